package main

import (
	"bytes"
	"regexp"
	"slices"
	"testing"

	"github.com/payrouter/payrouter/internal/refdoc"
)

const cliDoc = "../../docs/cli.md"

// usageCommand is a command line of the usage text: "  payrouter serve -config FILE ...".
var usageCommand = regexp.MustCompile(`(?m)^  payrouter ([a-z]+) `)

// commandHeading is the heading of a command's section in docs/cli.md: ## `payrouter serve`.
var commandHeading = regexp.MustCompile("^`payrouter ([a-z]+)`$")

// TestCLIDoc: every command `payrouter help` lists has its section in docs/cli.md, and every
// flag the command parses (its -h output) is in that section's table; every command and flag
// the page documents exists.
func TestCLIDoc(t *testing.T) {
	sections, err := refdoc.Sections(cliDoc)
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	if err := run(t.Context(), []string{"help"}, nil, &stdout, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var commands []string
	for _, m := range usageCommand.FindAllStringSubmatch(stdout.String(), -1) {
		commands = append(commands, m[1])
	}
	if len(commands) < 4 {
		t.Fatalf("only %d commands in the usage: %q", len(commands), stdout.String())
	}
	for _, cmd := range commands {
		section, ok := sections["`payrouter "+cmd+"`"]
		if !ok {
			t.Errorf("%s: no section \"## `payrouter %s`\"", cliDoc, cmd)
			continue
		}
		var stderr bytes.Buffer
		_ = run(t.Context(), []string{cmd, "-h"}, nil, &bytes.Buffer{}, &stderr) // prints the flags, exit 2
		defined := refdoc.DefinedFlags(stderr.String())
		if len(defined) == 0 {
			t.Errorf("payrouter %s -h lists no flag: %q", cmd, stderr.String())
		}
		documented := refdoc.Flags(section)
		for _, f := range defined {
			if !slices.Contains(documented, f) {
				t.Errorf("%s: payrouter %s has the flag -%s; its section does not document it", cliDoc, cmd, f)
			}
		}
		for _, f := range documented {
			if !slices.Contains(defined, f) {
				t.Errorf("%s: documents payrouter %s -%s, which the command does not have", cliDoc, cmd, f)
			}
		}
	}
	for heading := range sections {
		if m := commandHeading.FindStringSubmatch(heading); m != nil && !slices.Contains(commands, m[1]) {
			t.Errorf("%s: documents payrouter %s, which is no command", cliDoc, m[1])
		}
	}
}
