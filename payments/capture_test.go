package payments

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/routing"
)

// captureQueued stores the charge a hedge answered succeeded with its capture queued, and
// queues that capture as the router does (QueueCapture). It returns the queued task.
func (f *opsFixture) captureQueued(t *testing.T) payrouter.Task {
	t.Helper()
	c := f.charge(t, payrouter.StatusSucceeded, func(c *payrouter.Charge) { c.CaptureQueued, c.Owner = true, "shop" })
	if err := f.settler.QueueCapture(t.Context(), c, c.Gateway, c.Reference, c.GatewayReference, false); err != nil {
		t.Fatal(err)
	}
	tasks := f.store.Tasks()
	if len(tasks) != 1 || tasks[0].Kind != payrouter.TaskCapture {
		t.Fatalf("queued %+v; want one capture", tasks)
	}
	return tasks[0]
}

// eventTypes lists the types of the events the store wrote for the fixture's charges.
func (f *opsFixture) eventTypes(t *testing.T) []string {
	t.Helper()
	evs, _, err := f.store.Events(t.Context(), "shop", "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, string(e.Type))
	}
	return out
}

// TestQueuedCaptureIsSentAfterTheAnswer: the charge's own request sends the queued capture once
// its answer is stored, and acknowledges the task: the worker has nothing left to do.
func TestQueuedCaptureIsSentAfterTheAnswer(t *testing.T) {
	f := newOpsFixture(t)
	task := f.captureQueued(t)
	if want := f.now.Add(opsBudget + storeTimeout + opsTimeout); !task.NotBefore.Equal(want) {
		t.Errorf("the worker may send it from %v; want %v, after the request's own try", task.NotBefore, want)
	}
	f.settler.captureAfterAnswer(f.stored(t))
	f.settler.Wait()
	if got := f.gw.Calls(); !slices.Equal(got, []string{"capture:ch_test-a1-capture"}) {
		t.Errorf("gateway calls %v; want one capture, with the reference every capture of it sends", got)
	}
	if c := f.stored(t); c.Status != payrouter.StatusSucceeded || c.CaptureQueued {
		t.Errorf("stored %s, capture queued %v; want succeeded, captured", c.Status, c.CaptureQueued)
	}
	if left := f.store.Tasks(); len(left) != 0 {
		t.Errorf("tasks left %+v; want the capture acknowledged", left)
	}
	// Captured, a refund may go now.
	if _, err := f.settler.Refund(t.Context(), "ch_test", 500, "re_1"); err != nil {
		t.Errorf("refund after the capture: %v", err)
	}
}

// TestQueuedCaptureOutcomes: what the worker's try of a queued capture comes to, by what the
// gateway answers.
func TestQueuedCaptureOutcomes(t *testing.T) {
	cases := []struct {
		name       string
		capture    payrouter.Result
		look       payrouter.Result
		processing bool // the charge's answer not stored yet
		keepsOther bool // the charge keeps another attempt
		later      bool // fallback.ErrLater: handed out again
		status     payrouter.ChargeStatus
		queued     bool // still CaptureQueued
		calls      []string
		tasks      []string // queued after it, besides the capture itself
		events     []string
	}{
		{name: "captured", capture: lookedUp(payrouter.TxCaptured),
			status: payrouter.StatusSucceeded, calls: []string{"capture:ch_test-a1-capture"}},
		{name: "gateway unavailable: later, the same reference", capture: opUnavailable, later: true,
			status: payrouter.StatusSucceeded, queued: true, calls: []string{"capture:ch_test-a1-capture"}},
		{name: "answer lost: later, the same reference", capture: opTimeout, later: true,
			status: payrouter.StatusSucceeded, queued: true, calls: []string{"capture:ch_test-a1-capture"}},
		{name: "refused, but captured by an earlier send", capture: opDeclined, look: lookedUp(payrouter.TxCaptured),
			status: payrouter.StatusSucceeded, calls: []string{"capture:ch_test-a1-capture", "status:ch_test-a1"}},
		{name: "refused, still authorized: failed, released", capture: opDeclined, look: lookedUp(payrouter.TxAuthorized),
			status: payrouter.StatusFailed, calls: []string{"capture:ch_test-a1-capture", "status:ch_test-a1"},
			tasks: []string{"void paywell ch_test-a1"}, events: []string{"charge.capture_failed"}},
		{name: "refused, look-up not answered: later", capture: opMalformed, look: opUnavailable, later: true,
			status: payrouter.StatusSucceeded, queued: true, calls: []string{"capture:ch_test-a1-capture", "status:ch_test-a1"}},
		{name: "answer not stored yet: later, nothing sent", processing: true, later: true,
			status: payrouter.StatusProcessing, queued: true},
		{name: "the charge keeps another attempt: nothing to do", keepsOther: true,
			status: payrouter.StatusSucceeded, queued: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newOpsFixture(t)
			task := f.captureQueued(t)
			if tc.processing || tc.keepsOther {
				c := f.stored(t)
				if tc.processing {
					c.Status = payrouter.StatusProcessing
				} else {
					c.Reference = "ch_test-a2"
				}
				if err := f.store.SaveCharge(t.Context(), c); err != nil {
					t.Fatal(err)
				}
			}
			f.gw.set(payrouter.OpCapture, tc.capture)
			f.gw.set(payrouter.OpStatus, tc.look)
			err := f.settler.workCapture(t.Context(), task)
			if got := errors.Is(err, fallback.ErrLater); got != tc.later || !tc.later && err != nil {
				t.Errorf("err %v; want later %v", err, tc.later)
			}
			c := f.stored(t)
			if c.Status != tc.status || c.CaptureQueued != tc.queued {
				t.Errorf("stored %s, capture queued %v; want %s, %v", c.Status, c.CaptureQueued, tc.status, tc.queued)
			}
			if got := f.gw.Calls(); !slices.Equal(got, tc.calls) {
				t.Errorf("gateway calls %v; want %v", got, tc.calls)
			}
			var queued []string
			for _, q := range f.store.Tasks() {
				if q.ID != task.ID {
					queued = append(queued, string(q.Kind)+" "+q.Gateway+" "+q.Reference)
				}
			}
			if !slices.Equal(queued, tc.tasks) {
				t.Errorf("queued %v; want %v", queued, tc.tasks)
			}
			// charge.succeeded was written when the charge was stored succeeded, at its answer.
			if got := f.eventTypes(t)[1:]; !slices.Equal(got, tc.events) && !(len(got) == 0 && len(tc.events) == 0) {
				t.Errorf("events after the answer %v; want %v", got, tc.events)
			}
		})
	}
}

// TestQueuedCaptureSentTwiceAtOnce: two workers, or the charge's own request and a worker after
// an instance stalled mid-capture, send the same queued capture at once. Both send the same
// reference (the gateway captures once), the charge ends captured once, with no second event,
// and the one whose send is refused as a repeat looks the authorization up rather than failing
// the charge.
func TestQueuedCaptureSentTwiceAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newOpsFixture(t)
		task := f.captureQueued(t)
		// The first send stalls at the gateway; the second is applied meanwhile; the first then
		// comes back refused, as a gateway that already captured it may answer a repeat.
		var mu sync.Mutex
		sends := 0
		stalled, resume := make(chan struct{}), make(chan struct{})
		f.gw.onCall = func(op payrouter.Operation) {
			if op != payrouter.OpCapture {
				return
			}
			mu.Lock()
			sends++
			first := sends == 1
			mu.Unlock()
			if first {
				close(stalled)
				<-resume
				f.gw.set(payrouter.OpCapture, opMalformed)
				f.gw.set(payrouter.OpStatus, lookedUp(payrouter.TxCaptured))
			}
		}
		f.gw.set(payrouter.OpCapture, lookedUp(payrouter.TxCaptured))
		errs := make(chan error, 2)
		go func() { errs <- f.settler.workCapture(t.Context(), task) }()
		<-stalled
		if err := f.settler.workCapture(t.Context(), task); err != nil {
			t.Errorf("the second worker: %v", err)
		}
		close(resume)
		if err := <-errs; err != nil {
			t.Errorf("the stalled worker: %v; want done (found captured)", err)
		}
		var captures []string
		for _, call := range f.gw.Calls() {
			if strings.HasPrefix(call, "capture:") {
				captures = append(captures, call)
			}
		}
		if !slices.Equal(captures, []string{"capture:ch_test-a1-capture", "capture:ch_test-a1-capture"}) {
			t.Errorf("captures sent %v; want both with the one reference", captures)
		}
		if c := f.stored(t); c.Status != payrouter.StatusSucceeded || c.CaptureQueued {
			t.Errorf("stored %s, capture queued %v; want succeeded, captured", c.Status, c.CaptureQueued)
		}
		if got := f.eventTypes(t); !slices.Equal(got, []string{"charge.succeeded"}) {
			t.Errorf("events %v; want only the answer's charge.succeeded", got)
		}
	})
}

// TestQueuedCaptureAgainstVoidAndRefund: while a charge's capture is queued, a void request is
// refused (it is succeeded, no authorization to void) and so is a refund (nothing is captured
// yet), with nothing sent or reserved; the capture then goes through.
func TestQueuedCaptureAgainstVoidAndRefund(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newOpsFixture(t)
		task := f.captureQueued(t)
		atGateway, release := make(chan struct{}), make(chan struct{})
		f.gw.onCall = func(op payrouter.Operation) {
			if op == payrouter.OpCapture {
				close(atGateway)
				<-release
			}
		}
		done := make(chan error, 1)
		go func() { done <- f.settler.workCapture(t.Context(), task) }()
		<-atGateway
		if _, err := f.settler.Void(t.Context(), "ch_test"); payrouter.Code(err) != payrouter.EState {
			t.Errorf("void while its capture is at the gateway: %v; want invalid-charge-state", err)
		}
		if _, err := f.settler.Refund(t.Context(), "ch_test", 0, "re_1"); payrouter.Code(err) != payrouter.EState {
			t.Errorf("refund while its capture is at the gateway: %v; want invalid-charge-state", err)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := f.gw.Calls(); !slices.Equal(got, []string{"capture:ch_test-a1-capture"}) {
			t.Errorf("gateway calls %v; want the capture alone", got)
		}
		if c := f.stored(t); c.Status != payrouter.StatusSucceeded || c.CaptureQueued || c.RefundsReserved != 0 {
			t.Errorf("stored %s, capture queued %v, reserved %d; want succeeded, captured, nothing reserved", c.Status, c.CaptureQueued, c.RefundsReserved)
		}
	})
}

// withHedgedRoute gives the fixture's Service a route [paywell, ding] hedged after 100ms, a
// hedge for every charge (budget 1), ding answering as paywell does.
func withHedgedRoute(t *testing.T, f *opsFixture) *opGateway {
	t.Helper()
	ding := newOpGateway()
	var settings []resilience.GatewaySettings
	for _, name := range []string{"paywell", "ding"} {
		settings = append(settings, resilience.GatewaySettings{Name: name, TimeoutSettings: resilience.TimeoutSettings{Timeout: opsTimeout},
			BulkheadSettings: resilience.BulkheadSettings{MaxConcurrent: 4}, Breaker: resilience.BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 100, Cooldown: time.Minute}}})
	}
	dom := resilience.NewDomains(settings, nil)
	t.Cleanup(dom.Close)
	router, err := routing.New(routing.Config{
		Routes: []routing.Route{{Name: "hedged", Gateways: []string{"paywell", "ding"},
			Hedge: &routing.Hedge{After: routing.HedgeAfter{Delay: 100 * time.Millisecond}, Budget: 1}}},
		Gateways: map[string]payrouter.Gateway{"paywell": f.gw, "ding": ding}, Domains: dom, Budget: opsBudget,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.settler = New(Config{Router: router, Keys: f.store, KeysTTL: time.Hour, Charges: f.store, Refunds: f.store, Queue: f.store, Budget: opsBudget, Observer: f.obs})
	f.settler.now = func() time.Time { return f.now }
	return ding
}

// TestHedgedChargeIsCapturedAfterItsAnswer: POST /charge on a hedged route, through the
// idempotency protocol as the API runs it, its sale coming back only authorized (a gateway that
// authorizes a sale and leaves its capture to be asked). The answer is succeeded with the capture
// queued and nothing captured yet; the capture follows the stored answer, once, and its task is
// gone: such a sale is captured, never left waiting.
func TestHedgedChargeIsCapturedAfterItsAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newOpsFixture(t)
		withHedgedRoute(t, f)
		f.gw.authorize = payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxAuthorized, GatewayReference: "gw_1"}
		var atAnswer []string
		render := func(r Result) (Answer, error) {
			atAnswer = f.gw.Calls()
			return renderCharge(r)
		}
		c := &payrouter.Charge{ID: "ch_test", Owner: "shop", Amount: 1999, Currency: "USD", Capture: true,
			PaymentMethod: payrouter.PaymentMethod{Type: "card", Token: "tok_visa"}}
		a, err := f.settler.CreateCharge(t.Context(), Request{Scope: "shop", Key: "order-1", Fingerprint: "fp"}, c, render)
		if err != nil || a.Status != 201 {
			t.Fatalf("answer %d %s, %v; want 201 succeeded", a.Status, a.Body, err)
		}
		if !slices.Equal(atAnswer, []string{"authorize:ch_test-a1"}) {
			t.Errorf("gateway calls when answered %v; want the authorization alone: the capture comes after", atAnswer)
		}
		f.settler.Wait()
		if got := f.gw.Calls(); !slices.Equal(got, []string{"authorize:ch_test-a1", "capture:ch_test-a1-capture"}) {
			t.Errorf("gateway calls %v; want the authorization, then its capture", got)
		}
		if s := f.stored(t); s.Status != payrouter.StatusSucceeded || s.CaptureQueued {
			t.Errorf("stored %s, capture queued %v; want succeeded, captured", s.Status, s.CaptureQueued)
		}
		if left := f.store.Tasks(); len(left) != 0 {
			t.Errorf("tasks left %+v; want the capture's task acknowledged", left)
		}
	})
}
