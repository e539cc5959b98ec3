package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// The money rules as store transitions (docs/architecture.md, One owner for a charge's life):
// every write is conditional on the version its writer read, a refund moves with its charge, and
// each change writes its events. The racing tests run writers the way payrouter's are (read,
// decide by the charge's rules, write, and on ErrStale read again) and check the invariants a
// storefront relies on after every run.

// owner is the scope of the money tests' charges; otherOwner another key's.
const (
	owner      = "scope_shop_eu"
	otherOwner = "scope_shop_us"
)

// capturedCharge stores a new succeeded charge of amount and returns it as stored.
func capturedCharge(t *testing.T, s payrouter.Store, id string, amount int64) *payrouter.Charge {
	t.Helper()
	c := &payrouter.Charge{ID: id, Status: payrouter.StatusProcessing, Amount: amount, Currency: "USD", Owner: owner,
		Gateway: "paywell", Reference: payrouter.AttemptReference(id, 1), CreatedAt: base}
	mustSave(t, s, c)
	c.Status = payrouter.StatusSucceeded
	mustSave(t, s, c)
	return mustGet(t, s, id)
}

// reserveRefund makes refund id of amount (0: all that is left) of a charge, as payrouter does
// before sending one: read, reserve by the charge's rule, write with its task; on ErrStale again.
// The error is the rule's (EState) when it does not fit.
func reserveRefund(ctx context.Context, s payrouter.Store, chargeID, id string, amount int64) (*payrouter.Refund, error) {
	for {
		c, err := s.Charge(ctx, chargeID)
		if err != nil {
			return nil, err
		}
		if _, err := s.Refund(ctx, id); err == nil {
			return nil, fmt.Errorf("refund %s: %w", id, errExists)
		}
		reserved, err := c.ReserveRefund(amount)
		if err != nil {
			return nil, err
		}
		rf := &payrouter.Refund{ID: id, ChargeID: c.ID, Amount: reserved, Currency: c.Currency, Status: payrouter.RefundPending,
			Gateway: c.Gateway, Owner: c.Owner, Reference: payrouter.RefundReference(id), CreatedAt: base, UpdatedAt: base}
		task := payrouter.Task{Kind: payrouter.TaskRefund, Gateway: rf.Gateway, ChargeID: c.ID, RefundID: id, Amount: reserved,
			Currency: c.Currency, NotBefore: time.Now().Add(time.Hour), CreatedAt: base}
		err = s.ChangeRefund(ctx, payrouter.RefundChange{Refund: rf, Charge: c, Task: &task})
		if errors.Is(err, payrouter.ErrStale) {
			continue
		}
		return rf, err
	}
}

var errExists = errors.New("exists already")

// endRefund moves refund id to succeeded (the gateway applied it) or failed, with its charge, as
// payrouter does; a refund ended already is left as it is. It reports whether this call ended it.
func endRefund(ctx context.Context, s payrouter.Store, id string, applied bool) (bool, error) {
	for {
		rf, err := s.Refund(ctx, id)
		if err != nil {
			return false, err
		}
		if rf.Status == payrouter.RefundSucceeded || rf.Status == payrouter.RefundFailed {
			return false, nil
		}
		c, err := s.Charge(ctx, rf.ChargeID)
		if err != nil {
			return false, err
		}
		next := *rf
		if applied {
			next.Status = payrouter.RefundSucceeded
			c.RefundApplied(rf.Amount)
		} else {
			next.Status, next.Detail = payrouter.RefundFailed, "declined"
			c.RefundReleased(rf.Amount)
		}
		err = s.ChangeRefund(ctx, payrouter.RefundChange{Refund: &next, From: rf.Status, Charge: c})
		if errors.Is(err, payrouter.ErrStale) {
			continue
		}
		return err == nil, err
	}
}

// allEvents pages through owner's events one page of n at a time.
func allEvents(t *testing.T, s payrouter.Store, owner string, n int) []payrouter.Event {
	t.Helper()
	var out []payrouter.Event
	after := ""
	for range 10_000 {
		page, more, err := s.Events(t.Context(), owner, after, n)
		if err != nil {
			t.Fatalf("Events(%s after %q): %v", owner, after, err)
		}
		out = append(out, page...)
		if !more {
			return out
		}
		if len(page) == 0 {
			t.Fatalf("Events(%s after %q) said more, and listed none", owner, after)
		}
		after = page[len(page)-1].ID
	}
	t.Fatal("Events never said there were no more")
	return nil
}

func eventTypes(evs []payrouter.Event) []payrouter.EventType {
	out := make([]payrouter.EventType, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// checkRefundInvariants checks what a storefront relies on for a charge and its refunds: what
// the succeeded refunds add up to is the charge's refunded amount, what the pending and queued
// ones add up to is its reservations, and together they never exceed what it captured.
func checkRefundInvariants(t *testing.T, s payrouter.Store, chargeID string, refundIDs []string) (succeeded, reserved int64) {
	t.Helper()
	c := mustGet(t, s, chargeID)
	for _, id := range refundIDs {
		rf, err := s.Refund(t.Context(), id)
		if errors.Is(err, payrouter.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("Refund(%s): %v", id, err)
		}
		switch rf.Status {
		case payrouter.RefundSucceeded:
			succeeded += rf.Amount
		case payrouter.RefundPending, payrouter.RefundQueued:
			reserved += rf.Amount
		}
	}
	if c.Refunded != succeeded {
		t.Errorf("charge %s shows %d refunded; its succeeded refunds add up to %d", chargeID, c.Refunded, succeeded)
	}
	if c.RefundsReserved != reserved {
		t.Errorf("charge %s reserves %d; its pending and queued refunds add up to %d", chargeID, c.RefundsReserved, reserved)
	}
	if succeeded+reserved > c.Amount {
		t.Errorf("charge %s of %d has %d refunded and %d reserved: more than it captured", chargeID, c.Amount, succeeded, reserved)
	}
	return succeeded, reserved
}

// testVersions: a write from a version that is not the stored one is refused, and changes
// nothing; a new charge whose id is taken is refused.
func testVersions(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	c := newCharge("ch_v", payrouter.StatusProcessing, base)
	c.Refunded, c.RefundsReserved = 0, 0
	mustSave(t, s, c)
	if c.Stored.Version != 1 || c.Stored.Status != payrouter.StatusProcessing {
		t.Fatalf("a new charge after SaveCharge has Stored %+v, want version 1, processing", c.Stored)
	}
	a, b := mustGet(t, s, "ch_v"), mustGet(t, s, "ch_v")
	if a.Stored.Version != 1 {
		t.Fatalf("Charge(ch_v).Stored = %+v, want version 1", a.Stored)
	}
	a.Status = payrouter.StatusSucceeded
	mustSave(t, s, a)
	b.Status = payrouter.StatusFailed
	if err := s.SaveCharge(ctx, b); !errors.Is(err, payrouter.ErrStale) {
		t.Fatalf("SaveCharge from version 1 after another writer wrote version 2 = %v, want ErrStale", err)
	}
	if got := mustGet(t, s, "ch_v"); got.Status != payrouter.StatusSucceeded || got.Stored.Version != 2 {
		t.Errorf("after a refused write: %s at version %d, want succeeded at 2", got.Status, got.Stored.Version)
	}
	again := newCharge("ch_v", payrouter.StatusProcessing, base)
	if err := s.SaveCharge(ctx, again); !errors.Is(err, payrouter.ErrStale) {
		t.Errorf("SaveCharge of a new charge whose id is taken = %v, want ErrStale", err)
	}
	h := mustClaimNew(t, s, "k-versions", fpA)
	b.Hold = h
	if err := s.CompleteCharge(ctx, b, h, newRecord(fpA), longTTL); !errors.Is(err, payrouter.ErrStale) {
		t.Errorf("CompleteCharge from an old version = %v, want ErrStale", err)
	}
	if rec, err := s.Peek(ctx, "k-versions", fpA); !errors.Is(err, payrouter.ErrInFlight) {
		t.Errorf("the key of a refused CompleteCharge: %+v, %v; want it still held, not completed", rec, err)
	}
	if evs := allEvents(t, s, owner, 10); len(evs) != 1 || evs[0].Type != payrouter.EventChargeSucceeded {
		t.Errorf("events after one accepted and two refused writes: %v, want [charge.succeeded]", eventTypes(evs))
	}
}

// testRefundsFit: whatever computed it, a write whose refunds, applied and reserved, exceed what
// the charge captured is refused by the store itself, and changes nothing.
func testRefundsFit(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	over := &payrouter.Charge{ID: "ch_fit_new", Status: payrouter.StatusSucceeded, Amount: 100, Currency: "USD", Owner: owner, Refunded: 101, CreatedAt: base}
	if err := s.SaveCharge(ctx, over); !errors.Is(err, payrouter.ErrStale) {
		t.Errorf("a new charge refunded beyond its amount: %v, want it refused", err)
	}
	c := capturedCharge(t, s, "ch_fit", 1000)
	c.RefundsReserved = 1001
	if err := s.SaveCharge(ctx, c); !errors.Is(err, payrouter.ErrStale) {
		t.Errorf("reserving 1001 of 1000: %v, want it refused", err)
	}
	c = mustGet(t, s, "ch_fit")
	c.Refunded, c.RefundsReserved = 600, 401
	rf := &payrouter.Refund{ID: "re_fit", ChargeID: c.ID, Amount: 401, Currency: "USD", Status: payrouter.RefundPending, Owner: owner}
	if err := s.ChangeRefund(ctx, payrouter.RefundChange{Refund: rf, Charge: c}); !errors.Is(err, payrouter.ErrStale) {
		t.Errorf("a refund change leaving 1001 of 1000 refunded or reserved: %v, want it refused", err)
	}
	if _, err := s.Refund(ctx, "re_fit"); !errors.Is(err, payrouter.ErrNotFound) {
		t.Errorf("the refused refund was stored: %v", err)
	}
	if got := mustGet(t, s, "ch_fit"); got.Refunded != 0 || got.RefundsReserved != 0 {
		t.Errorf("after refused writes the charge has %d refunded, %d reserved; want none", got.Refunded, got.RefundsReserved)
	}
	c = mustGet(t, s, "ch_fit")
	c.Refunded, c.RefundsReserved = 600, 400
	if err := s.SaveCharge(ctx, c); err != nil {
		t.Errorf("1000 of 1000 refunded or reserved: %v, want it written", err)
	}
}

// testEvents: each change writes its events, with the object as written, listed per owner
// oldest first, paged without a miss or a repeat.
func testEvents(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	c := capturedCharge(t, s, "ch_ev", 1000)
	auth := &payrouter.Charge{ID: "ch_ev_auth", Status: payrouter.StatusProcessing, Amount: 300, Currency: "USD", Owner: owner, CreatedAt: base}
	mustSave(t, s, auth)
	auth.Status = payrouter.StatusRequiresCapture
	mustSave(t, s, auth)
	auth.Status = payrouter.StatusVoided
	mustSave(t, s, auth)
	if _, err := reserveRefund(ctx, s, c.ID, "re_ev_1", 400); err != nil {
		t.Fatal(err)
	}
	if _, err := reserveRefund(ctx, s, c.ID, "re_ev_2", 100); err != nil {
		t.Fatal(err)
	}
	for id, applied := range map[string]bool{"re_ev_1": true, "re_ev_2": false} {
		if _, err := endRefund(ctx, s, id, applied); err != nil {
			t.Fatal(err)
		}
	}
	other := &payrouter.Charge{ID: "ch_ev_other", Status: payrouter.StatusProcessing, Amount: 5, Currency: "USD", Owner: otherOwner, CreatedAt: base}
	mustSave(t, s, other)
	other.Status = payrouter.StatusDeclined
	mustSave(t, s, other)

	evs := allEvents(t, s, owner, 100)
	got := eventTypes(evs)
	want := []payrouter.EventType{payrouter.EventChargeSucceeded, payrouter.EventChargeRequiresCapture, payrouter.EventChargeVoided}
	// The two refunds' ends, in the order they were written.
	if len(got) != 6 {
		t.Fatalf("events = %v; want %v and refund.succeeded, charge.refunded, refund.failed", got, want)
	}
	for i, w := range want {
		if got[i] != w {
			t.Fatalf("events = %v; want %v first", got, want)
		}
	}
	counts := map[payrouter.EventType]int{}
	for _, e := range evs[3:] {
		counts[e.Type]++
	}
	if counts[payrouter.EventRefundSucceeded] != 1 || counts[payrouter.EventChargeRefunded] != 1 || counts[payrouter.EventRefundFailed] != 1 {
		t.Errorf("refund events %v; want one refund.succeeded, one charge.refunded, one refund.failed", got[3:])
	}
	seen := map[string]bool{}
	for _, e := range evs {
		if seen[e.ID] || len(e.ID) < 8 || e.ID[:4] != "evt_" {
			t.Errorf("event id %q repeated or not evt_...", e.ID)
		}
		seen[e.ID] = true
		if e.CreatedAt.IsZero() || e.Owner != owner {
			t.Errorf("event %s: created %v, owner %q", e.ID, e.CreatedAt, e.Owner)
		}
		switch {
		case e.Type.OfRefund() && (e.Refund == nil || e.Charge != nil):
			t.Errorf("%s event %s carries no refund", e.Type, e.ID)
		case !e.Type.OfRefund() && (e.Charge == nil || e.Refund != nil):
			t.Errorf("%s event %s carries no charge", e.Type, e.ID)
		case e.Type == payrouter.EventChargeRefunded && (e.Charge.Refunded != 400 || e.Charge.Status != payrouter.StatusPartiallyRefunded):
			t.Errorf("charge.refunded shows the charge %s with %d refunded, want partially_refunded with 400", e.Charge.Status, e.Charge.Refunded)
		case e.Type == payrouter.EventRefundSucceeded && (e.Refund.ID != "re_ev_1" || e.Refund.Status != payrouter.RefundSucceeded):
			t.Errorf("refund.succeeded shows %+v, want re_ev_1 succeeded", e.Refund)
		case e.Type == payrouter.EventChargeVoided && e.Charge.ID != "ch_ev_auth":
			t.Errorf("charge.voided shows %s", e.Charge.ID)
		}
	}
	for _, n := range []int{1, 2, 5} {
		paged := allEvents(t, s, owner, n)
		if fmt.Sprint(eventTypes(paged)) != fmt.Sprint(got) || paged[len(paged)-1].ID != evs[len(evs)-1].ID {
			t.Errorf("paged %d at a time: %v, want %v", n, eventTypes(paged), got)
		}
	}
	if evs := allEvents(t, s, otherOwner, 10); len(evs) != 1 || evs[0].Type != payrouter.EventChargeDeclined {
		t.Errorf("the other owner's events: %v, want [charge.declined] only", eventTypes(evs))
	}
	if _, _, err := s.Events(ctx, otherOwner, evs[0].ID, 10); !errors.Is(err, payrouter.ErrNotFound) {
		t.Errorf("Events after another owner's event = %v, want ErrNotFound", err)
	}
	if _, _, err := s.Events(ctx, owner, "evt_NOSUCHEVENT", 10); !errors.Is(err, payrouter.ErrNotFound) {
		t.Errorf("Events after an unknown event = %v, want ErrNotFound", err)
	}
	if page, more, err := s.Events(ctx, owner, evs[len(evs)-1].ID, 10); err != nil || more || len(page) != 0 {
		t.Errorf("Events after the last one = %d, %v, %v; want none", len(page), more, err)
	}
}

// testRefundChangeAtomic: a refund change whose charge or refund moved meanwhile writes nothing:
// not the refund, not the charge, not the task, not an event.
func testRefundChangeAtomic(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	c := capturedCharge(t, s, "ch_atomic", 1000)
	old := *c
	if _, err := reserveRefund(ctx, s, c.ID, "re_atomic_1", 100); err != nil {
		t.Fatal(err)
	}
	depth, _ := s.QueueDepth(ctx)
	// A writer that read the charge before the first refund.
	rf := &payrouter.Refund{ID: "re_atomic_2", ChargeID: c.ID, Amount: 950, Currency: "USD", Status: payrouter.RefundPending, Owner: owner}
	if _, err := old.ReserveRefund(950); err != nil {
		t.Fatal(err)
	}
	task := payrouter.Task{Kind: payrouter.TaskRefund, Gateway: "paywell", ChargeID: c.ID, RefundID: rf.ID}
	if err := s.ChangeRefund(ctx, payrouter.RefundChange{Refund: rf, Charge: &old, Task: &task}); !errors.Is(err, payrouter.ErrStale) {
		t.Fatalf("ChangeRefund from an old version of its charge = %v, want ErrStale", err)
	}
	if _, err := s.Refund(ctx, "re_atomic_2"); !errors.Is(err, payrouter.ErrNotFound) {
		t.Errorf("the refused refund was stored: %v", err)
	}
	if d, _ := s.QueueDepth(ctx); d != depth {
		t.Errorf("queue depth %d after a refused refund change, want %d: its task was queued", d, depth)
	}
	checkRefundInvariants(t, s, c.ID, []string{"re_atomic_1", "re_atomic_2"})

	// The same refund made twice: the second is refused, and the charge reserves it once.
	if _, err := reserveRefund(ctx, s, c.ID, "re_atomic_1", 100); !errors.Is(err, errExists) {
		t.Fatalf("a second refund with the same id: %v", err)
	}
	cur := mustGet(t, s, c.ID)
	dup := &payrouter.Refund{ID: "re_atomic_1", ChargeID: c.ID, Amount: 100, Currency: "USD", Status: payrouter.RefundPending, Owner: owner}
	if _, err := cur.ReserveRefund(100); err != nil {
		t.Fatal(err)
	}
	if err := s.ChangeRefund(ctx, payrouter.RefundChange{Refund: dup, Charge: cur}); !errors.Is(err, payrouter.ErrStale) {
		t.Fatalf("ChangeRefund of a new refund whose id is taken = %v, want ErrStale", err)
	}
	checkRefundInvariants(t, s, c.ID, []string{"re_atomic_1"})
	for _, e := range allEvents(t, s, owner, 100) {
		if e.Type.OfRefund() {
			t.Errorf("event %s from refused changes or a pending refund", e.Type)
		}
	}
}

// testRacingRefunds: many refunds of one charge at once, with different ids, then their ends,
// each run twice at once (a request and the queue worker): what is accepted never exceeds the
// charge, and each applied refund is counted once.
func testRacingRefunds(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	const workers = 12
	for round := range 3 {
		id := fmt.Sprintf("ch_race_%d", round)
		capturedCharge(t, s, id, 1000)
		ids := make([]string, workers)
		var accepted atomic.Int64
		var wg sync.WaitGroup
		for w := range workers {
			ids[w] = fmt.Sprintf("re_race_%d_%d", round, w)
			amount := int64(300)
			if w%2 == 0 {
				amount = 0 // all that is left
			}
			wg.Go(func() {
				rf, err := reserveRefund(ctx, s, id, ids[w], amount)
				switch {
				case err == nil:
					accepted.Add(rf.Amount)
				case payrouter.Code(err) != payrouter.EState:
					t.Errorf("refund %s: %v", ids[w], err)
				}
			})
		}
		wg.Wait()
		if got := accepted.Load(); got > 1000 || got == 0 {
			t.Fatalf("round %d: refunds of %d accepted of a charge of 1000", round, got)
		}
		succeeded, reserved := checkRefundInvariants(t, s, id, ids)
		if succeeded != 0 || reserved != accepted.Load() {
			t.Errorf("round %d: reserved %d, succeeded %d; want the %d accepted reserved", round, reserved, succeeded, accepted.Load())
		}
		var ended atomic.Int64
		for w, rid := range ids {
			for range 2 {
				wg.Go(func() {
					done, err := endRefund(ctx, s, rid, w%3 != 0)
					if err != nil && !errors.Is(err, payrouter.ErrNotFound) {
						t.Errorf("ending %s: %v", rid, err)
					}
					if done {
						ended.Add(1)
					}
				})
			}
		}
		wg.Wait()
		succeeded, reserved = checkRefundInvariants(t, s, id, ids)
		if reserved != 0 {
			t.Errorf("round %d: %d still reserved after every refund ended", round, reserved)
		}
		n := 0
		for _, rid := range ids {
			if _, err := s.Refund(ctx, rid); err == nil {
				n++
			}
		}
		if ended.Load() != int64(n) {
			t.Errorf("round %d: %d ends took effect for %d refunds; each must end once", round, ended.Load(), n)
		}
		c := mustGet(t, s, id)
		switch {
		case succeeded == 1000 && c.Status != payrouter.StatusRefunded,
			succeeded > 0 && succeeded < 1000 && c.Status != payrouter.StatusPartiallyRefunded:
			t.Errorf("round %d: charge %s with %d of 1000 refunded", round, c.Status, succeeded)
		}
	}
}

// testRacingTransitions: two opposite changes of one charge at once (a capture and a void, the
// request's answer and the reconciler's), from the same version: exactly one is written, and
// its event with it.
func testRacingTransitions(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	for round := range 10 {
		id := fmt.Sprintf("ch_opposite_%d", round)
		c := &payrouter.Charge{ID: id, Status: payrouter.StatusProcessing, Amount: 700, Currency: "USD", Owner: owner, CreatedAt: base}
		mustSave(t, s, c)
		c.Status = payrouter.StatusRequiresCapture
		mustSave(t, s, c)
		var marked [2]bool
		var wg sync.WaitGroup
		for i, op := range []payrouter.Operation{payrouter.OpCapture, payrouter.OpVoid} {
			wg.Go(func() {
				for {
					cur, err := s.Charge(ctx, id)
					if err != nil {
						t.Error(err)
						return
					}
					if cur.BeginChange(op, time.Now(), time.Minute) != nil {
						return // the other is under way: refused, nothing sent
					}
					err = s.SaveCharge(ctx, cur)
					if errors.Is(err, payrouter.ErrStale) {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					marked[i] = true
					return
				}
			})
		}
		wg.Wait()
		if marked[0] == marked[1] {
			t.Fatalf("round %d: capture marked %v, void marked %v; want exactly one", round, marked[0], marked[1])
		}
	}

	// The request and the reconciler both resolve one processing charge from the same read.
	for round := range 10 {
		id := fmt.Sprintf("ch_resolved_%d", round)
		c := &payrouter.Charge{ID: id, Status: payrouter.StatusProcessing, Amount: 700, Currency: "USD", Owner: owner, CreatedAt: base}
		key := "k-resolved-" + id
		h := mustClaimNew(t, s, key, fpA)
		c.Hold = h
		mustSave(t, s, c)
		request, reconciler := mustGet(t, s, id), mustGet(t, s, id)
		request.Hold = h
		request.Status, reconciler.Status = payrouter.StatusSucceeded, payrouter.StatusSucceeded
		var errs [2]error
		var wg sync.WaitGroup
		wg.Go(func() { errs[0] = s.CompleteCharge(ctx, request, h, newRecord(fpA), longTTL) })
		wg.Go(func() { errs[1] = s.SaveCharge(ctx, reconciler) })
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) || !errors.Is(errs[0], payrouter.ErrStale) && !errors.Is(errs[1], payrouter.ErrStale) {
			t.Fatalf("round %d: the request's write %v, the reconciler's %v; want one written, the other ErrStale", round, errs[0], errs[1])
		}
	}
	succeeded := 0
	for _, e := range allEvents(t, s, owner, 100) {
		if e.Type == payrouter.EventChargeSucceeded {
			succeeded++
		}
	}
	if succeeded != 10 {
		t.Errorf("%d charge.succeeded events for 10 charges each resolved by two writers at once, want 10", succeeded)
	}
}
