package pgstore

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/memstore"
	"github.com/payrouter/payrouter/pgstore/pgtest"
)

// statementCounter counts the statements sent to the database. With pgx's statement cache
// (the default mode), a statement already prepared on its connection is one round trip, so in
// a warm benchmark statements are round trips.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// memNsPerOp is the memstore baseline's time per charge, measured first in the same run.
var memNsPerOp float64

// BenchmarkChargePath measures the money-state work of one charge: the idempotency key
// claimed with the charge stored as processing (ClaimCharge) before the gateway call, then the
// final charge and the answer stored together (CompleteCharge). memstore runs the same
// sequence first as the baseline; pgstore reports its round trips per charge and its time as a
// multiple of memstore's. Skipped unless PAYROUTER_BENCH=1:
//
//	PAYROUTER_BENCH=1 go test -run '^$' -bench BenchmarkChargePath -benchmem ./pgstore/
func BenchmarkChargePath(b *testing.B) {
	if os.Getenv("PAYROUTER_BENCH") != "1" {
		b.Skip("set PAYROUTER_BENCH=1 to run the store benchmarks")
	}
	b.Run("memstore", func(b *testing.B) {
		s := memstore.New()
		defer s.Close()
		chargePath(b, s)
		memNsPerOp = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	})
	b.Run("pgstore", func(b *testing.B) {
		counter := &statementCounter{}
		s := open(b, pgtest.NewDatabase(b), Options{tracer: counter})
		// Warm-up: every statement prepared on the pool's connections, as in a running instance.
		for n := range 20 {
			chargeOnce(b, s, -n-1)
		}
		before := counter.n.Load()
		chargePath(b, s)
		b.ReportMetric(float64(counter.n.Load()-before)/float64(b.N), "roundtrips/op")
		if memNsPerOp > 0 {
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/memNsPerOp, "x-memstore")
		}
	})
}

// chargePath runs the charge sequence on s for the benchmark's loop, each with a key and a
// charge of its own.
func chargePath(b *testing.B, s payrouter.Store) {
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		chargeOnce(b, s, n)
		n++
	}
}

// benchRecord is the answer every benchmark charge stores.
var benchRecord = payrouter.IdempotencyRecord{Fingerprint: fpA, Status: 201,
	Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"id":"ch","status":"succeeded"}`)}

// chargeOnce is the store's part of charge n: ClaimCharge (the key and the processing charge),
// then CompleteCharge.
func chargeOnce(b *testing.B, s payrouter.Store, n int) {
	ctx := b.Context()
	key, id := "bench-"+strconv.Itoa(n), "ch_bench_"+strconv.Itoa(n)
	c := testCharge(id, payrouter.StatusProcessing)
	claimed, err := s.ClaimCharge(ctx, "", key, fpA, 10*time.Second, c)
	if err != nil || !claimed.Stored {
		b.Fatal(claimed, err)
	}
	c.Status, c.Gateway = payrouter.StatusSucceeded, "paywell"
	if err := s.CompleteCharge(ctx, c, claimed.Hold, benchRecord, time.Hour); err != nil {
		b.Fatal(err)
	}
}
