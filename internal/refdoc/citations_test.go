package refdoc

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestCheckCitationsFindsBadOnes: a tree whose comments cite a missing section, a missing page
// and a page outside the tree gets one problem for each, and nothing for the citations that are
// right, in either form, wrapped over comment lines or not, in Go and in SQL.
func TestCheckCitationsFindsBadOnes(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		path := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/arch.md", "# Arch\n\n## State stores\n\n### `POST /charge`\n\n```\n## Not a heading\n```\n")
	write("good.go", `// Package good cites (docs/arch.md, State stores) and docs/arch.md (POST /charge), and
// (docs/arch.md, POST /charge: a sub-point), and the page docs/arch.md alone, and one wrapped (docs/arch.md,
// State
// stores).
package good
`)
	write("bad.go", `// Package bad cites (docs/arch.md, Breakers).
package bad

// X is in (docs/arch.md, Not a heading).
var X = 1

// Y is in (DESIGN.md, Layout), from ../shared/STYLE.md.
var Y = 2
`)
	write("migrations/1.sql", "-- money (docs/arch.md, State stores) and\n-- (docs/arch.md, Hedging)\nSELECT 1;\n")
	write("testdata/skipped.go", "// (docs/arch.md, Skipped)\npackage skipped\n")

	got, err := CheckCitations(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`bad.go:1: docs/arch.md has no section "Breakers"`,
		`bad.go:4: docs/arch.md has no section "Not a heading"`,
		`bad.go:7: DESIGN.md is not a page of the repository`,
		`bad.go:7: ../shared/STYLE.md is not a page of the repository`,
		`migrations/1.sql:1: docs/arch.md has no section "Hedging"`,
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%q\nwant:\n%q", got, want)
	}
}
