package httpapi

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/sim"
)

// TestSlowRequestKeepsItsKey: a request that runs longer than its hold renews it, so the same key
// sent meanwhile is 409 and never a second charge; once it answered, the key replays.
//
// It runs on the bubble's clock: on the real one, a renewal due every 20ms that a busy machine
// runs 40ms late loses the key to the second request, and the test then fails for the machine's
// load rather than for anything the code did.
func TestSlowRequestKeepsItsKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hold = 60 * time.Millisecond
		st := newBubbleStack(t, "", hold)
		st.sims["paywell"].SetBehavior(sim.Behavior{Latency: 250 * time.Millisecond}) // four holds long
		body := `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`

		first := make(chan reply, 1)
		go func() { first <- st.charge("slow-1", body) }()
		time.Sleep(4 * hold) // well past a hold that was never renewed; the gateway answers at 250ms
		if r := st.charge("slow-1", body); r.status != http.StatusConflict {
			t.Errorf("the same key while the first request is still at the gateway: want 409; got %d %s", r.status, r.body)
		}
		r := <-first
		if r.status != http.StatusCreated {
			t.Fatalf("the slow charge: want 201; got %d %s", r.status, r.body)
		}
		if again := st.charge("slow-1", body); again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("the key once answered: want its 201 replayed; got %d %s", again.status, again.body)
		}
		if n := st.sims["paywell"].Stats().Requests + st.sims["ding"].Stats().Requests; n != 1 {
			t.Errorf("one key: want one gateway call; got %d", n)
		}
	})
}

// TestFastFailStillReplays: with every breaker open (the path that answers without claiming the
// key) a key answered before still replays its answer instead of a 503, a new key is 503 with
// Retry-After, and nothing is kept of that 503: the same key is a first request afterwards.
func TestFastFailStillReplays(t *testing.T) {
	st := newStack(t, "")
	body := `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`
	if r := st.charge("before-1", body); r.status != http.StatusCreated {
		t.Fatalf("a charge before the outage: want 201; got %d %s", r.status, r.body)
	}
	for _, g := range []string{"paywell", "ding"} {
		st.domains.Breaker(g, payrouter.OpCharge).Force(payrouter.ForcedOpen)
	}
	r := st.charge("during-1", body)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Fatalf("a charge with every breaker open: want 503 with Retry-After; got %d %s", r.status, r.body)
	}
	if again := st.charge("before-1", body); again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("a key answered before, sent again with every breaker open: want its 201 replayed; got %d %s", again.status, again.body)
	}
	for _, g := range []string{"paywell", "ding"} {
		st.domains.Breaker(g, payrouter.OpCharge).Reset()
	}
	// Nothing was kept of the 503: the same key with another body is a first request.
	other := `{"amount":2999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`
	if r := st.charge("during-1", other); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("the fast-failed key, with another body once the breakers closed: want a new 201; got %d %s", r.status, r.body)
	}
}
