package routing

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
)

// savingKeeper is storeKeeper that records what each save before a gateway call named.
type savingKeeper struct {
	*storeKeeper
	mu    sync.Mutex
	saves []string
}

func (k *savingKeeper) SaveCharge(ctx context.Context, c *payrouter.Charge) error {
	k.mu.Lock()
	k.saves = append(k.saves, c.Gateway+" "+c.Reference)
	k.mu.Unlock()
	return k.storeKeeper.SaveCharge(ctx, c)
}

func (k *savingKeeper) got() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.saves...)
}

// claimed plans c on r and stores it as the plan left it, as the claim of its key does
// (payrouter.Store.ClaimCharge), and returns the plan with Stored set.
func claimed(t *testing.T, r *Router, store payrouter.ChargeStore, c *payrouter.Charge) *Plan {
	t.Helper()
	plan, err := r.Plan(c)
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != payrouter.StatusProcessing || c.Gateway != "paywell" || c.Reference != "ch_test-a1" {
		t.Fatalf("planned %s at %q (%s); want processing, naming paywell and ch_test-a1", c.Status, c.Gateway, c.Reference)
	}
	if err := store.SaveCharge(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	plan.Stored = true
	return plan
}

// TestStoredPlanSavesOnlyForAnotherGateway (issue 21): a charge the claim of its key stored as
// planned goes to its first gateway with no save of its own; a failover still saves before the
// next call, naming it; and when no gateway was called at all, the charge, which exists, is the
// caller's to store as failed.
func TestStoredPlanSavesOnlyForAnotherGateway(t *testing.T) {
	t.Run("the first gateway answers", func(t *testing.T) {
		f := newFixture(t)
		keep := &savingKeeper{storeKeeper: f.keep}
		c := newCharge()
		ch, err := f.router.Run(t.Context(), claimed(t, f.router, f.store, c), c, keep)
		if err != nil || ch.Status != payrouter.StatusSucceeded || ch.Gateway != "paywell" {
			t.Fatalf("%+v, %v; want succeeded at paywell", ch, err)
		}
		if s := keep.got(); len(s) != 0 {
			t.Errorf("saves before calls %v; want none", s)
		}
	})
	t.Run("a failover saves before its call", func(t *testing.T) {
		f := newFixture(t)
		f.gw["paywell"].authorize = unavailable
		keep := &savingKeeper{storeKeeper: f.keep}
		c := newCharge()
		ch, err := f.router.Run(t.Context(), claimed(t, f.router, f.store, c), c, keep)
		if err != nil || ch.Status != payrouter.StatusSucceeded || ch.Gateway != "ding" {
			t.Fatalf("%+v, %v; want succeeded at ding", ch, err)
		}
		if s := keep.got(); len(s) != 1 || s[0] != "ding ch_test-a2" {
			t.Errorf("saves before calls %v; want [ding ch_test-a2]", s)
		}
	})
	t.Run("no gateway called", func(t *testing.T) {
		f := newFixture(t)
		for _, name := range []string{"paywell", "ding", "tranglo"} {
			f.dom.Breaker(name, payrouter.OpCharge).Force(payrouter.ForcedOpen)
		}
		keep := &savingKeeper{storeKeeper: f.keep}
		c := newCharge()
		ch, err := f.router.Run(t.Context(), claimed(t, f.router, f.store, c), c, keep)
		var u *fallback.Unavailable
		if !errors.As(err, &u) || u.ChargeID != "ch_test" {
			t.Fatalf("err %v; want the fallback's, naming the stored charge", err)
		}
		if final := FinalState(ch, err); final == nil || final.Status != payrouter.StatusFailed || final.Gateway != "" {
			t.Errorf("FinalState = %+v; want the charge, failed, naming no gateway", final)
		}
		if s := keep.got(); len(s) != 0 {
			t.Errorf("saves before calls %v; want none", s)
		}
	})
}

// TestStoredPlanHedged: on a hedged route the first flight, named by the plan, makes no save;
// the hedge saves before its call, naming itself.
func TestStoredPlanHedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHedgeFixture(t)
		slow := make(chan struct{})
		f.gw["paywell"].hold = slow
		keep := &savingKeeper{storeKeeper: f.keep}
		c := newCharge()
		ch, err := f.router.Run(t.Context(), claimed(t, f.router, f.store, c), c, keep)
		if err != nil || ch.Status != payrouter.StatusSucceeded || ch.Gateway != "ding" {
			t.Fatalf("%+v, %v; want succeeded at ding, the hedge", ch, err)
		}
		if s := keep.got(); len(s) != 1 || s[0] != "ding ch_test-a2" {
			t.Errorf("saves before calls %v; want [ding ch_test-a2]", s)
		}
		close(slow)
		f.router.late.Wait()
	})
}
