package resilience

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/payrouter/payrouter"
)

// recordSpans sets a global TracerProvider that keeps every span, and the W3C propagator, until
// the test ends.
func recordSpans(t *testing.T) *tracetest.InMemoryExporter {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
		_ = tp.Shutdown(context.Background())
	})
	return exp
}

// attrsOf returns a span's attributes by key.
func attrsOf(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestGuardSpans(t *testing.T) {
	exp := recordSpans(t)
	d := NewDomains([]GatewaySettings{{Name: "paywell", Breaker: BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 1}}}}, nil)
	defer d.Close()
	g := d.Guard("paywell", payrouter.OpCharge)
	ctx, parent := otel.Tracer("test").Start(t.Context(), "POST /charge")

	var callSpan trace.SpanContext
	g.Do(WithAttempt(ctx, 1, false), func(ctx context.Context) payrouter.Result {
		callSpan = trace.SpanContextFromContext(ctx)
		return payrouter.Result{Outcome: payrouter.OutcomeUnavailable} // opens the breaker
	})
	g.Do(WithAttempt(ctx, 2, true), answer(payrouter.OutcomeSucceeded)) // refused
	d.Guard("paywell", payrouter.OpCapture).Do(ctx, answer(payrouter.OutcomeDeclined))
	parent.End()

	type want struct {
		name      string
		attrs     map[attribute.Key]any
		noAttempt bool
		status    codes.Code
	}
	wants := []want{
		{"gateway charge", map[attribute.Key]any{attrGateway: "paywell", attrOperation: "charge", attrOutcome: "unavailable", attrAttempt: int64(1), attrHedge: false}, false, codes.Error},
		{"gateway charge", map[attribute.Key]any{attrGateway: "paywell", attrOperation: "charge", attrOutcome: "breaker_open", attrAttempt: int64(2), attrHedge: true}, false, codes.Error},
		{"gateway capture", map[attribute.Key]any{attrGateway: "paywell", attrOperation: "capture", attrOutcome: "declined", attrHedge: false}, true, codes.Unset},
	}
	spans := exp.GetSpans()
	if len(spans) != len(wants)+1 {
		t.Fatalf("%d spans, want %d", len(spans), len(wants)+1)
	}
	for i, w := range wants {
		s := spans[i]
		if s.Name != w.name || s.SpanKind != trace.SpanKindClient {
			t.Errorf("span %d: %s (%s), want client span %s", i, s.Name, s.SpanKind, w.name)
		}
		if s.Parent.SpanID() != parent.SpanContext().SpanID() || s.SpanContext.TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("span %d (%s) is not a child of the request's span", i, s.Name)
		}
		got := attrsOf(s)
		for k, v := range w.attrs {
			if got[k].AsInterface() != v {
				t.Errorf("span %d (%s): %s = %v, want %v", i, s.Name, k, got[k].AsInterface(), v)
			}
		}
		if _, ok := got[attrAttempt]; ok == w.noAttempt {
			t.Errorf("span %d (%s): payrouter.attempt present %v, want %v", i, s.Name, ok, !w.noAttempt)
		}
		if s.Status.Code != w.status {
			t.Errorf("span %d (%s): status %v, want %v", i, s.Name, s.Status.Code, w.status)
		}
	}
	if callSpan.SpanID() != spans[0].SpanContext.SpanID() {
		t.Error("the call did not run in its attempt's span: the gateway would get the request's span as parent")
	}
}

func TestGatewayClientSendsTheTraceContext(t *testing.T) {
	recordSpans(t)
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
	}))
	defer srv.Close()
	d := NewDomains([]GatewaySettings{{Name: "paywell"}}, nil)
	defer d.Close()

	ctx, span := otel.Tracer("test").Start(t.Context(), "gateway charge")
	defer span.End()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"with a span", ctx, "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"},
		{"without", t.Context(), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(tc.ctx, "POST", srv.URL, nil)
			req.Header.Set("Authorization", "Bearer secret")
			resp, err := d.Client("paywell").Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if h := <-got; h != tc.want {
				t.Errorf("gateway got traceparent %q, want %q", h, tc.want)
			}
			if len(req.Header) != 1 {
				t.Errorf("the caller's request was changed: %v", req.Header)
			}
		})
	}
}
