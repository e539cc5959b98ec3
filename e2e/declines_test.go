package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestDeclinesNeverOpenTheBreaker: a run of declined cards is the gateway doing its job. Ten in
// a row, twice the breaker's threshold, must each be answered 402 card-declined, must leave
// paywell/charge closed with no failure counted, and must never be failed over: another gateway
// would just decline the card again, or worse, approve what the issuer refused.
func TestDeclinesNeverOpenTheBreaker(t *testing.T) {
	skipIfShort(t)
	const (
		failuresToOpen = 5
		declines       = 2 * failuresToOpen
	)
	gw := gatewayConfig{Timeout: time.Second, MaxConcurrent: 20, ConsecutiveFailures: failuresToOpen, Cooldown: 30 * time.Second}
	s := startSims(t)
	pr := startPayrouter(t, s, routerConfig{
		RequestTimeout: 3 * time.Second,
		Gateways:       map[string]gatewayConfig{"paywell": gw, "ding": gw, "tranglo": gw},
		// Two gateways to fail over to, so that "received nothing" means something.
		Routes: []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell", "ding", "tranglo"}}},
	})

	for i := 1; i <= declines; i++ {
		what := fmt.Sprintf("decline %d of %d", i, declines)
		r, a := pr.mustCharge(t, int64(4000+i), "USD", "tok_decline")
		if r.status != 402 || a.Type != "/problems/card-declined" {
			t.Fatalf("%s: want 402 /problems/card-declined; got %s", what, r)
		}
		if a.DeclineCode == "" || a.ChargeID == "" || a.Gateway != "paywell" {
			t.Errorf("%s: want the extensions decline_code, charge_id and gateway paywell; got %s", what, r)
		}
		if len(a.Attempts) != 1 || a.Attempts[0].String() != "paywell/declined" {
			t.Errorf("%s: want the one attempt paywell/declined (no failover after a decline); got %s in %s", what, describe(a.Attempts), r)
		}
		if b := pr.breaker(t, "paywell/charge"); b.State != "closed" {
			t.Fatalf("%s: want paywell/charge closed (a decline is not a failure); got %s", what, b)
		}
	}

	b := pr.breaker(t, "paywell/charge")
	if b.State != "closed" || b.Counts.Failures != 0 || b.Counts.ConsecutiveFailures != 0 {
		t.Errorf("after %d declines: want paywell/charge closed with no failure counted; got %s", declines, b)
	}
	for _, other := range []*sim{s.ding, s.tranglo} {
		if st := other.stats(t); st.Requests != 0 {
			t.Errorf("after %d declines at paywell: want nothing sent to %s; it received %d request(s)", declines, other.name, st.Requests)
		}
	}
	if st := s.paywell.stats(t); st.Requests != declines {
		t.Errorf("after %d declines: want paywell asked exactly %d times (no retries); it counted %d", declines, declines, st.Requests)
	}

	// And the gateway is still trusted: the next good card goes to it, not around it.
	r, a := pr.mustCharge(t, 4100, "USD", "tok_visa")
	if r.status != 201 || len(a.Attempts) != 1 || a.Attempts[0].String() != "paywell/succeeded" {
		t.Errorf("a good card after %d declines: want 201 with the one attempt paywell/succeeded; got %s", declines, r)
	}
}
