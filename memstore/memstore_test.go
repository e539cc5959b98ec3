package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/memstore"
	"github.com/payrouter/payrouter/storetest"
)

// owner is the API key scope of the tests' idempotency keys.
const owner = "key_a"

func newStore(tb testing.TB, opts ...memstore.Option) *memstore.Store {
	s := memstore.New(opts...)
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) payrouter.Store { return newStore(t) })
}

// The suite holds with bounds on too: nothing it stores is dropped while it runs, and what each
// owner is counted at matches a recount of what it holds once the suite's test is done.
func TestStoreBounded(t *testing.T) {
	storetest.Run(t, func(t *testing.T) payrouter.Store {
		s := newStore(t, memstore.WithBounds(24*time.Hour, 64<<20))
		t.Cleanup(func() { checkUsage(t, s) })
		return s
	})
}

func BenchmarkStore(b *testing.B) {
	storetest.Benchmark(b, func(b *testing.B) payrouter.Store { return newStore(b) })
}

// fakeClock is a clock tests move by hand, so expiry is exact and costs no waiting.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func claimComplete(t *testing.T, s *memstore.Store, key string, inFlightTTL, ttl time.Duration) {
	t.Helper()
	ctx := t.Context()
	rec, h, err := s.Claim(ctx, owner, key, "fp", inFlightTTL)
	if rec != nil || err != nil {
		t.Fatalf("Claim(%s) = %+v, %v; want a new claim", key, rec, err)
	}
	if err := s.Complete(ctx, h, payrouter.IdempotencyRecord{Fingerprint: "fp", Status: 201}, ttl); err != nil {
		t.Fatalf("Complete(%s): %v", key, err)
	}
}

// TestSweepForgetsExpiredKeys: keys nobody asks about again must still be forgotten, or a
// long-running instance holds every key of the last days.
func TestSweepForgetsExpiredKeys(t *testing.T) {
	clock := newFakeClock()
	s := newStore(t, memstore.WithClock(clock.Now))
	for i := range 10_000 {
		claimComplete(t, s, fmt.Sprintf("old-%d", i), 30*time.Second, time.Minute)
	}
	if got := s.IdempotencyLen(); got != 10_000 {
		t.Fatalf("IdempotencyLen = %d, want 10000 before expiry", got)
	}

	clock.Advance(2 * time.Minute)
	for i := range 1000 {
		if rec, _, err := s.Claim(t.Context(), owner, fmt.Sprintf("new-%d", i), "fp", time.Minute); rec != nil || err != nil {
			t.Fatalf("Claim = %+v, %v", rec, err)
		}
	}
	if got := s.IdempotencyLen(); got != 1000 {
		t.Errorf("IdempotencyLen = %d, want only the 1000 live keys", got)
	}
	if got := s.ExpiriesLen(); got != 1000 {
		t.Errorf("ExpiriesLen = %d, want only the 1000 live keys' expiries", got)
	}
}

// TestMemoryBoundedUnderSteadyTraffic: with keys arriving at a steady rate and living ttl, the
// store holds about rate*ttl keys however long it runs.
func TestMemoryBoundedUnderSteadyTraffic(t *testing.T) {
	const (
		ops         = 50_000
		step        = time.Millisecond
		ttl         = time.Second // 1000 keys live at any time
		inFlightTTL = 100 * time.Millisecond
		live        = int(ttl / step)
	)
	clock := newFakeClock()
	s := newStore(t, memstore.WithClock(clock.Now))
	maxKeys, maxExpiries := 0, 0
	for i := range ops {
		claimComplete(t, s, fmt.Sprintf("k-%d", i), inFlightTTL, ttl)
		clock.Advance(step)
		maxKeys = max(maxKeys, s.IdempotencyLen())
		maxExpiries = max(maxExpiries, s.ExpiriesLen())
	}
	// Each key leaves a stale in-flight expiry behind for twice inFlightTTL (its hold, then as
	// long again for a slow holder).
	if maxKeys > live+1 {
		t.Errorf("at most %d keys held, want about %d", maxKeys, live)
	}
	if want := live + 2*int(inFlightTTL/step) + 1; maxExpiries > want {
		t.Errorf("at most %d expiries held, want at most %d", maxExpiries, want)
	}
}

// TestSweepOrder checks the expiry heap against a plain count: after time T and enough
// operations to drain, exactly the keys expiring after T remain. Claim's own check hides a
// misordered heap from every other test, so only the memory would tell.
func TestSweepOrder(t *testing.T) {
	clock := newFakeClock()
	s := newStore(t, memstore.WithClock(clock.Now))
	rng := rand.New(rand.NewPCG(1, 2))
	start := clock.Now()
	expires := make([]time.Time, 2000)
	for i := range expires {
		ttl := time.Duration(1+rng.IntN(1000)) * time.Millisecond
		key := fmt.Sprintf("k-%d", i)
		if rng.IntN(2) == 0 {
			claimComplete(t, s, key, time.Millisecond, ttl)
			expires[i] = start.Add(ttl)
		} else {
			if _, _, err := s.Claim(t.Context(), owner, key, "fp", ttl/2); err != nil {
				t.Fatal(err)
			}
			// An in-flight key is kept for its hold and as long again.
			expires[i] = start.Add(ttl / 2 * 2)
		}
	}
	for _, at := range []time.Duration{0, 100, 250, 500, 999, 1000} {
		clock.Advance(at*time.Millisecond - clock.Now().Sub(start))
		for range len(expires) {
			if err := s.Release(t.Context(), payrouter.Hold{Key: "k-unrelated", Token: -1}); err != nil {
				t.Fatal(err)
			}
		}
		want := 0
		for _, e := range expires {
			if clock.Now().Before(e) {
				want++
			}
		}
		if got := s.IdempotencyLen(); got != want {
			t.Errorf("at +%dms: IdempotencyLen = %d, want %d", at, got, want)
		}
	}
}

// TestExpiryBoundary pins the instant a key expires: at its TTL, not a tick later.
func TestExpiryBoundary(t *testing.T) {
	tests := []struct {
		name     string
		complete bool
		before   error // Claim's error one nanosecond before expiry
	}{
		{"in flight", false, payrouter.ErrInFlight},
		{"completed", true, payrouter.ErrMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			s := newStore(t, memstore.WithClock(clock.Now))
			ctx := t.Context()
			_, h, err := s.Claim(ctx, owner, "k", "fp", time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if tc.complete {
				if err := s.Complete(ctx, h, payrouter.IdempotencyRecord{Fingerprint: "fp"}, time.Second); err != nil {
					t.Fatal(err)
				}
			}
			clock.Advance(time.Second - time.Nanosecond)
			if _, _, err := s.Claim(ctx, owner, "k", "other", time.Second); !errors.Is(err, tc.before) {
				t.Fatalf("Claim just before expiry: %v, want %v", err, tc.before)
			}
			clock.Advance(time.Nanosecond)
			if rec, _, err := s.Claim(ctx, owner, "k", "other", time.Second); rec != nil || err != nil {
				t.Fatalf("Claim at expiry = %+v, %v; want a new claim", rec, err)
			}
		})
	}
}

// everyCall calls each method of the store once and returns its error.
func everyCall(s *memstore.Store) map[string]func(ctx context.Context) error {
	return map[string]func(ctx context.Context) error{
		"SaveCharge": func(ctx context.Context) error {
			return s.SaveCharge(ctx, &payrouter.Charge{ID: "ch_1", Status: payrouter.StatusProcessing})
		},
		"Charge": func(ctx context.Context) error { _, err := s.Charge(ctx, "ch_1"); return err },
		"ChargesByStatus": func(ctx context.Context) error {
			_, err := s.ChargesByStatus(ctx, payrouter.StatusProcessing, 10)
			return err
		},
		"Claim": func(ctx context.Context) error { _, _, err := s.Claim(ctx, owner, "k", "fp", time.Minute); return err },
		"ClaimCharge": func(ctx context.Context) error {
			_, err := s.ClaimCharge(ctx, owner, "k", "fp", time.Minute, &payrouter.Charge{ID: "ch_1", Status: payrouter.StatusProcessing})
			return err
		},
		"Renew": func(ctx context.Context) error { return s.Renew(ctx, payrouter.Hold{Key: "k", Token: 1}, time.Minute) },
		"Complete": func(ctx context.Context) error {
			return s.Complete(ctx, payrouter.Hold{Key: "k", Token: 1}, payrouter.IdempotencyRecord{}, time.Minute)
		},
		"Release": func(ctx context.Context) error { return s.Release(ctx, payrouter.Hold{Key: "k", Token: 1}) },
		"Ping":    func(ctx context.Context) error { return s.Ping(ctx) },
	}
}

func TestClosed(t *testing.T) {
	s := memstore.New()
	for range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	for name, call := range everyCall(s) {
		if err := call(t.Context()); !errors.Is(err, memstore.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

func TestCanceledContext(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for name, call := range everyCall(s) {
		if err := call(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a canceled context: %v, want context.Canceled", name, err)
		}
	}
}

// TestCopiesCoverEveryReference guards cloneCharge and cloneRecord, which copy by name the
// fields that share memory: a map, slice or pointer field added to these types later must be
// copied there too, and this test names it.
func TestCopiesCoverEveryReference(t *testing.T) {
	tests := []struct {
		typ    reflect.Type
		copied map[string]bool // fields the clone functions copy deeply
	}{
		{reflect.TypeFor[payrouter.Charge](), map[string]bool{"Charge.Metadata": true, "Charge.Attempts": true}},
		{reflect.TypeFor[payrouter.IdempotencyRecord](), map[string]bool{"IdempotencyRecord.Header": true, "IdempotencyRecord.Body": true}},
	}
	for _, tc := range tests {
		t.Run(tc.typ.Name(), func(t *testing.T) {
			for _, field := range referenceFields(tc.typ, tc.typ.Name()) {
				if !tc.copied[field] {
					t.Errorf("%s shares memory and is not deep-copied by the store", field)
				}
			}
		})
	}
}

// referenceFields lists the fields of typ, nested ones included, whose copy shares memory. It
// looks inside slice elements too, since slices.Clone copies them shallowly.
func referenceFields(typ reflect.Type, path string) []string {
	var found []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := path + "." + f.Name
		switch {
		case f.Type.Kind() == reflect.Slice:
			found = append(found, name)
			switch elem := f.Type.Elem(); {
			case elem.Kind() == reflect.Struct:
				found = append(found, referenceFields(elem, name+"[]")...)
			case sharesMemory(elem.Kind()):
				found = append(found, name+"[]")
			}
		case sharesMemory(f.Type.Kind()):
			found = append(found, name)
		case f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Time]():
			found = append(found, referenceFields(f.Type, name)...)
		}
	}
	return found
}

func sharesMemory(k reflect.Kind) bool {
	switch k {
	case reflect.Map, reflect.Pointer, reflect.Slice, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return true
	}
	return false
}
