package storetest

import (
	"strconv"
	"testing"

	"github.com/payrouter/payrouter"
)

// Benchmark measures the two writes on every charge's path: an idempotency key claimed and
// completed, and a charge saved. newStore is called once per sub-benchmark and returns an empty
// store.
func Benchmark(b *testing.B, newStore func(b *testing.B) payrouter.Store) {
	b.Run("ClaimComplete", func(b *testing.B) {
		s := newStore(b)
		ctx := b.Context()
		rec := newRecord(fpA)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			// A new key each time, as real traffic has; building it costs one small allocation.
			key := "bench-" + strconv.Itoa(i)
			i++
			_, h, err := s.Claim(ctx, owner, key, fpA, longTTL)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Complete(ctx, h, rec, longTTL); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("SaveCharge", func(b *testing.B) {
		s := newStore(b)
		ctx := b.Context()
		c := newCharge("ch_bench", payrouter.StatusProcessing, base)
		b.ReportAllocs()
		for b.Loop() {
			if err := s.SaveCharge(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
