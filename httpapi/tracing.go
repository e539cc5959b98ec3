package httpapi

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/payrouter/payrouter/resilience"
)

// Attributes of a request's span: the semantic conventions' HTTP server attributes, and ours.
const (
	attrMethod    = attribute.Key("http.request.method")
	attrRoute     = attribute.Key("http.route")
	attrStatus    = attribute.Key("http.response.status_code")
	attrRequestID = attribute.Key("payrouter.request_id")
	attrChargeID  = attribute.Key("payrouter.charge_id")
)

// routeOf names a request by its method and route pattern ("POST /charge/:id"), never by its
// path: ids would make every name new. Unmatched requests are "<METHOD> (unmatched)".
func routeOf(c echo.Context) string {
	if c.Path() == "" {
		return c.Request().Method + " (unmatched)"
	}
	return c.Request().Method + " " + c.Path()
}

// trace makes each request a server span "<METHOD> <route>", the child of the caller's span
// when the request carries a W3C traceparent (the global propagator reads it), and puts the span
// in the request's context: the request log line (observe) and every gateway attempt's span
// (resilience.Guard.Do) find it there. It records the method, route, status code, request id
// and charge id, never a header or a body. Scrapes of /metrics are not traced.
func (s *server) trace(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if strings.HasPrefix(c.Path(), "/metrics") {
			return next(c)
		}
		req := c.Request()
		ctx := otel.GetTextMapPropagator().Extract(req.Context(), propagation.HeaderCarrier(req.Header))
		ctx, span := otel.Tracer(resilience.TracerName).Start(ctx, routeOf(c), trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		c.SetRequest(req.WithContext(ctx))

		err := next(c)

		if span.IsRecording() {
			status := c.Response().Status
			span.SetAttributes(attrMethod.String(req.Method), attrStatus.Int(status))
			if c.Path() != "" {
				span.SetAttributes(attrRoute.String(c.Path()))
			}
			if id, _ := c.Get("request_id").(string); id != "" {
				span.SetAttributes(attrRequestID.String(id))
			}
			if id := chargeIDOf(c); id != "" {
				span.SetAttributes(attrChargeID.String(id))
			}
			if status >= http.StatusInternalServerError {
				span.SetStatus(codes.Error, http.StatusText(status))
			}
		}
		return err
	}
}

// chargeIDOf is the charge a request is about: the one POST /charge made or found for its
// Idempotency-Key (createCharge), or the one the path names.
func chargeIDOf(c echo.Context) string {
	if id, _ := c.Get("charge_id").(string); id != "" {
		return id
	}
	if strings.HasPrefix(c.Path(), "/charge/:id") && validPathID(c.Param("id")) {
		return c.Param("id") // never one screenPathID refused
	}
	return ""
}
