// Package version says which keyshare a build is: the release its source
// tree is (Release, the top entry of CHANGELOG.md), the module version the
// Go build recorded, and the VCS revision it was built from. `keyshare
// version` prints it and the keyshare_build_info metric labels it.
package version

import (
	"runtime"
	"runtime/debug"
)

// Release is the semantic version of this source tree: the top entry of
// CHANGELOG.md (a test holds the two together). A build from a tagged
// module reports the tag instead; a build from a checkout reports Release
// with a "-dev" suffix, since it may hold commits after the release.
const Release = "0.9.0"

// Module is keyshare's module path.
const Module = "github.com/keyshare/keyshare"

// Build is what a binary knows of the keyshare in it.
type Build struct {
	// Version is keyshare's module version: the tag it was fetched at
	// (v0.9.0), a replacement's version if the service replaces it, or
	// "v" + Release + "-dev" when built from its own tree; "unknown" when
	// the binary has no build information or no keyshare in it.
	Version string
	// Revision is the main module's VCS revision, empty when the build
	// stamped none; Modified says the tree had uncommitted changes.
	Revision string
	Modified bool
	// Go is the Go version that built the binary.
	Go string
}

// Running is the Build of the running binary.
func Running() Build { return Of(debug.ReadBuildInfo()) }

// Of reads a Build from build information (debug.ReadBuildInfo's results).
func Of(bi *debug.BuildInfo, ok bool) Build {
	b := Build{Version: "unknown", Go: runtime.Version()}
	if !ok || bi == nil {
		return b
	}
	if bi.GoVersion != "" {
		b.Go = bi.GoVersion
	}
	found := false
	if bi.Main.Path == Module {
		b.Version, found = bi.Main.Version, true
	}
	for _, d := range bi.Deps {
		if d.Path != Module {
			continue
		}
		b.Version, found = d.Version, true
		if d.Replace != nil {
			b.Version = d.Replace.Version
		}
	}
	if found && (b.Version == "" || b.Version == "(devel)") {
		b.Version = "v" + Release + "-dev"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is "keyshare VERSION (commit REV[, modified], GO)".
func (b Build) String() string {
	commit := "unknown commit"
	if b.Revision != "" {
		commit = "commit " + b.Revision
		if b.Modified {
			commit += ", modified"
		}
	}
	return "keyshare " + b.Version + " (" + commit + ", " + b.Go + ")"
}
