package httpapi

import (
	"net/http"
	"testing"
	"time"

	"github.com/payrouter/payrouter/gateways/sim"
)

// TestSlowRequestKeepsItsKey: a request that runs longer than its hold renews it, so the same key
// sent meanwhile is 409 and never a second charge; once it answered, the key replays.
func TestSlowRequestKeepsItsKey(t *testing.T) {
	const hold = 60 * time.Millisecond
	st := newStackHolding(t, "", hold)
	st.sims["paywell"].SetBehavior(sim.Behavior{Latency: 250 * time.Millisecond}) // four holds long
	body := `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`

	first := make(chan reply, 1)
	go func() { first <- st.charge("slow-1", body) }()
	time.Sleep(4 * hold) // well past a hold that was never renewed
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
}
