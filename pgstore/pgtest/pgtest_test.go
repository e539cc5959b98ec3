package pgtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeInstall makes a directory with empty executables called names.
func fakeInstall(t *testing.T, dir string, names ...string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFindBin(t *testing.T) {
	root := t.TempDir()
	fakeInstall(t, filepath.Join(root, "lib", "13", "bin"), "initdb", "pg_ctl")
	fakeInstall(t, filepath.Join(root, "lib", "16", "bin"), "initdb", "pg_ctl")
	fakeInstall(t, filepath.Join(root, "lib", "9", "bin"), "initdb", "pg_ctl")
	fakeInstall(t, filepath.Join(root, "lib", "17", "bin"), "initdb") // pg_ctl missing: not usable
	fakeInstall(t, filepath.Join(root, "path"), "initdb", "pg_ctl")
	fakeInstall(t, filepath.Join(root, "half"), "initdb")
	debian := filepath.Join(root, "lib", "*", "bin", "initdb")

	tests := []struct {
		name, glob, path, want, missing string
	}{
		{"the newest Debian version with both", debian, "", filepath.Join(root, "lib", "16", "bin"), ""},
		{"PATH when Debian's are absent", filepath.Join(root, "none", "*"), filepath.Join(root, "path"), filepath.Join(root, "path"), ""},
		{"nothing installed", filepath.Join(root, "none", "*"), filepath.Join(root, "empty"), "", "initdb"},
		{"initdb without pg_ctl", filepath.Join(root, "none", "*"), filepath.Join(root, "half"), "", "pg_ctl"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PATH", tc.path)
			dir, missing := findBin(tc.glob)
			if dir != tc.want || (tc.missing == "") != (missing == "") || !strings.Contains(missing, tc.missing) {
				t.Fatalf("findBin = %q, %q; want %q and missing mentioning %q", dir, missing, tc.want, tc.missing)
			}
		})
	}
}
