package resilience

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
)

// shareRecorder hears key-share refusals besides what recorder hears.
type shareRecorder struct {
	*recorder
	shareRejected int
}

func (r *shareRecorder) KeyShareRejected(string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shareRejected++
}

func TestBulkheadKeyShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &shareRecorder{recorder: newRecorder()}
		bh := NewBulkhead("paywell", 4, time.Second, rec)
		bh.SetKeyShare(0.5)
		if got := bh.KeyLimit(); got != 2 {
			t.Fatalf("KeyLimit = %d, want ceil(0.5 × 4) = 2", got)
		}
		a := WithKeyScope(t.Context(), "key-a")
		b := WithKeyScope(t.Context(), "key-b")
		ra1, ok1 := bh.Acquire(a)
		_, ok2 := bh.Acquire(a)
		if !ok1 || !ok2 {
			t.Fatal("key a refused within its share")
		}
		start := time.Now()
		if _, ok := bh.Acquire(a); ok {
			t.Fatal("key a got a third slot of 4 with a share of 0.5")
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("a refusal for the key's share waited %v; it must not wait for other keys' slots", waited)
		}
		if _, ok := bh.Acquire(b); !ok {
			t.Fatal("key b refused while key a held only its share")
		}
		if _, ok := bh.Acquire(b); !ok {
			t.Fatal("key b refused its second slot")
		}
		// Full now: a call without a key scope (the worker) waits MaxWait and is refused as full.
		if _, ok := bh.Acquire(t.Context()); ok {
			t.Fatal("a fifth slot of 4")
		}
		if rec.shareRejected != 1 || rec.bhRejected != 1 {
			t.Errorf("heard %d share refusals and %d full refusals, want 1 and 1", rec.shareRejected, rec.bhRejected)
		}
		ra1()
		if _, ok := bh.Acquire(a); !ok {
			t.Error("key a refused after giving a slot back")
		}
	})
}

func TestBulkheadKeyShareOffAndSmall(t *testing.T) {
	for _, tc := range []struct {
		share    float64
		capacity int
		want     int
	}{{1, 20, 0}, {0, 20, 0}, {1.5, 20, 0}, {0.5, 20, 10}, {0.5, 3, 2}, {0.01, 20, 1}, {0.99, 20, 20}} {
		bh := NewBulkhead("g", tc.capacity, 0, nil)
		bh.SetKeyShare(tc.share)
		if got := bh.KeyLimit(); got != tc.want {
			t.Errorf("share %v of %d: KeyLimit %d, want %d", tc.share, tc.capacity, got, tc.want)
		}
	}
	// Off: one key takes every slot.
	bh := NewBulkhead("g", 3, 0, nil)
	ctx := WithKeyScope(context.Background(), "only")
	for i := range 3 {
		if _, ok := bh.Acquire(ctx); !ok {
			t.Fatalf("share off: slot %d of 3 refused", i+1)
		}
	}
}

// One key flooding a slow gateway with charges holds its share of the bulkhead; another key's
// charges still get slots and succeed, and the flood's extra attempts are bulkhead_full with
// a detail that says why, so routing fails them over.
func TestGuardKeyShareLeavesRoomForOtherKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := NewDomains([]GatewaySettings{{Name: "slow", TimeoutSettings: TimeoutSettings{Timeout: time.Minute}, BulkheadSettings: BulkheadSettings{MaxConcurrent: 4}}}, nil)
		d.SetKeyShare(0.5)
		g := d.Guard("slow", payrouter.OpCharge)
		unblock := make(chan struct{})
		slow := func(ctx context.Context) payrouter.Result {
			select {
			case <-unblock:
			case <-ctx.Done():
			}
			return payrouter.Result{Outcome: payrouter.OutcomeSucceeded}
		}
		flood := WithKeyScope(t.Context(), "flood")
		var wg sync.WaitGroup
		results := make(chan payrouter.Result, 10)
		for range 10 {
			wg.Go(func() {
				res, _ := g.Do(flood, slow)
				results <- res
			})
		}
		synctest.Wait() // the flood holds what it can
		if got := d.Bulkhead("slow").InFlight(); got != 2 {
			t.Fatalf("the flooding key holds %d slots of 4, want its share 2", got)
		}
		for range 8 {
			res := <-results
			if res.Outcome != payrouter.OutcomeBulkheadFull || res.Detail != detailKeyShare {
				t.Errorf("a flood attempt over its share: %s %q, want bulkhead_full %q", res.Outcome, res.Detail, detailKeyShare)
			}
		}

		other := WithKeyScope(t.Context(), "shop")
		done := make(chan payrouter.Result, 2)
		for range 2 {
			go func() {
				res, _ := g.Do(other, func(context.Context) payrouter.Result {
					return payrouter.Result{Outcome: payrouter.OutcomeSucceeded}
				})
				done <- res
			}()
		}
		for range 2 {
			if res := <-done; res.Outcome != payrouter.OutcomeSucceeded {
				t.Errorf("the other key's charge while the flood holds its share: %s %q, want succeeded", res.Outcome, res.Detail)
			}
		}
		close(unblock)
		wg.Wait()
		if got := d.Bulkhead("slow").InFlight(); got != 0 {
			t.Errorf("%d slots still held after every call ended", got)
		}
	})
}

// The share set on Domains reaches bulkheads an Update makes afresh.
func TestDomainsKeyShareAfterUpdate(t *testing.T) {
	d := NewDomains([]GatewaySettings{{Name: "a", BulkheadSettings: BulkheadSettings{MaxConcurrent: 10}}}, nil)
	d.SetKeyShare(0.3)
	if got := d.Bulkhead("a").KeyLimit(); got != 3 {
		t.Fatalf("KeyLimit %d, want 3", got)
	}
	if _, err := d.Update([]GatewaySettings{{Name: "a", BulkheadSettings: BulkheadSettings{MaxConcurrent: 20}}, {Name: "b", BulkheadSettings: BulkheadSettings{MaxConcurrent: 4}}}); err != nil {
		t.Fatal(err)
	}
	if got := d.Bulkhead("a").KeyLimit(); got != 6 {
		t.Errorf("renewed bulkhead of 20: KeyLimit %d, want 6", got)
	}
	if got := d.Bulkhead("b").KeyLimit(); got != 2 {
		t.Errorf("new bulkhead of 4: KeyLimit %d, want 2", got)
	}
}
