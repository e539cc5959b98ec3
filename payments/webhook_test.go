package payments

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// The test gateway's webhook: the body {"type", "ref", "settles"}, signed by sending a secret in
// X-Test-Signature (each adapter's real scheme has its own tests).
func (g *opGateway) VerifyWebhook(header http.Header, body []byte, keys payrouter.WebhookKeys, _ time.Time) (payrouter.GatewayEvent, error) {
	sig := header.Get("X-Test-Signature")
	ok := false
	for _, s := range keys.Secrets {
		ok = ok || sig == s
	}
	if !ok {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: no", payrouter.ErrWebhookSignature)
	}
	var e struct {
		Type, Ref string
		Settles   bool
	}
	if err := json.Unmarshal(body, &e); err != nil {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: %v", payrouter.ErrWebhookForm, err)
	}
	return payrouter.GatewayEvent{ID: "evt", Type: e.Type, Reference: e.Ref, Settles: e.Settles}, nil
}

var hookKeys = map[string]payrouter.WebhookKeys{"paywell": {Secrets: []string{"old", "new"}, Tolerance: time.Minute}}

// hook calls the fixture's webhook as paywell with an event naming ref.
func (f *opsFixture) hook(t *testing.T, secret, ref string, settles bool) (WebhookResult, error) {
	t.Helper()
	body := fmt.Sprintf(`{"type": "tx.changed", "ref": %q, "settles": %v}`, ref, settles)
	res, _, err := f.settler.GatewayWebhook(t.Context(), "paywell", http.Header{"X-Test-Signature": {secret}}, []byte(body))
	return res, err
}

func TestGatewayWebhookSettlesThroughALookUp(t *testing.T) {
	t.Run("a processing charge is looked up and moved on, once", func(t *testing.T) {
		f := newOpsFixture(t)
		f.settler.SetWebhookKeys(hookKeys)
		f.charge(t, payrouter.StatusProcessing)
		f.gw.set(payrouter.OpStatus, foundIt)
		if res, err := f.hook(t, "new", "ch_test-a1", true); err != nil || res != WebhookSettled {
			t.Fatalf("webhook: %s, %v; want settled", res, err)
		}
		if c := f.stored(t); c.Status != payrouter.StatusSucceeded || c.GatewayReference != "gw_late" {
			t.Fatalf("stored %s at %q; want succeeded at gw_late", c.Status, c.GatewayReference)
		}
		// The same event again, and a late one: the charge is final, nothing is asked.
		for range 2 {
			if res, err := f.hook(t, "old", "ch_test-a1", true); err != nil || res != WebhookUnchanged {
				t.Errorf("duplicate: %s, %v; want unchanged", res, err)
			}
		}
		if n := statusCalls(f.gw); n != 1 {
			t.Errorf("%d look-ups; want 1 (a duplicate asks nothing)", n)
		}
	})
	t.Run("the event's claim is not the verdict: still pending at the gateway", func(t *testing.T) {
		f := newOpsFixture(t)
		f.settler.SetWebhookKeys(hookKeys)
		f.charge(t, payrouter.StatusProcessing)
		f.gw.set(payrouter.OpStatus, lookedUp(payrouter.TxPending))
		if res, err := f.hook(t, "old", "ch_test-a1", true); err != nil || res != WebhookUnchanged {
			t.Fatalf("webhook: %s, %v; want unchanged", res, err)
		}
		if c := f.stored(t); c.Status != payrouter.StatusProcessing {
			t.Errorf("stored %s; want processing (the look-up says pending)", c.Status)
		}
	})
	t.Run("refused and ignored calls change nothing and ask nothing", func(t *testing.T) {
		f := newOpsFixture(t)
		f.settler.SetWebhookKeys(hookKeys)
		f.charge(t, payrouter.StatusProcessing)
		f.gw.set(payrouter.OpStatus, foundIt)
		if _, err := f.hook(t, "forged", "ch_test-a1", true); !errors.Is(err, payrouter.ErrWebhookSignature) {
			t.Errorf("a bad signature: %v; want ErrWebhookSignature", err)
		}
		if _, _, err := f.settler.GatewayWebhook(t.Context(), "paywell", http.Header{"X-Test-Signature": {"old"}}, []byte("garbage")); !errors.Is(err, payrouter.ErrWebhookForm) {
			t.Errorf("garbage: %v; want ErrWebhookForm", err)
		}
		if _, _, err := f.settler.GatewayWebhook(t.Context(), "ding", http.Header{}, nil); !errors.Is(err, ErrNoWebhook) {
			t.Errorf("a gateway without a webhook: %v; want ErrNoWebhook", err)
		}
		for _, tc := range []struct {
			ref     string
			settles bool
			want    WebhookResult
		}{
			{"ch_test-a1", false, WebhookIgnored},
			{"ch_other-a1", true, WebhookUnchanged},
			{"not-ours", true, WebhookUnchanged},
			{"ch_test-a7", true, WebhookUnchanged},
		} {
			if res, err := f.hook(t, "old", tc.ref, tc.settles); err != nil || res != tc.want {
				t.Errorf("%s settles %v: %s, %v; want %s", tc.ref, tc.settles, res, err, tc.want)
			}
		}
		if n := statusCalls(f.gw); n != 0 {
			t.Errorf("%d look-ups; want none", n)
		}
		if c := f.stored(t); c.Status != payrouter.StatusProcessing {
			t.Errorf("stored %s; want processing", c.Status)
		}
		f.settler.SetWebhookKeys(nil)
		if _, err := f.hook(t, "old", "ch_test-a1", true); !errors.Is(err, ErrNoWebhook) {
			t.Errorf("keys removed by a reload: %v; want ErrNoWebhook", err)
		}
	})
	t.Run("a late approval of an attempt the charge does not keep is released", func(t *testing.T) {
		f := newOpsFixture(t)
		f.settler.SetWebhookKeys(hookKeys)
		f.charge(t, payrouter.StatusSucceeded, func(c *payrouter.Charge) {
			// a1 at paywell timed out and was not found; the charge succeeded with a2.
			c.Attempts = []payrouter.Attempt{
				{Gateway: "paywell", Outcome: payrouter.OutcomeTimeout, Reference: "ch_test-a1", Resolved: payrouter.TxNotFound},
				{Gateway: "paywell", Outcome: payrouter.OutcomeSucceeded, Reference: "ch_test-a2"},
			}
			c.Reference = "ch_test-a2"
		})
		f.gw.set(payrouter.OpStatus, lookedUp(payrouter.TxAuthorized))
		if res, err := f.hook(t, "old", "ch_test-a1", true); err != nil || res != WebhookSettled {
			t.Fatalf("webhook: %s, %v; want settled (released)", res, err)
		}
		c := f.stored(t)
		if !c.Attempts[0].Voided || c.Attempts[1].Voided || c.Status != payrouter.StatusSucceeded {
			t.Errorf("attempts %+v, status %s; want a1 voided, a2 kept, succeeded", c.Attempts, c.Status)
		}
		calls := strings.Join(f.gw.Calls(), " ")
		if !strings.Contains(calls, "void:ch_test-a1-void") {
			t.Errorf("calls %s; want the void of a1", calls)
		}
		f.gw.set(payrouter.OpStatus, lookedUp(payrouter.TxVoided))
		if res, err := f.hook(t, "old", "ch_test-a1", true); err != nil || res != WebhookUnchanged {
			t.Errorf("again: %s, %v; want unchanged", res, err)
		}
	})
}

// TestGatewayWebhookRacesTheRequestAndTheReconciler: a charge answered pending is settled by its
// gateway's webhooks (several, as duplicates arrive), by the reconciler's look-up and by its own
// request, all at once, any of them first: it ends succeeded once, its key's answer shows that,
// and its succeeded event is written once.
func TestGatewayWebhookRacesTheRequestAndTheReconciler(t *testing.T) {
	for i := range 30 {
		f := newOpsFixture(t, withKeys)
		f.settler.SetWebhookKeys(hookKeys)
		f.gw.authorize = payrouter.Result{Outcome: payrouter.OutcomePending, State: payrouter.TxPending, GatewayReference: "gw_1"}
		f.gw.set(payrouter.OpStatus, payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxCaptured, GatewayReference: "gw_1"})
		r := Request{Scope: "shop", Key: fmt.Sprintf("order-%d", i), Fingerprint: "fp"}
		newCharge := func() *payrouter.Charge { // as each request decodes it
			return &payrouter.Charge{ID: "ch_test", Owner: "shop", Amount: 1999, Currency: "USD", Capture: true,
				PaymentMethod: payrouter.PaymentMethod{Type: "card", Token: "tok_visa"}}
		}
		charge := newCharge()

		// The gateway calls back once it has the charge: the racers start as it arrives there,
		// while its request has yet to store the answer.
		arrived := make(chan struct{})
		var once sync.Once
		f.gw.onAuthorize = func() { once.Do(func() { close(arrived) }) }
		var wg sync.WaitGroup
		var answer Answer
		var answerErr error
		wg.Go(func() { answer, answerErr = f.settler.CreateCharge(t.Context(), r, charge, renderCharge) })
		for range 3 {
			wg.Go(func() {
				<-arrived
				for range 50 {
					if res, err := f.hook(t, "old", "ch_test-a1", true); err != nil {
						t.Errorf("webhook: %v", err)
						return
					} else if res == WebhookSettled {
						return
					}
				}
			})
		}
		wg.Go(func() { // the reconciler's transition
			<-arrived
			for range 50 {
				c, err := f.settler.Get(t.Context(), "ch_test")
				if err != nil {
					continue // not stored yet
				}
				if _, err := f.settler.ResolveProcessing(t.Context(), c); err != nil {
					t.Errorf("ResolveProcessing: %v", err)
				}
				if c.Status.Final() {
					return
				}
			}
		})
		wg.Wait()
		if answerErr != nil {
			t.Fatalf("run %d: the request: %v", i, answerErr)
		}
		if c := f.stored(t); c.Status != payrouter.StatusSucceeded {
			t.Fatalf("run %d: stored %s; want succeeded", i, c.Status)
		}
		if !strings.Contains(string(answer.Body), "succeeded") && !strings.Contains(string(answer.Body), "processing") {
			t.Fatalf("run %d: the request answered %d %s", i, answer.Status, answer.Body)
		}
		replay, err := f.settler.CreateCharge(t.Context(), r, newCharge(), renderCharge)
		if err != nil || !replay.Replayed || !strings.Contains(string(replay.Body), "succeeded") {
			t.Fatalf("run %d: the key's replay: %d %s %v; want the charge succeeded", i, replay.Status, replay.Body, err)
		}
		events, _, err := f.store.Events(t.Context(), "shop", "", 100)
		if err != nil {
			t.Fatal(err)
		}
		succeeded := 0
		for _, e := range events {
			if e.Type == payrouter.EventChargeSucceeded {
				succeeded++
			}
		}
		if succeeded != 1 {
			t.Fatalf("run %d: %d charge.succeeded events; want 1", i, succeeded)
		}
		if n := strings.Count(strings.Join(f.gw.Calls(), " "), "authorize:"); n != 1 {
			t.Fatalf("run %d: %d authorizations; want 1", i, n)
		}
	}
}
