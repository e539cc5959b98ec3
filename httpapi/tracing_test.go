package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/gateways"
	"github.com/payrouter/payrouter/gateways/ding/dingsim"
	"github.com/payrouter/payrouter/gateways/paywell/paywellsim"
	"github.com/payrouter/payrouter/gateways/sim"
	"github.com/payrouter/payrouter/internal/testlog"
	"github.com/payrouter/payrouter/memstore"
	"github.com/payrouter/payrouter/payments"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/routing"
	"github.com/payrouter/payrouter/telemetry"
)

// tracedStack is newStack's stack with every span kept, the traceparent each gateway received,
// and the log.
type tracedStack struct {
	*stack
	spans *tracetest.InMemoryExporter
	log   *testlog.Buffer

	mu          sync.Mutex
	traceparent map[string][]string // by gateway
}

// newTracedStack sets a global TracerProvider that keeps every span and the W3C propagator (as
// telemetry.SetupTracing does) until the test ends, and builds the stack of newStack over them.
func newTracedStack(t *testing.T) *tracedStack {
	t.Helper()
	ts := &tracedStack{stack: &stack{sims: map[string]*sim.Server{"paywell": paywellsim.New(), "ding": dingsim.New()}},
		spans: tracetest.NewInMemoryExporter(), log: &testlog.Buffer{}, traceparent: map[string][]string{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(ts.spans))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
		_ = tp.Shutdown(context.Background())
	})

	st, names := ts.stack, []string{"paywell", "ding"}
	// No test here waits for a timeout: the gateway timeout and the budget are only bounds, wide
	// enough that a simulator slowed by a loaded machine under -race still answers in time (at
	// 300 ms, a charge meant to succeed was answered 202 after a timeout on a busy CI machine).
	const timeout, budget = 10 * time.Second, 30 * time.Second
	var settings []resilience.GatewaySettings
	for _, n := range names {
		settings = append(settings, resilience.GatewaySettings{Name: n, TimeoutSettings: resilience.TimeoutSettings{Timeout: timeout}, BulkheadSettings: resilience.BulkheadSettings{MaxConcurrent: 4}, Breaker: resilience.BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 3, Cooldown: time.Minute}}})
	}
	metrics := telemetry.NewMetrics()
	st.domains = resilience.NewDomains(settings, metrics)
	t.Cleanup(st.domains.Close)
	adapters := map[string]payrouter.Gateway{}
	for _, n := range names {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/health" && !strings.HasPrefix(r.URL.Path, "/_sim/") { // the gateway's API
				ts.mu.Lock()
				ts.traceparent[n] = append(ts.traceparent[n], r.Header.Get("traceparent"))
				ts.mu.Unlock()
			}
			st.sims[n].ServeHTTP(w, r)
		}))
		t.Cleanup(func() { st.sims[n].Close(); srv.Close() })
		gw, err := gateways.New(n, srv.URL, map[string]string{"api_key": "secret-" + n}, st.domains.Client(n))
		if err != nil {
			t.Fatal(err)
		}
		adapters[n] = gw
	}
	st.store = memstore.New()
	var err error
	router, err := routing.New(routing.Config{
		Routes:   []routing.Route{{Name: "default", Gateways: names}},
		Gateways: adapters, Domains: st.domains, Budget: budget, Observer: metrics.RouterObserver(),
	})
	if err != nil {
		t.Fatal(err)
	}
	log := telemetry.NewLogger(ts.log, slog.LevelInfo)
	st.payments = payments.New(payments.Config{Router: router, Keys: st.store, KeysTTL: time.Hour, Hold: time.Minute, Events: st.store,
		Charges: st.store, Refunds: st.store, Queue: st.store, Budget: budget, Log: log, Observer: metrics.RouterObserver()})
	deps := Deps{
		Credentials: NewCredentials([]string{"key-1"}, ""), Payments: st.payments, Store: st.store, Domains: st.domains, Metrics: metrics,
		Log:      log,
		Gateways: []config.GatewaySummary{{Name: "paywell", Kind: "paywell"}, {Name: "ding", Kind: "ding"}},
	}
	st.api, st.admin = NewServer(deps), NewAdminServer(deps)
	return ts
}

// received returns the traceparent headers a gateway's API received.
func (ts *tracedStack) received(gateway string) []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.traceparent[gateway]...)
}

// spansNamed returns the spans with that name, in the order they ended.
func (ts *tracedStack) spansNamed(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range ts.spans.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attrs(s tracetest.SpanStub) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

func checkAttrs(t *testing.T, s tracetest.SpanStub, want map[string]any) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("span %s: %s = %v, want %v (all: %v)", s.Name, k, got[k], v, got)
		}
	}
}

func traceparentOf(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
}

func TestRequestSpanContinuesTheCallersTrace(t *testing.T) {
	ts := newTracedStack(t)
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r := ts.charge("traced-1", `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"},"capture":true}`,
		"traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	ch := decodeInto[chargeReply](t, r)
	if r.status != 201 {
		t.Fatalf("charge: %d %s", r.status, r.body)
	}

	servers := ts.spansNamed("POST /charge")
	if len(servers) != 1 {
		t.Fatalf("%d spans POST /charge, want 1", len(servers))
	}
	req := servers[0]
	if req.SpanContext.TraceID().String() != callerTrace || req.Parent.SpanID().String() != callerSpan || !req.Parent.IsRemote() {
		t.Errorf("request span in trace %s under %s: want the caller's trace %s under its span %s",
			req.SpanContext.TraceID(), req.Parent.SpanID(), callerTrace, callerSpan)
	}
	if req.SpanKind != trace.SpanKindServer || req.Status.Code == codes.Error {
		t.Errorf("request span kind %s status %v", req.SpanKind, req.Status)
	}
	checkAttrs(t, req, map[string]any{
		"http.request.method": "POST", "http.route": "/charge", "http.response.status_code": int64(201),
		"payrouter.request_id": r.header.Get("X-Request-Id"), "payrouter.charge_id": ch.ID,
	})
	for k := range attrs(req) {
		if strings.Contains(k, "header") || strings.Contains(k, "body") {
			t.Errorf("request span records %s", k)
		}
	}

	attempts := ts.spansNamed("gateway charge")
	if len(attempts) != 1 {
		t.Fatalf("%d spans gateway charge, want 1", len(attempts))
	}
	a := attempts[0]
	if a.SpanContext.TraceID() != req.SpanContext.TraceID() || a.Parent.SpanID() != req.SpanContext.SpanID() {
		t.Errorf("attempt span (trace %s, parent %s) is not a child of the request's span %s", a.SpanContext.TraceID(), a.Parent.SpanID(), req.SpanContext.SpanID())
	}
	checkAttrs(t, a, map[string]any{
		"payrouter.gateway": "paywell", "payrouter.operation": "charge", "payrouter.outcome": "succeeded",
		"payrouter.attempt": int64(1), "payrouter.hedge": false,
	})
	if got, want := ts.received("paywell"), []string{traceparentOf(a.SpanContext)}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("paywell received traceparent %q, want %q: the attempt's span as parent", got, want)
	}

	// The request's log line leads to the trace.
	var line map[string]any
	for _, l := range strings.Split(strings.TrimSpace(ts.log.String()), "\n") {
		if strings.Contains(l, `"msg":"http.request"`) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatal(err)
			}
		}
	}
	if line["trace_id"] != callerTrace || line["span_id"] != req.SpanContext.SpanID().String() {
		t.Errorf("request log line %v: want trace_id %s and the request span's span_id", line, callerTrace)
	}
}

func TestFailoverAttemptSpansAreNumbered(t *testing.T) {
	ts := newTracedStack(t)
	ts.sims["paywell"].SetBehavior(sim.Behavior{Mode: sim.ModeUnavailable})
	r := ts.charge("traced-2", `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"},"capture":true}`)
	if r.status != 201 {
		t.Fatalf("charge: %d %s", r.status, r.body)
	}
	req := ts.spansNamed("POST /charge")
	if len(req) != 1 || req[0].Parent.IsValid() {
		t.Fatalf("request spans %d; want 1, a root: the caller sent no traceparent", len(req))
	}
	attempts := ts.spansNamed("gateway charge")
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(attempts))
	}
	for i, want := range []map[string]any{
		{"payrouter.gateway": "paywell", "payrouter.outcome": "unavailable", "payrouter.attempt": int64(1), "payrouter.hedge": false},
		{"payrouter.gateway": "ding", "payrouter.outcome": "succeeded", "payrouter.attempt": int64(2), "payrouter.hedge": false},
	} {
		checkAttrs(t, attempts[i], want)
		if attempts[i].Parent.SpanID() != req[0].SpanContext.SpanID() {
			t.Errorf("attempt %d is not a child of the request's span", i+1)
		}
		if gw := want["payrouter.gateway"].(string); !strings.Contains(strings.Join(ts.received(gw), " "), attempts[i].SpanContext.SpanID().String()) {
			t.Errorf("%s received traceparent %v, want its attempt's span %s", gw, ts.received(gw), attempts[i].SpanContext.SpanID())
		}
	}
	if attempts[0].Status.Code != codes.Error || attempts[1].Status.Code == codes.Error {
		t.Errorf("attempt statuses %v, %v: want the unavailable one an error", attempts[0].Status, attempts[1].Status)
	}
}

func TestRequestSpanOf503IsAnError(t *testing.T) {
	ts := newTracedStack(t)
	for _, s := range ts.sims {
		s.SetBehavior(sim.Behavior{Mode: sim.ModeUnavailable})
	}
	r := ts.charge("traced-3", `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`)
	if r.status != 503 {
		t.Fatalf("charge: %d %s, want 503", r.status, r.body)
	}
	req := ts.spansNamed("POST /charge")
	if len(req) != 1 || req[0].Status.Code != codes.Error {
		t.Fatalf("request spans %+v, want one with status error", req)
	}
	checkAttrs(t, req[0], map[string]any{"http.response.status_code": int64(503)})

	// An unmatched route is named for what it is, not for its path.
	do(ts.api, "GET", "/nope/123", "")
	if got := ts.spansNamed(unmatchedRoute); len(got) != 1 {
		t.Errorf("%d spans %s, want 1", len(got), unmatchedRoute)
	}
	// Scrapes are not traced.
	do(ts.admin, "GET", "/metrics", "")
	for _, s := range ts.spans.GetSpans() {
		if strings.Contains(s.Name, "/metrics") {
			t.Errorf("span %s", s.Name)
		}
	}
}
