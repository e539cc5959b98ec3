package bench

import (
	"testing"

	"github.com/payrouter/payrouter/pgstore/pgtest"
)

// TestMain runs the tests through pgtest, which stops the throwaway PostgreSQL the database
// benchmarks start (none is started unless one runs: `go test ./bench/` stays quick).
func TestMain(m *testing.M) { pgtest.Main(m) }
