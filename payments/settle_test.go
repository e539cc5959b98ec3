package payments

import (
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
)

// hedgeWon stores the charge a hedge at ding won while paywell's sale was still running
// (answered succeeded at ding, its capture queued), and queues that capture as the router does.
// It returns ding's gateway and the queued task.
func (f *opsFixture) hedgeWon(t *testing.T, awaitSale bool) (*opGateway, payrouter.Task) {
	t.Helper()
	ding := withHedgedRoute(t, f)
	c := &payrouter.Charge{
		ID: "ch_test", Owner: "shop", Status: payrouter.StatusSucceeded, Amount: 1999, Currency: "USD", Capture: true, CaptureQueued: true,
		Gateway: "ding", Reference: "ch_test-a2", GatewayReference: "gw_2",
		Attempts: []payrouter.Attempt{
			{Gateway: "paywell", Outcome: payrouter.OutcomeUnknown, Reference: "ch_test-a1", Sale: true},
			{Gateway: "ding", Outcome: payrouter.OutcomeSucceeded, Reference: "ch_test-a2", Hedge: true},
		},
		CreatedAt: f.now, UpdatedAt: f.now,
	}
	if err := f.store.SaveCharge(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	if err := f.settler.QueueCapture(t.Context(), c, "ding", "ch_test-a2", "gw_2", awaitSale); err != nil {
		t.Fatal(err)
	}
	tasks := f.store.Tasks()
	if len(tasks) != 1 || tasks[0].Kind != payrouter.TaskCapture {
		t.Fatalf("queued %+v; want one capture", tasks)
	}
	return ding, tasks[0]
}

// otherTasks lists the queued tasks but task, as "kind gateway reference".
func (f *opsFixture) otherTasks(task payrouter.Task) []string {
	var out []string
	for _, q := range f.store.Tasks() {
		if q.ID != task.ID {
			out = append(out, string(q.Kind)+" "+q.Gateway+" "+q.Reference)
		}
	}
	return out
}

// settledAs checks where the stored charge keeps its money once settled, and which of its
// attempts are voided.
func (f *opsFixture) settledAs(t *testing.T, gateway, ref string, queued bool, voided []string) {
	t.Helper()
	c := f.stored(t)
	if c.Status != payrouter.StatusSucceeded || c.Gateway != gateway || c.Reference != ref || c.CaptureQueued != queued {
		t.Errorf("stored %s at %s %s, capture queued %v; want succeeded at %s %s, capture queued %v",
			c.Status, c.Gateway, c.Reference, c.CaptureQueued, gateway, ref, queued)
	}
	var got []string
	for _, a := range c.Attempts {
		if a.Voided {
			got = append(got, a.Reference)
		}
	}
	if !slices.Equal(got, voided) {
		t.Errorf("voided attempts %v; want %v", got, voided)
	}
}

// TestSettleLooksTheSaleUp: the queue's worker settles a hedge's queued capture (TaskCapture)
// from what a look-up of the sale finds, one branch each. Nothing is captured at the hedge while
// the sale may hold money.
func TestSettleLooksTheSaleUp(t *testing.T) {
	found := func(s payrouter.TxState) payrouter.Result {
		return payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: s, GatewayReference: "gw_1"}
	}
	cases := []struct {
		name      string
		look      payrouter.Result // paywell's status answer for the sale
		saleVoid  payrouter.Result // paywell's void answer
		hedgeVoid payrouter.Result // ding's void answer
		after     time.Duration    // since the charge was made
		later     bool
		gateway   string // where the charge keeps its money after
		queued    bool   // still CaptureQueued
		voided    []string
		paywell   []string
		ding      []string
		tasks     []string
	}{
		{name: "the sale captured: it keeps the charge, the hedge is voided", look: found(payrouter.TxCaptured), after: time.Minute,
			gateway: "paywell", voided: []string{"ch_test-a2"},
			paywell: []string{"status:ch_test-a1"}, ding: []string{"void:ch_test-a2-void"}},
		{name: "the sale captured, the hedge's void fails: queued", look: found(payrouter.TxCaptured), hedgeVoid: opUnavailable, after: time.Minute,
			gateway: "paywell",
			paywell: []string{"status:ch_test-a1"}, ding: []string{"void:ch_test-a2-void"}, tasks: []string{"void ding ch_test-a2"}},
		{name: "the sale only authorized: voided, then the hedge captured", look: found(payrouter.TxAuthorized), after: time.Minute,
			gateway: "ding", voided: []string{"ch_test-a1"},
			paywell: []string{"status:ch_test-a1", "void:ch_test-a1-void"}, ding: []string{"capture:ch_test-a2-capture"}},
		{name: "the sale only authorized, its void fails: later, nothing captured", look: found(payrouter.TxAuthorized), saleVoid: opUnavailable,
			after: time.Minute, later: true, gateway: "ding", queued: true,
			paywell: []string{"status:ch_test-a1", "void:ch_test-a1-void"}},
		{name: "the sale declined: the hedge captured", look: found(payrouter.TxDeclined), after: time.Minute,
			gateway: "ding", paywell: []string{"status:ch_test-a1"}, ding: []string{"capture:ch_test-a2-capture"}},
		{name: "the sale not found, and it cannot be on its way any more: the hedge captured, the sale rechecked",
			look: found(payrouter.TxNotFound), after: time.Minute,
			gateway: "ding", paywell: []string{"status:ch_test-a1"}, ding: []string{"capture:ch_test-a2-capture"},
			tasks: []string{"recheck paywell ch_test-a1"}},
		{name: "the sale not found while it may still be on its way: later, nothing captured",
			look: found(payrouter.TxNotFound), after: time.Second, later: true, gateway: "ding", queued: true,
			paywell: []string{"status:ch_test-a1"}},
		{name: "the sale pending: later, nothing captured", look: found(payrouter.TxPending), after: time.Minute, later: true,
			gateway: "ding", queued: true, paywell: []string{"status:ch_test-a1"}},
		{name: "the look-up not answered: later, nothing captured", look: opUnavailable, after: time.Minute, later: true,
			gateway: "ding", queued: true, paywell: []string{"status:ch_test-a1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newOpsFixture(t)
			ding, task := f.hedgeWon(t, false)
			f.gw.set(payrouter.OpStatus, tc.look)
			if tc.saleVoid.Outcome != "" {
				f.gw.set(payrouter.OpVoid, tc.saleVoid)
			}
			if tc.hedgeVoid.Outcome != "" {
				ding.set(payrouter.OpVoid, tc.hedgeVoid)
			}
			f.now = f.now.Add(tc.after)
			err := f.settler.workCapture(t.Context(), task)
			if got := errors.Is(err, fallback.ErrLater); got != tc.later || !tc.later && err != nil {
				t.Errorf("err %v; want later %v", err, tc.later)
			}
			var voided []string
			if tc.voided != nil {
				voided = tc.voided
			}
			ref := map[string]string{"paywell": "ch_test-a1", "ding": "ch_test-a2"}[tc.gateway]
			f.settledAs(t, tc.gateway, ref, tc.queued, voided)
			if got := f.gw.Calls(); !slices.Equal(got, tc.paywell) {
				t.Errorf("paywell calls %v; want %v", got, tc.paywell)
			}
			if got := ding.Calls(); !slices.Equal(got, tc.ding) {
				t.Errorf("ding calls %v; want %v", got, tc.ding)
			}
			if got := f.otherTasks(task); !slices.Equal(got, tc.tasks) {
				t.Errorf("tasks queued %v; want %v", got, tc.tasks)
			}
		})
	}
}

// TestSettleFromTheSalesOwnAnswer: the charge's own instance settles as soon as both its answer
// is stored and its sale answered, whichever comes first, from the sale's own answer: no look-up
// when that answer is final, one when it is not. The task is acknowledged once it is done.
func TestSettleFromTheSalesOwnAnswer(t *testing.T) {
	cases := []struct {
		name          string
		sale          payrouter.Result
		look          payrouter.Result
		saleFirst     bool // the sale answers before the charge's answer is stored
		gateway       string
		paywell, ding []string
	}{
		{name: "captured, after the answer is stored", sale: payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxCaptured, GatewayReference: "gw_1"},
			gateway: "paywell", ding: []string{"void:ch_test-a2-void"}},
		{name: "captured, before the answer is stored", sale: payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxCaptured, GatewayReference: "gw_1"},
			saleFirst: true, gateway: "paywell", ding: []string{"void:ch_test-a2-void"}},
		{name: "declined", sale: opDeclined, gateway: "ding", ding: []string{"capture:ch_test-a2-capture"}},
		{name: "not sent", sale: opUnavailable, gateway: "ding", ding: []string{"capture:ch_test-a2-capture"}},
		{name: "timed out: looked up, found captured", sale: opTimeout, look: lookedUp(payrouter.TxCaptured),
			gateway: "paywell", paywell: []string{"status:ch_test-a1"}, ding: []string{"void:ch_test-a2-void"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newOpsFixture(t)
			ding, _ := f.hedgeWon(t, true)
			if tc.look.Outcome != "" {
				f.gw.set(payrouter.OpStatus, tc.look)
			}
			if tc.saleFirst {
				f.settler.SaleAnswered("ch_test", tc.sale)
				f.settler.captureAfterAnswer(f.stored(t))
			} else {
				f.settler.captureAfterAnswer(f.stored(t))
				f.settler.Wait()
				if got := slices.Concat(f.gw.Calls(), ding.Calls()); len(got) != 0 {
					t.Fatalf("calls %v before the sale answered; want none", got)
				}
				f.settler.SaleAnswered("ch_test", tc.sale)
			}
			f.settler.Wait()
			ref := map[string]string{"paywell": "ch_test-a1", "ding": "ch_test-a2"}[tc.gateway]
			var voided []string
			if tc.gateway == "paywell" {
				voided = []string{"ch_test-a2"}
			}
			f.settledAs(t, tc.gateway, ref, false, voided)
			if got := f.gw.Calls(); !slices.Equal(got, tc.paywell) {
				t.Errorf("paywell calls %v; want %v", got, tc.paywell)
			}
			if got := ding.Calls(); !slices.Equal(got, tc.ding) {
				t.Errorf("ding calls %v; want %v", got, tc.ding)
			}
			if left := f.store.Tasks(); len(left) != 0 {
				t.Errorf("tasks left %+v; want the capture's acknowledged", left)
			}
		})
	}
}

// TestSettleRecheckOfTheSaleWaits: a recheck of the sale (queued when the hedge won) does
// nothing while the settlement has not decided which attempt the charge keeps: releasing a
// sale that captured would refund the customer's purchase.
func TestSettleRecheckOfTheSaleWaits(t *testing.T) {
	f := newOpsFixture(t)
	f.hedgeWon(t, false)
	f.gw.set(payrouter.OpStatus, lookedUp(payrouter.TxCaptured))
	recheck := payrouter.Task{Kind: payrouter.TaskRecheck, Gateway: "paywell", ChargeID: "ch_test", Reference: "ch_test-a1",
		Amount: 1999, Currency: "USD", CreatedAt: f.now}
	if err := f.settler.release(t.Context(), recheck); !errors.Is(err, fallback.ErrLater) {
		t.Errorf("recheck of the unsettled sale: %v; want later", err)
	}
	if got := f.gw.Calls(); len(got) != 0 {
		t.Errorf("paywell calls %v; want none", got)
	}
}

// TestSettleInstanceDiesMidSettlement: the instance that answered stops after the sale's void
// and before the hedge's capture. The worker, on any instance, settles it again from the
// charge as stored: the sale is voided already (no second look-up), the hedge is captured once.
func TestSettleInstanceDiesMidSettlement(t *testing.T) {
	f := newOpsFixture(t)
	ding, task := f.hedgeWon(t, false)
	f.now = f.now.Add(time.Minute)
	f.gw.set(payrouter.OpStatus, lookedUp(payrouter.TxAuthorized))
	ding.set(payrouter.OpCapture, opUnavailable) // the first try stops short of the capture
	if err := f.settler.workCapture(t.Context(), task); !errors.Is(err, fallback.ErrLater) {
		t.Fatalf("first try: %v; want later", err)
	}
	ding.set(payrouter.OpCapture, lookedUp(payrouter.TxCaptured))
	if err := f.settler.workCapture(t.Context(), task); err != nil {
		t.Fatalf("second try: %v", err)
	}
	f.settledAs(t, "ding", "ch_test-a2", false, []string{"ch_test-a1"})
	if got := f.gw.Calls(); !slices.Equal(got, []string{"status:ch_test-a1", "void:ch_test-a1-void"}) {
		t.Errorf("paywell calls %v; want one look-up and one void", got)
	}
	if got := ding.Calls(); !slices.Equal(got, []string{"capture:ch_test-a2-capture", "capture:ch_test-a2-capture"}) {
		t.Errorf("ding calls %v; want the capture sent twice with one reference", got)
	}
}

// TestSettleReconcilesAHedgedChargeLeftProcessing: a hedged charge whose instance died with its
// sale and its hedge in flight is stored processing, naming the hedge. The reconciler looks the
// sale up first: a sale that captured is the charge, and the hedge is rechecked (released);
// only a sale that holds nothing lets the hedge be captured.
func TestSettleReconcilesAHedgedChargeLeftProcessing(t *testing.T) {
	cases := []struct {
		name    string
		sale    payrouter.TxState
		gateway string
		ding    []string
		tasks   []string
	}{
		{"the sale captured", payrouter.TxCaptured, "paywell", nil, []string{"recheck ding ch_test-a2"}},
		{"the sale not found", payrouter.TxNotFound, "ding", []string{"status:ch_test-a2", "capture:ch_test-a2-capture"},
			[]string{"recheck paywell ch_test-a1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newOpsFixture(t)
			ding := withHedgedRoute(t, f)
			c := &payrouter.Charge{
				ID: "ch_test", Status: payrouter.StatusProcessing, Amount: 1999, Currency: "USD", Capture: true,
				Gateway: "ding", Reference: "ch_test-a2",
				Attempts:  []payrouter.Attempt{{Gateway: "paywell", Reference: "ch_test-a1", Sale: true}},
				CreatedAt: f.now, UpdatedAt: f.now,
			}
			if err := f.store.SaveCharge(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			f.now = f.now.Add(time.Minute)
			f.gw.set(payrouter.OpStatus, payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: tc.sale, GatewayReference: "gw_1"})
			ding.set(payrouter.OpStatus, payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxAuthorized, GatewayReference: "gw_2"})
			c, err := f.settler.Get(t.Context(), "ch_test")
			if err != nil {
				t.Fatal(err)
			}
			if answered, err := f.settler.ResolveProcessing(t.Context(), c); !answered || err != nil {
				t.Fatalf("answered %v, err %v", answered, err)
			}
			got := f.stored(t)
			if got.Status != payrouter.StatusSucceeded || got.Gateway != tc.gateway {
				t.Errorf("stored %s at %s; want succeeded at %s", got.Status, got.Gateway, tc.gateway)
			}
			if got := ding.Calls(); !slices.Equal(got, tc.ding) {
				t.Errorf("ding calls %v; want %v", got, tc.ding)
			}
			if got := f.otherTasks(payrouter.Task{}); !slices.Equal(got, tc.tasks) {
				t.Errorf("tasks %v; want %v", got, tc.tasks)
			}
		})
	}
}

// TestHedgedSaleLosesToTheHedgeAndIsKept: POST /charge on a hedged route, end to end in
// process: paywell's sale is slow, ding's authorization answers at the hedge delay and the charge
// is answered succeeded at ding; the sale then captures, so the charge is kept at paywell and
// ding's authorization voided. Captured once, and no look-up was needed.
func TestHedgedSaleLosesToTheHedgeAndIsKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newOpsFixture(t)
		ding := withHedgedRoute(t, f)
		release := make(chan struct{})
		f.gw.onAuthorize = func() { <-release }
		f.gw.authorize = payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxCaptured, GatewayReference: "gw_1"}
		ding.authorize = payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxAuthorized, GatewayReference: "gw_2"}
		c := &payrouter.Charge{ID: "ch_test", Owner: "shop", Amount: 1999, Currency: "USD", Capture: true,
			PaymentMethod: payrouter.PaymentMethod{Type: "card", Token: "tok_visa"}}
		a, err := f.settler.CreateCharge(t.Context(), Request{Scope: "shop", Key: "order-1", Fingerprint: "fp"}, c, renderCharge)
		if err != nil || a.Status != 201 {
			t.Fatalf("answer %d %s, %v; want 201 succeeded", a.Status, a.Body, err)
		}
		if s := f.stored(t); s.Gateway != "ding" || !s.CaptureQueued {
			t.Errorf("answered at %s, capture queued %v; want ding, its capture queued", s.Gateway, s.CaptureQueued)
		}
		close(release)
		f.settler.router.Wait()
		f.settler.Wait()
		f.settledAs(t, "paywell", "ch_test-a1", false, []string{"ch_test-a2"})
		if got := ding.Calls(); !slices.Equal(got, []string{"authorize:ch_test-a2", "void:ch_test-a2-void"}) {
			t.Errorf("ding calls %v; want its authorization, then its void", got)
		}
		if got := f.gw.Calls(); !slices.Equal(got, []string{"authorize:ch_test-a1"}) {
			t.Errorf("paywell calls %v; want the sale alone", got)
		}
		if left := f.store.Tasks(); len(left) != 1 || left[0].Kind != payrouter.TaskRecheck {
			t.Errorf("tasks left %+v; want the sale's recheck alone (it finds the sale kept)", left)
		}
	})
}
