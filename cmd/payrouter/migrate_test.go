package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/payrouter/payrouter/pgstore/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestMigrate: `payrouter migrate` brings an empty database to this build's schema, and running
// it again (a deploy that always migrates first) changes nothing and still exits 0.
func TestMigrate(t *testing.T) {
	sims := startSims(t)
	path := writeConfig(t, sims, "state: {database_url: \""+pgtest.NewDatabase(t)+"\"}\n")
	for i := range 2 {
		var out, errOut bytes.Buffer
		if err := run(t.Context(), []string{"migrate", "-config", path}, os.Getenv, &out, &errOut); err != nil {
			t.Fatalf("migrate, run %d: %v\n%s", i+1, err, errOut.String())
		}
		if !strings.Contains(out.String(), "schema") {
			t.Errorf("migrate, run %d: want it to say the database is at this build's schema; printed %q", i+1, out.String())
		}
	}
}
