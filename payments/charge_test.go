package payments

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/memstore"
)

// TestChargeAskedAgainAfterItsInstanceDied: the instance running a charge died mid-call, its
// Idempotency-Key came free, and the storefront sent the charge again: the same key gives the
// same charge id, so the charge the gateway may have approved is answered, never sent twice.
func TestChargeAskedAgainAfterItsInstanceDied(t *testing.T) {
	again := func() *payrouter.Charge {
		return &payrouter.Charge{ID: "ch_test", Amount: 1999, Currency: "USD", Capture: true,
			PaymentMethod: payrouter.PaymentMethod{Type: "card", Token: "tok_visa"}}
	}
	t.Run("stopped mid-call, approved meanwhile", func(t *testing.T) {
		f := newOpsFixture(t)
		f.charge(t, payrouter.StatusProcessing)
		f.gw.set(payrouter.OpStatus, payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxCaptured, GatewayReference: "gw_late"})
		c, err := f.askAgain(t, again())
		if err != nil || c.Status != payrouter.StatusSucceeded || c.GatewayReference != "gw_late" {
			t.Fatalf("charge asked again: %+v, %v; want the first one, succeeded at gw_late", c, err)
		}
		for _, call := range f.gw.Calls() {
			if strings.HasPrefix(call, "authorize:") {
				t.Errorf("gateway called again: %s", call)
			}
		}
	})
	t.Run("no gateway took it: run again with new references", func(t *testing.T) {
		f := newOpsFixture(t)
		f.charge(t, payrouter.StatusFailed, func(c *payrouter.Charge) {
			c.Attempts = []payrouter.Attempt{{Gateway: "paywell", Outcome: payrouter.OutcomeUnavailable, Reference: "ch_test-a1"}}
		})
		f.gw.authorize = payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxCaptured, GatewayReference: "gw_2"}
		c, err := f.askAgain(t, again())
		if err != nil || c.Status != payrouter.StatusSucceeded {
			t.Fatalf("charge asked again: %+v, %v; want it run again and succeeded", c, err)
		}
		if got := f.gw.Calls(); len(got) != 1 || got[0] != "authorize:ch_test-a2" {
			t.Errorf("paywell calls %v; want [authorize:ch_test-a2] (a reference not used before)", got)
		}
	})
	t.Run("same key, another amount", func(t *testing.T) {
		f := newOpsFixture(t)
		f.charge(t, payrouter.StatusSucceeded, func(c *payrouter.Charge) { c.Amount = 5 })
		if _, err := f.askAgain(t, again()); payrouter.Code(err) != payrouter.EMismatch {
			t.Errorf("err %v; want %s", err, payrouter.EMismatch)
		}
	})
}

// askAgain sends c as CreateCharge does, under a key of its own: planned, claimed with the
// charge (payrouter.Store.ClaimCharge), run.
func (f *opsFixture) askAgain(t *testing.T, c *payrouter.Charge) (*payrouter.Charge, error) {
	t.Helper()
	plan, err := f.settler.router.Plan(c)
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := f.store.ClaimCharge(t.Context(), "shop", "again-"+t.Name(), "fp", time.Minute, c)
	if err != nil || !claimed.Hold.Held() {
		t.Fatalf("ClaimCharge: %+v, %v; want the key claimed", claimed, err)
	}
	if claimed.Stored || claimed.Prev == nil {
		t.Fatalf("ClaimCharge: %+v; want the charge stored before returned, c not stored", claimed)
	}
	return f.settler.Charge(t.Context(), plan, c, claimed)
}

// TestQueuedVoidIsSent: a void of an approval no charge keeps, queued because the gateway did
// not take it, is sent by the queue's worker once it does.
func TestQueuedVoidIsSent(t *testing.T) {
	f := newOpsFixture(t)
	stray := payrouter.AttemptReference("ch_test", 2)
	c := f.charge(t, payrouter.StatusSucceeded, func(c *payrouter.Charge) {
		c.Attempts = append(c.Attempts, payrouter.Attempt{Gateway: "paywell", Outcome: payrouter.OutcomeSucceeded, Reference: stray, Hedge: true})
	})
	f.gw.set(payrouter.OpStatus, payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxAuthorized, GatewayReference: "gw_stray"})
	f.settler.ReleaseLater(t.Context(), payrouter.TaskVoid, c, "paywell", stray, "gw_stray", 0)
	for _, err := range f.work(t) {
		if err != nil {
			t.Fatalf("the void task: %v", err)
		}
	}
	want := "void:" + payrouter.OperationReference(stray, payrouter.OpVoid)
	if got := f.gw.Calls(); len(got) != 2 || got[1] != want {
		t.Errorf("gateway calls %v; want the look-up, then %s", got, want)
	}
	if n, _ := f.store.QueueDepth(t.Context()); n != 0 {
		t.Errorf("%d tasks left; want the void done and acknowledged", n)
	}
}

// TestReleaseWaitsForItsChargeToBeDecided is the chaos check's finding: a hedged charge names
// its last flight while it is processing, so a recheck of that flight that ran before the
// charge's answer was stored found it "kept" and was dropped, and the flight's late approval
// held the money for good. A recheck now waits while its charge is processing, then releases an
// attempt the decided charge does not keep.
func TestReleaseWaitsForItsChargeToBeDecided(t *testing.T) {
	f := newOpsFixture(t)
	hedge := payrouter.AttemptReference("ch_test", 2)
	c := f.charge(t, payrouter.StatusProcessing, func(c *payrouter.Charge) {
		c.Reference = hedge
		c.Attempts = append(c.Attempts, payrouter.Attempt{Gateway: "paywell", Reference: hedge, Hedge: true})
	})
	f.gw.set(payrouter.OpStatus, payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxAuthorized, GatewayReference: "gw_hedge"})
	task := payrouter.Task{Kind: payrouter.TaskRecheck, Gateway: "paywell", ChargeID: c.ID, Reference: hedge}
	if err := work(f.settler, t.Context(), task); !errors.Is(err, fallback.ErrLater) {
		t.Fatalf("a recheck of the attempt a processing charge names: %v, want it left for later", err)
	}
	if calls := f.gw.Calls(); len(calls) != 0 {
		t.Fatalf("gateway calls %v while the charge is processing; want none", calls)
	}
	c = f.stored(t)
	c.Status, c.Reference = payrouter.StatusSucceeded, "ch_test-a1" // decided on the primary
	if err := f.store.SaveCharge(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	if err := work(f.settler, t.Context(), task); err != nil {
		t.Fatalf("the recheck once the charge is decided: %v", err)
	}
	want := "void:" + payrouter.OperationReference(hedge, payrouter.OpVoid)
	if calls := f.gw.Calls(); len(calls) != 2 || calls[1] != want {
		t.Errorf("gateway calls %v; want the look-up, then %s", calls, want)
	}
}

// countingStore counts the money-state writes and reads a charge makes, by method.
type countingStore struct {
	*memstore.Store
	mu    sync.Mutex
	calls map[string]int
}

func (s *countingStore) count(method string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[method]++
}

func (s *countingStore) Claim(ctx context.Context, owner, key, fp string, holdFor time.Duration) (*payrouter.IdempotencyRecord, payrouter.Hold, error) {
	s.count("Claim")
	return s.Store.Claim(ctx, owner, key, fp, holdFor)
}

func (s *countingStore) ClaimCharge(ctx context.Context, owner, key, fp string, holdFor time.Duration, c *payrouter.Charge) (payrouter.Claimed, error) {
	s.count("ClaimCharge")
	return s.Store.ClaimCharge(ctx, owner, key, fp, holdFor, c)
}

func (s *countingStore) SaveCharge(ctx context.Context, c *payrouter.Charge) error {
	s.count("SaveCharge")
	return s.Store.SaveCharge(ctx, c)
}

func (s *countingStore) Charge(ctx context.Context, id string) (*payrouter.Charge, error) {
	s.count("Charge")
	return s.Store.Charge(ctx, id)
}

func (s *countingStore) CompleteCharge(ctx context.Context, c *payrouter.Charge, h payrouter.Hold, rec payrouter.IdempotencyRecord, ttl time.Duration) error {
	s.count("CompleteCharge")
	return s.Store.CompleteCharge(ctx, c, h, rec, ttl)
}

// TestNewChargeTakesTwoStoreCalls (issue 21): a charge its gateway answers costs the money
// state two calls, one round trip each on PostgreSQL: the key claimed with the charge stored as
// processing before the gateway call (ClaimCharge), the final state with the key's answer after
// (CompleteCharge). A replay of its key costs one call, which writes nothing.
func TestNewChargeTakesTwoStoreCalls(t *testing.T) {
	f := newOpsFixture(t, withKeys)
	store := &countingStore{Store: f.store, calls: map[string]int{}}
	f.settler.keys, f.settler.charges = store, store
	f.gw.authorize = payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxCaptured, GatewayReference: "gw_1"}
	r := Request{Scope: "shop", Key: "order-1", Fingerprint: "fp"}
	newCharge := func() *payrouter.Charge {
		return &payrouter.Charge{ID: "ch_test", Owner: "shop", Amount: 1999, Currency: "USD", Capture: true,
			PaymentMethod: payrouter.PaymentMethod{Type: "card", Token: "tok_visa"}}
	}
	a, err := f.settler.CreateCharge(t.Context(), r, newCharge(), renderCharge)
	if err != nil || a.Status != 201 {
		t.Fatalf("the charge: %d %s, %v", a.Status, a.Body, err)
	}
	if want := map[string]int{"ClaimCharge": 1, "CompleteCharge": 1}; !maps.Equal(store.calls, want) {
		t.Errorf("a charge made store calls %v; want %v", store.calls, want)
	}
	if got := f.gw.Calls(); len(got) != 1 || got[0] != "authorize:ch_test-a1" {
		t.Errorf("gateway calls %v; want [authorize:ch_test-a1]", got)
	}
	if c := f.stored(t); c.Status != payrouter.StatusSucceeded || c.Stored.Version != 2 {
		t.Errorf("stored %s at version %d; want succeeded at 2 (claimed, completed)", c.Status, c.Stored.Version)
	}

	clear(store.calls)
	a, err = f.settler.CreateCharge(t.Context(), r, newCharge(), renderCharge)
	if err != nil || !a.Replayed {
		t.Fatalf("the replay: %d %s, %v", a.Status, a.Body, err)
	}
	// The replay renders the charge as it stands now: one read more.
	if want := map[string]int{"ClaimCharge": 1, "Charge": 1}; !maps.Equal(store.calls, want) {
		t.Errorf("a replay made store calls %v; want %v", store.calls, want)
	}
}

// TestNoteLateAnswerWaitsForTheAnswer: a hedge's loser voided before its charge's answer is
// stored is noted once the answer is, so that its recheck finds it voided with no look-up.
func TestNoteLateAnswerWaitsForTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newOpsFixture(t)
		c := f.charge(t, payrouter.StatusProcessing, func(c *payrouter.Charge) {
			c.Attempts = append(c.Attempts, payrouter.Attempt{Gateway: "ding", Outcome: payrouter.OutcomeUnknown, Reference: "ch_test-a2", Hedge: true})
		})
		done := make(chan error)
		go func() {
			done <- f.settler.NoteLateAnswer(t.Context(), "ch_test", "ch_test-a2",
				payrouter.Attempt{Gateway: "ding", Outcome: payrouter.OutcomeSucceeded, Duration: time.Second, Reference: "ch_test-a2", Voided: true})
		}()
		synctest.Wait() // the note waits: the answer is stored after the late answer came
		c.Status = payrouter.StatusSucceeded
		if err := f.store.SaveCharge(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if at := f.stored(t).Attempts[1]; !at.Voided || at.Outcome != payrouter.OutcomeSucceeded {
			t.Errorf("attempt noted %+v; want its approval, voided", at)
		}
	})
}

// TestRecheckOfAnAttemptNeverSent: a hedge abandoned before it was sent (its charge was decided
// first) is recorded with no reference, and its recheck ends at once, with no look-up: asking
// would find it not found, again and again for RecheckFor.
func TestRecheckOfAnAttemptNeverSent(t *testing.T) {
	f := newOpsFixture(t)
	f.charge(t, payrouter.StatusSucceeded, func(c *payrouter.Charge) {
		c.Attempts = append(c.Attempts, payrouter.Attempt{Gateway: "paywell", Outcome: payrouter.OutcomeError, Hedge: true})
	})
	task := payrouter.Task{Kind: payrouter.TaskRecheck, Gateway: "paywell", ChargeID: "ch_test", Reference: "ch_test-a2", CreatedAt: f.now}
	if err := work(f.settler, t.Context(), task); err != nil {
		t.Fatalf("recheck of an attempt never sent: %v", err)
	}
	if calls := f.gw.Calls(); len(calls) != 0 {
		t.Errorf("gateway calls %v; want none", calls)
	}
}
