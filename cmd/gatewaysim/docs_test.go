package main

import (
	"bytes"
	"errors"
	"flag"
	"slices"
	"testing"

	"github.com/payrouter/payrouter/internal/refdoc"
)

const cliDoc = "../../docs/cli.md"

// TestCLIDoc: every flag gatewaysim parses (its -h output) is in the gatewaysim section of
// docs/cli.md, and every flag documented there exists.
func TestCLIDoc(t *testing.T) {
	sections, err := refdoc.Sections(cliDoc)
	if err != nil {
		t.Fatal(err)
	}
	section, ok := sections["`gatewaysim`"]
	if !ok {
		t.Fatalf("%s: no section \"## `gatewaysim`\"", cliDoc)
	}
	var stderr bytes.Buffer
	if err := run(t.Context(), []string{"-h"}, &bytes.Buffer{}, &stderr); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("gatewaysim -h: %v", err)
	}
	defined := refdoc.DefinedFlags(stderr.String())
	if len(defined) < 6 {
		t.Fatalf("gatewaysim -h lists %d flags: %q", len(defined), stderr.String())
	}
	documented := refdoc.Flags(section)
	for _, f := range defined {
		if !slices.Contains(documented, f) {
			t.Errorf("%s: gatewaysim has the flag -%s; its section does not document it", cliDoc, f)
		}
	}
	for _, f := range documented {
		if !slices.Contains(defined, f) {
			t.Errorf("%s: documents gatewaysim -%s, which it does not have", cliDoc, f)
		}
	}
}
