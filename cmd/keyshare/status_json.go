package main

import (
	"encoding/json"
	"io"
	"slices"
	"time"

	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// status --json: the JSON forms of what members report in etcd (the
// fields an operator reads, in snake_case, without the records' version),
// and the whole status cut to the text output's bounds.

// stuckStatus is a range its owner reports as held by one record.
type stuckStatus struct {
	Member    string    `json:"member"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Lo        uint64    `json:"lo"`
	Offset    int64     `json:"offset"`
	Key       string    `json:"key"`
	Since     time.Time `json:"since"`
	Attempts  int       `json:"attempts"`
	Error     string    `json:"error,omitempty"`
}

func stuckStatusOf(s schema.StuckRecord) stuckStatus {
	return stuckStatus{Member: s.Member, Topic: s.Topic, Partition: s.Partition, Lo: s.Lo, Offset: s.Offset, Key: s.Key, Since: s.Since, Attempts: s.Attempts, Error: s.Error}
}

// lossStatus is a loss report: records Kafka deleted before the range
// handled them.
type lossStatus struct {
	Member    string    `json:"member"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Lo        uint64    `json:"lo"`
	Hi        uint64    `json:"hi"`
	At        time.Time `json:"at"`
	// FromOffset up to LogStart is the window of lost records;
	// KnownPending of them the range had read and not finished.
	FromOffset   int64                `json:"from_offset"`
	LogStart     int64                `json:"log_start"`
	KnownPending int                  `json:"known_pending"`
	Segments     []ledger.LostSegment `json:"segments"`
}

func lossStatusOf(l schema.LossRecord) lossStatus {
	return lossStatus{Member: l.Member, Topic: l.Topic, Partition: l.Partition, Lo: l.Lo, Hi: l.Hi, At: l.At,
		FromOffset: l.Window(), LogStart: l.LogStart, KnownPending: l.Known(), Segments: l.Segments}
}

// printStatusJSON writes st as JSON with the bounds of the text output:
// the values are kept as they are (the encoder escapes control
// characters, textsafe.JSON the bidi and C1 controls it leaves raw) but
// cut, so a 1 MB host is a few hundred bytes and its size.
// Indented, or one line (NDJSON, under --watch).
func printStatusJSON(out io.Writer, st *groupStatus, indent bool) error {
	var b []byte
	var err error
	if indent {
		b, err = json.MarshalIndent(st.clipped(), "", "  ")
	} else {
		b, err = json.Marshal(st.clipped())
	}
	if err != nil {
		return err
	}
	_, err = out.Write(append(textsafe.JSON(b), '\n'))
	return err
}

// clipped is a copy of st with every name cut to textsafe.MaxKey bytes
// and other text to textsafe.MaxText, not escaped (textsafe.Clip).
func (st *groupStatus) clipped() *groupStatus {
	n := func(s string) string { return textsafe.Clip(s, textsafe.MaxKey) }
	txt := func(s string) string { return textsafe.Clip(s, textsafe.MaxText) }
	c := *st
	c.Group, c.Leader = n(st.Group), n(st.Leader)
	if p := st.Paused; p != nil {
		cp := *p
		cp.By, cp.Reason = n(p.By), txt(p.Reason)
		c.Paused = &cp
	}
	c.Members = make([]memberStatus, len(st.Members))
	for i, m := range st.Members {
		m.ID, m.Host = n(m.ID), n(m.Host)
		c.Members[i] = m
	}
	c.Partitions = make([]partitionStatus, len(st.Partitions))
	for i, p := range st.Partitions {
		p.Topic = n(p.Topic)
		p.Ranges = slices.Clone(p.Ranges)
		for j := range p.Ranges {
			r := &p.Ranges[j]
			r.Owner, r.State, r.Target = n(r.Owner), n(r.State), n(r.Target)
			r.HotKeys = slices.Clone(r.HotKeys)
			for k, h := range r.HotKeys {
				if h.Key != nil {
					key := n(*h.Key)
					r.HotKeys[k].Key = &key
				}
			}
		}
		c.Partitions[i] = p
	}
	c.Stuck, c.Losses = nil, nil
	c.StuckJSON = make([]stuckStatus, len(st.Stuck))
	for i, s := range st.Stuck {
		// Key and error are written cut (textsafe.Bytes, Escape) by
		// the member that reports them: cut again only if larger.
		s.Member, s.Topic, s.Key, s.Error = n(s.Member), n(s.Topic), txt(s.Key), txt(s.Error)
		c.StuckJSON[i] = stuckStatusOf(s)
	}
	c.KeyOps = slices.Clone(st.KeyOps)
	for i, op := range c.KeyOps {
		op.Topic, op.Key, op.By, op.Reason, op.Refused, op.Problem = n(op.Topic), txt(op.Key), txt(op.By), txt(op.Reason), txt(op.Refused), txt(op.Problem)
		c.KeyOps[i] = op
	}
	c.LossesJSON = make([]lossStatus, len(st.Losses))
	for i, l := range st.Losses {
		l.Member, l.Topic = n(l.Member), n(l.Topic)
		c.LossesJSON[i] = lossStatusOf(l)
	}
	if d := st.EtcdDown; d != nil {
		c.EtcdDown = &etcdOutage{Since: d.Since, Error: txt(d.Error)}
	}
	c.Problems = make([]string, len(st.Problems))
	for i, p := range st.Problems {
		c.Problems[i] = txt(p)
	}
	return &c
}
