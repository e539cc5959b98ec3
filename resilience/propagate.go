package resilience

import (
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// propagating is a gateway client's RoundTripper: it sends the trace context of the request's
// context (the attempt's span, Guard.Do) with the global propagator, W3C traceparent/tracestate
// and baggage once telemetry.SetupTracing has set it, so that a gateway that traces joins the
// charge's trace.
type propagating struct {
	base *http.Transport
}

// propagate wraps a gateway's transport; Domains keeps the transport itself for
// CloseIdleConnections.
func propagate(t *http.Transport) http.RoundTripper { return propagating{base: t} }

// RoundTrip sends req with the trace context headers added. A RoundTripper must not change its
// request, so they go on a copy, made only when there is a trace context to send.
func (p propagating) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if !trace.SpanContextFromContext(ctx).IsValid() && baggage.FromContext(ctx).Len() == 0 {
		return p.base.RoundTrip(req)
	}
	out := new(http.Request)
	*out = *req // shallow, as Request.WithContext does; only the header changes
	out.Header = req.Header.Clone()
	if out.Header == nil {
		out.Header = http.Header{}
	}
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(out.Header))
	return p.base.RoundTrip(out)
}

// CloseIdleConnections closes the transport's idle connections (http.Client.CloseIdleConnections).
func (p propagating) CloseIdleConnections() { p.base.CloseIdleConnections() }
