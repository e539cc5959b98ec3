package resilience

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// propagating is a gateway client's RoundTripper: it sends the trace context of the request's
// context (the attempt's span, Guard.Do) as a W3C traceparent, so that a gateway that traces
// joins the charge's trace. Nothing else the storefront sent goes on: its baggage is never
// injected, and the tracestate (which rides along from the storefront's own traceparent) is left
// out, since both are the storefront's words, unscreened, to a third party.
type propagating struct {
	base *http.Transport
}

// propagate wraps a gateway's transport; Domains keeps the transport itself for
// CloseIdleConnections.
func propagate(t *http.Transport) http.RoundTripper { return propagating{base: t} }

// RoundTrip sends req with the traceparent header added. A RoundTripper must not change its
// request, so it goes on a copy, made only when there is a trace context to send.
func (p propagating) RoundTrip(req *http.Request) (*http.Response, error) {
	sc := trace.SpanContextFromContext(req.Context())
	if !sc.IsValid() {
		return p.base.RoundTrip(req)
	}
	out := new(http.Request)
	*out = *req // shallow, as Request.WithContext does; only the header changes
	out.Header = req.Header.Clone()
	if out.Header == nil {
		out.Header = http.Header{}
	}
	only := trace.ContextWithSpanContext(context.Background(), sc.WithTraceState(trace.TraceState{}))
	propagation.TraceContext{}.Inject(only, propagation.HeaderCarrier(out.Header))
	return p.base.RoundTrip(out)
}

// CloseIdleConnections closes the transport's idle connections (http.Client.CloseIdleConnections).
func (p propagating) CloseIdleConnections() { p.base.CloseIdleConnections() }
