package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"
)

// TestGracefulDrain: a deploy sends SIGTERM. A charge already at a (slow but healthy) gateway
// must still get its answer, not a reset connection the storefront would have to guess about,
// and the process must then exit 0 (docs/cli.md, payrouter serve).
func TestGracefulDrain(t *testing.T) {
	skipIfShort(t)
	const (
		latency        = 800 * time.Millisecond // well within the gateway's timeout
		gatewayTimeout = 2 * time.Second
		requestTimeout = 3 * time.Second
	)
	gw := gatewayConfig{Timeout: gatewayTimeout, MaxConcurrent: 20, ConsecutiveFailures: 5, Cooldown: 30 * time.Second}
	s := startSims(t)
	pr := startPayrouter(t, s, routerConfig{
		RequestTimeout: requestTimeout,
		Gateways:       map[string]gatewayConfig{"paywell": gw},
		Routes:         []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell"}}},
	})
	s.paywell.behave(t, "normal", latency)

	type result struct {
		r   reply
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := pr.charge(5000, "USD", "tok_visa")
		done <- result{r, err}
	}()
	// SIGTERM only once the charge has reached paywell: then it is truly in flight.
	eventually(t, 5*time.Second, "the charge is in flight at paywell", func() (bool, string) {
		st := s.paywell.stats(t)
		return st.InFlight == 1, fmt.Sprintf("paywell stats %+v", st)
	})
	if err := pr.proc.signal(syscall.SIGTERM); err != nil {
		t.Fatalf("sending SIGTERM to payrouter: %v", err)
	}
	signalled := time.Now()

	var res result
	select {
	case res = <-done:
	case <-time.After(requestTimeout + 5*time.Second):
		t.Fatalf("the charge in flight at SIGTERM got no answer within %v", requestTimeout+5*time.Second)
	}
	if res.err != nil {
		t.Fatalf("the charge in flight at SIGTERM: want its answer; got %v", res.err)
	}
	a, err := decodeAnswer(res.r)
	if err != nil || res.r.status != 201 || a.Gateway != "paywell" || len(a.Attempts) != 1 || a.Attempts[0].String() != "paywell/succeeded" {
		t.Errorf("the charge in flight at SIGTERM: want 201 from paywell with the one attempt paywell/succeeded; got %s", res.r)
	}
	if res.r.elapsed < latency {
		t.Errorf("the charge in flight at SIGTERM answered in %v, before paywell's %v latency: it cannot have been served", res.r.elapsed, latency)
	}

	if !pr.proc.wait(stopGrace) {
		t.Fatalf("payrouter still running %v after SIGTERM, with nothing left in flight", time.Since(signalled).Round(time.Millisecond))
	}
	exitedAfter := time.Since(signalled)
	if code := pr.proc.exitCode(); code != 0 {
		t.Errorf("payrouter after SIGTERM and a drained charge: want exit code 0; got %d (%v)", code, pr.proc.waitErr)
	}
	if l := s.paywell.ledger(t); len(l) != 1 || l[0].Status != "captured" || l[0].Amount != 5000 {
		t.Errorf("paywell's ledger after the drain: want exactly one captured charge of 5000; got %+v", l)
	}
	t.Logf("charge answered %d in %v; payrouter exited %d, %v after SIGTERM",
		res.r.status, res.r.elapsed.Round(time.Millisecond), pr.proc.exitCode(), exitedAfter.Round(time.Millisecond))
}
