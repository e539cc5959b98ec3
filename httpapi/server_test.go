package httpapi

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/gateways"
	"github.com/payrouter/payrouter/gateways/ding/dingsim"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
	"github.com/payrouter/payrouter/gateways/paywell/paywellsim"
	"github.com/payrouter/payrouter/gateways/sim"
	"github.com/payrouter/payrouter/internal/memnet"
	"github.com/payrouter/payrouter/internal/testlog"
	"github.com/payrouter/payrouter/memstore"
	"github.com/payrouter/payrouter/payments"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/routing"
	"github.com/payrouter/payrouter/telemetry"
)

// stack is the storefront and admin handlers over the real router, guards, adapters and
// simulators (paywell then ding), each simulator on its own loopback socket.
type stack struct {
	api, admin http.Handler
	sims       map[string]*sim.Server
	domains    *resilience.Domains
	store      *memstore.Store
	payments   *payments.Service
	creds      *Credentials    // both handlers': a test may set other keys
	log        *testlog.Buffer // every line both handlers logged, JSON
	keys       *keyRecorder    // every idempotency key the handlers gave the store
}

func newStack(t testing.TB, adminToken string) *stack {
	t.Helper()
	return newStackHolding(t, adminToken, time.Minute)
}

// newStackHolding is newStack with Deps.Hold set to hold; opts change the Deps before the
// handlers are made.
func newStackHolding(t testing.TB, adminToken string, hold time.Duration, opts ...func(*Deps)) *stack {
	t.Helper()
	return buildStack(t, adminToken, hold, nil, opts...)
}

// newBubbleStack is newStackHolding for a test inside a testing/synctest bubble: the simulators
// are served on an in-process network, and the adapters reach them through a transport of that
// network instead of the gateways' own pools, which dial loopback sockets (a goroutine waiting
// on one stops the bubble's clock). Trace context is not propagated to the simulators.
func newBubbleStack(t testing.TB, adminToken string, hold time.Duration, opts ...func(*Deps)) *stack {
	t.Helper()
	return buildStack(t, adminToken, hold, &memnet.Network{}, opts...)
}

// buildStack is newStackHolding, with the simulators on network when it is not nil.
func buildStack(t testing.TB, adminToken string, hold time.Duration, network *memnet.Network, opts ...func(*Deps)) *stack {
	t.Helper()
	st := &stack{sims: map[string]*sim.Server{"paywell": paywellsim.New(), "ding": dingsim.New()}, log: &testlog.Buffer{}}
	names := []string{"paywell", "ding"}
	var settings []resilience.GatewaySettings
	for _, n := range names {
		settings = append(settings, resilience.GatewaySettings{Name: n, TimeoutSettings: resilience.TimeoutSettings{Timeout: 300 * time.Millisecond}, BulkheadSettings: resilience.BulkheadSettings{MaxConcurrent: 4}, Breaker: resilience.BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 3, Cooldown: time.Minute}}})
	}
	metrics := telemetry.NewMetrics()
	st.domains = resilience.NewDomains(settings, metrics)
	t.Cleanup(st.domains.Close)
	adapters := map[string]payrouter.Gateway{}
	var memTransport *http.Transport
	if network != nil {
		memTransport = network.Transport()
		t.Cleanup(memTransport.CloseIdleConnections)
	}
	for _, n := range names {
		var url string
		client := st.domains.Client(n)
		if network != nil {
			url, client = network.Serve(t, n, st.sims[n]), gatewayhttp.NewClient(memTransport)
			t.Cleanup(st.sims[n].Close) // before the server closes: hung calls let go
		} else {
			srv := httptest.NewServer(st.sims[n])
			t.Cleanup(func() { st.sims[n].Close(); srv.Close() })
			url = srv.URL
		}
		gw, err := gateways.New(n, url, map[string]string{"api_key": "secret-" + n}, client)
		if err != nil {
			t.Fatal(err)
		}
		adapters[n] = gw
	}
	store := memstore.New()
	router, err := routing.New(routing.Config{
		Routes:   []routing.Route{{Name: "default", Gateways: names}},
		Gateways: adapters, Domains: st.domains, Budget: 2 * time.Second, Observer: metrics.RouterObserver(),
	})
	if err != nil {
		t.Fatal(err)
	}
	st.keys = &keyRecorder{Store: store}
	deps := Deps{
		Credentials: NewCredentials([]string{"key-1", "key-2"}, adminToken), Store: st.keys,
		Domains: st.domains, Metrics: metrics,
		Log:      slog.New(slog.NewJSONHandler(st.log, &slog.HandlerOptions{ReplaceAttr: dropTime})),
		Gateways: []config.GatewaySummary{{Name: "paywell", Kind: "paywell"}, {Name: "ding", Kind: "ding"}},
	}
	for _, opt := range opts {
		opt(&deps)
	}
	// The money operations on the store as the options left it (a failing one, for the error
	// tests), as service wires them.
	deps.Payments = payments.New(payments.Config{Router: router, Keys: deps.Store, KeysTTL: time.Hour, Hold: hold, Events: deps.Store,
		Charges: deps.Store, Refunds: deps.Store, Queue: deps.Store, Budget: 2 * time.Second, Log: deps.Log,
		Observer: metrics.RouterObserver()})
	st.api, st.admin = NewServer(deps), NewAdminServer(deps)
	st.store, st.payments, st.creds = store, deps.Payments, deps.Credentials
	return st
}

// dropTime leaves the time out of the log lines: the tests that search the log for a card
// number's digits ("4111") would otherwise find them, now and then, in a timestamp's nanoseconds.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

type reply struct {
	status int
	header http.Header
	body   string
}

// do sends a request from httptest's client address, 192.0.2.1.
func do(h http.Handler, method, path, body string, headers ...string) reply {
	return doFrom(h, "192.0.2.1:1234", method, path, body, headers...)
}

// doFrom is do with the request coming from the client address addr (host:port).
func doFrom(h http.Handler, addr, method, path, body string, headers ...string) reply {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.RemoteAddr = addr
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return reply{rec.Code, rec.Result().Header, string(b)}
}

func (st *stack) charge(key, body string, headers ...string) reply {
	return do(st.api, "POST", "/charge", body, append([]string{"Authorization", "Bearer key-1", "Idempotency-Key", key}, headers...)...)
}

func problemType(t *testing.T, r reply) string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("status %d: Content-Type %q, want application/problem+json: %s", r.status, ct, r.body)
	}
	var p struct{ Type string }
	_ = json.Unmarshal([]byte(r.body), &p)
	return p.Type
}

func TestRequestIDAndProblemsEverywhere(t *testing.T) {
	st := newStack(t, "admin-token")
	cases := []struct {
		name     string
		r        reply
		status   int
		wantType string
	}{
		{"no credentials", do(st.api, "GET", "/charge/ch_1", ""), 401, "/problems/unauthorized"},
		{"unknown route", do(st.api, "GET", "/nowhere", ""), 404, "/problems/not-found"},
		{"wrong method", do(st.api, "DELETE", "/charge", ""), 405, "/problems/method-not-allowed"},
		{"unknown charge", do(st.api, "GET", "/charge/ch_nope", "", "Authorization", "Bearer key-2"), 404, "/problems/not-found"},
		{"admin without token", do(st.admin, "GET", "/admin/breakers", ""), 401, "/problems/unauthorized"},
		{"unknown breaker", do(st.admin, "POST", "/admin/breakers/stripe/charge/reset", "", "Authorization", "Bearer admin-token"), 404, "/problems/not-found"},
		{"unknown action", do(st.admin, "POST", "/admin/breakers/paywell/charge/explode", "", "Authorization", "Bearer admin-token"), 404, "/problems/not-found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.r.status != tc.status || problemType(t, tc.r) != tc.wantType {
				t.Errorf("got %d %s, want %d %s", tc.r.status, tc.r.body, tc.status, tc.wantType)
			}
			if tc.r.header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id")
			}
		})
	}
	r := do(st.api, "GET", "/healthz", "", "X-Request-Id", "bad id with spaces")
	if id := r.header.Get("X-Request-Id"); id == "bad id with spaces" || !strings.HasPrefix(id, "req_") {
		t.Errorf("an unusable X-Request-Id must be replaced; got %q", id)
	}
}

func TestAdminDisabledWithoutToken(t *testing.T) {
	st := newStack(t, "")
	for _, auth := range []string{"", "Bearer ", "Bearer anything"} {
		r := do(st.admin, "GET", "/admin/breakers", "", "Authorization", auth)
		if r.status != 403 || problemType(t, r) != "/problems/forbidden" {
			t.Errorf("Authorization %q with no admin token configured: got %d %s, want 403", auth, r.status, r.body)
		}
	}
	if r := do(st.admin, "GET", "/metrics", ""); r.status != 200 {
		t.Errorf("/metrics needs no token: got %d", r.status)
	}
}

func TestUnavailableIsNotStoredSoTheSameKeyCanRetry(t *testing.T) {
	st := newStack(t, "admin-token")
	for _, s := range st.sims {
		s.SetBehavior(sim.Behavior{Mode: sim.ModeUnavailable})
	}
	body := `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`
	r := st.charge("retry-me", body)
	if r.status != 503 || problemType(t, r) != "/problems/gateways-unavailable" || r.header.Get("Retry-After") == "" {
		t.Fatalf("every gateway unavailable: got %d %v %s", r.status, r.header, r.body)
	}
	for _, s := range st.sims {
		s.SetBehavior(sim.Behavior{Mode: sim.ModeNormal})
	}
	r = st.charge("retry-me", body)
	if r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the same key after the 503: got %d replayed=%q %s; want a fresh 201", r.status, r.header.Get("Idempotent-Replayed"), r.body)
	}
}

func TestDeclineIsStoredAndReplayed(t *testing.T) {
	st := newStack(t, "admin-token")
	body := `{"amount":1300,"currency":"USD","payment_method":{"type":"card","token":"tok_decline"}}`
	first := st.charge("decline-1", body)
	if first.status != 402 || problemType(t, first) != "/problems/card-declined" {
		t.Fatalf("decline: got %d %s", first.status, first.body)
	}
	again := st.charge("decline-1", body)
	if again.status != 402 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replayed decline: got %d replayed=%q %s", again.status, again.header.Get("Idempotent-Replayed"), again.body)
	}
	if n := st.sims["paywell"].Stats().Requests; n != 1 {
		t.Errorf("paywell saw %d requests for a decline and its replay, want 1", n)
	}
}

func TestIdempotencyKeysArePerAPIKey(t *testing.T) {
	st := newStack(t, "admin-token")
	body := `{"amount":1500,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`
	a := st.charge("shared-key", body)
	b := st.charge("shared-key", body, "Authorization", "Bearer key-2")
	if a.status != 201 || b.status != 201 || b.header.Get("Idempotent-Replayed") != "" || a.body == b.body {
		t.Errorf("the same Idempotency-Key under two API keys must be two charges: %d %s / %d %s", a.status, a.body, b.status, b.body)
	}
}

func TestProcessingAnswersLocationAndReplaysIt(t *testing.T) {
	st := newStack(t, "admin-token")
	st.sims["paywell"].SetBehavior(sim.Behavior{Mode: sim.ModeNormal, Latency: 2 * time.Second})
	body := `{"amount":1700,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`
	r := st.charge("slow-1", body)
	if r.status != 202 {
		t.Fatalf("paywell slower than its timeout: got %d %s, want 202", r.status, r.body)
	}
	var ch struct {
		ID, Status string
		Attempts   []struct{ Gateway, Outcome string }
	}
	_ = json.Unmarshal([]byte(r.body), &ch)
	if ch.Status != "processing" || r.header.Get("Location") != "/charge/"+ch.ID || len(ch.Attempts) != 1 || ch.Attempts[0].Gateway != "paywell" {
		t.Errorf("got %v %s", r.header, r.body)
	}
	if n := st.sims["ding"].Stats().Requests; n != 0 {
		t.Errorf("ding received %d requests while paywell may have charged", n)
	}
	again := st.charge("slow-1", body)
	if again.status != 202 || again.header.Get("Location") != r.header.Get("Location") || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay of a 202: got %d %v", again.status, again.header)
	}
	g := do(st.api, "GET", "/charge/"+ch.ID, "", "Authorization", "Bearer key-1")
	if g.status != 200 || !strings.Contains(g.body, `"status":"processing"`) {
		t.Errorf("GET /charge/%s: %d %s", ch.ID, g.status, g.body)
	}
}

func TestAdminForceAndGateways(t *testing.T) {
	st := newStack(t, "admin-token")
	auth := []string{"Authorization", "Bearer admin-token"}
	r := do(st.admin, "POST", "/admin/breakers/paywell/charge/force-open", "", auth...)
	if r.status != 200 || !strings.Contains(r.body, `"forced":"open"`) || !strings.Contains(r.body, `"state":"open"`) {
		t.Fatalf("force-open: %d %s", r.status, r.body)
	}
	c := st.charge("forced-1", `{"amount":1100,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`)
	if c.status != 201 || !strings.Contains(c.body, `{"gateway":"paywell","outcome":"breaker_open","duration_ms":0}`) {
		t.Errorf("charge while paywell is forced open: %d %s", c.status, c.body)
	}
	g := do(st.admin, "GET", "/admin/gateways", "", auth...)
	if g.status != 200 || !strings.Contains(g.body, `"in_flight":0`) || strings.Contains(g.body, "secret-") {
		t.Errorf("/admin/gateways: %d %s", g.status, g.body)
	}
	list := do(st.admin, "GET", "/admin/breakers", "", auth...)
	var breakers struct{ Breakers []breakerView }
	if err := json.Unmarshal([]byte(list.body), &breakers); err != nil || len(breakers.Breakers) != 2*len(payrouter.Operations) {
		t.Errorf("/admin/breakers lists %d breakers (%v), want one per gateway and operation", len(breakers.Breakers), err)
	}
	m := do(st.admin, "GET", "/metrics", "")
	for _, want := range []string{
		`circuit_breaker_rejections_total{gateway="paywell",operation="charge"} 1`,
		`payrouter_http_request_duration_seconds_count{code="201",route="POST /charge"} 1`,
	} {
		if !strings.Contains(m.body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// The final state of a charge is stored with its idempotency answer (Store.CompleteCharge), and
// that of a charge whose gateways were all unavailable after it was sent is stored too, though
// its 503 is not kept for the key.
func TestFinalStateIsStoredWithTheAnswer(t *testing.T) {
	st := newStack(t, "admin-token")
	body := `{"amount":1800,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`
	r := st.charge("final-1", body)
	var ch struct{ ID, Status string }
	if err := json.Unmarshal([]byte(r.body), &ch); err != nil || r.status != 201 {
		t.Fatalf("charge: %d %s", r.status, r.body)
	}
	g := do(st.api, "GET", "/charge/"+ch.ID, "", "Authorization", "Bearer key-1")
	if g.status != 200 || !strings.Contains(g.body, `"status":"succeeded"`) {
		t.Errorf("GET /charge/%s right after its 201: %d %s; want it succeeded", ch.ID, g.status, g.body)
	}

	for _, s := range st.sims {
		s.SetBehavior(sim.Behavior{Mode: sim.ModeUnavailable})
	}
	r = st.charge("final-2", body)
	var p struct {
		ChargeID string `json:"charge_id"`
	}
	if err := json.Unmarshal([]byte(r.body), &p); err != nil || r.status != 503 || p.ChargeID == "" {
		t.Fatalf("every gateway unavailable: %d %s; want a 503 naming the charge", r.status, r.body)
	}
	g = do(st.api, "GET", "/charge/"+p.ChargeID, "", "Authorization", "Bearer key-1")
	if g.status != 200 || !strings.Contains(g.body, `"status":"failed"`) {
		t.Errorf("GET /charge/%s after its 503: %d %s; want it failed", p.ChargeID, g.status, g.body)
	}
}
