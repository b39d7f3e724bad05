package kit_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keyshare/keyshare/testutil"
)

// TestExactlyOnceThroughFaults runs member processes delivering to a
// Python endpoint that applies each record through the kit's
// PostgresSink (testdata/eo_endpoint.py), while records stream in:
// members join (one with batches), one leaves, one is SIGKILLed, and one
// is made a zombie: its open requests are held at the endpoint, it is
// SIGSTOPped past its lease so its ranges fail over, and once the group
// has committed past the held records and the sink's applied rows below
// the commits are pruned (as an operator prunes), the held requests apply
// under their old fences. Every produced record must have its effect once,
// each key's effects in offset order, and every held write must be
// refused (answered fenced).
//
// KEYSHARE_PYKIT_SWITCH_OFF=fence runs the same with the kit's fence
// check off, to see the check fail: the held writes then apply a second
// time. KEYSHARE_PYKIT_SWITCH_OFF=applied forgets each record's applied
// row before applying it: the records a member re-runs after the SIGKILL
// then apply twice.
//
// It runs twice: with the endpoint applying each record in a transaction
// of its own (PostgresSink.apply), and with every member sending batches
// of up to 8 that the endpoint applies in one transaction each
// (PostgresSink.apply_batch).
func TestExactlyOnceThroughFaults(t *testing.T) {
	for _, mode := range []struct {
		name  string
		batch bool
	}{{"each record", false}, {"batch transactions", true}} {
		t.Run(mode.name, func(t *testing.T) {
			exactlyOnceThroughFaults(t, mode.batch)
		})
	}
}

func exactlyOnceThroughFaults(t *testing.T, batch bool) {
	c := startCluster(t, switchOff(os.Getenv("KEYSHARE_PYKIT_SWITCH_OFF")), batch)
	ctx, stopProducing := context.WithCancel(t.Context())
	produced := make(chan error, 1)
	go func() { produced <- c.produce(ctx, 200, 300) }()
	defer stopProducing()

	c.start("a")
	c.waitEffects("a", 50)
	c.start("b", "--batch-size", "8")
	c.waitEffects("b", 50)
	c.start("c")
	c.waitEffects("c", 50)
	t.Log("a leaves")
	c.signal("a", syscall.SIGTERM)
	c.waitEffects("c", 200)
	t.Log("b is killed")
	c.signal("b", syscall.SIGKILL)
	c.start("d")
	c.waitEffects("d", 50)

	held := c.zombie()
	time.Sleep(time.Second) // records after the zombie's return
	stopProducing()
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	end := c.ends()
	testutil.WaitFor(t, "the group's commit at the end of every partition", 60*time.Second, func() bool {
		got, err := testutil.ReadCommitted(c.brokers, group, topic, parts)
		return err == nil && got[0] == end[0] && got[1] == end[1]
	})
	stale := c.waitStale(len(held))
	check := c.checkEffects()
	t.Logf("%d records produced; %s; %d redelivered records skipped as applied; %d zombie records held, %d of their writes accepted",
		len(c.ackedCopy()), check, c.duplicates(), len(held), stale)
	if check.broken() {
		t.Errorf("effects are not once each, in key order: %s", check)
	}
	if stale != 0 {
		t.Errorf("the sink accepted %d of the zombie's %d held writes under its stale fences", stale, len(held))
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		if check.byWriter[id] == 0 {
			t.Errorf("member %s wrote no effect: effects by member %v", id, check.byWriter)
		}
	}
}

// waitEffects waits until member id has written n effects.
func (c *cluster) waitEffects(id string, n int) {
	c.t.Helper()
	testutil.WaitFor(c.t, fmt.Sprintf("%d effects written by %s", n, id), 60*time.Second, func() bool {
		var got int
		err := c.query(func(conn *pgx.Conn) error {
			return conn.QueryRow(c.t.Context(), "SELECT count(*) FROM eo_effects WHERE writer = $1", id).Scan(&got)
		})
		return err == nil && got >= n
	})
}

// zombie makes a non-leader a zombie (see the test) and returns the
// records of its requests the endpoint held.
func (c *cluster) zombie() []endpointLine {
	c.t.Helper()
	var id string
	testutil.WaitFor(c.t, "a leader", 30*time.Second, func() bool { return c.leader() != "" })
	for _, m := range []string{"c", "d"} {
		if m != c.leader() {
			id = m
		}
	}
	hold := c.control("hold-" + id)
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		c.t.Fatal(err)
	}
	testutil.WaitFor(c.t, "a request of "+id+" held", 10*time.Second, func() bool { return len(c.held()) > 0 })
	time.Sleep(50 * time.Millisecond) // let a few more in
	if err := os.Remove(hold); err != nil {
		c.t.Fatal(err)
	}
	held := c.held()
	c.t.Logf("%s is a zombie: SIGSTOP for %s with %d records held", id, 5*ttl/2, len(held))
	c.signal(id, syscall.SIGSTOP)
	time.Sleep(5 * ttl / 2)
	c.signal(id, syscall.SIGCONT)
	need := map[int32]int64{}
	for _, h := range held {
		need[h.Partition] = max(need[h.Partition], h.Offset+1)
	}
	var committed map[int32]int64
	testutil.WaitFor(c.t, fmt.Sprintf("the commit past the held records %v", need), 60*time.Second, func() bool {
		var err error
		committed, err = testutil.ReadCommitted(c.brokers, group, topic, parts)
		if err != nil {
			return false
		}
		for p, o := range need {
			if committed[p] < o {
				return false
			}
		}
		return true
	})
	for p := range need {
		err := c.query(func(conn *pgx.Conn) error {
			ct, err := conn.Exec(c.t.Context(), "DELETE FROM eo_applied WHERE topic = $1 AND kafka_partition = $2 AND kafka_offset < $3", topic, p, committed[p])
			c.t.Logf("pruned %d applied rows of partition %d below the commit %d", ct.RowsAffected(), p, committed[p])
			return err
		})
		if err != nil {
			c.t.Fatal(err)
		}
	}
	if err := os.WriteFile(c.control("release"), nil, 0o644); err != nil {
		c.t.Fatal(err)
	}
	return held
}

// endpointLine is a line of the endpoint's log (testdata/eo_endpoint.py).
type endpointLine struct {
	Held      string `json:"held"`
	Stale     string `json:"stale"`
	Duplicate string `json:"duplicate"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Accepted  bool   `json:"accepted"`
}

func (c *cluster) lines() []endpointLine {
	f, err := os.Open(c.endpointLog())
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []endpointLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l endpointLine
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			out = append(out, l)
		}
	}
	return out
}

// duplicates is how many records the sink skipped as applied before.
func (c *cluster) duplicates() (n int) {
	for _, l := range c.lines() {
		if l.Duplicate != "" {
			n++
		}
	}
	return n
}

func (c *cluster) held() (out []endpointLine) {
	for _, l := range c.lines() {
		if l.Held != "" {
			out = append(out, l)
		}
	}
	return out
}

// waitStale waits for the held writes to be attempted and returns how
// many the sink accepted.
func (c *cluster) waitStale(n int) (accepted int) {
	c.t.Helper()
	var stale []endpointLine
	testutil.WaitFor(c.t, fmt.Sprintf("the %d held writes attempted", n), 30*time.Second, func() bool {
		stale = stale[:0]
		for _, l := range c.lines() {
			if l.Stale != "" {
				stale = append(stale, l)
			}
		}
		return len(stale) >= n
	})
	for _, l := range stale {
		if l.Accepted {
			accepted++
		}
	}
	return accepted
}

func (c *cluster) query(f func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(c.t.Context(), c.pgURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(c.t.Context()))
	return f(conn)
}

// effectsCheck is what the effects table says against the acknowledged records.
type effectsCheck struct {
	effects, missing, twice, unknown, outOfOrder int
	byWriter                                     map[string]int
}

func (e effectsCheck) broken() bool {
	return e.missing > 0 || e.twice > 0 || e.unknown > 0 || e.outOfOrder > 0
}

func (e effectsCheck) String() string {
	return fmt.Sprintf("%d effects: %d records missing, %d effects twice, %d of no record, %d out of key order",
		e.effects, e.missing, e.twice, e.unknown, e.outOfOrder)
}

func (c *cluster) checkEffects() effectsCheck {
	c.t.Helper()
	type id struct {
		p int32
		o int64
	}
	counts := map[id]int{}
	check := effectsCheck{byWriter: map[string]int{}}
	err := c.query(func(conn *pgx.Conn) error {
		rows, err := conn.Query(c.t.Context(), "SELECT kafka_partition, kafka_offset, writer FROM eo_effects")
		if err != nil {
			return err
		}
		for rows.Next() {
			var k id
			var w string
			if err := rows.Scan(&k.p, &k.o, &w); err != nil {
				return err
			}
			counts[k]++
			check.byWriter[w]++
			check.effects++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		// Per key, in the order applied, each offset above every one applied before it.
		return conn.QueryRow(c.t.Context(), `SELECT count(*) FROM (
	SELECT kafka_offset, max(kafka_offset) OVER (PARTITION BY kafka_partition, key ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
	FROM eo_effects) x WHERE kafka_offset <= before`).Scan(&check.outOfOrder)
	})
	if err != nil {
		c.t.Fatal(err)
	}
	acked := map[id]bool{}
	for _, a := range c.ackedCopy() {
		k := id{a.partition, a.offset}
		acked[k] = true
		switch n := counts[k]; {
		case n == 0:
			check.missing++
		case n > 1:
			check.twice += n - 1
		}
	}
	for k, n := range counts {
		if !acked[k] {
			check.unknown += n
		}
	}
	return check
}
