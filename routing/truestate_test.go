package routing

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
)

// TestVoidedAuthorizationAskedAgainIsVoided is the regression of a fault-injection finding: an
// authorization voided at the gateway, its record lost, and the same key sent again. The gateway
// answers the repeated reference with the transaction as it stands, voided; the charge must say
// voided, never succeeded. The same holds for every state a charge can be in at its gateway.
func TestVoidedAuthorizationAskedAgainIsVoided(t *testing.T) {
	cases := []struct {
		state payrouter.TxState
		want  payrouter.ChargeStatus
	}{
		{payrouter.TxVoided, payrouter.StatusVoided},
		{payrouter.TxRefunded, payrouter.StatusRefunded},
		{payrouter.TxPartiallyRefunded, payrouter.StatusPartiallyRefunded},
		{payrouter.TxAuthorized, payrouter.StatusRequiresCapture},
		{payrouter.TxCaptured, payrouter.StatusSucceeded},
	}
	for _, tc := range cases {
		t.Run(string(tc.state), func(t *testing.T) {
			f := newFixture(t)
			f.gw["paywell"].authorize = payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: tc.state, GatewayReference: "gw_1"}
			c := newCharge()
			c.Capture = false
			got, err := charge(t.Context(), f.router, f.keep, c)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != tc.want {
				t.Errorf("charge answered %s by a gateway that has it %s; want %s", got.Status, tc.state, tc.want)
			}
		})
	}
}

// TestStalledHolderSendsNothing: a request whose hold on its key was taken by a later request
// (it stalled past its hold) cannot store the charge before its gateway call, so it calls no
// gateway: the later request is the charge's only writer.
func TestStalledHolderSendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		ctx := t.Context()
		const hold = 10 * time.Millisecond
		_, stale, err := f.store.Claim(ctx, "", "scope:key-1", "fp", hold)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * hold) // the holder stalls past its hold
		if _, _, err := f.store.Claim(ctx, "", "scope:key-1", "fp", time.Minute); err != nil {
			t.Fatalf("the later claim: %v", err)
		}
		c := newCharge()
		c.Hold = stale
		_, err = charge(ctx, f.router, f.keep, c)
		if !errors.Is(err, payrouter.ErrHoldLost) {
			t.Fatalf("charge by the stalled holder: %v; want ErrHoldLost", err)
		}
		for name, gw := range f.gw {
			if len(gw.calls) != 0 {
				t.Errorf("%s was called %v by a holder that lost its key", name, gw.calls)
			}
		}
	})
}

// TestFastFail: with every candidate's breaker open, FastFail answers as Charge would (every
// attempt breaker_open, in route order) and calls no gateway; with any candidate able to take a
// call it declines, and Charge decides.
func TestFastFail(t *testing.T) {
	f := newFixture(t)
	if _, ok := f.router.FastFail(t.Context(), newCharge()); ok {
		t.Fatal("FastFail with every breaker closed: want it to decline")
	}
	f.dom.Breaker("paywell", payrouter.OpCharge).Force(payrouter.ForcedOpen)
	f.dom.Breaker("ding", payrouter.OpCharge).Force(payrouter.ForcedOpen)
	if _, ok := f.router.FastFail(t.Context(), newCharge()); ok {
		t.Fatal("FastFail with tranglo's breaker closed: want it to decline")
	}
	f.dom.Breaker("tranglo", payrouter.OpCharge).Force(payrouter.ForcedOpen)
	u, ok := f.router.FastFail(t.Context(), newCharge())
	if !ok {
		t.Fatal("FastFail with every breaker open: want the 503 answer")
	}
	got := ""
	for _, a := range u.Attempts {
		got += a.Gateway + "/" + string(a.Outcome) + " "
	}
	if got != "paywell/breaker_open ding/breaker_open tranglo/breaker_open " {
		t.Errorf("FastFail's attempts = %q; want every gateway breaker_open in route order", got)
	}
	for name, gw := range f.gw {
		if len(gw.calls) != 0 {
			t.Errorf("%s was called %v by a charge every breaker refused", name, gw.calls)
		}
	}
	if u.RetryAfterSeconds() < 1 {
		t.Errorf("Retry-After %d; want at least 1", u.RetryAfterSeconds())
	}
}
