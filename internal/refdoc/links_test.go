package refdoc

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// markdownLink is a link of a page: [text](target).
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// slug is the anchor GitHub gives a heading: lower case, punctuation dropped but for - and _,
// spaces as -.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || 'a' <= r && r <= 'z' || '0' <= r && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors lists the anchors of a page's headings.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fence := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && !fence && strings.HasPrefix(line, "#") {
			out[slug(strings.ReplaceAll(h, `\`, ""))] = true
		}
	}
	return out
}

// TestLinks: every relative link of the README and of docs/ names a file of the repository, and
// every #anchor a heading of the page it points at. Nothing links outside the checkout.
func TestLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(pages) < 5 {
		t.Fatalf("docs/*.md: %v %v", pages, err)
	}
	pages = append(pages, filepath.Join(root, "README.md"))
	abs, _ := filepath.Abs(root)
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range markdownLink.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := page
			if file != "" {
				dest = filepath.Join(filepath.Dir(page), file)
			}
			if d, _ := filepath.Abs(dest); !strings.HasPrefix(d, abs+string(filepath.Separator)) && d != abs {
				t.Errorf("%s: the link %s leaves the repository", page, target)
				continue
			}
			st, err := os.Stat(dest)
			if err != nil {
				t.Errorf("%s: the link %s names nothing: %v", page, target, err)
				continue
			}
			if anchor != "" && !st.IsDir() && strings.HasSuffix(dest, ".md") && !anchors(t, dest)[anchor] {
				t.Errorf("%s: the link %s names no heading of %s", page, target, dest)
			}
		}
	}
}

// TestCitations: every page a comment of the code names is a file of the repository, and every
// section it cites ("(docs/architecture.md, State stores)") is a heading of that page.
func TestCitations(t *testing.T) {
	problems, err := CheckCitations(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
