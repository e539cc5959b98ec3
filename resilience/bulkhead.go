package resilience

import (
	"context"
	"math"
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

	// share is the most of the slots one API key scope may hold (SetKeyShare), as float64 bits;
	// 1: no limit. held counts the slots each scope holds (or waits for) while share < 1.
	share  atomic.Uint64
	heldMu sync.Mutex
	held   map[string]int
}

// keyScopeKey is the context key of WithKeyScope.
type keyScopeKey struct{}

// WithKeyScope marks ctx as a request of the API key scope: every bulkhead the request's
// attempts go through counts the slots that scope holds against its share (SetKeyShare). httpapi
// sets it for every authenticated storefront request; calls without it (the queue's worker, the
// reconciler, the prober) are not limited by any share.
func WithKeyScope(ctx context.Context, scope string) context.Context {
	return context.WithValue(ctx, keyScopeKey{}, scope)
}

func keyScopeOf(ctx context.Context) string {
	s, _ := ctx.Value(keyScopeKey{}).(string)
	return s
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
		held:    map[string]int{},
	}
	bh.share.Store(math.Float64bits(1))
	bh.releaseFn = bh.release
	return bh
}

// SetKeyShare sets the share of the slots one API key scope may hold: ceil(share × capacity),
// at least 1. A call of a scope holding that many already is refused at once, as if the
// bulkhead were full (it does not wait MaxWait: the slots it would wait for are the other keys'),
// so a charge goes on to its route's next gateway. share >= 1 (or not a number in (0, 1)) is no
// limit. Slots held when it changes stay held.
func (bh *Bulkhead) SetKeyShare(share float64) {
	if !(share > 0 && share < 1) {
		share = 1
	}
	bh.share.Store(math.Float64bits(share))
}

// KeyLimit returns the most slots one API key scope may hold; 0: no limit.
func (bh *Bulkhead) KeyLimit() int {
	share := math.Float64frombits(bh.share.Load())
	if share >= 1 {
		return 0
	}
	return max(1, int(math.Ceil(share*float64(cap(bh.slots)))))
}

// KeyShareObserver is an Observer that also hears of calls refused because their API key held
// its share of a bulkhead (telemetry counts them as rate-limited, reason key_concurrency). They
// are not reported to BulkheadRejected: the bulkhead was not full.
type KeyShareObserver interface {
	KeyShareRejected(gateway string)
}

// Acquire takes a slot, waiting at most MaxWait for one (with MaxWait 0 not at all), and never
// past ctx; a call of a key scope (WithKeyScope) holding its share is refused at once. When ok,
// release must be called exactly once.
func (bh *Bulkhead) Acquire(ctx context.Context) (release func(), ok bool) {
	scope, ok, _ := bh.acquire(ctx)
	if !ok {
		return nil, false
	}
	if scope == "" {
		return bh.releaseFn, true
	}
	return func() { bh.releaseFor(scope) }, true
}

// acquire takes a slot for ctx. counted is the scope whose share holds the slot ("" when none
// does), to give to releaseFor; overShare is set when it was refused for the key's share.
func (bh *Bulkhead) acquire(ctx context.Context) (counted string, ok, overShare bool) {
	if scope := keyScopeOf(ctx); scope != "" {
		if limit := bh.KeyLimit(); limit > 0 {
			bh.heldMu.Lock()
			if bh.held[scope] >= limit {
				bh.heldMu.Unlock()
				if o, ok := bh.obs.(KeyShareObserver); ok {
					o.KeyShareRejected(bh.gateway)
				}
				return "", false, true
			}
			bh.held[scope]++
			bh.heldMu.Unlock()
			counted = scope
		}
	}
	if !bh.take(ctx) {
		bh.unhold(counted)
		return "", false, false
	}
	return counted, true, false
}

// unhold gives back a slot counted against scope's share.
func (bh *Bulkhead) unhold(scope string) {
	if scope == "" {
		return
	}
	bh.heldMu.Lock()
	if bh.held[scope]--; bh.held[scope] <= 0 {
		delete(bh.held, scope) // the map holds only the scopes holding slots now
	}
	bh.heldMu.Unlock()
}

// releaseFor releases a slot taken by acquire, counted against scope's share ("" none).
func (bh *Bulkhead) releaseFor(scope string) {
	bh.release()
	bh.unhold(scope)
}

func (bh *Bulkhead) take(ctx context.Context) bool {
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
