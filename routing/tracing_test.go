package routing

import (
	"context"
	"testing"
	"testing/synctest"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// recordSpans sets a global TracerProvider that keeps every span until the test ends.
func recordSpans(t *testing.T) *tracetest.InMemoryExporter {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() {
		otel.SetTracerProvider(prev)
		_ = tp.Shutdown(context.Background())
	})
	return exp
}

// TestHedgeAttemptSpans: the spans of a hedged charge's attempts say which is the hedge and
// number the attempts as the charge does; its capture is no attempt.
func TestHedgeAttemptSpans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := recordSpans(t)
		f := newHedgeFixture(t)
		slow := make(chan struct{})
		f.gw["paywell"].hold = slow
		ctx, parent := otel.Tracer("test").Start(t.Context(), "POST /charge")
		c, err := charge(ctx, f.router, f.keep, newCharge())
		if err != nil || c.Gateway != "ding" {
			t.Fatalf("charge at %q, err %v; want the hedge at ding to win", c.Gateway, err)
		}
		parent.End()
		close(slow)
		f.router.late.Wait()

		var got []string
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID() != parent.SpanContext().TraceID() || s.Name == "POST /charge" {
				continue
			}
			if s.Parent.SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("%s is not a child of the request's span", s.Name)
			}
			a := map[attribute.Key]attribute.Value{}
			for _, kv := range s.Attributes {
				a[kv.Key] = kv.Value
			}
			got = append(got, s.Name+" "+a["payrouter.gateway"].String()+" attempt="+a["payrouter.attempt"].String()+
				" hedge="+a["payrouter.hedge"].String()+" "+a["payrouter.outcome"].String())
		}
		// In the order they ended: ding's authorization, then paywell's late approval. (Its
		// void runs in the background, on a trace of its own, and ding's capture after the
		// answer, from the queue.)
		want(t, "spans", got, []string{
			"gateway charge ding attempt=2 hedge=true succeeded",
			"gateway charge paywell attempt=1 hedge=false succeeded",
		})
	})
}
