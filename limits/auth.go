package limits

import (
	"container/list"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// DefaultAuthAddresses is AuthThrottle's table size when none is given: at about 200 bytes an
// address, 10,000 addresses are 2 MB, and a client that sends wrong credentials from more
// addresses than that gets through only as often as the table forgets one of them.
const DefaultAuthAddresses = 10_000

// AuthThrottle counts failed authentications per client address and refuses an address that
// failed more than PerMinute times within a minute (a token bucket of PerMinute tokens refilled
// at PerMinute a minute: a burst of PerMinute failures, then one failure every 60/PerMinute s).
// The caller asks Blocked once a request's credentials were checked and found missing or wrong,
// never for a right one: an address's failures must not lock out the right key sent from the
// same address (a load balancer's). So it bounds how often an address is told 401, not how many
// tokens it may try (a refusal says "wrong" as plainly); the keys' length bounds that. A
// failure while blocked counts nothing: Failed takes no token from an empty bucket, so the wait
// never grows past one token's. IPv6 addresses count by their /64: one host usually holds a
// whole /64, and counting each address would let it cycle through them.
//
// The table is bounded: beyond its size, the address seen least recently is forgotten. An
// attacker cycling through more addresses than the table holds evicts its own entries and is
// throttled less, but can never make the process hold more than the table.
type AuthThrottle struct {
	mu        sync.Mutex
	perMinute int
	size      int
	byAddr    map[netip.Prefix]*list.Element // of *authEntry
	lru       *list.List                     // most recently seen first
}

type authEntry struct {
	addr netip.Prefix
	lim  *rate.Limiter
}

// NewAuthThrottle returns a throttle of perMinute failures a minute per address (0 or less:
// off), remembering at most size addresses (0: DefaultAuthAddresses).
func NewAuthThrottle(perMinute, size int) *AuthThrottle {
	if size <= 0 {
		size = DefaultAuthAddresses
	}
	return &AuthThrottle{perMinute: perMinute, size: size, byAddr: map[netip.Prefix]*list.Element{}, lru: list.New()}
}

// SetPerMinute changes the threshold (a reload); the addresses known keep their counts.
func (t *AuthThrottle) SetPerMinute(perMinute int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if perMinute == t.perMinute {
		return
	}
	t.perMinute = perMinute
	if perMinute <= 0 {
		t.byAddr, t.lru = map[netip.Prefix]*list.Element{}, list.New()
		return
	}
	now := time.Now()
	for e := t.lru.Front(); e != nil; e = e.Next() {
		l := e.Value.(*authEntry).lim
		l.SetLimitAt(now, perMinuteLimit(perMinute))
		l.SetBurstAt(now, perMinute)
	}
}

func perMinuteLimit(n int) rate.Limit { return rate.Limit(float64(n) / 60) }

// Blocked reports whether addr has used up its failures at now, and if so how long until it may
// try again. It counts nothing.
func (t *AuthThrottle) Blocked(addr string, now time.Time) (wait time.Duration, blocked bool) {
	key, ok := prefixOf(addr)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.perMinute <= 0 || !ok {
		return 0, false
	}
	e := t.byAddr[key]
	if e == nil {
		return 0, false
	}
	l := e.Value.(*authEntry).lim
	tokens := l.TokensAt(now)
	if tokens >= 1 {
		return 0, false
	}
	return time.Duration((1 - tokens) / float64(l.Limit()) * float64(time.Second)), true
}

// Failed counts one failed authentication from addr at now.
func (t *AuthThrottle) Failed(addr string, now time.Time) {
	key, ok := prefixOf(addr)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.perMinute <= 0 || !ok {
		return
	}
	e := t.byAddr[key]
	if e != nil {
		t.lru.MoveToFront(e)
	} else {
		if t.lru.Len() >= t.size {
			oldest := t.lru.Back()
			t.lru.Remove(oldest)
			delete(t.byAddr, oldest.Value.(*authEntry).addr)
		}
		e = t.lru.PushFront(&authEntry{addr: key, lim: rate.NewLimiter(perMinuteLimit(t.perMinute), t.perMinute)})
		t.byAddr[key] = e
	}
	// Take a token if one is left; with none left the address is blocked already, and a failure
	// then is not counted again (Blocked refuses it before any check).
	e.Value.(*authEntry).lim.AllowN(now, 1)
}

// Len returns how many addresses the table holds.
func (t *AuthThrottle) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Len()
}

// prefixOf is the table's key for a client address: the address itself for IPv4, its /64 for
// IPv6. An address that does not parse (a Unix socket's peer) is not throttled.
func prefixOf(addr string) (netip.Prefix, bool) {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return netip.Prefix{}, false
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return netip.PrefixFrom(a, 32), true
	}
	p, err := a.Prefix(64)
	return p, err == nil
}
