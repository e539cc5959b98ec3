package fallback

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

func TestNewUnavailable(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	reopen := map[string]time.Time{
		"paywell": now.Add(4200 * time.Millisecond),
		"ding":    now.Add(2 * time.Second),
		"tranglo": {}, // forced open: no known reopening
	}
	openUntil := func(g string) time.Time { return reopen[g] }
	attempt := func(g string, o payrouter.Outcome) payrouter.Attempt {
		return payrouter.Attempt{Gateway: g, Outcome: o}
	}
	cases := []struct {
		name          string
		attempts      []payrouter.Attempt
		wantOpenUntil time.Time
		wantSeconds   int
	}{
		{"earliest reopening wins", []payrouter.Attempt{
			attempt("paywell", payrouter.OutcomeBreakerOpen), attempt("ding", payrouter.OutcomeBreakerOpen),
		}, now.Add(2 * time.Second), 2},
		{"rounded up to whole seconds", []payrouter.Attempt{
			attempt("paywell", payrouter.OutcomeBreakerOpen),
		}, now.Add(4200 * time.Millisecond), 5},
		{"bulkhead full: one second", []payrouter.Attempt{
			attempt("paywell", payrouter.OutcomeBulkheadFull),
		}, time.Time{}, 1},
		{"forced open has no reopening", []payrouter.Attempt{
			attempt("tranglo", payrouter.OutcomeBreakerOpen),
		}, time.Time{}, 1},
		{"an unavailable gateway's breaker is not consulted", []payrouter.Attempt{
			attempt("ding", payrouter.OutcomeUnavailable),
		}, time.Time{}, 1},
		{"no attempts at all", nil, time.Time{}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := NewUnavailable(payrouter.OpCharge, "ch_1", tc.attempts, openUntil, now)
			if !u.OpenUntil.Equal(tc.wantOpenUntil) {
				t.Errorf("OpenUntil = %v, want %v", u.OpenUntil, tc.wantOpenUntil)
			}
			if got := u.RetryAfterSeconds(); got != tc.wantSeconds {
				t.Errorf("RetryAfterSeconds = %d, want %d", got, tc.wantSeconds)
			}
		})
	}
}

// TestUnavailableIsCoded: the Fail answer carries its own code, wrapped or not, so that nothing
// that classifies errors by payrouter.Code takes it for an internal error.
func TestUnavailableIsCoded(t *testing.T) {
	u := NewUnavailable(payrouter.OpRefund, "ch_1", nil, func(string) time.Time { return time.Time{} }, time.Now())
	for name, err := range map[string]error{
		"bare":    u,
		"wrapped": fmt.Errorf("refund ch_1: %w", u),
		"joined":  errors.Join(errors.New("also"), fmt.Errorf("x: %w", u)),
	} {
		t.Run(name, func(t *testing.T) {
			if got := payrouter.Code(err); got != payrouter.EGatewaysUnavailable {
				t.Errorf("Code = %q, want %q", got, payrouter.EGatewaysUnavailable)
			}
			if got := payrouter.Message(err); got != u.SafeMessage() || got == "internal error" {
				t.Errorf("Message = %q, want the fallback's own", got)
			}
		})
	}
}
