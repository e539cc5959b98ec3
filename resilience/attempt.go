package resilience

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/payrouter/payrouter"
)

// TracerName is the instrumentation scope of payrouter's spans.
const TracerName = "github.com/payrouter/payrouter"

// Attributes of a gateway attempt's span.
const (
	attrGateway   = attribute.Key("payrouter.gateway")
	attrOperation = attribute.Key("payrouter.operation")
	attrOutcome   = attribute.Key("payrouter.outcome")
	attrAttempt   = attribute.Key("payrouter.attempt")
	attrHedge     = attribute.Key("payrouter.hedge")
)

// attemptKey is the context key of WithAttempt.
type attemptKey struct{}

// attempt is what routing knows of a call that Guard.Do does not: which attempt of its charge it
// is.
type attempt struct {
	number int
	hedge  bool
}

// WithAttempt marks ctx as attempt number (1-based, counted over the whole charge) of a charge,
// and as a hedge or not, for the span Guard.Do starts: payrouter.attempt and payrouter.hedge.
// Routing calls it where it launches charge attempts; calls without it (capture, void, refund,
// status look-ups) have spans without payrouter.attempt.
//
// Only that span reads the mark, so where Guard.Do will make none (spanWanted) ctx is returned
// as it is: the three refused attempts of a fast-failed charge cost no context each.
func WithAttempt(ctx context.Context, number int, hedge bool) context.Context {
	if !spanWanted(ctx) {
		return ctx
	}
	return context.WithValue(ctx, attemptKey{}, attempt{number: number, hedge: hedge})
}

// attemptOf returns what WithAttempt put in ctx; number 0 when nothing.
func attemptOf(ctx context.Context) attempt {
	a, _ := ctx.Value(attemptKey{}).(attempt)
	return a
}

// spanStart is the option of every attempt span: a client span, as its gateway is a server.
// Shared, so that starting a span does not allocate a slice of options.
var spanStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// startSpan starts the span of one attempt through g, a child of the span in ctx (the API
// request's): "gateway <operation>". The gateway call runs in the returned context, so that the
// trace context its request carries (propagate.go) names this span as the parent. The tracer
// is the global TracerProvider's at each call, so that telemetry.SetupTracing (or a test) may set
// it after the guards are made.
//
// Under a request whose trace is not sampled (serve without an exporter, or a caller that does
// not sample) no span is made: the attempt would not be recorded either, and the gateway gets the
// request's trace context, so logs and traces still join up. That keeps the fast 503 path of an
// outage, three refused attempts per charge, from paying for three spans nobody keeps.
//
// Nor is one made while no TracerProvider was set (a test, a tool, or code running before
// telemetry.SetupTracing): the global default's spans record nothing and carry no ids of their
// own, so the call's context would hold the same trace context either way.
func (g *Guard) startSpan(ctx context.Context) (context.Context, trace.Span) {
	if !spanWanted(ctx) {
		return ctx, unrecorded
	}
	return otel.Tracer(TracerName).Start(ctx, g.spanName, spanStart...)
}

// spanWanted reports whether an attempt under ctx gets a span of its own (startSpan): not under
// a request whose trace is not sampled, nor while no TracerProvider is set.
func spanWanted(ctx context.Context) bool {
	if parent := trace.SpanContextFromContext(ctx); parent.IsValid() && !parent.IsSampled() {
		return false
	}
	return otel.GetTracerProvider() != defaultTracerProvider
}

// defaultTracerProvider is the global TracerProvider until one is set: OpenTelemetry's
// delegate, which records nothing until then.
var defaultTracerProvider = otel.GetTracerProvider()

// unrecorded stands for an attempt's span that was not made: ending it does nothing.
var unrecorded trace.Span = noop.Span{} // an interface value made once: returning it boxes nothing

// endSpan ends an attempt's span with its attributes and outcome, all set at once: one
// allocation in the span rather than one per call. Failures and refusals (breaker_open,
// bulkhead_full, and error: our request refused) are errors; a decline is the gateway working.
// An empty outcome is a call that panicked. ctx is the span's, with WithAttempt's mark if any.
func (g *Guard) endSpan(ctx context.Context, span trace.Span, outcome payrouter.Outcome) {
	if !span.IsRecording() {
		span.End()
		return
	}
	a := attemptOf(ctx)
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, attrGateway.String(g.gateway), attrOperation.String(string(g.op)), attrHedge.Bool(a.hedge))
	if a.number > 0 {
		attrs = append(attrs, attrAttempt.Int(a.number))
	}
	if outcome != "" {
		attrs = append(attrs, attrOutcome.String(string(outcome)))
	}
	span.SetAttributes(attrs...)
	switch {
	case outcome == "":
		span.SetStatus(codes.Error, "the call panicked")
	case outcome.IsFailure() || outcome.IsExcluded():
		span.SetStatus(codes.Error, string(outcome))
	}
	span.End()
}
