package resilience

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
)

// A gateway gets the charge's traceparent and nothing else the storefront sent: not its
// baggage, not the tracestate that rode along with its traceparent.
func TestGatewaysGetTheTraceparentOnly(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
	t.Cleanup(srv.Close)
	ts, err := trace.ParseTraceState("vendor=secret-from-the-storefront")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, TraceState: ts})
	member, err := baggage.NewMember("customer_email", "someone@example.com")
	if err != nil {
		t.Fatal(err)
	}
	bag, err := baggage.New(member)
	if err != nil {
		t.Fatal(err)
	}
	ctx := baggage.ContextWithBaggage(trace.ContextWithSpanContext(t.Context(), sc), bag)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	resp, err := propagate(transport).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got.Get("traceparent") != "00-01000000000000000000000000000000-0200000000000000-01" {
		t.Errorf("traceparent %q, want the attempt's", got.Get("traceparent"))
	}
	if got.Get("tracestate") != "" || got.Get("baggage") != "" {
		t.Errorf("tracestate %q, baggage %q reached the gateway; want neither", got.Get("tracestate"), got.Get("baggage"))
	}
	if req.Header.Get("traceparent") != "" {
		t.Error("the caller's request was changed")
	}
}
