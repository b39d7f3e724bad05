package version

import (
	"os"
	"regexp"
	"runtime/debug"
	"testing"
)

// TestOf: keyshare's version is the main module's or the dependency's (a
// replacement's if it has one), a build from the tree is the release with
// "-dev", the revision is the VCS stamp, and a build without information
// still reports the Go version.
func TestOf(t *testing.T) {
	rev := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "abc123"}}
	dirty := []debug.BuildSetting{{Key: "vcs.revision", Value: "66a29e4f"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want Build
		line string
	}{
		{"no build info", nil, false, Build{Version: "unknown"}, ""},
		{"keyshare binary", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: Module, Version: "v1.4.0"}, Settings: rev}, true,
			Build{Version: "v1.4.0", Revision: "abc123", Go: "go1.26.8"}, "keyshare v1.4.0 (commit abc123, go1.26.8)"},
		{"built in its tree", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: Module, Version: "(devel)"}, Settings: dirty}, true,
			Build{Version: "v" + Release + "-dev", Revision: "66a29e4f", Modified: true, Go: "go1.26.8"}, "keyshare v" + Release + "-dev (commit 66a29e4f, modified, go1.26.8)"},
		{"a service's dependency", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/svc", Version: "v2.0.0"},
			Deps: []*debug.Module{{Path: "golang.org/x/sys", Version: "v0.1.0"}, {Path: Module, Version: "v1.3.2"}}, Settings: rev}, true,
			Build{Version: "v1.3.2", Revision: "abc123", Go: "go1.26.8"}, ""},
		{"replaced dependency", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/svc"},
			Deps: []*debug.Module{{Path: Module, Version: "v1.3.2", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.3.3"}}}}, true,
			Build{Version: "v1.3.3", Go: "go1.26.8"}, ""},
		{"replaced by a local tree", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/svc"},
			Deps: []*debug.Module{{Path: Module, Version: "v1.3.2", Replace: &debug.Module{Path: "../keyshare"}}}}, true,
			Build{Version: "v" + Release + "-dev", Go: "go1.26.8"}, ""},
		{"keyshare not in the build", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/svc"}}, true,
			Build{Version: "unknown", Go: "go1.26.8"}, "keyshare unknown (unknown commit, go1.26.8)"},
	} {
		got := Of(tc.bi, tc.ok)
		if tc.want.Go == "" {
			tc.want.Go = got.Go // runtime.Version: whatever built the test
		}
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
		if tc.line != "" && got.String() != tc.line {
			t.Errorf("%s: %q, want %q", tc.name, got.String(), tc.line)
		}
	}
}

// TestReleaseIsChangelogsTop: Release names the top entry of CHANGELOG.md,
// and is a semantic version.
func TestReleaseIsChangelogsTop(t *testing.T) {
	if !regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$`).MatchString(Release) {
		t.Fatalf("Release %q is not a semantic version MAJOR.MINOR.PATCH", Release)
	}
	b, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	top := regexp.MustCompile(`(?m)^## \[?v?([0-9][^\] ]*)\]?`).FindSubmatch(b)
	if top == nil {
		t.Fatal("CHANGELOG.md has no \"## VERSION\" entry")
	}
	if string(top[1]) != Release {
		t.Fatalf("CHANGELOG.md's top entry is %s, version.Release %s: add the entry or change Release", top[1], Release)
	}
}
