package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/schema"
)

// TestWatchSurvivesEtcdErrors: under --watch --json, an etcd error keeps
// the last status with an etcd_unreachable banner dated from the first
// failure, a good read clears it, and an unknown group ends the watch with
// its error.
func TestWatchSurvivesEtcdErrors(t *testing.T) {
	etcdErr := errors.New("context deadline exceeded")
	good := func(gen int64) func() (*groupStatus, error) {
		return func() (*groupStatus, error) {
			return &groupStatus{Group: "g", Generation: gen, State: groupStable}, nil
		}
	}
	bad := func() (*groupStatus, error) { return nil, etcdErr }
	reads := []func() (*groupStatus, error){good(1), bad, bad, good(2), func() (*groupStatus, error) {
		return nil, unknownGroupError(schema.Group{Prefix: "/keyshare", Name: "g"}.Keys())
	}}
	i := 0
	read := func() (*groupStatus, error) {
		r := reads[i]
		i++
		return r()
	}
	var out bytes.Buffer
	c := &statusCommand{group: "g", prefix: "/keyshare", asJSON: true, watch: true}
	err := c.watchStatus(context.Background(), &out, time.Millisecond, read, &kafkaLog{})
	if !errors.Is(err, errUnknownGroup) {
		t.Fatalf("watch ended with %v, want the unknown group", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d NDJSON lines, want 4:\n%s", len(lines), out.String())
	}
	var sts []groupStatus
	for _, l := range lines {
		var st groupStatus
		if err := json.Unmarshal([]byte(l), &st); err != nil {
			t.Fatalf("line is not JSON: %v: %s", err, l)
		}
		sts = append(sts, st)
	}
	if sts[0].EtcdDown != nil || sts[3].EtcdDown != nil || sts[3].Generation != 2 {
		t.Errorf("good reads: %+v, %+v", sts[0], sts[3])
	}
	for _, st := range sts[1:3] {
		if st.EtcdDown == nil || st.EtcdDown.Error != etcdErr.Error() || st.Generation != 1 || st.State != groupStable {
			t.Errorf("during the outage: %+v, want the last status under the banner", st)
		}
	}
	if d1, d2 := sts[1].EtcdDown, sts[2].EtcdDown; d1 != nil && d2 != nil && !d1.Since.Equal(d2.Since) {
		t.Errorf("outage since %v, then %v: want the first failure's time", d1.Since, d2.Since)
	}
}

// TestRedrawClearsEachLine: a frame overwrites the last in place: cursor
// home, each line cleared to its end, the rest of the screen cleared.
func TestRedrawClearsEachLine(t *testing.T) {
	var b bytes.Buffer
	redraw(&b, []byte("a\nbc\n"))
	if got, want := b.String(), "\033[Ha\033[K\nbc\033[K\n\033[J"; got != want {
		t.Errorf("redraw = %q, want %q", got, want)
	}
}

// TestWatchToPipeIsPlain: --watch on an output that is not a terminal (a
// file, a pipe) writes each frame as plain text, with no terminal escape,
// after a ruler line that tells the frames apart.
func TestWatchToPipeIsPlain(t *testing.T) {
	reads := []func() (*groupStatus, error){
		func() (*groupStatus, error) { return &groupStatus{Group: "g", Generation: 1, State: groupStable}, nil },
		func() (*groupStatus, error) { return &groupStatus{Group: "g", Generation: 2, State: groupStable}, nil },
		func() (*groupStatus, error) {
			return nil, unknownGroupError(schema.Group{Prefix: "/keyshare", Name: "g"}.Keys())
		},
	}
	i := 0
	read := func() (*groupStatus, error) { i++; return reads[i-1]() }
	var out bytes.Buffer
	c := &statusCommand{group: "g", prefix: "/keyshare", watch: true}
	if err := c.watchStatus(context.Background(), &out, time.Millisecond, read, &kafkaLog{}); !errors.Is(err, errUnknownGroup) {
		t.Fatalf("watch ended with %v, want the unknown group", err)
	}
	text := out.String()
	if strings.Contains(text, "\033") {
		t.Errorf("output to a non-terminal holds escapes:\n%q", text)
	}
	frames := strings.Split(text, watchRuler+"\n")
	if len(frames) != 3 || frames[0] != "" || !strings.Contains(frames[1], "generation 1") || !strings.Contains(frames[2], "generation 2") {
		t.Errorf("want two frames, each after a ruler line %q:\n%s", watchRuler, text)
	}
}
