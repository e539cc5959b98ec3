package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/gateways/sim"
	"github.com/payrouter/payrouter/memstore"
	"github.com/payrouter/payrouter/telemetry"
)

// newLimitedStack is newBubbleStack with the limits of cfg; it returns the metrics too. The
// limits read the clock, so their tests run in a synctest bubble, where waiting out a refill
// costs nothing and a slow machine refills nothing early.
func newLimitedStack(t *testing.T, cfg config.Limits) (*stack, *telemetry.Metrics) {
	t.Helper()
	var metrics *telemetry.Metrics
	st := newBubbleStack(t, "admin-token", time.Minute, func(d *Deps) {
		d.Limits = NewLimits(cfg, []config.APIKey{{Key: "key-1"}, {Key: "key-2"}})
		metrics = d.Metrics
	})
	return st, metrics
}

func limitedCount(t *testing.T, m *telemetry.Metrics, reason string) int {
	t.Helper()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "payrouter_rate_limited_total" {
			continue
		}
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return int(mt.GetCounter().GetValue())
				}
			}
		}
	}
	t.Fatalf("payrouter_rate_limited_total{reason=%q} not exported", reason)
	return 0
}

const visa = `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`

// A key over its rate is answered 429 with Retry-After, without taking its Idempotency-Key:
// the same request goes through once the bucket refills. Another key is not slowed.
func TestKeyRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, m := newLimitedStack(t, config.Limits{RequestsPerSecond: 1, Burst: 2, KeyShare: 1})
		for i := range 2 {
			if r := st.charge(fmt.Sprintf("rl-%d", i), visa); r.status != 201 {
				t.Fatalf("charge %d within the burst: %d %s", i+1, r.status, r.body)
			}
		}
		r := st.charge("rl-over", visa)
		if r.status != 429 || problemType(t, r) != "/problems/rate-limited" {
			t.Fatalf("third charge at once with a burst of 2: %d %s, want 429 rate-limited", r.status, r.body)
		}
		if got := r.header.Get("Retry-After"); got != "1" {
			t.Errorf("Retry-After %q, want 1 (at most a second at 1/s)", got)
		}
		if !strings.Contains(r.body, `"retry_after_ms":`) {
			t.Errorf("429 body without retry_after_ms: %s", r.body)
		}
		if got := limitedCount(t, m, telemetry.LimitKeyRate); got != 1 {
			t.Errorf("payrouter_rate_limited_total{reason=key_rate} = %d, want 1", got)
		}
		// GETs count against the same bucket; another key has its own.
		if r := do(st.api, "GET", "/charge/ch_nope", "", "Authorization", "Bearer key-1"); r.status != 429 {
			t.Errorf("a GET by the limited key: %d, want 429", r.status)
		}
		other := do(st.api, "POST", "/charge", visa, "Authorization", "Bearer key-2", "Idempotency-Key", "rl-other")
		if other.status != 201 {
			t.Errorf("key-2 while key-1 is limited: %d %s, want 201", other.status, other.body)
		}

		time.Sleep(time.Second) // one token at 1/s
		r = st.charge("rl-over", visa)
		if r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("the refused request sent again after Retry-After: %d replayed=%q %s, want a first 201",
				r.status, r.header.Get("Idempotent-Replayed"), r.body)
		}
		if n := len(st.ledger(t, "paywell")); n != 4 {
			t.Errorf("paywell ledger holds %d charges, want 4 (the refused request reached no gateway)", n)
		}
	})
}

// After N failed authentications within a minute, an address's further guesses (a wrong or a
// missing credential) are answered 429 with Retry-After, on the storefront and the admin
// listener alike, while the right key and the right admin token from the same address go
// through; another address is not throttled.
func TestAuthFailureThrottle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, m := newLimitedStack(t, config.Limits{AuthFailuresPerMinute: 3, KeyShare: 1})
		for i := range 3 {
			r := do(st.api, "GET", "/charge/ch_1", "", "Authorization", "Bearer wrong-key")
			if r.status != 401 {
				t.Fatalf("failure %d: %d, want 401", i+1, r.status)
			}
		}
		for _, tc := range []struct {
			name string
			r    reply
		}{
			{"storefront with a wrong key", do(st.api, "GET", "/charge/ch_1", "", "Authorization", "Bearer wrong-key")},
			{"storefront with no key", do(st.api, "GET", "/charge/ch_1", "")},
			{"admin with a wrong token", do(st.admin, "GET", "/admin/breakers", "", "Authorization", "Bearer wrong-key")},
			{"admin with no token", do(st.admin, "GET", "/admin/breakers", "")},
		} {
			if tc.r.status != 429 || problemType(t, tc.r) != "/problems/rate-limited" {
				t.Errorf("%s after 3 failures: %d %s, want 429 rate-limited", tc.name, tc.r.status, tc.r.body)
			}
			if got := tc.r.header.Get("Retry-After"); got != "20" {
				t.Errorf("%s: Retry-After %q, want 20 (one failure every 20 s at 3 a minute)", tc.name, got)
			}
		}
		for _, tc := range []struct {
			name string
			r    reply
			want int
		}{
			{"storefront with a right key", do(st.api, "GET", "/charge/ch_1", "", "Authorization", "Bearer key-1"), 404},
			{"admin with the right token", do(st.admin, "GET", "/admin/breakers", "", "Authorization", "Bearer admin-token"), 200},
		} {
			if tc.r.status != tc.want {
				t.Errorf("%s after 3 failures from its address: %d %s, want %d", tc.name, tc.r.status, tc.r.body, tc.want)
			}
		}
		if got := limitedCount(t, m, telemetry.LimitAuthFailures); got != 4 {
			t.Errorf("payrouter_rate_limited_total{reason=auth_failures} = %d, want the 4 guesses", got)
		}
		// A right key let through gave the address nothing back: the next guess is still 429.
		if r := do(st.api, "GET", "/charge/ch_1", "", "Authorization", "Bearer wrong-key"); r.status != 429 {
			t.Errorf("a guess after the right key: %d, want 429", r.status)
		}
		// Once the bucket holds a token again, one guess is checked and answered 401.
		time.Sleep(20 * time.Second)
		if r := do(st.api, "GET", "/charge/ch_1", "", "Authorization", "Bearer wrong-key"); r.status != 401 {
			t.Errorf("a guess after Retry-After: %d, want 401", r.status)
		}
		if r := do(st.api, "GET", "/charge/ch_1", "", "Authorization", "Bearer wrong-key"); r.status != 429 {
			t.Errorf("the guess after that: %d, want 429", r.status)
		}
	})
}

// Failures on the admin listener throttle the address's guesses on the storefront too, and
// never its right key.
func TestAuthFailureThrottleAdmin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, _ := newLimitedStack(t, config.Limits{AuthFailuresPerMinute: 2, KeyShare: 1})
		for range 2 {
			if r := do(st.admin, "GET", "/admin/breakers", "", "Authorization", "Bearer guess"); r.status != 401 {
				t.Fatalf("wrong admin token: %d, want 401", r.status)
			}
		}
		if r := do(st.api, "POST", "/charge", visa, "Authorization", "Bearer guess", "Idempotency-Key", "k"); r.status != 429 {
			t.Errorf("a wrong key on the storefront after 2 admin failures from the address: %d, want 429", r.status)
		}
		if r := do(st.api, "POST", "/charge", visa, "Authorization", "Bearer key-1", "Idempotency-Key", "k"); r.status != 201 {
			t.Errorf("the right key on the storefront after 2 admin failures from the address: %d %s, want 201", r.status, r.body)
		}
	})
}

// twoKeysConfig is a configuration that leaves every limit at its default, with two API keys
// (newLimitedStack's key-1 and key-2).
const twoKeysConfig = `
auth: {api_keys: [key-1, key-2], admin_token: admin-token}
gateways: {paywell: {kind: paywell, base_url: "http://127.0.0.1:9101", credentials: {api_key: x}}}
routes: [{name: default, gateways: [paywell]}]
`

// Regression (issue 19): 20 wrong bearer tokens from an address locked the right API key and
// the right admin token of that address out with 429, so behind a load balancer one client
// locked out every storefront. With the defaults a user has (two keys listed, the rate limit
// on), 25 wrong tokens from one address leave its right key and admin token working at once,
// its 26th wrong token is 429, and another address's right key is never refused.
func TestGuessesDoNotLockOutTheRightKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := config.Parse([]byte(twoKeysConfig), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Limits.AuthFailuresPerMinute != 20 || cfg.Limits.RequestsPerSecond == 0 {
			t.Fatalf("the defaults changed: %+v; this test is about auth_failures_per_minute 20 with the rate limit on", cfg.Limits)
		}
		st, m := newLimitedStack(t, cfg.Limits)
		st.domains.SetKeyShare(cfg.Limits.KeyShare)
		const shared, other = "198.51.100.7:4242", "203.0.113.9:4242"
		from := func(h http.Handler, addr, method, path, body, token string, headers ...string) reply {
			if token != "" {
				headers = append(headers, "Authorization", "Bearer "+token)
			}
			return doFrom(h, addr, method, path, body, headers...)
		}
		otherKey := func(when string) {
			t.Helper()
			if r := from(st.api, other, "GET", "/charge/ch_none", "", "key-2"); r.status != 404 {
				t.Errorf("another address's right key %s: %d %s, want 404", when, r.status, r.body)
			}
		}
		otherKey("before the guesses")
		for i := range 25 {
			r := from(st.api, shared, "GET", "/charge/ch_none", "", fmt.Sprintf("guess-%02d", i))
			want := 401
			if i >= cfg.Limits.AuthFailuresPerMinute {
				want = 429
			}
			if r.status != want {
				t.Fatalf("wrong token %d: %d %s, want %d", i+1, r.status, r.body, want)
			}
			otherKey(fmt.Sprintf("after %d guesses", i+1))
		}
		if r := from(st.api, shared, "POST", "/charge", visa, "key-1", "Idempotency-Key", "after-guesses"); r.status != 201 {
			t.Errorf("the right key from the guessing address: %d %s, want 201", r.status, r.body)
		}
		if r := from(st.admin, shared, "GET", "/admin/breakers", "", "admin-token"); r.status != 200 {
			t.Errorf("the right admin token from the guessing address: %d %s, want 200", r.status, r.body)
		}
		r := from(st.api, shared, "GET", "/charge/ch_none", "", "guess-26")
		if r.status != 429 || problemType(t, r) != "/problems/rate-limited" || r.header.Get("Retry-After") != "3" {
			t.Errorf("the 26th wrong token: %d Retry-After %q %s, want 429 rate-limited, Retry-After 3", r.status, r.header.Get("Retry-After"), r.body)
		}
		if r := from(st.admin, shared, "GET", "/admin/breakers", "", "guess-27"); r.status != 429 {
			t.Errorf("a wrong admin token from the guessing address: %d, want 429", r.status)
		}
		otherKey("after it all")
		if got := limitedCount(t, m, telemetry.LimitAuthFailures); got != 7 {
			t.Errorf("payrouter_rate_limited_total{reason=auth_failures} = %d, want the 7 guesses over the limit", got)
		}
		if got := limitedCount(t, m, telemetry.LimitKeyRate); got != 0 {
			t.Errorf("payrouter_rate_limited_total{reason=key_rate} = %d, want 0", got)
		}
	})
}

// One key flooding a slow gateway while the other is idle takes every slot: only the charges past
// the bulkhead's capacity are refused, as a full bulkhead, never for the key's share. Once the
// other key holds a slot, the flood is held to its share: a slot stays free for the other key's
// next charge, and the flood's extra charges are refused at that gateway as bulkhead_full (here
// pinned to it, so 503 gateways-unavailable, with nothing stored for their keys) and counted as
// key_concurrency.
func TestKeyShareLeavesSlotsForOtherKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, m := newLimitedStack(t, config.Limits{KeyShare: 0.5})
		st.domains.SetKeyShare(0.5)                                                   // bulkheads of 4: 2 slots a key
		st.sims["paywell"].SetBehavior(sim.Behavior{Latency: 150 * time.Millisecond}) // well under its 300ms timeout
		pinned := `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"},"gateway":"paywell"}`
		// floodOf sends n charges of key-1 at once; the func it returns waits for their answers.
		floodOf := func(name string, n int) func() (ok, refused int) {
			var wg sync.WaitGroup
			flood := make([]reply, n)
			for i := range flood {
				wg.Go(func() { flood[i] = st.charge(fmt.Sprintf("%s-%d", name, i), pinned) })
			}
			return func() (ok, refused int) {
				wg.Wait()
				for _, r := range flood {
					switch {
					case r.status == 201:
						ok++
					case r.status == 503 && strings.Contains(r.body, `"outcome":"bulkhead_full"`):
						refused++
					default:
						t.Errorf("a flood charge: %d %s", r.status, r.body)
					}
				}
				return ok, refused
			}
		}
		shop := func(i int) reply {
			return do(st.api, "POST", "/charge", pinned, "Authorization", "Bearer key-2", "Idempotency-Key", fmt.Sprintf("shop-%d", i))
		}

		// key-2 idle: key-1 uses all 4 slots.
		alone := floodOf("alone", 6)
		synctest.Wait()
		if n := st.domains.Bulkhead("paywell").InFlight(); n != 4 {
			t.Errorf("key-1 alone holds %d of paywell's 4 slots, want every one", n)
		}
		if ok, refused := alone(); ok != 4 || refused != 2 {
			t.Errorf("key-1 alone, 6 charges at a bulkhead of 4: %d succeeded and %d refused, want 4 and 2", ok, refused)
		}
		if got := limitedCount(t, m, telemetry.LimitKeyConcurrency); got != 0 {
			t.Errorf("payrouter_rate_limited_total{reason=key_concurrency} = %d with key-2 idle, want 0", got)
		}

		// key-2 holds one slot: key-1 gets its 2, and one stays free for key-2.
		var wg sync.WaitGroup
		var shops [2]reply
		wg.Go(func() { shops[0] = shop(0) })
		synctest.Wait()
		shared := floodOf("shared", 6)
		synctest.Wait()
		if n := st.domains.Bulkhead("paywell").InFlight(); n != 3 {
			t.Errorf("key-1's flood and key-2's charge hold %d of paywell's slots, want 3 (one kept for key-2)", n)
		}
		shops[1] = shop(1)
		ok, refused := shared()
		wg.Wait()
		for i, r := range shops {
			if r.status != 201 {
				t.Errorf("key-2's charge %d while key-1 floods: %d %s, want 201", i+1, r.status, r.body)
			}
		}
		if ok != 2 || refused != 4 {
			t.Errorf("flood of 6 beside key-2: %d succeeded and %d refused, want 2 (its share) and 4", ok, refused)
		}
		if got := limitedCount(t, m, telemetry.LimitKeyConcurrency); got != 4 {
			t.Errorf("payrouter_rate_limited_total{reason=key_concurrency} = %d, want 4", got)
		}
	})
}

// A key holding its share of the memstore, all of it charges still moving money, answers what a
// database outage does (503 state-unavailable, Retry-After), saying why: the operator's fix is
// state.max_memory, not the database. It is counted as a limit.
func TestFullMemstoreSaysWhy(t *testing.T) {
	open := &payrouter.Charge{ID: "ch_open", Owner: "key_a", Status: payrouter.StatusProcessing, CreatedAt: time.Now()}
	store := memstore.New(memstore.WithBounds(time.Hour, 0))
	ctx := context.Background()
	if err := store.SaveCharge(ctx, open); err != nil {
		t.Fatal(err)
	}
	store.SetMaxBytesPerOwner(store.OwnerBytes("key_a")) // its share: the one charge it holds
	err := store.SaveCharge(ctx, &payrouter.Charge{ID: "ch_next", Owner: "key_a", Status: payrouter.StatusProcessing, CreatedAt: time.Now()})
	rec := httptest.NewRecorder()
	c := echo.New().NewContext(httptest.NewRequest("POST", "/charge", nil), rec)
	m := telemetry.NewMetrics()
	_, s := newEcho(Deps{Metrics: m})
	p := s.errorProblem(c, "charge.failed", err)
	if p.Status != 503 || p.Type != "/problems/state-unavailable" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("a full share: %d %s, Retry-After %q", p.Status, p.Type, rec.Header().Get("Retry-After"))
	}
	if !strings.Contains(p.Detail, "state.max_memory") || !strings.Contains(p.Detail, "other API keys are not affected") || strings.Contains(p.Detail, "database") {
		t.Errorf("the detail does not say the key's share is full: %q", p.Detail)
	}
	if got := limitedCount(t, m, telemetry.LimitKeyMemory); got != 1 {
		t.Errorf("payrouter_rate_limited_total{reason=key_memory} = %d, want 1", got)
	}
}
