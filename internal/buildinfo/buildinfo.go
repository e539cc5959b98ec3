// Package buildinfo says which build of payrouter is running: the module version, the commit it
// was built from and the Go toolchain that built it. `payrouter version` prints it, and the
// traces carry the version as service.version, so that a log line, a span and a container image
// all lead back to one commit.
//
// The Go toolchain records most of it in the binary by itself (runtime/debug.ReadBuildInfo): the
// module version of a `go install ...@v1.2.3`, and the commit of a build from a git checkout. A
// build made with -buildvcs=false, or from a copy of the sources without .git (a container build
// context), records no commit, so the Makefile stamps both with the linker:
//
//	go build -ldflags "-X github.com/payrouter/payrouter/internal/buildinfo.commit=$(git rev-parse HEAD)"
//
// A stamped value wins over the recorded one.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Stamped by the linker (-ldflags -X, see the Makefile); empty when not.
var (
	version  string // the module version, e.g. v1.4.0 (git describe of a v* tag)
	commit   string // the full commit hash
	modified string // "true" when the tree had changes not committed
)

// Devel is the version of a build whose module version is not known: Go's own word for a build
// of the main module from its sources.
const Devel = "(devel)"

// Info is what one build says of itself.
type Info struct {
	// Version is the module version (v1.4.0, or a pseudo-version v0.0.0-20261201120000-abcdef123456);
	// Devel when not known.
	Version string `json:"version"`
	// Commit is the git commit the binary was built from; "" when not known.
	Commit string `json:"commit"`
	// Modified is true when the tree it was built from had changes not committed: the commit
	// alone does not say what was built.
	Modified bool `json:"modified"`
	// GoVersion is the toolchain that built it, e.g. go1.26.8.
	GoVersion string `json:"go_version"`
	// Platform is the operating system and architecture it was built for, e.g. linux/amd64.
	Platform string `json:"platform"`
}

// Read returns this binary's Info: what the linker stamped, else what the Go toolchain recorded.
func Read() Info {
	return read(debug.ReadBuildInfo, version, commit, modified)
}

// read is Read with its sources passed in, for the tests.
func read(buildInfo func() (*debug.BuildInfo, bool), stampedVersion, stampedCommit, stampedModified string) Info {
	info := Info{Version: Devel, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := buildInfo(); ok {
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		if v := bi.Main.Version; v != "" {
			info.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Commit = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	if stampedVersion != "" {
		info.Version = stampedVersion
	}
	if stampedCommit != "" {
		info.Commit = stampedCommit
		info.Modified = stampedModified == "true"
	}
	return info
}

// String is one line naming the build: "v1.4.0 (commit 0123abc..., go1.26.8 linux/amd64)".
func (i Info) String() string {
	commit := i.Commit
	if commit == "" {
		commit = "unknown"
	}
	if i.Modified {
		commit += ", modified"
	}
	return i.Version + " (commit " + commit + ", " + i.GoVersion + " " + i.Platform + ")"
}
