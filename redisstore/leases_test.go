package redisstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter/redisstore"
)

const leaseName = "prober/paywell"

func holdLease(t *testing.T, s *redisstore.Store, holder string, ttl time.Duration, want bool) {
	t.Helper()
	held, err := s.HoldLease(t.Context(), leaseName, holder, ttl)
	if err != nil {
		t.Fatalf("HoldLease(%s, %s): %v", leaseName, holder, err)
	}
	if held != want {
		t.Fatalf("HoldLease(%s, %s) = %v, want %v", leaseName, holder, held, want)
	}
}

func TestHoldLeaseHasOneHolder(t *testing.T) {
	fl := newFleet(t)
	stores := []*redisstore.Store{fl.instance(t), fl.instance(t)}
	holders := []string{"instance-a", "instance-b"}
	var wg sync.WaitGroup
	start := make(chan struct{})
	held := make([]bool, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			<-start
			held[i], errs[i] = stores[i].HoldLease(t.Context(), leaseName, holders[i], time.Minute)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("HoldLease(%s): %v", holders[i], err)
		}
	}
	if held[0] == held[1] {
		t.Fatalf("HoldLease held = %v for two holders at once, want exactly one", held)
	}
	winner, loser := 0, 1
	if held[1] {
		winner, loser = 1, 0
	}
	holdLease(t, stores[loser], holders[loser], time.Minute, false)
	holdLease(t, stores[winner], holders[winner], time.Minute, true) // renewal
	holdLease(t, stores[loser], holders[loser], time.Minute, false)
}

func TestHoldLeaseRenewalExtendsOnlyTheHolders(t *testing.T) {
	fl := newFleet(t)
	a, b := fl.instance(t), fl.instance(t)
	key := fl.prefix + "lease:{" + leaseName + "}"
	pttl := func() time.Duration {
		t.Helper()
		d, err := fl.raw.PTTL(t.Context(), key).Result()
		if err != nil {
			t.Fatalf("PTTL %s: %v", key, err)
		}
		return d
	}

	holdLease(t, a, "a", time.Second, true)
	if d := pttl(); d <= 0 || d > time.Second {
		t.Fatalf("lease expires in %v, want within its 1s ttl", d)
	}
	holdLease(t, a, "a", time.Hour, true)
	if d := pttl(); d <= time.Second {
		t.Fatalf("lease renewed for an hour expires in %v", d)
	}
	if holder, err := fl.raw.Get(t.Context(), key).Result(); err != nil || holder != "a" {
		t.Fatalf("lease holder = %q, %v; want a", holder, err)
	}
	holdLease(t, b, "b", 2*time.Hour, false)
	if d := pttl(); d > time.Hour {
		t.Fatalf("another holder's HoldLease moved the expiry to %v", d)
	}
}

func TestHoldLeaseTakeoverAfterExpiry(t *testing.T) {
	fl := newFleet(t)
	a, b := fl.instance(t), fl.instance(t)
	holdLease(t, a, "a", 100*time.Millisecond, true)
	holdLease(t, b, "b", time.Minute, false)
	// a stopped renewing (crashed, or stalled): b takes the lease once it expires.
	fleetEventually(t, "b takes the expired lease", func() (bool, error) {
		return b.HoldLease(t.Context(), leaseName, "b", time.Minute)
	})
	// A stalled a coming back must not renew over b.
	holdLease(t, a, "a", time.Minute, false)
	holdLease(t, b, "b", time.Minute, true)
}

func TestDropLease(t *testing.T) {
	fl := newFleet(t)
	a, b := fl.instance(t), fl.instance(t)
	holdLease(t, a, "a", time.Minute, true)

	if err := b.DropLease(t.Context(), leaseName, "b"); err != nil {
		t.Fatalf("DropLease by another holder: %v", err)
	}
	holdLease(t, b, "b", time.Minute, false) // still a's

	if err := a.DropLease(t.Context(), leaseName, "a"); err != nil {
		t.Fatalf("DropLease by the holder: %v", err)
	}
	holdLease(t, b, "b", time.Minute, true) // free at once, no waiting for the ttl

	if err := a.DropLease(t.Context(), "never/held", "a"); err != nil {
		t.Fatalf("DropLease of a lease nobody holds: %v", err)
	}
}

func TestLeaseInvalidArguments(t *testing.T) {
	fl := newFleet(t)
	s := fl.instance(t)
	tests := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"hold: empty name", func(ctx context.Context) error {
			_, err := s.HoldLease(ctx, "", "a", time.Minute)
			return err
		}},
		{"hold: empty holder", func(ctx context.Context) error {
			_, err := s.HoldLease(ctx, leaseName, "", time.Minute)
			return err
		}},
		{"hold: no ttl", func(ctx context.Context) error {
			_, err := s.HoldLease(ctx, leaseName, "a", 0)
			return err
		}},
		{"drop: empty name", func(ctx context.Context) error { return s.DropLease(ctx, "", "a") }},
		{"drop: empty holder", func(ctx context.Context) error { return s.DropLease(ctx, leaseName, "") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(t.Context()); err == nil {
				t.Fatal("succeeded, want an error")
			}
		})
	}
	if keys := fl.keys(t); len(keys) != 0 {
		t.Fatalf("refused calls wrote %v", keys)
	}
}
