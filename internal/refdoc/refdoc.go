// Package refdoc reads the reference pages of docs/ for the tests that keep them true to the
// code: the sections of a page, the flags a command's section documents, and the citations of
// pages and sections in the code's comments (CheckCitations).
package refdoc

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Sections returns the text under each "## " heading of the page at path, by the heading's
// text (backticks kept); the text before the first heading is under "".
func Sections(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	heading := ""
	for _, line := range strings.Split(string(data), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			heading = h
			continue
		}
		out[heading] += line + "\n"
	}
	return out, nil
}

// flagRow is a table row documenting a flag: | `-listen ADDR` | ... |.
var flagRow = regexp.MustCompile("(?m)^\\| `-([a-z][a-z0-9-]*)[ `]")

// Flags returns the flags a section's table rows document, without their dash, in order.
func Flags(section string) []string {
	var out []string
	for _, m := range flagRow.FindAllStringSubmatch(section, -1) {
		out = append(out, m[1])
	}
	return out
}

// defaultsFlag is a line of flag.FlagSet.PrintDefaults: "  -config string".
var defaultsFlag = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`)

// DefinedFlags returns the flags a flag.FlagSet's PrintDefaults output lists, in order.
func DefinedFlags(printDefaults string) []string {
	var out []string
	for _, m := range defaultsFlag.FindAllStringSubmatch(printDefaults, -1) {
		out = append(out, m[1])
	}
	return out
}

// Headings returns the text of every heading of the Markdown page at path, at any level, as a
// reader sees it: backticks and backslash escapes dropped ("## `POST /charge`" is "POST /charge").
// Lines inside fenced code blocks are not headings.
func Headings(path string) (map[string]bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	fence := false
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
			continue
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok {
			out[plainHeading(h)] = true
		}
	}
	return out, nil
}

// plainHeading is a heading's or a cited section's text without Markdown's backticks and
// escapes, its spaces collapsed.
func plainHeading(s string) string {
	s = strings.NewReplacer("`", "", `\`, "").Replace(s)
	return strings.Join(strings.Fields(s), " ")
}

// A comment cites a page's section in one of two forms, "(docs/api.md, Idempotency)" or
// "docs/api.md (Idempotency)"; in the first, the section ends at the first ')', ':' or ';', so
// "(docs/api.md, POST /charge: attempt outcomes)" cites the section "POST /charge". Any other
// mention of a page ("docs/metrics.md lists them") must name a file of the repository.
var (
	citeComma = regexp.MustCompile(`\(((?:[\w.-]+/)*[\w.-]+\.md), ([^):;]+)`)
	citeParen = regexp.MustCompile(`((?:[\w.-]+/)*[\w.-]+\.md) \(([^)]+)\)`)
	mention   = regexp.MustCompile(`(?:[\w.-]+/)*[\w.-]+\.md\b`)
)

// CheckCitations reads the comments of every Go file and SQL migration under root (testdata and
// dot-directories left out) and returns one line per comment that points where nothing is: a
// page that is not a file of the repository (one beside or above the checkout included), or a
// section that is not a heading of its page. Pages are named from root, as in
// "docs/architecture.md".
func CheckCitations(root string) ([]string, error) {
	var problems []string
	headings := map[string]map[string]bool{} // by page; nil: no such page
	pageHeadings := func(page string) (map[string]bool, bool) {
		if h, seen := headings[page]; seen {
			return h, h != nil
		}
		var h map[string]bool
		clean := filepath.Clean(filepath.FromSlash(page))
		if filepath.IsLocal(clean) {
			h, _ = Headings(filepath.Join(root, clean))
		}
		headings[page] = h
		return h, h != nil
	}
	check := func(where, text string) {
		text = strings.Join(strings.Fields(text), " ")
		for _, page := range mention.FindAllString(text, -1) {
			if _, ok := pageHeadings(page); !ok {
				problems = append(problems, fmt.Sprintf("%s: %s is not a page of the repository", where, page))
			}
		}
		cites := citeComma.FindAllStringSubmatch(text, -1)
		cites = append(cites, citeParen.FindAllStringSubmatch(text, -1)...)
		for _, m := range cites {
			page, section := m[1], plainHeading(m[2])
			if h, ok := pageHeadings(page); ok && !h[section] {
				problems = append(problems, fmt.Sprintf("%s: %s has no section %q", where, page, section))
			}
		}
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		switch filepath.Ext(name) {
		case ".go":
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, cg := range f.Comments {
				check(fmt.Sprintf("%s:%d", rel, fset.Position(cg.Pos()).Line), cg.Text())
			}
		case ".sql":
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			var block []string
			start := 0
			lines := strings.Split(string(data), "\n")
			for i, line := range append(lines, "") {
				if c, ok := strings.CutPrefix(strings.TrimSpace(line), "--"); ok {
					if block == nil {
						start = i + 1
					}
					block = append(block, c)
					continue
				}
				if block != nil {
					check(fmt.Sprintf("%s:%d", rel, start), strings.Join(block, " "))
					block = nil
				}
			}
		}
		return nil
	})
	return problems, err
}
