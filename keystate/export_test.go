package keystate

// SwitchOff turns one of the rules off until the returned function turns it
// back on, for the model test to show that it fails without it: "skip"
// drops the applied-offset skip, "fence" the fencing-token tie-break,
// "repair" the repairs of a key whose last record lost.
func SwitchOff(rule string) (restore func()) {
	p := map[string]*bool{"skip": &skipApplied, "fence": &fenceTieBreak, "repair": &repairLosers}[rule]
	if p == nil {
		panic("keystate: no rule " + rule + " to switch off")
	}
	*p = false
	return func() { *p = true }
}
