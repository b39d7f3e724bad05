package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// costFunc is the simulated cost of one handler call of n records.
type costFunc func(r *rand.Rand, n int) time.Duration

// parseCost reads --work: call:FIXED+PER_RECORD is a fixed cost per handler
// call plus a cost per record in it (a sink that pays per call, such as a
// database transaction or a bulk API); any other spec is a per-record
// distribution (parseWork), summed over the records of a call.
func parseCost(spec string) (costFunc, error) {
	if arg, ok := strings.CutPrefix(spec, "call:"); ok {
		bad := fmt.Errorf("--work %q: want call:FIXED+PER_RECORD, e.g. call:5ms+0.05ms", spec)
		fixed, per, ok := strings.Cut(arg, "+")
		if !ok {
			return nil, bad
		}
		f, err1 := time.ParseDuration(fixed)
		p, err2 := time.ParseDuration(per)
		if err1 != nil || err2 != nil || f < 0 || p < 0 {
			return nil, bad
		}
		return func(_ *rand.Rand, n int) time.Duration { return f + time.Duration(n)*p }, nil
	}
	work, err := parseWork(spec)
	if err != nil {
		return nil, err
	}
	return func(r *rand.Rand, n int) time.Duration {
		var d time.Duration
		for range n {
			d += work(r)
		}
		return d
	}, nil
}

// parseStall reads KEY:DURATION ("" means no stall).
func parseStall(spec string) (string, time.Duration, error) {
	if spec == "" {
		return "", 0, nil
	}
	i := strings.LastIndex(spec, ":")
	if i <= 0 {
		return "", 0, fmt.Errorf("--stall %q: want KEY:DURATION, e.g. key-3:20s", spec)
	}
	d, err := time.ParseDuration(spec[i+1:])
	if err != nil || d <= 0 {
		return "", 0, fmt.Errorf("--stall %q: want KEY:DURATION, e.g. key-3:20s", spec)
	}
	return spec[:i], d, nil
}

// parseWork reads a work distribution.
func parseWork(spec string) (func(*rand.Rand) time.Duration, error) {
	bad := fmt.Errorf("--work %q: want a duration (5ms), uniform:MIN-MAX (uniform:0-5ms), exp:MEAN (exp:2ms) or call:FIXED+PER_RECORD (call:5ms+0.05ms)", spec)
	kind, arg, hasKind := strings.Cut(spec, ":")
	switch {
	case !hasKind:
		if spec == "0" {
			return func(*rand.Rand) time.Duration { return 0 }, nil
		}
		d, err := time.ParseDuration(spec)
		if err != nil || d < 0 {
			return nil, bad
		}
		return func(*rand.Rand) time.Duration { return d }, nil
	case kind == "uniform":
		lo, hi, ok := strings.Cut(arg, "-")
		if !ok {
			return nil, bad
		}
		hiD, err := time.ParseDuration(hi)
		if err != nil {
			return nil, bad
		}
		// "0-5ms": the unit of the upper bound applies to a bare lower bound.
		loD, err := time.ParseDuration(lo)
		if err != nil {
			f, ferr := strconv.ParseFloat(lo, 64)
			if ferr != nil {
				return nil, bad
			}
			unit := strings.TrimLeft(hi, "0123456789.")
			u, uerr := time.ParseDuration("1" + unit)
			if uerr != nil {
				return nil, bad
			}
			loD = time.Duration(f * float64(u))
		}
		if loD < 0 || hiD < loD {
			return nil, bad
		}
		return func(r *rand.Rand) time.Duration { return loD + time.Duration(r.Int64N(int64(hiD-loD)+1)) }, nil
	case kind == "exp":
		mean, err := time.ParseDuration(arg)
		if err != nil || mean <= 0 {
			return nil, bad
		}
		return func(r *rand.Rand) time.Duration { return time.Duration(r.ExpFloat64() * float64(mean)) }, nil
	}
	return nil, bad
}
