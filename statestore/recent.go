package statestore

import (
	"sync"
	"time"

	"github.com/payrouter/payrouter"
)

// Defaults of Options.RecentAnswers and Options.RecentFor.
const (
	DefaultRecentAnswers = 10000
	DefaultRecentFor     = 10 * time.Minute
)

// recentAnswers remembers the last idempotency answers this instance stored in the shared
// store, so that while the shared store is down a retry of a request answered just before the
// outage, through this instance, is replayed instead of charged again. It is bounded by count and
// by age: a storefront retries within seconds, and the memory must stay small.
type recentAnswers struct {
	mu    sync.Mutex
	keep  time.Duration
	byKey map[string]recentAnswer
	ring  []string // keys in the order they were added; the oldest is overwritten
	next  int
}

type recentAnswer struct {
	rec     payrouter.IdempotencyRecord
	expires time.Time
	slot    int
}

func newRecentAnswers(max int, keep time.Duration) *recentAnswers {
	return &recentAnswers{keep: keep, byKey: make(map[string]recentAnswer, max), ring: make([]string, max)}
}

// add remembers rec for key, for the shorter of ttl and keep.
func (r *recentAnswers) add(key string, rec payrouter.IdempotencyRecord, ttl time.Duration, now time.Time) {
	if len(r.ring) == 0 {
		return
	}
	rec = cloneRecord(rec)
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.ring[r.next]; old != "" {
		if a, ok := r.byKey[old]; ok && a.slot == r.next {
			delete(r.byKey, old)
		}
	}
	r.ring[r.next] = key
	r.byKey[key] = recentAnswer{rec: rec, expires: now.Add(min(ttl, r.keep)), slot: r.next}
	r.next = (r.next + 1) % len(r.ring)
}

// get returns the answer remembered for key, if it has not expired.
func (r *recentAnswers) get(key string, now time.Time) (payrouter.IdempotencyRecord, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.byKey[key]
	if !ok || !now.Before(a.expires) {
		return payrouter.IdempotencyRecord{}, false
	}
	return cloneRecord(a.rec), true
}
