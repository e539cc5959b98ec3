package resilience

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Bulkhead bounds the calls in flight to one gateway, all its operations together: a slow
// gateway can hold at most its own slots, and no caller waits longer than MaxWait for one.
type Bulkhead struct {
	gateway  string
	capacity int
	maxWait  time.Duration
	obs      Observer
	// reportMu orders BulkheadChanged reports and reads the count inside them, so that the last
	// report the observer hears always carries the current count. It is taken before mu, never
	// while holding it.
	reportMu sync.Mutex
	// releaseFn is release as a func value made once, so that Acquire allocates nothing.
	releaseFn func()
	// quiet is set while the bulkhead is not its gateway's current one (Domains.Update replaced
	// it, or retired the gateway): the calls it still holds finish on it, but its counts no
	// longer speak for the gateway.
	quiet atomic.Bool

	// share is the share of the slots each API key scope is sure of (SetKeyShare), as float64
	// bits; 1: no share.
	share atomic.Uint64

	// mu guards the slots and who holds and waits for them, so that whether a key may go over
	// its share is decided on one consistent view.
	mu       sync.Mutex
	inFlight int
	// held counts the slots each key scope holds, waiting the callers of each scope waiting for
	// one (only scopes with some are in the maps); seen is when a scope last gave a slot back or
	// was refused one. A scope is active while it holds or waits for a slot and for keyActiveFor
	// after: with MaxWait 0 nobody ever waits, and a key whose calls come one after another would
	// otherwise drop out between two of them and lose its share to a flood.
	held    map[string]int
	waiting map[string]int
	seen    map[string]time.Time
	queue   []*bulkheadWaiter // in arrival order
}

// keyActiveFor is how long a key scope that held, waited for or was refused a slot still counts
// as active: its share is kept for it that long after its last call.
const keyActiveFor = time.Second

// bulkheadWaiter is one caller waiting for a slot; granted is closed when release hands it one.
type bulkheadWaiter struct {
	scope   string
	granted chan struct{}
	done    bool // granted (guarded by Bulkhead.mu)
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
		gateway:  gateway,
		capacity: max(capacity, 1),
		maxWait:  maxWait,
		obs:      obs,
		held:     map[string]int{},
		waiting:  map[string]int{},
		seen:     map[string]time.Time{},
	}
	bh.share.Store(math.Float64bits(1))
	bh.releaseFn = bh.release
	return bh
}

// SetKeyShare sets the share of the slots each API key scope is sure of: ceil(share × capacity),
// at least 1 (KeyLimit). The share bounds a key only while other keys need the slots: a key may
// take a slot beyond its share only while more slots are free than the other active scopes (those
// holding or waiting for a slot, or that gave one back or were refused one in the last
// keyActiveFor) lack of their shares, so a key alone may use every slot, and
// every active key can always get its share. A call refused for that is refused at once, as if
// the bulkhead were full (it does not wait MaxWait: the slots it would wait for are the other
// keys'), so a charge goes on to its route's next gateway. share >= 1 (or not a number in
// (0, 1)) is no share. Slots held when it changes stay held.
func (bh *Bulkhead) SetKeyShare(share float64) {
	if !(share > 0 && share < 1) {
		share = 1
	}
	bh.share.Store(math.Float64bits(share))
}

// KeyLimit returns the slots each API key scope is sure of (its share); 0: no share.
func (bh *Bulkhead) KeyLimit() int {
	share := math.Float64frombits(bh.share.Load())
	if share >= 1 {
		return 0
	}
	return max(1, int(math.Ceil(share*float64(bh.capacity))))
}

// KeyShareObserver is an Observer that also hears of calls refused because their API key held
// its share of a bulkhead while other keys needed the rest (telemetry counts them as
// rate-limited, reason key_concurrency). They are not reported to BulkheadRejected: the bulkhead
// was not full.
type KeyShareObserver interface {
	KeyShareRejected(gateway string)
}

// Acquire takes a slot, waiting at most MaxWait for one (with MaxWait 0 not at all), and never
// past ctx; a call of a key scope (WithKeyScope) over its share while other keys need the free
// slots is refused at once. When ok, release must be called exactly once.
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
	limit := bh.KeyLimit()
	if limit > 0 {
		counted = keyScopeOf(ctx)
	}
	bh.mu.Lock()
	if bh.mayTake(counted, limit) {
		bh.grant(counted)
		if len(bh.queue) > 0 {
			bh.handOut(limit) // a key's slot can leave the rest to a waiter it was kept from
		}
		bh.mu.Unlock()
		bh.changed()
		return counted, true, false
	}
	if bh.shareBars(counted, limit) {
		bh.refused(counted)
		bh.mu.Unlock()
		bh.rejectedForShare()
		return "", false, true
	}
	if bh.maxWait <= 0 || ctx.Err() != nil {
		bh.refused(counted)
		bh.mu.Unlock()
		bh.obs.BulkheadRejected(bh.gateway)
		return "", false, false
	}
	w := &bulkheadWaiter{scope: counted, granted: make(chan struct{})}
	bh.queue = append(bh.queue, w)
	if counted != "" {
		bh.waiting[counted]++
	}
	bh.mu.Unlock()

	t := time.NewTimer(bh.maxWait)
	defer t.Stop()
	select {
	case <-w.granted:
		bh.changed()
		return counted, true, false
	case <-t.C:
	case <-ctx.Done():
	}
	bh.mu.Lock()
	if w.done { // granted while the timer fired: the slot is the caller's
		bh.mu.Unlock()
		bh.changed()
		return counted, true, false
	}
	bh.queue = slices.DeleteFunc(bh.queue, func(q *bulkheadWaiter) bool { return q == w })
	bh.unwait(counted)
	bh.refused(counted)
	overShare = bh.shareBars(counted, limit)
	bh.handOut(limit) // one waiter fewer may leave room for another key's
	bh.mu.Unlock()
	if overShare {
		bh.rejectedForShare()
	} else {
		bh.obs.BulkheadRejected(bh.gateway)
	}
	return "", false, overShare
}

// mayTake reports whether scope ("" none) may take a slot now: one is free and, if scope holds
// its share already, more are free than the other active scopes lack of theirs. bh.mu held.
func (bh *Bulkhead) mayTake(scope string, limit int) bool {
	free := bh.capacity - bh.inFlight
	if free <= 0 {
		return false
	}
	if scope == "" || limit == 0 || bh.held[scope] < limit {
		return true
	}
	return free > bh.reserved(scope, limit)
}

// shareBars reports whether scope is kept from a slot by its share: it holds its share and other
// active scopes lack of theirs (when nobody else does, what keeps it out is a full bulkhead).
// bh.mu held.
func (bh *Bulkhead) shareBars(scope string, limit int) bool {
	return scope != "" && limit > 0 && bh.held[scope] >= limit && bh.reserved(scope, limit) > 0
}

// reserved returns the slots the active scopes other than scope lack of their shares: those are
// kept free for them. bh.mu held.
func (bh *Bulkhead) reserved(scope string, limit int) int {
	n := 0
	for s, h := range bh.held {
		if s != scope && h < limit {
			n += limit - h
		}
	}
	for s := range bh.waiting {
		if _, holding := bh.held[s]; s != scope && !holding {
			n += limit // waiting and holding nothing yet
		}
	}
	if len(bh.seen) > 0 {
		now := time.Now()
		for s, at := range bh.seen {
			_, holding := bh.held[s]
			_, waiting := bh.waiting[s]
			switch {
			case holding || waiting:
				// counted above
			case now.Sub(at) >= keyActiveFor:
				delete(bh.seen, s) // idle: the map holds only the scopes active of late
			case s != scope:
				n += limit
			}
		}
	}
	return n
}

// refused notes that scope ("" none) was refused a slot: it is active a while yet. bh.mu held.
func (bh *Bulkhead) refused(scope string) {
	if scope != "" {
		bh.seen[scope] = time.Now()
	}
}

// grant gives a slot to scope ("" none). bh.mu held.
func (bh *Bulkhead) grant(scope string) {
	bh.inFlight++
	if scope != "" {
		bh.held[scope]++
	}
}

// unwait counts one waiter of scope fewer. bh.mu held.
func (bh *Bulkhead) unwait(scope string) {
	if scope == "" {
		return
	}
	if bh.waiting[scope]--; bh.waiting[scope] <= 0 {
		delete(bh.waiting, scope)
	}
}

// handOut gives the free slots to the waiters that may take them, earliest first; a waiter over
// its share is passed over while another key needs the slot. bh.mu held.
func (bh *Bulkhead) handOut(limit int) {
	// Each grant changes what the others lack, so the scan starts again after it; the queue
	// is at most the callers in flight.
	for granted := true; granted && bh.inFlight < bh.capacity; {
		granted = false
		for i, w := range bh.queue {
			if !bh.mayTake(w.scope, limit) {
				continue
			}
			bh.queue = slices.Delete(bh.queue, i, i+1)
			bh.unwait(w.scope)
			bh.grant(w.scope)
			w.done = true
			close(w.granted)
			granted = true
			break
		}
	}
}

func (bh *Bulkhead) rejectedForShare() {
	if o, ok := bh.obs.(KeyShareObserver); ok {
		o.KeyShareRejected(bh.gateway)
	}
}

// releaseFor releases a slot taken by acquire, counted against scope's share ("" none).
func (bh *Bulkhead) releaseFor(scope string) {
	bh.mu.Lock()
	if scope != "" {
		if bh.held[scope]--; bh.held[scope] <= 0 {
			delete(bh.held, scope) // the map holds only the scopes holding slots now
			bh.seen[scope] = time.Now()
		}
	}
	bh.releaseLocked()
}

func (bh *Bulkhead) release() {
	bh.mu.Lock()
	bh.releaseLocked()
}

// releaseLocked gives a slot back and hands it on; it unlocks bh.mu.
func (bh *Bulkhead) releaseLocked() {
	if bh.inFlight <= 0 {
		bh.mu.Unlock()
		// A count below zero would admit more calls than the bulkhead has slots; say what went
		// wrong instead.
		panic("resilience: bulkhead " + bh.gateway + " released more often than acquired")
	}
	bh.inFlight--
	bh.handOut(bh.KeyLimit())
	bh.mu.Unlock()
	bh.changed()
}

func (bh *Bulkhead) changed() {
	if bh.quiet.Load() {
		return
	}
	bh.reportMu.Lock()
	bh.obs.BulkheadChanged(bh.gateway, bh.InFlight(), bh.capacity)
	bh.reportMu.Unlock()
}

// InFlight returns how many slots are taken.
func (bh *Bulkhead) InFlight() int {
	bh.mu.Lock()
	defer bh.mu.Unlock()
	return bh.inFlight
}

// Capacity returns how many slots the bulkhead has.
func (bh *Bulkhead) Capacity() int { return bh.capacity }

// MaxWait returns the longest Acquire waits for a slot.
func (bh *Bulkhead) MaxWait() time.Duration { return bh.maxWait }
