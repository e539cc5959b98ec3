package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestRead(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	recorded := func(version string, settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/payrouter/payrouter", Version: version}, Settings: settings}, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	cases := []struct {
		name                       string
		buildInfo                  func() (*debug.BuildInfo, bool)
		stampV, stampC, stampM     string
		version, commit, goVersion string
		modified                   bool
	}{
		{name: "go install of a release", buildInfo: recorded("v1.4.0"), version: "v1.4.0", goVersion: "go1.99.1"},
		{name: "a checkout's build records the commit",
			buildInfo: recorded("v0.0.0-20261201120000-0123456789ab+dirty", debug.BuildSetting{Key: "vcs.revision", Value: rev}, debug.BuildSetting{Key: "vcs.modified", Value: "true"}),
			version:   "v0.0.0-20261201120000-0123456789ab+dirty", commit: rev, modified: true, goVersion: "go1.99.1"},
		{name: "-buildvcs=false records neither", buildInfo: recorded("(devel)"), version: Devel, goVersion: "go1.99.1"},
		{name: "the Makefile's stamps win", buildInfo: recorded("(devel)", debug.BuildSetting{Key: "vcs.revision", Value: "ffff"}, debug.BuildSetting{Key: "vcs.modified", Value: "true"}),
			stampV: "v1.5.0-rc.1", stampC: rev, stampM: "false", version: "v1.5.0-rc.1", commit: rev, goVersion: "go1.99.1"},
		{name: "a stamped commit of a modified tree", buildInfo: recorded("(devel)"), stampC: rev, stampM: "true", version: Devel, commit: rev, modified: true, goVersion: "go1.99.1"},
		{name: "no build information at all", buildInfo: none, version: Devel, goVersion: runtime.Version()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := read(tc.buildInfo, tc.stampV, tc.stampC, tc.stampM)
			want := Info{Version: tc.version, Commit: tc.commit, Modified: tc.modified, GoVersion: tc.goVersion, Platform: runtime.GOOS + "/" + runtime.GOARCH}
			if got != want {
				t.Errorf("read() = %+v, want %+v", got, want)
			}
		})
	}
}

func TestString(t *testing.T) {
	for _, tc := range []struct {
		info Info
		want string
	}{
		{Info{Version: "v1.4.0", Commit: "abc", GoVersion: "go1.26.8", Platform: "linux/amd64"}, "v1.4.0 (commit abc, go1.26.8 linux/amd64)"},
		{Info{Version: Devel, Commit: "abc", Modified: true, GoVersion: "go1.26.8", Platform: "linux/arm64"}, "(devel) (commit abc, modified, go1.26.8 linux/arm64)"},
		{Info{Version: Devel, GoVersion: "go1.26.8", Platform: "linux/amd64"}, "(devel) (commit unknown, go1.26.8 linux/amd64)"},
	} {
		if got := tc.info.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}
