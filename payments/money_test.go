package payments

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/payrouter/payrouter"
)

// The money rules raced through the Service, against a gateway that applies every refund it
// is sent without checking what is left (opGateway): payrouter alone holds the limit.

// TestConcurrentRefundsNeverExceedTheCharge: full and partial refunds of one charge at once,
// each with its own id (its own Idempotency-Key): what is accepted never adds up to more than the
// charge, the refused ones are 409 with nothing sent, and the gateway applied exactly what was
// accepted.
func TestConcurrentRefundsNeverExceedTheCharge(t *testing.T) {
	for round := range 5 {
		f := newOpsFixture(t)
		f.charge(t, payrouter.StatusSucceeded) // 1999
		var (
			wg       sync.WaitGroup
			accepted atomic.Int64
			refused  atomic.Int64
		)
		for i := range 16 {
			amount := int64(0) // all that is left
			if i%2 == 1 {
				amount = 700
			}
			wg.Go(func() {
				rf, err := f.settler.Refund(t.Context(), "ch_test", amount, fmt.Sprintf("re_%d", i))
				switch {
				case err == nil && rf.Status == payrouter.RefundSucceeded:
					accepted.Add(rf.Amount)
				case payrouter.Code(err) == payrouter.EState:
					refused.Add(1)
				default:
					t.Errorf("refund %d: %+v, %v", i, rf, err)
				}
			})
		}
		wg.Wait()
		c := f.stored(t)
		if accepted.Load() > c.Amount || accepted.Load() == 0 {
			t.Fatalf("round %d: refunds of %d accepted of a charge of %d", round, accepted.Load(), c.Amount)
		}
		if got := f.gw.Applied(); got != accepted.Load() {
			t.Errorf("round %d: the gateway applied %d, the storefront was told %d", round, got, accepted.Load())
		}
		if c.Refunded != accepted.Load() || c.RefundsReserved != 0 {
			t.Errorf("round %d: the charge shows %d refunded and %d reserved; %d was applied", round, c.Refunded, c.RefundsReserved, accepted.Load())
		}
		if calls, sent := len(f.gw.Calls()), 16-int(refused.Load()); calls != sent {
			t.Errorf("round %d: %d refunds sent to the gateway, %d accepted: a refused refund reached it", round, calls, sent)
		}
	}
}

// TestRefundCompletedOnce: a refund whose answer was lost is queued, then its completion runs
// twice at once (two queue workers, or the worker and a retry), and once more from a stalled
// holder resuming with the copy it had: its amount is counted once.
func TestRefundCompletedOnce(t *testing.T) {
	f := newOpsFixture(t, withRefundFallback("queue"))
	f.charge(t, payrouter.StatusSucceeded)
	f.gw.appliedOnTimeout = true
	f.gw.set(payrouter.OpRefund, opTimeout)
	stalled, err := f.settler.Refund(t.Context(), "ch_test", 500, "re_lost")
	if err != nil || stalled.Status != payrouter.RefundQueued {
		t.Fatalf("a refund whose answer was lost: %+v, %v; want it queued", stalled, err)
	}
	if c := f.stored(t); c.RefundsReserved != 500 || c.RefundLeft() != 1499 {
		t.Fatalf("the queued refund reserves %d, %d left; want 500 reserved, 1499 left", c.RefundsReserved, c.RefundLeft())
	}
	f.gw.set(payrouter.OpRefund, payrouter.Result{Outcome: payrouter.OutcomeSucceeded, GatewayReference: "gw_re"})
	task := payrouter.Task{Kind: payrouter.TaskRefund, Gateway: "paywell", ChargeID: "ch_test", RefundID: "re_lost"}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := work(f.settler, context.Background(), task); err != nil {
				t.Errorf("Work: %v", err)
			}
		})
	}
	wg.Wait()
	old := *stalled
	if err := f.settler.completeRefund(t.Context(), &old, nil, payrouter.Result{Outcome: payrouter.OutcomeSucceeded}); err != nil {
		t.Fatal(err)
	}
	c := f.stored(t)
	if c.Refunded != 500 || c.RefundsReserved != 0 || c.Status != payrouter.StatusPartiallyRefunded {
		t.Errorf("after three completions of one refund of 500: %s, %d refunded, %d reserved; want 500 once", c.Status, c.Refunded, c.RefundsReserved)
	}
	evs, _, err := f.store.Events(t.Context(), "", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Type == payrouter.EventRefundSucceeded {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d refund.succeeded events for one refund", n)
	}
}

// TestRefundRefusedFreesItsReservation: a refund the gateway declines frees what it reserved.
func TestRefundRefusedFreesItsReservation(t *testing.T) {
	f := newOpsFixture(t)
	f.charge(t, payrouter.StatusSucceeded)
	f.gw.set(payrouter.OpRefund, opDeclined)
	if _, err := f.settler.Refund(t.Context(), "ch_test", 0, "re_declined"); payrouter.Code(err) != payrouter.EGatewayError {
		t.Fatalf("a declined refund: %v, want gateway-error", err)
	}
	if c := f.stored(t); c.RefundsReserved != 0 || c.RefundLeft() != c.Amount {
		t.Errorf("after a declined refund %d is reserved, %d left; want nothing reserved", c.RefundsReserved, c.RefundLeft())
	}
}

// TestCaptureAgainstVoid: a capture and a void of one authorization at once: one reaches the
// gateway, the other is refused with nothing sent.
func TestCaptureAgainstVoid(t *testing.T) {
	f := newOpsFixture(t)
	f.charge(t, payrouter.StatusRequiresCapture)
	inCapture, release := make(chan struct{}), make(chan struct{})
	f.gw.onCall = func(op payrouter.Operation) {
		if op == payrouter.OpCapture {
			close(inCapture)
			<-release
		}
	}
	var captured *payrouter.Charge
	var capErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		captured, capErr = f.settler.Capture(context.Background(), "ch_test")
	}()
	<-inCapture
	_, err := f.settler.Void(t.Context(), "ch_test")
	close(release)
	<-done
	if payrouter.Code(err) != payrouter.EState {
		t.Errorf("a void while the capture is at the gateway: %v, want invalid-charge-state", err)
	}
	if capErr != nil || captured.Status != payrouter.StatusSucceeded || captured.Changing != "" {
		t.Errorf("the capture: %+v, %v; want succeeded, its mark cleared", captured, capErr)
	}
	for _, call := range f.gw.Calls() {
		if call[:4] == "void" {
			t.Errorf("gateway calls %v: the void was sent", f.gw.Calls())
		}
	}
}

// TestLookUpShowsTrueState: a processing charge looked up (GET /charge, the reconciler) and
// found voided or refunded at its gateway shows that, never succeeded.
func TestLookUpShowsTrueState(t *testing.T) {
	cases := []struct {
		state payrouter.TxState
		want  payrouter.ChargeStatus
	}{
		{payrouter.TxVoided, payrouter.StatusVoided},
		{payrouter.TxRefunded, payrouter.StatusRefunded},
		{payrouter.TxPartiallyRefunded, payrouter.StatusPartiallyRefunded},
	}
	for _, tc := range cases {
		t.Run(string(tc.state), func(t *testing.T) {
			f := newOpsFixture(t)
			f.charge(t, payrouter.StatusProcessing)
			f.gw.set(payrouter.OpStatus, payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: tc.state, GatewayReference: "gw_1"})
			got, _, err := f.settler.Refresh(t.Context(), "", "ch_test")
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != tc.want || f.stored(t).Status != tc.want {
				t.Errorf("GET of a charge the gateway has %s shows %s (stored %s); want %s", tc.state, got.Status, f.stored(t).Status, tc.want)
			}
		})
	}
}

// TestRefusedRefundSaysWhyInItsOwnWords: a refused refund's failure_reason is payrouter's words
// and the gateway's reason code, never the gateway's own text.
func TestRefusedRefundSaysWhyInItsOwnWords(t *testing.T) {
	for _, tc := range []struct {
		answer payrouter.Result
		want   string
	}{
		{payrouter.Result{Outcome: payrouter.OutcomeDeclined, DeclineCode: "charge_already_refunded", Detail: "Dear customer, call 555-0100"}, "declined by the gateway: charge_already_refunded"},
		{payrouter.Result{Outcome: payrouter.OutcomeDeclined, DeclineCode: "<script>", Detail: "x"}, "declined by the gateway: declined"},
		{payrouter.Result{Outcome: payrouter.OutcomeError, Detail: "amount: must be > 0 (field 'amt' at line 3)"}, "refused by the gateway as malformed: gateway_error"},
	} {
		f := newOpsFixture(t)
		f.charge(t, payrouter.StatusSucceeded)
		f.gw.set(payrouter.OpRefund, tc.answer)
		_, err := f.settler.Refund(t.Context(), "ch_test", 0, "re_refused")
		if payrouter.Code(err) != payrouter.EGatewayError || !strings.HasSuffix(payrouter.Message(err), "("+tc.want+")") {
			t.Errorf("refused refund: %v; want a gateway-error ending (%s)", err, tc.want)
		}
		if rf, _ := f.store.Refund(t.Context(), "re_refused"); rf == nil || rf.Status != payrouter.RefundFailed || rf.Detail != tc.want {
			t.Errorf("stored refund %+v; want failed, its reason %q", rf, tc.want)
		}
	}
}
