package httpapi

import (
	"net/http"
	"strings"
	"sync"

	"github.com/labstack/echo/v5"
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

// unmatchedRoute is the route of every request payrouter does not route: a path no route has,
// a method its path does not answer (echo's 405, and the OPTIONS echo answers by itself), a
// path only a group's catch-all takes (/admin/nope). It is one value whatever the method and
// path: both are the caller's to make up, and each name would be a new series of
// payrouter_http_request_duration_seconds, and a new span name, for as long as the process lives.
const unmatchedRoute = "(unmatched)"

// routeOf names a request by its method and route pattern ("POST /charge/:id"), never by its
// path: ids would make every name new. A request no route of its listener answers is
// unmatchedRoute. It names the request's span, its request-duration series and its log lines.
// The names are made once (routeSet), not per request.
func (s *server) routeOf(c *echo.Context) string {
	if route, ok := s.routes()[routeKey{c.Request().Method, c.Path()}]; ok && c.Path() != "" {
		return route
	}
	return unmatchedRoute
}

// routeKey is a route's method and pattern.
type routeKey struct{ method, path string }

// routeSet returns the routes e serves, each with its name "<METHOD> <pattern>", read the first
// time it is called: by the first request, once every route is registered. A group's catch-all
// is not a route.
func routeSet(e *echo.Echo) func() map[routeKey]string {
	return sync.OnceValue(func() map[routeKey]string {
		routes := map[routeKey]string{}
		for _, r := range e.Router().Routes() {
			if r.Method != echo.RouteNotFound {
				routes[routeKey{r.Method, r.Path}] = r.Method + " " + r.Path
			}
		}
		return routes
	})
}

// isScrape tells a scrape of /metrics, which is neither traced nor counted.
func (s *server) isScrape(c *echo.Context) bool {
	return c.Path() == "/metrics" && s.routeOf(c) == http.MethodGet+" /metrics"
}

// methodOf is the request's method as the span's http.request.method records it: one of the
// methods HTTP defines, or "_OTHER" (as the semantic conventions ask) for any other, which the
// caller may have made up at any length.
func methodOf(req *http.Request) string {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return req.Method
	}
	return "_OTHER"
}

// trace makes each request a server span "<METHOD> <route>" (routeOf), the child of the caller's span
// when the request carries a W3C traceparent (the global propagator reads it), and puts the span
// in the request's context: the request log line (observe) and every gateway attempt's span
// (resilience.Guard.Do) find it there. It records the method, route, status code, request id
// and charge id, never a header or a body. Scrapes of /metrics are not traced.
func (s *server) trace(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		if s.isScrape(c) {
			return next(c)
		}
		req := c.Request()
		route := s.routeOf(c)
		ctx := otel.GetTextMapPropagator().Extract(req.Context(), propagation.HeaderCarrier(req.Header))
		ctx, span := otel.Tracer(resilience.TracerName).Start(ctx, route, serverSpan...)
		defer span.End()
		c.SetRequest(req.WithContext(ctx))

		err := next(c)

		if span.IsRecording() {
			_, status := echo.ResolveResponseStatus(c.Response(), nil)
			span.SetAttributes(attrMethod.String(methodOf(req)), attrStatus.Int(status))
			if route != unmatchedRoute {
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

// serverSpan is the option of every request span, made once rather than per request.
var serverSpan = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}

// chargeIDOf is the charge a request is about: the one POST /charge made or found for its
// Idempotency-Key (createCharge), or the one the path names.
func chargeIDOf(c *echo.Context) string {
	if id, _ := c.Get("charge_id").(string); id != "" {
		return id
	}
	if strings.HasPrefix(c.Path(), "/charge/:id") && validPathID(c.Param("id")) {
		return c.Param("id") // never one screenPathID refused
	}
	return ""
}
