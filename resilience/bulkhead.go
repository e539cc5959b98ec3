package resilience

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Bulkhead bounds the calls in flight to one gateway, all its operations together: a slow
// gateway can hold at most its own slots, and no caller waits longer than MaxWait for one.
type Bulkhead struct {
	gateway string
	slots   chan struct{} // a semaphore: a value in the channel is a slot taken
	maxWait time.Duration
	obs     Observer
	// reportMu orders BulkheadChanged reports and reads the count inside them, so that the last
	// report the observer hears always carries the current count.
	reportMu sync.Mutex
	// releaseFn is release as a func value made once, so that Acquire allocates nothing.
	releaseFn func()
	// quiet is set while the bulkhead is not its gateway's current one (Domains.Update replaced
	// it, or retired the gateway): the calls it still holds finish on it, but its counts no
	// longer speak for the gateway.
	quiet atomic.Bool
}

// NewBulkhead returns a bulkhead of capacity slots (at least 1) for gateway; obs nil is
// NopObserver. Domains makes one per gateway; NewBulkhead is for tests and tools.
func NewBulkhead(gateway string, capacity int, maxWait time.Duration, obs Observer) *Bulkhead {
	if obs == nil {
		obs = NopObserver{}
	}
	bh := &Bulkhead{
		gateway: gateway,
		slots:   make(chan struct{}, max(capacity, 1)),
		maxWait: maxWait,
		obs:     obs,
	}
	bh.releaseFn = bh.release
	return bh
}

// Acquire takes a slot, waiting at most MaxWait for one (with MaxWait 0 not at all), and never
// past ctx. When ok, release must be called exactly once.
func (bh *Bulkhead) Acquire(ctx context.Context) (release func(), ok bool) {
	if !bh.acquire(ctx) {
		return nil, false
	}
	return bh.releaseFn, true
}

func (bh *Bulkhead) acquire(ctx context.Context) bool {
	select {
	case bh.slots <- struct{}{}:
		bh.changed()
		return true
	default:
	}
	if bh.maxWait > 0 && ctx.Err() == nil {
		t := time.NewTimer(bh.maxWait)
		defer t.Stop()
		select {
		case bh.slots <- struct{}{}:
			bh.changed()
			return true
		case <-t.C:
		case <-ctx.Done():
		}
	}
	bh.obs.BulkheadRejected(bh.gateway)
	return false
}

func (bh *Bulkhead) release() {
	select {
	case <-bh.slots:
	default:
		// Receiving from an empty semaphore would block forever; say what went wrong instead.
		panic("resilience: bulkhead " + bh.gateway + " released more often than acquired")
	}
	bh.changed()
}

func (bh *Bulkhead) changed() {
	if bh.quiet.Load() {
		return
	}
	bh.reportMu.Lock()
	bh.obs.BulkheadChanged(bh.gateway, len(bh.slots), cap(bh.slots))
	bh.reportMu.Unlock()
}

// InFlight returns how many slots are taken.
func (bh *Bulkhead) InFlight() int { return len(bh.slots) }

// Capacity returns how many slots the bulkhead has.
func (bh *Bulkhead) Capacity() int { return cap(bh.slots) }

// MaxWait returns the longest Acquire waits for a slot.
func (bh *Bulkhead) MaxWait() time.Duration { return bh.maxWait }
