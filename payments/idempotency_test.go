package payments

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/resilience"
)

// withKeys gives the fixture's Service its idempotency keys, in its memstore.
func withKeys(c *Config, _ *resilience.GatewaySettings) {
	c.Keys, c.KeysTTL = c.Charges.(KeyStore), time.Hour
}

// renderCharge renders a result as the API would, in short: the status and what the charge is.
func renderCharge(r Result) (Answer, error) {
	switch {
	case r.Err != nil:
		return Answer{Status: 402, Body: []byte("declined")}, nil
	case r.Charge.Status == payrouter.StatusSucceeded && r.Charge.Capture:
		return Answer{Status: 201, Header: map[string]string{"Content-Type": "application/json"}, Body: fmt.Appendf(nil, "%s %s %s", r.Charge.ID, r.Charge.Status, r.Charge.Metadata["order"])}, nil
	}
	return Answer{Status: 200, Header: map[string]string{"Content-Type": "application/json"}, Body: fmt.Appendf(nil, "%s %s %s", r.Charge.ID, r.Charge.Status, r.Charge.Metadata["order"])}, nil
}

// A success's answer is not kept with its key: its record names the charge a replay renders it
// from, as it stands then (issue 19: kept whole, a key of the largest charge held a second copy
// of its metadata for 24 h). The charge answered from is kept while its key lives.
func TestSuccessAnswerIsRenderedFromItsCharge(t *testing.T) {
	f := newOpsFixture(t, withKeys)
	f.gw.authorize = payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxAuthorized, GatewayReference: "gw_1"}
	f.gw.set(payrouter.OpCapture, lookedUp(payrouter.TxCaptured))
	r := Request{Scope: "shop", Key: "order-1", Fingerprint: "fp-1"}
	newCharge := func() *payrouter.Charge {
		return &payrouter.Charge{ID: "ch_test", Owner: "shop", Amount: 1999, Currency: "USD", Capture: false,
			Metadata: map[string]string{"order": strings.Repeat("o", 400)}, PaymentMethod: payrouter.PaymentMethod{Type: "card", Token: "tok_visa"}}
	}
	first, err := f.settler.CreateCharge(t.Context(), r, newCharge(), renderCharge)
	if err != nil || first.Status != 200 || !strings.Contains(string(first.Body), "requires_capture") {
		t.Fatalf("the authorization: %d %s, %v", first.Status, first.Body, err)
	}
	rec, err := f.store.Peek(t.Context(), payrouter.IdempotencyStoreKey("shop", "order-1"), "fp-1")
	if err != nil || rec == nil {
		t.Fatalf("its key: %+v, %v", rec, err)
	}
	if len(rec.Body) != 0 || rec.Header != nil || rec.ChargeID != "ch_test" || rec.Status != 200 {
		t.Errorf("its record keeps %d bytes of body, header %v, charge %q, status %d; want no body nor header, the charge named, 200",
			len(rec.Body), rec.Header, rec.ChargeID, rec.Status)
	}

	// Captured since: the key of the authorization and the capture's own key both replay the
	// charge as it stands.
	rc := Request{Scope: "shop", Key: "capture-1", Fingerprint: "fp-capture"}
	if a, err := f.settler.CaptureCharge(t.Context(), rc, "ch_test", renderCharge); err != nil || !strings.Contains(string(a.Body), "succeeded") {
		t.Fatalf("the capture: %d %s, %v", a.Status, a.Body, err)
	}
	stored := f.stored(t)
	stored.Status, stored.Refunded = payrouter.StatusRefunded, stored.Amount
	if err := f.store.SaveCharge(t.Context(), stored); err != nil {
		t.Fatal(err)
	}
	for name, replay := range map[string]func() (Answer, error){
		"charge":  func() (Answer, error) { return f.settler.CreateCharge(t.Context(), r, newCharge(), renderCharge) },
		"capture": func() (Answer, error) { return f.settler.CaptureCharge(t.Context(), rc, "ch_test", renderCharge) },
	} {
		a, err := replay()
		if err != nil || !a.Replayed || a.Status != 200 || string(a.Body) != "ch_test refunded "+strings.Repeat("o", 400) {
			t.Errorf("the %s's key replayed: %d %q replayed=%v, %v; want 200 with the charge as it stands, refunded", name, a.Status, a.Body, a.Replayed, err)
		}
	}
	if got := strings.Count(strings.Join(f.gw.Calls(), " "), "authorize:"); got != 1 {
		t.Errorf("%d authorizations sent, want 1", got)
	}
}

// A record kept without its body whose charge is gone (which the stores prevent while the key
// lives) answers that the charge is no longer kept, never an empty success.
func TestBodilessAnswerOfAChargeGone(t *testing.T) {
	f := newOpsFixture(t, withKeys)
	key := payrouter.IdempotencyStoreKey("shop", "order-gone")
	_, h, err := f.store.Claim(t.Context(), "shop", key, "fp", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.Complete(t.Context(), h, payrouter.IdempotencyRecord{Fingerprint: "fp", Status: 201, ChargeID: "ch_gone"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	c := &payrouter.Charge{ID: "ch_gone", Owner: "shop", Amount: 1999, Currency: "USD", Capture: true, PaymentMethod: payrouter.PaymentMethod{Type: "card", Token: "tok_visa"}}
	a, err := f.settler.CreateCharge(t.Context(), Request{Scope: "shop", Key: "order-gone", Fingerprint: "fp"}, c, renderCharge)
	if payrouter.Code(err) != payrouter.ENotFound {
		t.Fatalf("replay of a bodiless answer whose charge is gone: %d %q, %v; want not-found", a.Status, a.Body, err)
	}
	if calls := f.gw.Calls(); len(calls) != 0 {
		t.Errorf("gateway called: %v", calls)
	}
}
