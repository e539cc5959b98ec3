// Package refdoc reads the reference pages of docs/ for the tests that keep them true to the
// code: the sections of a page and the flags a command's section documents.
package refdoc

import (
	"os"
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
