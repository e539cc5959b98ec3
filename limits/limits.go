// Package limits holds the request limits of payrouter's listeners, each a token bucket of
// golang.org/x/time/rate (a well-kept implementation whose reservations say how long a caller
// must wait, which is what Retry-After needs): a rate per API key (KeyRates), and a throttle of
// failed authentication per client address (AuthThrottle). Both are bounded in memory: KeyRates
// by the configured keys, AuthThrottle by a fixed number of addresses, the least recently seen
// forgotten first.
package limits

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Rate is a token bucket: PerSecond requests a second on average, Burst of them at once.
type Rate struct {
	// PerSecond is the sustained rate; 0 (or less): no limit.
	PerSecond float64
	// Burst is how many requests may come at once above the rate; 0: max(1, ceil(PerSecond)).
	Burst int
}

// Off reports whether r limits nothing.
func (r Rate) Off() bool { return r.PerSecond <= 0 }

func (r Rate) burst() int {
	if r.Burst > 0 {
		return r.Burst
	}
	return max(1, int(math.Ceil(r.PerSecond)))
}

// KeyRates keeps one token bucket per API key scope. A scope's bucket is made at its first
// request; Set drops the buckets of scopes no longer configured, so the map never holds more
// than the keys configured since the last Set, whatever the callers send (only an authenticated
// request reaches Allow).
type KeyRates struct {
	mu   sync.Mutex
	rate Rate
	keys map[string]*rate.Limiter
}

// NewKeyRates returns buckets of r for every scope.
func NewKeyRates(r Rate) *KeyRates {
	return &KeyRates{rate: r, keys: map[string]*rate.Limiter{}}
}

// Set applies r to every bucket and forgets the scopes not in keep (a reload: a key removed
// from the configuration). A bucket kept keeps its tokens, so a reload is no way around the
// limit.
func (k *KeyRates) Set(r Rate, keep []string) {
	wanted := make(map[string]bool, len(keep))
	for _, s := range keep {
		wanted[s] = true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.rate = r
	now := time.Now()
	for scope, l := range k.keys {
		if !wanted[scope] || r.Off() {
			delete(k.keys, scope)
			continue
		}
		if l.Limit() != rate.Limit(r.PerSecond) {
			l.SetLimitAt(now, rate.Limit(r.PerSecond))
		}
		if l.Burst() != r.burst() {
			l.SetBurstAt(now, r.burst())
		}
	}
}

// Allow takes one request from scope's bucket at now. When the bucket is empty it takes
// nothing and returns how long until a request would be let through.
func (k *KeyRates) Allow(scope string, now time.Time) (wait time.Duration, ok bool) {
	k.mu.Lock()
	r := k.rate
	if r.Off() {
		k.mu.Unlock()
		return 0, true
	}
	l := k.keys[scope]
	if l == nil {
		l = rate.NewLimiter(rate.Limit(r.PerSecond), r.burst())
		k.keys[scope] = l
	}
	k.mu.Unlock()
	return take(l, now)
}

// take takes a token of l at now, or, when there is none, gives back the reservation (so that a
// refused request costs the caller nothing) and returns its delay.
func take(l *rate.Limiter, now time.Time) (time.Duration, bool) {
	res := l.ReserveN(now, 1)
	if !res.OK() { // burst 0: never; Rate.burst is at least 1, so this is defensive
		return time.Minute, false
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d, false
	}
	return 0, true
}

// Len returns how many buckets are kept.
func (k *KeyRates) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.keys)
}

// RetryAfterSeconds is a Retry-After header's value for a wait: whole seconds, rounded up, at
// least 1 (a client told 0 would come back at once).
func RetryAfterSeconds(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}
