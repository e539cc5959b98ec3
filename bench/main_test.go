package bench

import (
	"testing"

	"github.com/payrouter/payrouter/pgstore/pgtest"
)

// TestMain runs the tests through pgtest, which stops the throwaway PostgreSQL the database
// benchmarks start (none is started unless one runs: `go test ./bench/` stays quick). The server
// is durable (fsync and synchronous_commit on), as docs/postgresql.md tells users to run theirs:
// what a commit costs is part of what the database benchmarks measure.
func TestMain(m *testing.M) { pgtest.Main(m, pgtest.Durable) }
