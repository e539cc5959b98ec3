package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/payrouter/payrouter/internal/buildinfo"
)

// version is `payrouter version`: which build this is (internal/buildinfo), a field a line, or
// one JSON object with -json, for a deploy script to compare with what it meant to ship.
func version(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print one JSON object: version, commit, modified, go_version, platform")
	if err := fs.Parse(args); err != nil {
		return &exitError{code: 2}
	}
	if fs.NArg() > 0 {
		return usageError("version: unexpected argument %q", fs.Arg(0))
	}
	info := buildinfo.Read()
	if *asJSON {
		return json.NewEncoder(stdout).Encode(info)
	}
	commit := info.Commit
	if commit == "" {
		commit = "unknown"
	}
	if info.Modified {
		commit += " (modified: built with changes not committed)"
	}
	_, err := fmt.Fprintf(stdout, "version   %s\ncommit    %s\ngo        %s\nplatform  %s\n", info.Version, commit, info.GoVersion, info.Platform)
	return err
}
