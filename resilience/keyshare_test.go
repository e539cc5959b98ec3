package resilience

import (
	"context"
	"fmt"
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

// heldBy returns the slots scope holds.
func (bh *Bulkhead) heldBy(scope string) int {
	bh.mu.Lock()
	defer bh.mu.Unlock()
	return bh.held[scope]
}

// A key alone may take every slot: its share bounds it only while another key needs them.
func TestBulkheadKeyShareLoneKeyUsesEverySlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &shareRecorder{recorder: newRecorder()}
		bh := NewBulkhead("paywell", 4, time.Second, rec)
		bh.SetKeyShare(0.5)
		if got := bh.KeyLimit(); got != 2 {
			t.Fatalf("KeyLimit = %d, want ceil(0.5 × 4) = 2", got)
		}
		a := WithKeyScope(t.Context(), "key-a")
		for i := range 4 {
			if _, ok := bh.Acquire(a); !ok {
				t.Fatalf("key a alone refused slot %d of 4", i+1)
			}
		}
		// Full now: the fifth waits MaxWait like any call at a full bulkhead, and is refused as
		// full, not for its share.
		start := time.Now()
		if _, ok := bh.Acquire(a); ok {
			t.Fatal("a fifth slot of 4")
		}
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("the fifth call waited %v, want MaxWait 1s", waited)
		}
		if rec.shareRejected != 0 || rec.bhRejected != 1 {
			t.Errorf("heard %d share refusals and %d full refusals, want 0 and 1", rec.shareRejected, rec.bhRejected)
		}
	})
}

// A key over its share while the other key waits: the freed slots go to the other key until it
// holds its share, and the first key's own calls are refused at once meanwhile, so the other key
// gets its share within MaxWait.
func TestBulkheadKeyShareWaitingKeyGetsItsShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &shareRecorder{recorder: newRecorder()}
		bh := NewBulkhead("paywell", 4, time.Second, rec)
		bh.SetKeyShare(0.5)
		a := WithKeyScope(t.Context(), "key-a")
		b := WithKeyScope(t.Context(), "key-b")
		var releases []func()
		for range 4 {
			r, ok := bh.Acquire(a)
			if !ok {
				t.Fatal("key a alone refused a free slot")
			}
			releases = append(releases, r)
		}
		// key a asked first: its fifth call waits for a slot, then key b's two do.
		aWaiter := make(chan bool, 1)
		go func() { _, ok := bh.Acquire(a); aWaiter <- ok }()
		synctest.Wait()
		type got struct {
			ok     bool
			waited time.Duration
		}
		bGot := make(chan got, 2)
		for range 2 {
			go func() {
				start := time.Now()
				_, ok := bh.Acquire(b)
				bGot <- got{ok, time.Since(start)}
			}()
		}
		synctest.Wait()
		start := time.Now()
		if _, ok := bh.Acquire(a); ok {
			t.Fatal("key a over its share got a slot while key b waits for its share")
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("a refusal for the key's share waited %v; it must not wait for other keys' slots", waited)
		}
		time.Sleep(100 * time.Millisecond)
		releases[0]()
		releases[1]()
		for range 2 {
			if g := <-bGot; !g.ok || g.waited != 100*time.Millisecond {
				t.Errorf("key b waiting for its share: ok %v after %v, want a slot after 100ms", g.ok, g.waited)
			}
		}
		if ha, hb := bh.heldBy("key-a"), bh.heldBy("key-b"); ha != 2 || hb != 2 {
			t.Errorf("key a holds %d, key b %d, want 2 and 2", ha, hb)
		}
		if ok := <-aWaiter; ok {
			t.Error("key a's waiter got a slot kept for key b")
		}
		// key a's waiter timed out once key b held its share: the bulkhead was simply full then.
		if rec.shareRejected != 1 || rec.bhRejected != 1 {
			t.Errorf("heard %d share refusals and %d full refusals, want 1 and 1", rec.shareRejected, rec.bhRejected)
		}
		releases[2]()
		if _, ok := bh.Acquire(a); !ok {
			t.Error("key a refused within its share")
		}
	})
}

// With MaxWait 0 nobody waits: a key refused at a full bulkhead still counts as active for
// keyActiveFor, so the next slot freed goes to it and not to the key holding every slot.
func TestBulkheadKeyShareRefusedKeyKeepsItsClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bh := NewBulkhead("paywell", 4, 0, nil)
		bh.SetKeyShare(0.5)
		a := WithKeyScope(t.Context(), "key-a")
		b := WithKeyScope(t.Context(), "key-b")
		var releases []func()
		for range 4 {
			r, _ := bh.Acquire(a)
			releases = append(releases, r)
		}
		if _, ok := bh.Acquire(b); ok {
			t.Fatal("key b got a slot of a full bulkhead")
		}
		releases[0]()
		if _, ok := bh.Acquire(a); ok {
			t.Fatal("key a over its share took the slot key b was refused a moment ago")
		}
		if _, ok := bh.Acquire(b); !ok {
			t.Fatal("key b refused the freed slot")
		}
		// Once key b has been idle for keyActiveFor, key a may use its slots again.
		releases[1]()
		time.Sleep(keyActiveFor)
		if _, ok := bh.Acquire(a); ok {
			t.Fatal("key a took the slot key b, holding one, still lacks of its share")
		}
	})
}

// flood runs workers calls of scope, each holding its slot for hold and trying again at once
// (1ms later if refused), until stop.
func flood(bh *Bulkhead, ctx context.Context, workers int, hold time.Duration, stop time.Time) {
	for range workers {
		go func() {
			for time.Now().Before(stop) {
				release, ok := bh.Acquire(ctx)
				if !ok {
					time.Sleep(time.Millisecond)
					continue
				}
				time.Sleep(hold)
				release()
			}
		}()
	}
}

// minHeld samples, between the floods' steps, the fewest slots each scope held from from to to.
func minHeld(bh *Bulkhead, from, to time.Duration, scopes ...string) map[string]int {
	least := map[string]int{}
	for _, s := range scopes {
		least[s] = bh.Capacity() + 1
	}
	start := time.Now()
	time.Sleep(from + 500*time.Microsecond) // half a step off every worker's wake-up
	for time.Since(start) < to {
		for _, s := range scopes {
			least[s] = min(least[s], bh.heldBy(s))
		}
		time.Sleep(5 * time.Millisecond)
	}
	return least
}

func TestBulkheadKeyShareFloods(t *testing.T) {
	for _, maxWait := range []time.Duration{0, 50 * time.Millisecond} {
		t.Run(fmt.Sprintf("max_wait %v", maxWait), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &shareRecorder{recorder: newRecorder()}
				bh := NewBulkhead("paywell", 20, maxWait, rec)
				bh.SetKeyShare(0.5)
				a := WithKeyScope(t.Context(), "key-a")
				b := WithKeyScope(t.Context(), "key-b")
				stop := time.Now().Add(2 * time.Second)

				// One key floods while the other is idle: every slot is used, none refused for
				// the share.
				flood(bh, a, 30, 10*time.Millisecond, stop)
				lone := minHeld(bh, 20*time.Millisecond, 500*time.Millisecond, "key-a")
				t.Logf("key a alone: at least %d of 20 slots", lone["key-a"])
				if lone["key-a"] != 20 || rec.shareRejected != 0 {
					t.Errorf("key a alone held at least %d of 20 slots, with %d share refusals; want 20 and 0", lone["key-a"], rec.shareRejected)
				}

				// Then both flood: each holds at least its share, 10.
				flood(bh, b, 30, 10*time.Millisecond, stop)
				both := minHeld(bh, 100*time.Millisecond, 1300*time.Millisecond, "key-a", "key-b")
				t.Logf("both flooding: key a at least %d, key b at least %d of 20 slots", both["key-a"], both["key-b"])
				if both["key-a"] < 10 || both["key-b"] < 10 {
					t.Errorf("both flooding: key a held at least %d, key b %d; want each at least its share 10", both["key-a"], both["key-b"])
				}
				time.Sleep(time.Until(stop) + time.Second)
				if n := bh.InFlight(); n != 0 {
					t.Errorf("%d slots held after the floods", n)
				}
			})
		})
	}
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

// One key flooding a slow gateway with charges takes every slot while it is alone, so none of its
// charges is bulkhead_full while a slot is free; another key's charges then get the slots freed,
// up to its share, and the flood's extra attempts meanwhile are bulkhead_full with a detail that
// says why, so routing fails them over.
func TestGuardKeyShareLeavesRoomForOtherKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := NewDomains([]GatewaySettings{{Name: "slow", TimeoutSettings: TimeoutSettings{Timeout: time.Minute}, BulkheadSettings: BulkheadSettings{MaxConcurrent: 4}}}, nil)
		d.SetKeyShare(0.5)
		g := d.Guard("slow", payrouter.OpCharge)
		slow := func(ctx context.Context) payrouter.Result {
			time.Sleep(100 * time.Millisecond)
			return payrouter.Result{Outcome: payrouter.OutcomeSucceeded}
		}
		flood := WithKeyScope(t.Context(), "flood")
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if res, _ := g.Do(flood, slow); res.Outcome != payrouter.OutcomeSucceeded {
					t.Errorf("the flood alone, a free slot: %s %q, want succeeded", res.Outcome, res.Detail)
				}
			})
		}
		synctest.Wait()
		if got := d.Bulkhead("slow").InFlight(); got != 4 {
			t.Fatalf("the flooding key alone holds %d slots of 4, want every one", got)
		}

		// The shop is refused at the full bulkhead (MaxWait 0); the flood's next charge, once a
		// slot is free, is refused for its share: the slot is the shop's.
		other := WithKeyScope(t.Context(), "shop")
		ok := func(context.Context) payrouter.Result { return payrouter.Result{Outcome: payrouter.OutcomeSucceeded} }
		if res, _ := g.Do(other, ok); res.Outcome != payrouter.OutcomeBulkheadFull || res.Detail != detailBulkheadFull {
			t.Errorf("the shop at a full bulkhead: %s %q, want bulkhead_full %q", res.Outcome, res.Detail, detailBulkheadFull)
		}
		wg.Wait()
		hold := make(chan struct{})
		for range 2 {
			wg.Go(func() {
				g.Do(flood, func(context.Context) payrouter.Result {
					<-hold
					return payrouter.Result{Outcome: payrouter.OutcomeSucceeded}
				})
			})
		}
		synctest.Wait()
		if res, _ := g.Do(flood, ok); res.Outcome != payrouter.OutcomeBulkheadFull || res.Detail != detailKeyShare {
			t.Errorf("a flood attempt over its share while the shop needs the slots: %s %q, want bulkhead_full %q", res.Outcome, res.Detail, detailKeyShare)
		}
		done := make(chan payrouter.Result, 2)
		for range 2 {
			wg.Go(func() {
				res, _ := g.Do(other, func(context.Context) payrouter.Result {
					<-hold
					return payrouter.Result{Outcome: payrouter.OutcomeSucceeded}
				})
				done <- res
			})
		}
		synctest.Wait()
		if got := d.Bulkhead("slow").InFlight(); got != 4 {
			t.Errorf("flood and shop hold %d slots of 4, want 2 each", got)
		}
		close(hold)
		for range 2 {
			if res := <-done; res.Outcome != payrouter.OutcomeSucceeded {
				t.Errorf("the shop's charge within its share: %s %q, want succeeded", res.Outcome, res.Detail)
			}
		}
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
