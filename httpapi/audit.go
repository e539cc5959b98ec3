package httpapi

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter/telemetry"
)

// Audit: every action that moves money or changes how payrouter routes it writes one `audit`
// log line once it is answered, whatever the answer: who (actor), from where (client_address),
// which request (request_id), on what (charge_id, refund_id, breaker), what (action) and how it
// ended (status, result). docs/audit.md says how to ship these lines to a retained store.

// The audited actions.
const (
	auditCharge  = "charge"
	auditCapture = "capture"
	auditVoid    = "void"
	auditRefund  = "refund"
	auditBreaker = "breaker" // the action is the route's: force-open, force-close, reset
	auditReload  = "reload"
	// The storefront webhooks' admin actions.
	auditRedeliver = "webhook.redeliver"
	auditEnable    = "webhook.enable"
)

// audit wraps a route whose every request is audited as action.
func (s *server) audit(action string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			// On top of echo's Response, which it unwraps to: the status stays echo's to keep.
			w := &problemCatcher{ResponseWriter: c.Response()}
			c.SetResponse(w)
			err := next(c)
			if err != nil {
				// Written here rather than by the outer middleware, so the line has its status.
				c.Echo().HTTPErrorHandler(c, err)
			}
			s.auditLine(c, action, w.problemType())
			return nil
		}
	}
}

// auditLine writes the audit line of the request c answered.
func (s *server) auditLine(c *echo.Context, action, problemType string) {
	_, status := echo.ResolveResponseStatus(c.Response(), nil)
	attrs := []slog.Attr{
		slog.String("action", action),
		slog.String("actor", actorOf(c)),
		slog.String("client_address", clientAddress(c)),
		slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)),
	}
	// What the path names is the caller's text until payrouter found it: a breaker or charge
	// that does not exist, or a path refused as malformed, is not repeated (it could be anything,
	// a credential pasted in the wrong place included).
	named := status != http.StatusNotFound && status != http.StatusBadRequest
	switch action {
	case auditBreaker:
		attrs[0] = slog.String("action", "breaker."+c.Param("action"))
		if named {
			attrs = append(attrs, slog.String("breaker", c.Param("gateway")+"/"+c.Param("operation")))
		}
	case auditReload:
	case auditRedeliver:
		if d := c.Param("delivery"); named || looksLikeID(d, "whd_") {
			attrs = append(attrs, slog.String("delivery", d))
		}
	case auditEnable:
		if named {
			attrs = append(attrs, slog.String("endpoint", c.Param("endpoint")))
		}
	default:
		id, _ := c.Get("charge_id").(string) // derived by payrouter: always safe to show
		if id == "" && status != http.StatusBadRequest && (named || looksLikeID(c.Param("id"), "ch_")) {
			id = c.Param("id")
		}
		attrs = append(attrs, slog.String("charge_id", id))
		if rf, _ := c.Get("refund_id").(string); rf != "" {
			attrs = append(attrs, slog.String("refund_id", rf))
		}
	}
	result := "ok"
	if status >= 300 {
		result = problemType
		if result == "" {
			result = strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "-"))
		}
	}
	attrs = append(attrs, slog.Int("status", status), slog.String("result", result))
	if c.Response().Header().Get("Idempotent-Replayed") == "true" {
		attrs = append(attrs, slog.Bool("replayed", true))
	}
	s.Log.LogAttrs(c.Request().Context(), slog.LevelInfo, telemetry.AuditMessage, attrs...) // written at every -log-level
}

// looksLikeID reports whether s has the shape of the ids payrouter makes: prefix, then up to 40
// letters and digits. Another key's charge id asked for is worth its audit line; text that could
// never be an id is not repeated.
func looksLikeID(s, prefix string) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok || len(rest) == 0 || len(rest) > 40 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; !('A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// problemCatcher keeps the start of a problem+json answer, to name the problem in the audit
// line whichever path wrote it (a fresh answer, a replay, an error).
type problemCatcher struct {
	http.ResponseWriter
	head    []byte    // the part of headBuf written so far
	headBuf [512]byte // head's room, in the catcher itself: no allocation of its own
}

func (w *problemCatcher) Write(b []byte) (int, error) {
	if len(w.head) < len(w.headBuf) && strings.HasPrefix(w.Header().Get(echo.HeaderContentType), "application/problem+json") {
		if w.head == nil {
			w.head = w.headBuf[:0]
		}
		w.head = append(w.head, b[:min(len(b), len(w.headBuf)-len(w.head))]...)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *problemCatcher) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// problemType is the name of the problem answered ("card-declined"), or "" when none was. The
// type is the first member a problem is written with, so the head always holds it.
func (w *problemCatcher) problemType() string {
	_, rest, ok := bytes.Cut(w.head, []byte(`"type":"/problems/`))
	if !ok {
		return ""
	}
	name, _, _ := bytes.Cut(rest, []byte(`"`))
	return string(name)
}
