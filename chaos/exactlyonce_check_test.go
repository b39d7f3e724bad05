package chaos

import "testing"

// TestExactlyOnceCheckFailsUnfenced: the zombie row with an endpoint that
// ignores the fence (eoUnfenced). The held writes are accepted and apply
// their records a second time, after their keys' later records (their
// dedupe rows were pruned): the database check must report it, so the EO
// rows' check can fail.
func TestExactlyOnceCheckFailsUnfenced(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a group")
	}
	r := rowNamed(rows, "EO 5 ")
	r.name = "EO 5u zombie member, fence ignored"
	r.eo = eoUnfenced
	r.check = func(t *testing.T, e *env) {
		v, _ := eoChecks.Load(e)
		c := v.(eoCheck)
		if c.StaleAttempted == 0 || c.StaleAccepted == 0 {
			t.Errorf("held writes %d attempted, %d accepted: want the stale writes through (no fence)", c.StaleAttempted, c.StaleAccepted)
		}
		if c.Extra == 0 && c.OutOfOrder == 0 {
			t.Errorf("the check found no extra or out-of-order effect with the fence ignored: %s", c)
		}
	}
	runRow(t, r, false)
}
