package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/internal/testlog"
)

// TestErrorProblem: every kind of error a handler meets becomes one problem, with Retry-After
// where the caller should come back, and only the internal ones are logged, once, with the
// request's id and the charge it is about.
func TestErrorProblem(t *testing.T) {
	now := time.Now()
	unavailable := fallback.NewUnavailable(payrouter.OpCapture, "ch_ABC",
		[]payrouter.Attempt{{Gateway: "paywell", Outcome: payrouter.OutcomeBreakerOpen}},
		func(string) time.Time { return now.Add(3 * time.Second) }, now)
	cases := []struct {
		name       string
		err        error
		status     int
		typ        string
		retryAfter string // "" when none
		logged     bool
	}{
		{"fallback fails", unavailable, 503, "/problems/gateways-unavailable", "3", false},
		{"fallback fails, wrapped", fmt.Errorf("capture ch_ABC: %w", unavailable), 503, "/problems/gateways-unavailable", "3", false},
		{"money store unavailable", fmt.Errorf("save: %w", payrouter.ErrStateUnavailable), 503, "/problems/state-unavailable", "2", false},
		{"money store full", fmt.Errorf("full: %w: %w", payrouter.ErrStateFull, payrouter.ErrStateUnavailable), 503, "/problems/state-unavailable", "2", false},
		{"hold lost", fmt.Errorf("complete: %w", payrouter.ErrHoldLost), 409, "/problems/idempotency-conflict", "", false},
		{"key in flight", payrouter.ErrInFlight, 409, "/problems/idempotency-conflict", "", false},
		{"key used with another body", payrouter.ErrMismatch, 422, "/problems/idempotency-mismatch", "", false},
		{"not found", payrouter.Errorf(payrouter.ENotFound, "no charge ch_ABC"), 404, "/problems/not-found", "", false},
		{"invalid", payrouter.Errorf(payrouter.EInvalid, "amount too large"), 400, "/problems/invalid-request", "", false},
		{"state", payrouter.Errorf(payrouter.EState, "already captured"), 409, "/problems/invalid-charge-state", "", false},
		{"declined", payrouter.Errorf(payrouter.EDeclined, "declined"), 402, "/problems/card-declined", "", false},
		{"gateway refused", payrouter.Errorf(payrouter.EGatewayError, "malformed"), 502, "/problems/gateway-error", "", false},
		{"unauthorized", payrouter.Errorf(payrouter.EUnauthorized, "no key"), 401, "/problems/unauthorized", "", false},
		{"coded conflict", payrouter.Errorf(payrouter.EConflict, "in flight"), 409, "/problems/idempotency-conflict", "", false},
		{"coded internal", payrouter.Errorf(payrouter.EInternal, "broken"), 500, "/problems/internal", "", true},
		{"plain error", errors.New("disk on fire"), 500, "/problems/internal", "", true},
		{"wrapped plain error", fmt.Errorf("charge ch_ABC: %w", errors.New("disk on fire")), 500, "/problems/internal", "", true},
		{"bare not-found sentinel", payrouter.ErrNotFound, 500, "/problems/internal", "", true},
		{"internal by decision, outage cause", withDetail(payrouter.ErrStateUnavailable, "try again"), 500, "/problems/internal", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logs := &testlog.Buffer{}
			_, s := newEcho(Deps{Log: slog.New(slog.NewJSONHandler(logs, nil))})
			rec := httptest.NewRecorder()
			c := echo.New().NewContext(httptest.NewRequest("POST", "/charge/ch_ABC/capture", nil), rec)
			c.SetPath("/charge/:id/capture")
			c.SetPathValues(echo.PathValues{{Name: "id", Value: "ch_ABC"}})
			rec.Header().Set(echo.HeaderXRequestID, "req-1")

			p := s.errorProblem(c, "capture.failed", tc.err)
			if p.Status != tc.status || p.Type != tc.typ {
				t.Errorf("problem %d %s, want %d %s", p.Status, p.Type, tc.status, tc.typ)
			}
			if got := rec.Header().Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, tc.retryAfter)
			}
			if p.Status == 500 && strings.Contains(p.Detail, "fire") {
				t.Errorf("an internal error's detail shows its cause: %q", p.Detail)
			}
			lines := logs.Named(t, "capture.failed")
			if !tc.logged {
				if logs.String() != "" {
					t.Errorf("logged, want nothing: %s", logs.String())
				}
				return
			}
			if len(lines) != 1 || strings.Count(logs.String(), "\n") != 1 {
				t.Fatalf("want one capture.failed line and nothing else, got: %s", logs.String())
			}
			l := lines[0]
			if l["level"] != "ERROR" || l["request_id"] != "req-1" || l["charge_id"] != "ch_ABC" || l["err"] != tc.err.Error() {
				t.Errorf("log line %v, want ERROR with request_id req-1, charge_id ch_ABC and err %q", l, tc.err.Error())
			}
		})
	}
}

// failingStore is a money store whose charge look-up fails with err.
type failingStore struct {
	payrouter.Store
	err error
}

func (f failingStore) Charge(context.Context, string) (*payrouter.Charge, error) { return nil, f.err }

// TestHandlersLogInternalErrorsOnly: the handlers answer through errorProblem. A charge look-up
// that fails for no known reason is 500 and logged once with the request's id and the charge; a
// database outage is the documented 503 and not logged (the store logs its own outage once).
func TestHandlersLogInternalErrorsOnly(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		status int
		typ    string
		logged bool
	}{
		{"internal", errors.New("decode row: bad varint"), 500, "/problems/internal", true},
		{"outage", fmt.Errorf("query: %w", payrouter.ErrStateUnavailable), 503, "/problems/state-unavailable", false},
		{"not found", payrouter.ErrNotFound, 404, "/problems/not-found", false},
	}
	requests := []struct {
		method, path, event string
	}{
		{"GET", "/charge/ch_ABC", "charge.get_failed"},
		{"POST", "/charge/ch_ABC/capture", "capture.failed"},
		{"POST", "/charge/ch_ABC/void", "void.failed"},
		{"POST", "/charge/ch_ABC/refund", "refund.failed"},
	}
	for _, tc := range cases {
		for _, rq := range requests {
			t.Run(tc.name+" "+rq.method+" "+rq.path, func(t *testing.T) {
				st := newStackHolding(t, "", time.Minute, func(d *Deps) { d.Store = failingStore{Store: d.Store, err: tc.err} })
				r := do(st.api, rq.method, rq.path, "", "Authorization", "Bearer key-1", "Idempotency-Key", "k1", echo.HeaderXRequestID, "req-42")
				if r.status != tc.status || problemType(t, r) != tc.typ {
					t.Fatalf("%d %s, want %d %s", r.status, r.body, tc.status, tc.typ)
				}
				lines := st.log.Named(t, rq.event)
				if !tc.logged {
					if len(lines) != 0 {
						t.Errorf("logged %v, want nothing", lines)
					}
					return
				}
				if len(lines) != 1 {
					t.Fatalf("%d %s lines, want 1:\n%s", len(lines), rq.event, st.log.String())
				}
				if l := lines[0]; l["request_id"] != "req-42" || l["charge_id"] != "ch_ABC" || !strings.Contains(l["err"].(string), "bad varint") {
					t.Errorf("log line %v, want request_id req-42, charge_id ch_ABC and the cause", l)
				}
			})
		}
	}
}

// TestHandlerErrorsReachingEcho: an error a handler returns instead of answering is answered
// and logged as internal, once, by the one mapping; echo's own refusals are answers, not logged.
func TestHandlerErrorsReachingEcho(t *testing.T) {
	logs := &testlog.Buffer{}
	e, _ := newEcho(Deps{Log: slog.New(slog.NewJSONHandler(logs, nil))})
	e.GET("/broken", func(*echo.Context) error { return errors.New("encoding the answer: unsupported value") })
	r := do(e, "GET", "/broken", "")
	if r.status != 500 || problemType(t, r) != "/problems/internal" || strings.Contains(r.body, "unsupported") {
		t.Errorf("a handler's raw error: %d %s, want 500 internal that does not show the cause", r.status, r.body)
	}
	if lines := logs.Named(t, "http.failed"); len(lines) != 1 || lines[0]["err"] != "encoding the answer: unsupported value" || lines[0]["request_id"] == "" {
		t.Errorf("http.failed lines %v, want one with the error and the request id", lines)
	}
	r = do(e, "GET", "/nowhere", "")
	if r.status != 404 || problemType(t, r) != "/problems/not-found" {
		t.Errorf("an unknown route: %d %s, want 404 not-found", r.status, r.body)
	}
	if n := len(logs.Named(t, "http.failed")); n != 1 {
		t.Errorf("an unknown route was logged as a failure (%d http.failed lines)", n)
	}
}
