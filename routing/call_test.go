package routing

import (
	"context"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/resilience"
)

// Call.Do says whether the gateway was asked from whether the guard ran the call, never from the
// answer: a gateway whose own answer looks exactly like a call that was not sent was still
// called, and its reference is recorded.
func TestCallSaysWhetherTheGatewayWasCalled(t *testing.T) {
	cases := []struct {
		name       string
		open       bool // the breaker is forced open
		refuse     bool // Before abandons the call
		answer     payrouter.Result
		wantCalled bool
		wantSent   int
	}{
		{"sent and approved", false, false, payrouter.Result{Outcome: payrouter.OutcomeSucceeded}, true, 1},
		{"sent, and answered like an abandoned call", false, false, payrouter.Result{Outcome: payrouter.OutcomeError, Detail: "not sent: the charge could not be stored or was refused"}, true, 1},
		{"refused by the breaker", true, false, payrouter.Result{Outcome: payrouter.OutcomeSucceeded}, false, 0},
		{"abandoned before the gateway", false, true, payrouter.Result{Outcome: payrouter.OutcomeSucceeded}, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dom := resilience.NewDomains([]resilience.GatewaySettings{{Name: "paywell", TimeoutSettings: resilience.TimeoutSettings{Timeout: time.Second}, BulkheadSettings: resilience.BulkheadSettings{MaxConcurrent: 1}, Breaker: resilience.BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 100, Cooldown: time.Minute}}}}, nil)
			t.Cleanup(dom.Close)
			if tc.open {
				dom.Breaker("paywell", payrouter.OpCapture).Force(payrouter.ForcedOpen)
			}
			gws := &Gateways{Domains: dom.Current()}
			sent := 0
			call := gws.Call("paywell", payrouter.OpCapture, "ch_1-a1-capture", func(context.Context) payrouter.Result {
				sent++
				return tc.answer
			})
			if tc.refuse {
				call.Before = func(context.Context) bool { return false }
			}
			res := call.Do(t.Context())
			if res.Called != tc.wantCalled || sent != tc.wantSent {
				t.Fatalf("Called %v after %d sends; want %v after %d", res.Called, sent, tc.wantCalled, tc.wantSent)
			}
			wantRef := ""
			if tc.wantCalled {
				wantRef = "ch_1-a1-capture"
			}
			if a := res.Attempt(); a.Reference != wantRef || a.Gateway != "paywell" {
				t.Errorf("attempt %+v; want gateway paywell, reference %q", a, wantRef)
			}
		})
	}
}
