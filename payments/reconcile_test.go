package payments

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
)

// reconciledLog records what the reconciler reported.
type reconciledLog struct {
	mu  sync.Mutex
	got []string
}

func (o *reconciledLog) FallbackUsed(payrouter.Operation, fallback.Policy) {}
func (o *reconciledLog) HedgeDone(string)                                  {}
func (o *reconciledLog) TaskNotQueued(payrouter.TaskKind)                  {}
func (o *reconciledLog) ChargeReconciled(s payrouter.ChargeStatus, took time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, string(s)+" after "+took.String())
}

// reconcileFixture is a Service whose clock the test moves, with one processing charge at
// paywell created a minute ago, its first attempt timed out.
func reconcileFixture(t *testing.T) (*opsFixture, *reconciledLog, *time.Time) {
	f := newOpsFixture(t)
	obs := &reconciledLog{}
	f.settler.obs = obs
	f.charge(t, payrouter.StatusProcessing, func(c *payrouter.Charge) {
		c.GatewayReference = ""
		c.Attempts[0].Outcome = payrouter.OutcomeTimeout
		c.CreatedAt = f.now.Add(-time.Minute)
	})
	return f, obs, &f.now
}

// statusCalls counts the status look-ups g was asked.
func statusCalls(g *opGateway) int {
	n := 0
	for _, c := range g.Calls() {
		if strings.HasPrefix(c, "status:") {
			n++
		}
	}
	return n
}

var (
	foundIt     = payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxCaptured, GatewayReference: "gw_late"}
	unavailable = payrouter.Result{Outcome: payrouter.OutcomeUnavailable}
)

func TestReconcilerResolvesAProcessingCharge(t *testing.T) {
	f, obs, _ := reconcileFixture(t)
	f.gw.set(payrouter.OpStatus, foundIt)
	rc := &Reconciler{Payments: f.settler}
	rc.Round(t.Context())

	c, err := f.store.Charge(t.Context(), "ch_test")
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != payrouter.StatusSucceeded || c.GatewayReference != "gw_late" {
		t.Errorf("after a look-up found it captured: status %s, gateway reference %q; want succeeded, gw_late", c.Status, c.GatewayReference)
	}
	if len(obs.got) != 1 || obs.got[0] != "succeeded after 1m0s" {
		t.Errorf("reported %v; want one charge succeeded after 1m0s", obs.got)
	}
	if left, _ := f.store.ChargesByStatus(t.Context(), payrouter.StatusProcessing, 10); len(left) != 0 {
		t.Errorf("processing charges left: %d", len(left))
	}
}

func TestReconcilerLeavesAChargeWhoseRequestMayStillRun(t *testing.T) {
	f, _, now := reconcileFixture(t)
	f.gw.set(payrouter.OpStatus, foundIt)
	*now = now.Add(-time.Minute + f.settler.budget) // the charge is exactly as old as the budget
	(&Reconciler{Payments: f.settler}).Round(t.Context())
	if n := statusCalls(f.gw); n != 0 {
		t.Errorf("%d look-ups of a charge whose request may still be running; want none", n)
	}
}

func TestReconcilerBacksOffAGatewayThatDoesNotAnswer(t *testing.T) {
	f, obs, now := reconcileFixture(t)
	f.gw.set(payrouter.OpStatus, unavailable)
	rc := &Reconciler{Payments: f.settler, MaxBackoff: 4 * time.Second}
	// Look-ups at 0s, then 1s, 3s, 7s, 11s later: the wait doubles up to MaxBackoff.
	want := map[time.Duration]int{0: 1, 500 * time.Millisecond: 1, time.Second: 2, 2 * time.Second: 2,
		3 * time.Second: 3, 6 * time.Second: 3, 7 * time.Second: 4, 10 * time.Second: 4, 11 * time.Second: 5}
	start := *now
	for _, at := range []time.Duration{0, 500 * time.Millisecond, time.Second, 2 * time.Second, 3 * time.Second,
		6 * time.Second, 7 * time.Second, 10 * time.Second, 11 * time.Second} {
		*now = start.Add(at)
		rc.Round(t.Context())
		if n := statusCalls(f.gw); n != want[at] {
			t.Fatalf("at +%s: %d look-ups; want %d", at, n, want[at])
		}
	}
	if len(obs.got) != 0 {
		t.Errorf("reported %v for a charge still processing", obs.got)
	}
	// The gateway answers: the next due look-up settles it.
	f.gw.set(payrouter.OpStatus, foundIt)
	*now = start.Add(15 * time.Second)
	rc.Round(t.Context())
	if c, _ := f.store.Charge(t.Context(), "ch_test"); c.Status != payrouter.StatusSucceeded {
		t.Errorf("after the gateway answered: %s; want succeeded", c.Status)
	}
}

// leases is a payrouter.Leases whose answer a test sets.
type leases struct {
	held bool
	err  error
}

func (l leases) HoldLease(context.Context, string, string, time.Duration) (bool, error) {
	return l.held, l.err
}
func (l leases) DropLease(context.Context, string, string) error { return nil }

func TestReconcilerLeadsWithTheLeaseOrWithoutASharedStore(t *testing.T) {
	for _, tc := range []struct {
		name   string
		leases payrouter.Leases
		want   bool
	}{
		{"no shared store", nil, true},
		{"lease held", leases{held: true}, true},
		{"another instance holds it", leases{held: false}, false},
		{"shared store down", leases{err: errors.New("down")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := &Reconciler{Leases: tc.leases, Holder: "me"}
			if got := rc.leads(t.Context(), time.Second); got != tc.want {
				t.Errorf("leads = %v; want %v", got, tc.want)
			}
		})
	}
}
