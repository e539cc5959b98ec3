package payrouter

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// A charge printed or logged whole never shows its card token; short tokens are hidden entirely.
func TestPaymentTokenIsMasked(t *testing.T) {
	const token = "tok_live_9f8e7d6c5b4a39281706f5e4d3c2b1a0"
	c := Charge{ID: "ch_1", PaymentMethod: PaymentMethod{Type: "card", Token: token}}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("charge", "method", c.PaymentMethod)
	for _, out := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c), fmt.Sprintf("%s", c.PaymentMethod), logged.String()} {
		if strings.Contains(out, token) || !strings.Contains(out, "tok_...b1a0") {
			t.Errorf("printed: %s", out)
		}
	}
	for in, want := range map[string]string{
		"tok_visa": Redacted, "": Redacted, "tok_123456789012": "tok_...9012", token: "tok_...b1a0",
	} {
		if got := MaskToken(in); got != want {
			t.Errorf("MaskToken(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestStatusOfState: every gateway-side state maps to the charge status that tells the truth of
// it; a voided, refunded or partly refunded transaction is never shown as succeeded.
func TestStatusOfState(t *testing.T) {
	cases := []struct {
		state TxState
		want  ChargeStatus
		known bool
	}{
		{TxAuthorized, StatusRequiresCapture, true},
		{TxCaptured, StatusSucceeded, true},
		{TxVoided, StatusVoided, true},
		{TxRefunded, StatusRefunded, true},
		{TxPartiallyRefunded, StatusPartiallyRefunded, true},
		{TxDeclined, StatusDeclined, true},
		{TxFailed, StatusFailed, true},
		{TxPending, StatusProcessing, false},
		{TxNotFound, StatusProcessing, false},
		{TxUnknown, StatusProcessing, false},
	}
	for _, tc := range cases {
		got, known := StatusOfState(tc.state)
		if got != tc.want || known != tc.known {
			t.Errorf("StatusOfState(%q) = %s, %v; want %s, %v", tc.state, got, known, tc.want, tc.known)
		}
	}
}

// TestCode: the first coded error in the chain gives the code and the caller-safe message;
// anything else is internal, and says nothing of itself.
func TestCode(t *testing.T) {
	notFound := Errorf(ENotFound, "no charge %q", "ch_1")
	cases := []struct {
		name    string
		err     error
		code    ErrorCode
		message string
	}{
		{"nil", nil, "", "internal error"},
		{"coded", notFound, ENotFound, `no charge "ch_1"`},
		{"wrapped", fmt.Errorf("get: %w", notFound), ENotFound, `no charge "ch_1"`},
		{"plain", errors.New("disk on fire"), EInternal, "internal error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Code(tc.err); got != tc.code {
				t.Errorf("Code = %q, want %q", got, tc.code)
			}
			if got := Message(tc.err); got != tc.message {
				t.Errorf("Message = %q, want %q", got, tc.message)
			}
		})
	}
}

// The references of the operations on an attempt are what gateways have already recorded for
// it: a capture, void or refund sent again after an upgrade must carry the same reference, or a
// gateway would apply it twice.
func TestOperationReference(t *testing.T) {
	attempt := AttemptReference("ch_1", 2)
	for op, want := range map[Operation]string{
		OpCapture: "ch_1-a2-capture",
		OpVoid:    "ch_1-a2-void",
		OpRefund:  "ch_1-a2-refund",
		OpStatus:  "ch_1-a2",
	} {
		if got := OperationReference(attempt, op); got != want {
			t.Errorf("OperationReference(%q, %s) = %q; want %q", attempt, op, got, want)
		}
	}
}

// The outcome predicates every path reads: a row per outcome, so that a new outcome fails here
// until it is placed.
func TestOutcomePredicates(t *testing.T) {
	cases := []struct {
		o                                       Outcome
		notSent, mayHaveBeenApplied, unanswered bool
	}{
		{OutcomeSucceeded, false, false, false},
		{OutcomeDeclined, false, false, false},
		{OutcomePending, false, true, true},
		{OutcomeUnavailable, true, false, true},
		{OutcomeTimeout, false, true, true},
		{OutcomeUnknown, false, true, true},
		{OutcomeError, false, false, false},
		{OutcomeBreakerOpen, true, false, true},
		{OutcomeBulkheadFull, true, false, true},
	}
	for _, tc := range cases {
		if got := [3]bool{tc.o.NotSent(), tc.o.MayHaveBeenApplied(), tc.o.Unanswered()}; got != [3]bool{tc.notSent, tc.mayHaveBeenApplied, tc.unanswered} {
			t.Errorf("%s: NotSent, MayHaveBeenApplied, Unanswered = %v, want %v", tc.o, got, [3]bool{tc.notSent, tc.mayHaveBeenApplied, tc.unanswered})
		}
	}
}
