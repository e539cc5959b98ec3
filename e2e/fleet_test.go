package e2e

// The fleet: two payrouter instances sharing one real redis-server (state.redis_url), as
// configs/payrouter-redis.yaml runs them. What one instance learns about a gateway, the other
// knows at once; what one answered, the other replays; and an instance restarted in the middle
// of an incident comes back knowing it.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter/pgstore/pgtest"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

// startFleet starts two instances, A and B, on cfg (which names the Redis they share).
func startFleet(t *testing.T, s *sims, cfg routerConfig) (a, b *instance) {
	t.Helper()
	a = startPayrouter(t, s, cfg)
	a.proc.name = "payrouter-A"
	b = startPayrouter(t, s, cfg)
	b.proc.name = "payrouter-B"
	return a, b
}

// breakerSeen is one poll of a breaker on one instance.
type breakerSeen struct {
	at   time.Time
	view breakerView
}

// breakerLog is what polling one breaker of one instance saw: every change of its state or
// open_until, with when it was first seen, and the most failures it ever counted.
type breakerLog struct {
	who, name string

	mu          sync.Mutex
	polls       int
	changes     []breakerSeen
	maxFailures int64
	errs        []error
}

// followBreaker polls name on in every `every` until ctx ends; wg waits for it.
func followBreaker(ctx context.Context, wg *sync.WaitGroup, in *instance, who, name string, every time.Duration) *breakerLog {
	l := &breakerLog{who: who, name: name}
	wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			all, err := in.breakers()
			now := time.Now()
			l.mu.Lock()
			l.polls++
			b, ok := all[name]
			switch {
			case err != nil:
				if ctx.Err() == nil && len(l.errs) < 10 {
					l.errs = append(l.errs, err)
				}
			case !ok:
				if len(l.errs) < 10 {
					l.errs = append(l.errs, fmt.Errorf("GET /admin/breakers lists no %s", name))
				}
			default:
				l.maxFailures = max(l.maxFailures, b.Counts.Failures)
				if n := len(l.changes); n == 0 || l.changes[n-1].view.State != b.State || !sameTime(l.changes[n-1].view.OpenUntil, b.OpenUntil) {
					l.changes = append(l.changes, breakerSeen{at: now, view: b})
				}
			}
			l.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return l
}

func sameTime(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// seen returns the changes seen so far.
func (l *breakerLog) seen() []breakerSeen {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]breakerSeen(nil), l.changes...)
}

// firstSeen is when the breaker was first seen in state.
func (l *breakerLog) firstSeen(state string) (breakerSeen, bool) {
	for _, c := range l.seen() {
		if c.view.State == state {
			return c, true
		}
	}
	return breakerSeen{}, false
}

// transitions counts the changes seen from one state to another.
func (l *breakerLog) transitions(from, to string) int {
	n := 0
	changes := l.seen()
	for i := 1; i < len(changes); i++ {
		if changes[i-1].view.State == from && changes[i].view.State == to {
			n++
		}
	}
	return n
}

// reopenings counts the open periods seen after the first: an open state whose open_until is at
// least min later than the one of the open state seen before it. A half-open moment in between
// may be too short for the polls to catch, so reopening is told by the new cooldown.
func (l *breakerLog) reopenings(t *testing.T, min time.Duration) int {
	t.Helper()
	n := 0
	var last time.Time
	for _, c := range l.seen() {
		if c.view.State != "open" {
			continue
		}
		u, ok := openUntil(t, c.view)
		if !ok {
			continue
		}
		if !last.IsZero() && u.Sub(last) >= min {
			n++
		}
		last = u
	}
	return n
}

// report fails the test on the errors polling met.
func (l *breakerLog) report(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, err := range l.errs {
		t.Errorf("watching %s on %s: %v", l.name, l.who, err)
	}
}

// history is the changes seen, relative to since, for failure messages and logs.
func (l *breakerLog) history(since time.Time) string {
	var parts []string
	for _, c := range l.seen() {
		until := ""
		if c.view.OpenUntil != nil {
			if u, err := time.Parse(time.RFC3339Nano, *c.view.OpenUntil); err == nil {
				until = fmt.Sprintf(" until +%v", u.Sub(since).Round(time.Millisecond))
			}
		}
		parts = append(parts, fmt.Sprintf("+%v %s%s", c.at.Sub(since).Round(time.Millisecond), c.view.State, until))
	}
	l.mu.Lock()
	polls := l.polls
	l.mu.Unlock()
	return fmt.Sprintf("%s on %s, %d polls: [%s]", l.name, l.who, polls, strings.Join(parts, "; "))
}

// openUntil parses a breaker's open_until; ok is false when it has none.
func openUntil(t *testing.T, b breakerView) (time.Time, bool) {
	t.Helper()
	if b.OpenUntil == nil {
		return time.Time{}, false
	}
	u, err := time.Parse(time.RFC3339Nano, *b.OpenUntil)
	if err != nil {
		t.Fatalf("%s: open_until is not RFC 3339: %v", b, err)
	}
	return u, true
}

// TestFleetSharedBreakerAndRestart: two instances on one Redis share what a storefront sees.
//   - The same Idempotency-Key sent to A, then to B, is one charge: B replays A's answer
//     (Idempotent-Replayed: true) and the gateway is called once.
//   - paywell fails; charges through A open paywell/charge on A after three failures in a row,
//     and B shows it open within 200 ms (the agreement latency is logged). A charge through B
//     then passes paywell without calling it (paywell/breaker_open) and is served by ding.
//   - B is restarted (SIGTERM, a new process on the same configuration) while the breaker is
//     still open: the new B shows paywell/charge open from its first answer, with the cooldown
//     that is left, and keeps passing paywell without a call.
func TestFleetSharedBreakerAndRestart(t *testing.T) {
	skipIfShort(t)
	const (
		failuresToOpen = 3
		// cooldown is long enough for a restart to happen well inside it.
		cooldown       = 30 * time.Second
		agreementBound = 200 * time.Millisecond
	)
	rds := redistest.Start(t)
	s := startSims(t)
	gw := gatewayConfig{Timeout: time.Second, MaxConcurrent: 10, ConsecutiveFailures: failuresToOpen, Cooldown: cooldown}
	cfg := routerConfig{
		RequestTimeout: 3 * time.Second,
		RedisURL:       rds.URL(), DatabaseURL: pgtest.NewDatabase(t),
		Gateways: map[string]gatewayConfig{"paywell": gw, "ding": gw},
		Routes:   []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell", "ding"}}},
	}
	a, b := startFleet(t, s, cfg)

	// One Idempotency-Key, A then B: one charge.
	const key = "fleet-order-1"
	body := chargeBody(1500, "USD", "tok_visa", "")
	first, err := a.chargeKeyed(key, body)
	if err != nil {
		t.Fatal(err)
	}
	fa, err := decodeAnswer(first)
	if err != nil || first.status != http.StatusCreated || describe(fa.Attempts) != "[paywell/succeeded]" {
		t.Fatalf("a first charge through A: want 201 with the one attempt paywell/succeeded; got %s", first)
	}
	again, err := b.chargeKeyed(key, body)
	if err != nil {
		t.Fatal(err)
	}
	if again.status != first.status || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the same Idempotency-Key and body through B after A answered: want A's %d replayed with Idempotent-Replayed: true; got Idempotent-Replayed %q, %s",
			first.status, again.header.Get("Idempotent-Replayed"), again)
	} else if ra, err := decodeAnswer(again); err != nil || ra.ID != fa.ID {
		t.Errorf("the replay through B: want A's charge %s; got %s", fa.ID, again)
	}
	if st := s.paywell.stats(t); st.Requests != 1 {
		t.Errorf("one Idempotency-Key sent through A and then B: want paywell called once; it counted %d request(s)", st.Requests)
	}
	if l := s.paywell.ledger(t); len(l) != 1 {
		t.Errorf("one Idempotency-Key sent through A and then B: want one transaction in paywell's ledger; got %+v", l)
	}

	// paywell fails: A opens its breaker, and B knows.
	s.paywell.behave(t, "unavailable", 0)
	failingSince := time.Now()
	ctx, stopWatching := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	onB := followBreaker(ctx, &wg, b, "B", "paywell/charge", 2*time.Millisecond)
	for i := 1; i <= failuresToOpen; i++ {
		r, ans := a.mustCharge(t, int64(2000+i), "USD", "tok_visa")
		if r.status != http.StatusCreated || describe(ans.Attempts) != "[paywell/unavailable ding/succeeded]" {
			t.Errorf("charge %d through A while paywell is unavailable: want 201 with attempts [paywell/unavailable ding/succeeded]; got %s", i, r)
		}
	}
	onA := a.breaker(t, "paywell/charge")
	if onA.State != "open" {
		stopWatching()
		wg.Wait()
		t.Fatalf("after %d failures in a row through A (consecutive_failures %d): want paywell/charge open on A; got %s", failuresToOpen, failuresToOpen, onA)
	}
	untilA, ok := openUntil(t, onA)
	if !ok {
		t.Fatalf("paywell/charge open on A by a trip shows no open_until: %s", onA)
	}
	openedAt := untilA.Add(-cooldown)
	eventually(t, 2*time.Second, "B shows paywell/charge open", func() (bool, string) {
		_, ok := onB.firstSeen("open")
		return ok, onB.history(failingSince)
	})
	stopWatching()
	wg.Wait()
	onB.report(t)
	seenB, _ := onB.firstSeen("open")
	agreement := seenB.at.Sub(openedAt)
	untilB, _ := openUntil(t, seenB.view)
	if agreement > agreementBound {
		t.Errorf("paywell/charge opened on A at %s; B was first seen open %v later, want within %v\n  %s",
			openedAt.Format(time.RFC3339Nano), agreement.Round(time.Millisecond), agreementBound, onB.history(failingSince))
	}
	t.Logf("fleet agreement: paywell/charge opened on A, seen open on B %v later (B polled every 2ms; B's open_until minus A's: %v)",
		agreement.Round(100*time.Microsecond), untilB.Sub(untilA).Round(100*time.Microsecond))

	// B passes paywell without calling it.
	before := s.paywell.stats(t).Requests
	r, ans := b.mustCharge(t, 3001, "USD", "tok_visa")
	if r.status != http.StatusCreated || ans.Gateway != "ding" || describe(ans.Attempts) != "[paywell/breaker_open ding/succeeded]" {
		t.Errorf("a charge through B once A opened paywell/charge: want 201 by ding with attempts [paywell/breaker_open ding/succeeded]; got %s", r)
	}
	if after := s.paywell.stats(t).Requests; after != before {
		t.Errorf("a charge through B with paywell/charge open fleet-wide: want no request to paywell; it counted %d more", after-before)
	}

	// A deploy restarts B in the middle of the incident.
	restartAt := time.Now()
	b = b.restart(t)
	restarted := time.Since(restartAt)
	nb := b.breaker(t, "paywell/charge") // the new B's first answer
	untilNew, ok := openUntil(t, nb)
	switch {
	case nb.State != "open" || !ok:
		t.Errorf("B restarted %v after paywell/charge opened (cooldown %v): want it open from the new B's first GET /admin/breakers, with open_until; got %s",
			time.Since(openedAt).Round(time.Millisecond), cooldown, nb)
	case untilNew.Sub(untilA) > time.Second || untilA.Sub(untilNew) > time.Second:
		t.Errorf("the restarted B: want paywell/charge open until about A's open_until %s (the cooldown left); got %s",
			untilA.Format(time.RFC3339Nano), nb)
	}
	t.Logf("B restarted in %v, %v after the opening: its first answer shows paywell/charge %s, %v of cooldown left (open_until %v off A's)",
		restarted.Round(time.Millisecond), time.Since(openedAt).Round(time.Millisecond), nb.State,
		time.Until(untilNew).Round(time.Millisecond), untilNew.Sub(untilA).Round(time.Millisecond))
	before = s.paywell.stats(t).Requests
	r, ans = b.mustCharge(t, 3002, "USD", "tok_visa")
	if r.status != http.StatusCreated || describe(ans.Attempts) != "[paywell/breaker_open ding/succeeded]" {
		t.Errorf("a charge through the restarted B: want 201 with attempts [paywell/breaker_open ding/succeeded]; got %s", r)
	}
	if after := s.paywell.stats(t).Requests; after != before {
		t.Errorf("a charge through the restarted B with paywell/charge open: want no request to paywell; it counted %d more", after-before)
	}
}
