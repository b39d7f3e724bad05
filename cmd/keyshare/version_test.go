package main

import (
	"runtime/debug"
	"testing"
)

func TestVersionLine(t *testing.T) {
	cases := []struct {
		main     string
		settings map[string]string
		want     string
	}{
		{"v1.4.0", map[string]string{"vcs.revision": "66a29e4f", "vcs.modified": "false"}, "keyshare v1.4.0 (commit 66a29e4f, go1.26.8)"},
		{"(devel)", map[string]string{"vcs.revision": "66a29e4f", "vcs.modified": "true"}, "keyshare (devel) (commit 66a29e4f, modified, go1.26.8)"},
		{"", nil, "keyshare (devel) (unknown commit, go1.26.8)"},
	}
	for _, tc := range cases {
		info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: tc.main}}
		for k, v := range tc.settings {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: k, Value: v})
		}
		if got := versionLine(info); got != tc.want {
			t.Errorf("versionLine(%s, %v) = %q, want %q", tc.main, tc.settings, got, tc.want)
		}
	}
}
