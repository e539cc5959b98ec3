package resilience

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestBulkheadRefusesAtCapacityWithoutWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		bh := NewBulkhead("tranglo", 2, 0, rec)
		r1, ok1 := bh.Acquire(t.Context())
		r2, ok2 := bh.Acquire(t.Context())
		if !ok1 || !ok2 {
			t.Fatalf("two acquires on 2 slots: got %v, %v", ok1, ok2)
		}
		start := time.Now()
		if release, ok := bh.Acquire(t.Context()); ok || release != nil {
			t.Fatal("third acquire on 2 slots: admitted")
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("refusal with MaxWait 0 waited %v", waited)
		}
		if bh.InFlight() != 2 || bh.Capacity() != 2 {
			t.Errorf("in flight %d of %d, want 2 of 2", bh.InFlight(), bh.Capacity())
		}
		r1()
		r3, ok := bh.Acquire(t.Context())
		if !ok {
			t.Fatal("acquire after a release: refused")
		}
		r2()
		r3()
		if got, want := rec.inFlight, []int{1, 2, 1, 2, 1, 0}; !slices.Equal(got, want) {
			t.Errorf("in-flight counts heard: got %v, want %v", got, want)
		}
		if rec.bhRejected != 1 {
			t.Errorf("rejections heard: got %d, want 1", rec.bhRejected)
		}
	})
}

func TestBulkheadWaitsUpToMaxWait(t *testing.T) {
	const maxWait = 100 * time.Millisecond
	tests := []struct {
		name      string
		releaseAt time.Duration // when the slot holder lets go; 0 never
		budget    time.Duration // the caller's deadline; 0 none
		admitted  bool
		waited    time.Duration
	}{
		{"no slot frees up", 0, 0, false, maxWait},
		{"a slot frees up in time", 30 * time.Millisecond, 0, true, 30 * time.Millisecond},
		{"a slot frees up too late", 150 * time.Millisecond, 0, false, maxWait},
		{"the caller's deadline comes first", 0, 20 * time.Millisecond, false, 20 * time.Millisecond},
		{"the caller's deadline is later", 0, time.Second, false, maxWait},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				bh := NewBulkhead("tranglo", 1, maxWait, nil)
				holder, _ := bh.Acquire(t.Context())
				if tc.releaseAt > 0 {
					time.AfterFunc(tc.releaseAt, holder)
				}
				ctx := t.Context()
				if tc.budget > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.budget)
					defer cancel()
				}
				start := time.Now()
				release, ok := bh.Acquire(ctx)
				if waited := time.Since(start); ok != tc.admitted || waited != tc.waited {
					t.Errorf("Acquire: admitted %v after %v; want %v after %v", ok, waited, tc.admitted, tc.waited)
				}
				if ok {
					release()
				}
				synctest.Wait() // let a late release run before the bubble ends
			})
		})
	}
}

func TestBulkheadAcquireWithEndedContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bh := NewBulkhead("tranglo", 1, time.Second, nil)
		holder, _ := bh.Acquire(t.Context())
		defer holder()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		start := time.Now()
		if _, ok := bh.Acquire(ctx); ok || time.Since(start) != 0 {
			t.Errorf("acquire with an ended context on a full bulkhead: admitted %v after %v, want refused at once", ok, time.Since(start))
		}
	})
}

func TestBulkheadReleaseTwicePanics(t *testing.T) {
	bh := NewBulkhead("tranglo", 1, 0, nil)
	release, _ := bh.Acquire(t.Context())
	release()
	defer func() {
		if recover() == nil {
			t.Error("a second release: no panic")
		}
	}()
	release()
}

func TestBulkheadUnderConcurrency(t *testing.T) {
	rec := newRecorder()
	bh := NewBulkhead("tranglo", 5, 0, rec)
	var (
		wg       sync.WaitGroup
		inside   atomic.Int64
		most     atomic.Int64
		admitted atomic.Int64
	)
	for range 200 {
		wg.Go(func() {
			release, ok := bh.Acquire(t.Context())
			if !ok {
				return
			}
			admitted.Add(1)
			n := inside.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			inside.Add(-1)
			release()
		})
	}
	wg.Wait()
	if most.Load() > 5 {
		t.Errorf("at most %d inside a bulkhead of 5", most.Load())
	}
	if bh.InFlight() != 0 {
		t.Errorf("in flight after every release: %d", bh.InFlight())
	}
	// Reports are ordered with the count read inside them: the last one is the true count.
	if got := rec.inFlight[len(rec.inFlight)-1]; got != 0 {
		t.Errorf("last in-flight count heard: %d, want 0", got)
	}
	if got, want := len(rec.inFlight), 2*int(admitted.Load()); got != want {
		t.Errorf("in-flight reports: %d, want %d (one per acquire and release)", got, want)
	}
	if got, want := rec.bhRejected, 200-int(admitted.Load()); got != want {
		t.Errorf("rejections heard: %d, want %d", got, want)
	}
}
