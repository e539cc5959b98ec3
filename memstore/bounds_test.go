package memstore_test

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/memstore"
)

func charge(id string, st payrouter.ChargeStatus) *payrouter.Charge {
	return &payrouter.Charge{ID: id, Status: st, Amount: 100, Currency: "USD", Gateway: "paywell"}
}

// owned is charge with an owner, the API key scope whose share it counts in.
func owned(owner, id string, st payrouter.ChargeStatus) *payrouter.Charge {
	c := charge(id, st)
	c.Owner = owner
	return c
}

// save writes c as the next version of its charge, whatever is stored.
func save(t *testing.T, s *memstore.Store, c *payrouter.Charge) {
	t.Helper()
	if stored, err := s.Charge(t.Context(), c.ID); err == nil {
		c.Stored = stored.Stored
	}
	if err := s.SaveCharge(t.Context(), c); err != nil {
		t.Fatalf("SaveCharge(%s): %v", c.ID, err)
	}
}

// refused checks that saving c, a new charge, is refused as full (503 state-unavailable).
func refused(t *testing.T, s *memstore.Store, c *payrouter.Charge) {
	t.Helper()
	err := s.SaveCharge(t.Context(), c)
	if !errors.Is(err, memstore.ErrFull) || !errors.Is(err, payrouter.ErrStateUnavailable) {
		t.Fatalf("SaveCharge(%s): %v, want ErrFull and ErrStateUnavailable", c.ID, err)
	}
}

func present(t *testing.T, s *memstore.Store, id string) bool {
	t.Helper()
	_, err := s.Charge(t.Context(), id)
	if err != nil && !errors.Is(err, payrouter.ErrNotFound) {
		t.Fatalf("Charge(%s): %v", id, err)
	}
	return err == nil
}

// bytesOf is what a store counts charges cs at, written one version each into an empty store:
// the tests size quotas with it, so that they say "room for three of these", not a figure
// that changes with Charge's fields.
func bytesOf(t *testing.T, cs ...*payrouter.Charge) int64 {
	t.Helper()
	s := newStore(t)
	for _, c := range cs {
		cp := *c
		save(t, s, &cp)
	}
	return s.Bytes()
}

// forCharges is the quota whose room for new charges (all but the keys' reserve) is n bytes.
func forCharges(n int64) int64 {
	return n*memstore.KeysReserve/(memstore.KeysReserve-1) + 1
}

// checkUsage fails when what each owner is counted at differs from a recount of what it holds.
func checkUsage(t *testing.T, s *memstore.Store) {
	t.Helper()
	recount, err := s.Recount()
	if err != nil {
		t.Fatal(err)
	}
	if usage := s.Usage(); !maps.Equal(usage, recount) {
		t.Fatalf("owners counted at %v, recounted at %v", usage, recount)
	}
}

// Beyond its share an owner's settled charges written longest ago go first.
func TestBoundsOldestSettledFirst(t *testing.T) {
	clock := newFakeClock()
	one := bytesOf(t, charge("ch_x", payrouter.StatusDeclined))
	s := newStore(t, memstore.WithClock(clock.Now), memstore.WithBounds(0, forCharges(3*one+one/2)))
	for i := range 5 {
		save(t, s, charge(fmt.Sprintf("ch_%d", i), payrouter.StatusDeclined))
		clock.Advance(time.Second)
	}
	// Writing ch_2 again makes it the newest: ch_3 is now the oldest.
	save(t, s, charge("ch_2", payrouter.StatusDeclined))
	save(t, s, charge("ch_5", payrouter.StatusSucceeded))
	for id, want := range map[string]bool{"ch_0": false, "ch_1": false, "ch_3": false, "ch_2": true, "ch_4": true, "ch_5": true} {
		if got := present(t, s, id); got != want {
			t.Errorf("%s present = %v, want %v", id, got, want)
		}
	}
	if s.ChargesLen() != 3 || s.Evicted() != 3 {
		t.Errorf("holds %d charges, evicted %d; want 3 and 3", s.ChargesLen(), s.Evicted())
	}
	if s.Bytes() > s.MaxBytesPerOwner() {
		t.Errorf("the owner holds %d bytes, over its share of %d", s.Bytes(), s.MaxBytesPerOwner())
	}
	checkUsage(t, s)
}

// Issue 19: one key's uncaptured authorizations made every other key's charges 503 until
// restart, and its declines dropped another key's charges. Each owner has its own share: one
// full of authorizations is refused alone, and its declines drop only its own charges.
func TestBoundsOneOwnerCannotHarmAnother(t *testing.T) {
	one := bytesOf(t, owned("a", "ch_a_0", payrouter.StatusRequiresCapture))
	s := newStore(t, memstore.WithBounds(time.Hour, forCharges(10*one+one/2)))
	save(t, s, owned("b", "ch_b_declined", payrouter.StatusDeclined))
	for i := range 10 {
		save(t, s, owned("a", fmt.Sprintf("ch_a_%d", i), payrouter.StatusRequiresCapture))
	}
	refused(t, s, owned("a", "ch_a_more", payrouter.StatusProcessing))
	for i := range 10 { // b's own share is untouched by a's
		save(t, s, owned("b", fmt.Sprintf("ch_b_%d", i), payrouter.StatusSucceeded))
		if i < 9 && !present(t, s, "ch_b_declined") {
			t.Fatalf("b's decline dropped after %d of b's charges, with room in b's share", i+1)
		}
	}
	for i := range 10 {
		if !present(t, s, fmt.Sprintf("ch_a_%d", i)) {
			t.Fatalf("an authorization of a's was dropped")
		}
	}
	// b's succeeded charges hold money: b, full of them, is refused in its turn; a is not
	// helped or harmed by it.
	refused(t, s, owned("b", "ch_b_more", payrouter.StatusProcessing))
	if present(t, s, "ch_b_declined") {
		t.Error("b's decline was kept while b's share was full")
	}
	if s.OwnerBytes("a") > s.MaxBytesPerOwner() || s.OwnerBytes("b") > s.MaxBytesPerOwner() {
		t.Errorf("a holds %d, b %d: over the share of %d", s.OwnerBytes("a"), s.OwnerBytes("b"), s.MaxBytesPerOwner())
	}
	checkUsage(t, s)

	// Once a's authorizations are voided, a's new charges take their room, b's are kept.
	for i := range 10 {
		save(t, s, owned("a", fmt.Sprintf("ch_a_%d", i), payrouter.StatusVoided))
	}
	save(t, s, owned("a", "ch_a_more", payrouter.StatusProcessing))
	for i := range 10 {
		if !present(t, s, fmt.Sprintf("ch_b_%d", i)) {
			t.Fatalf("b's charge ch_b_%d was dropped to make room for a's", i)
		}
	}
	checkUsage(t, s)
}

// Charges still moving money are never dropped: with only those held, a new charge is refused
// as state-unavailable (503, sent again later), and accepted once one of them settles.
func TestBoundsNeverDropUnsettled(t *testing.T) {
	two := bytesOf(t, charge("ch_proc", payrouter.StatusProcessing), charge("ch_auth", payrouter.StatusRequiresCapture))
	s := newStore(t, memstore.WithBounds(0, forCharges(two+two/8)))
	save(t, s, charge("ch_proc", payrouter.StatusProcessing))
	save(t, s, charge("ch_auth", payrouter.StatusRequiresCapture))
	refused(t, s, charge("ch_new", payrouter.StatusProcessing))
	// An update of a charge held is never refused.
	save(t, s, charge("ch_proc", payrouter.StatusProcessing))
	if !present(t, s, "ch_proc") || !present(t, s, "ch_auth") || present(t, s, "ch_new") {
		t.Fatal("the store dropped an unsettled charge, or kept a refused one")
	}
	save(t, s, charge("ch_proc", payrouter.StatusDeclined))
	save(t, s, charge("ch_new", payrouter.StatusProcessing))
	if present(t, s, "ch_proc") || !present(t, s, "ch_auth") || !present(t, s, "ch_new") {
		t.Error("after ch_proc settled, the new charge should have taken its place")
	}
	checkUsage(t, s)
}

// A charge with a refund queued or pending, or a task queued for it, stays; once that is done
// it goes like any settled charge, with its refunds.
func TestBoundsPins(t *testing.T) {
	s := newStore(t, memstore.WithBounds(0, 0))
	ctx := t.Context()
	save(t, s, charge("ch_refunding", payrouter.StatusSucceeded))
	rf := &payrouter.Refund{ID: "re_1", ChargeID: "ch_refunding", Amount: 100, Status: payrouter.RefundQueued}
	changeRefund(t, s, rf, "", func(c *payrouter.Charge) {
		if _, err := c.ReserveRefund(rf.Amount); err != nil {
			t.Fatal(err)
		}
	})
	save(t, s, charge("ch_voiding", payrouter.StatusFailed))
	taskID, err := s.Enqueue(ctx, payrouter.Task{Kind: payrouter.TaskVoid, Gateway: "paywell", ChargeID: "ch_voiding", Reference: "ref"})
	if err != nil {
		t.Fatal(err)
	}
	s.SetMaxBytesPerOwner(forCharges(s.Bytes() + 16)) // full
	refused(t, s, charge("ch_3", payrouter.StatusDeclined))
	if !present(t, s, "ch_refunding") || !present(t, s, "ch_voiding") {
		t.Fatal("a pinned charge was dropped")
	}

	rf.Status = payrouter.RefundPending // still pinned
	if err := s.ChangeRefund(ctx, payrouter.RefundChange{Refund: rf, From: payrouter.RefundQueued}); err != nil {
		t.Fatal(err)
	}
	refused(t, s, charge("ch_3", payrouter.StatusDeclined))
	rf.Status = payrouter.RefundSucceeded
	changeRefund(t, s, rf, payrouter.RefundPending, func(c *payrouter.Charge) { c.RefundApplied(rf.Amount) })
	save(t, s, charge("ch_3", payrouter.StatusDeclined))
	if present(t, s, "ch_refunding") {
		t.Error("the charge refunded in full was kept")
	}
	if _, err := s.Refund(ctx, "re_1"); !errors.Is(err, payrouter.ErrNotFound) {
		t.Errorf("the dropped charge's refund: %v, want not found (dropped with it)", err)
	}
	if !present(t, s, "ch_voiding") {
		t.Fatal("the charge with a task queued was dropped")
	}
	if err := s.Ack(ctx, taskID); err != nil {
		t.Fatal(err)
	}
	// Unpinned, it goes back in the order as if written now: after ch_3.
	save(t, s, charge("ch_4", payrouter.StatusDeclined))
	if present(t, s, "ch_3") || !present(t, s, "ch_voiding") {
		t.Error("want ch_3 dropped first: the unpinned charge counts as written when its task was acknowledged")
	}
	save(t, s, charge("ch_5", payrouter.StatusDeclined))
	if present(t, s, "ch_voiding") {
		t.Error("the charge whose task was acknowledged was kept")
	}
	checkUsage(t, s)
}

// changeRefund writes rf, moved from from, with its charge changed by change.
func changeRefund(t *testing.T, s *memstore.Store, rf *payrouter.Refund, from payrouter.RefundStatus, change func(*payrouter.Charge)) {
	t.Helper()
	c, err := s.Charge(t.Context(), rf.ChargeID)
	if err != nil {
		t.Fatal(err)
	}
	change(c)
	if err := s.ChangeRefund(t.Context(), payrouter.RefundChange{Refund: rf, From: from, Charge: c}); err != nil {
		t.Fatalf("ChangeRefund(%s to %s): %v", rf.ID, rf.Status, err)
	}
}

// Settled charges go after state.retention without any quota; a charge written again is
// measured from that write, and a write never drops the charge it writes.
func TestBoundsRetention(t *testing.T) {
	clock := newFakeClock()
	s := newStore(t, memstore.WithClock(clock.Now), memstore.WithBounds(time.Hour, 0))
	save(t, s, charge("ch_old", payrouter.StatusSucceeded))
	save(t, s, charge("ch_touched", payrouter.StatusSucceeded))
	save(t, s, charge("ch_proc", payrouter.StatusProcessing))
	clock.Advance(50 * time.Minute)
	save(t, s, charge("ch_touched", payrouter.StatusRefunded))
	clock.Advance(20 * time.Minute)
	save(t, s, charge("ch_new", payrouter.StatusDeclined))
	for id, want := range map[string]bool{"ch_old": false, "ch_touched": true, "ch_proc": true, "ch_new": true} {
		if got := present(t, s, id); got != want {
			t.Errorf("%s present = %v, want %v", id, got, want)
		}
	}
	clock.Advance(2 * time.Hour)
	save(t, s, charge("ch_touched", payrouter.StatusRefunded)) // its own write keeps it
	if !present(t, s, "ch_touched") || present(t, s, "ch_new") {
		t.Error("a write dropped the charge it wrote, or kept one past retention")
	}
	checkUsage(t, s)
}

// Idempotency keys count in their owner's share: a new key is refused while the owner's keys
// fill it, each kept for its whole TTL and never forgotten early, and taken once some expired.
// Another owner's keys are not refused for it.
func TestBoundsIdempotencyKeys(t *testing.T) {
	clock := newFakeClock()
	probe := newStore(t, memstore.WithClock(clock.Now))
	claimComplete(t, probe, "k0", time.Second, time.Minute)
	one := probe.Bytes()
	s := newStore(t, memstore.WithClock(clock.Now), memstore.WithBounds(0, 10*one+one/2))
	for i := range 10 {
		claimComplete(t, s, fmt.Sprintf("k%d", i), time.Second, time.Minute)
	}
	_, _, err := s.Claim(t.Context(), owner, "one-more", "fp", time.Second)
	if !errors.Is(err, memstore.ErrFull) || !errors.Is(err, payrouter.ErrStateUnavailable) {
		t.Fatalf("claim beyond the share: %v, want ErrFull and ErrStateUnavailable", err)
	}
	// Keys already held answer as before.
	if rec, _, err := s.Claim(t.Context(), owner, "k0", "fp", time.Second); err != nil || rec == nil {
		t.Fatalf("replay of a key held: %v %v", rec, err)
	}
	if _, h, err := s.Claim(t.Context(), "key_b", "b-1", "fp", time.Second); err != nil || !h.Held() {
		t.Fatalf("another owner's claim: %v", err)
	}
	clock.Advance(time.Minute)
	if _, h, err := s.Claim(t.Context(), owner, "one-more", "fp", time.Second); err != nil || !h.Held() {
		t.Fatalf("claim once the others expired: %v", err)
	}
	if n := s.IdempotencyLen(); n != 1 {
		t.Errorf("holds %d keys, want 1 (the expired ones swept)", n)
	}
	checkUsage(t, s)
}

// A new key of an owner at its share takes the room of the owner's own settled charges holding
// no money, oldest first; never another owner's, and never a charge that holds money.
func TestBoundsKeyTakesRoomOfOwnCharges(t *testing.T) {
	decline := bytesOf(t, owned(owner, "ch_d_0", payrouter.StatusDeclined))
	s := newStore(t, memstore.WithBounds(0, 3*decline+decline/2))
	save(t, s, owned(owner, "ch_held", payrouter.StatusSucceeded))
	save(t, s, owned(owner, "ch_d_0", payrouter.StatusDeclined))
	save(t, s, owned(owner, "ch_d_1", payrouter.StatusDeclined))
	save(t, s, owned("key_b", "ch_b", payrouter.StatusDeclined))
	for i := range 20 {
		if _, h, err := s.Claim(t.Context(), owner, fmt.Sprintf("k%d", i), "fp", time.Hour); err != nil || !h.Held() {
			if !errors.Is(err, memstore.ErrFull) {
				t.Fatalf("claim %d: %v", i, err)
			}
			break
		}
	}
	if present(t, s, "ch_d_0") || present(t, s, "ch_d_1") {
		t.Error("the owner's declines were kept while its new keys were refused")
	}
	if !present(t, s, "ch_held") || !present(t, s, "ch_b") {
		t.Error("a charge holding money, or another owner's, was dropped for a key")
	}
	if _, _, err := s.Claim(t.Context(), owner, "k-last", "fp", time.Hour); !errors.Is(err, memstore.ErrFull) {
		t.Errorf("claim with nothing left to drop: %v, want ErrFull", err)
	}
	checkUsage(t, s)
}

// A charge an unexpired idempotency key answers from (a record kept without its body) is not
// dropped, to make room or after its retention, until the key expires: its replay renders it.
func TestBoundsKeyedChargeKept(t *testing.T) {
	clock := newFakeClock()
	one := bytesOf(t, charge("ch_voided", payrouter.StatusVoided))
	s := newStore(t, memstore.WithClock(clock.Now), memstore.WithBounds(24*time.Hour, forCharges(2*one+one)))
	ctx := t.Context()
	_, h, err := s.Claim(ctx, "", "k-void", "fp", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	save(t, s, charge("ch_voided", payrouter.StatusVoided))
	if err := s.Complete(ctx, h, payrouter.IdempotencyRecord{Fingerprint: "fp", Status: 200, ChargeID: "ch_voided"}, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		clock.Advance(time.Minute)
		save(t, s, charge(fmt.Sprintf("ch_d_%d", i), payrouter.StatusDeclined))
	}
	if !present(t, s, "ch_voided") {
		t.Fatal("the charge an unexpired key answers from was dropped to make room")
	}
	if present(t, s, "ch_d_0") {
		t.Error("room was not made from the next oldest decline")
	}
	clock.Advance(24 * time.Hour)
	save(t, s, charge("ch_after", payrouter.StatusDeclined))
	if present(t, s, "ch_voided") {
		t.Error("the charge was kept after its key expired and past its retention")
	}
	checkUsage(t, s)
}

// Making room costs amortised O(1): a store full of pinned charges, or of charges holding
// money, does not rescan them on every write.
func TestBoundsManyPinnedCharges(t *testing.T) {
	const n = 20_000
	one := bytesOf(t, charge("ch_00000", payrouter.StatusFailed))
	s := newStore(t, memstore.WithBounds(0, int64(n+1)*(one+512)))
	ctx := t.Context()
	for i := range n {
		id := fmt.Sprintf("ch_%05d", i)
		switch i % 3 {
		case 0: // holds no money, pinned by a queued void: parked by the first write that needs room
			save(t, s, charge(id, payrouter.StatusFailed))
			if _, err := s.Enqueue(ctx, payrouter.Task{Kind: payrouter.TaskVoid, Gateway: "paywell", ChargeID: id, Reference: "ref"}); err != nil {
				t.Fatal(err)
			}
		case 1: // holds money, pinned by a queued refund
			save(t, s, charge(id, payrouter.StatusSucceeded))
			if err := s.ChangeRefund(ctx, payrouter.RefundChange{Refund: &payrouter.Refund{ID: "re_" + id, ChargeID: id, Status: payrouter.RefundQueued}}); err != nil {
				t.Fatal(err)
			}
		default: // holds money, not pinned: never in the order that making room walks
			save(t, s, charge(id, payrouter.StatusSucceeded))
		}
	}
	s.SetMaxBytesPerOwner(forCharges(s.Bytes() + one + one/2)) // room for one more: then each needs one to go
	before := s.Visits()
	save(t, s, charge("ch_free", payrouter.StatusDeclined))
	for i := range n {
		// Each new charge must drop ch_free's successor; the pinned ones are parked once.
		save(t, s, charge(fmt.Sprintf("ch_n_%05d", i), payrouter.StatusDeclined))
	}
	// Counted, not timed: n/3 pinned charges parked once, n+1 charges dropped. Rescanning the
	// pinned ones on every write would visit n*n/3.
	if v := s.Visits() - before; v > 2*n {
		t.Errorf("%d writes beside %d pinned charges visited %d charges of the settled orders: making room rescans them", n, n, v)
	}
	if s.ChargesLen() != n+1 {
		t.Errorf("holds %d, want %d", s.ChargesLen(), n+1)
	}
	checkUsage(t, s)
}

// Issue 19: with max_charges 50, 55 declined 1-cent charges of key A dropped key B's captured
// charge of 5000; its GET and refund then answered 404 while the gateway held the money. With
// a share each, A's declines drop only A's own.
func TestBoundsDeclinesOfOneKeyKeepAnothersCapturedCharge(t *testing.T) {
	clock := newFakeClock()
	one := bytesOf(t, owned("key_a", "ch_a_00", payrouter.StatusDeclined))
	s := newStore(t, memstore.WithClock(clock.Now), memstore.WithBounds(time.Hour, forCharges(50*one+one/2)))
	captured := &payrouter.Charge{ID: "ch_b", Owner: "key_b", Status: payrouter.StatusSucceeded, Amount: 5000, Currency: "USD", Gateway: "paywell", Capture: true}
	save(t, s, captured)
	for i := range 55 {
		clock.Advance(time.Second)
		c := &payrouter.Charge{ID: fmt.Sprintf("ch_a_%02d", i), Owner: "key_a", Status: payrouter.StatusDeclined, Amount: 1, Currency: "USD", Gateway: "paywell"}
		save(t, s, c)
	}
	if !present(t, s, "ch_b") {
		t.Fatal("key A's declines dropped key B's captured charge")
	}
	if s.ChargesLen() != 51 || s.Evicted() != 5 {
		t.Errorf("holds %d charges, evicted %d; want 51 and 5 (A's oldest declines)", s.ChargesLen(), s.Evicted())
	}
	for i := range 5 {
		if present(t, s, fmt.Sprintf("ch_a_%02d", i)) {
			t.Errorf("ch_a_%02d, among the oldest declines, was kept", i)
		}
	}

	// Its refund works, as the service makes it: reserved and sent, then applied.
	rf := &payrouter.Refund{ID: "re_b", ChargeID: "ch_b", Owner: "key_b", Amount: 5000, Status: payrouter.RefundPending}
	changeRefund(t, s, rf, "", func(c *payrouter.Charge) {
		if _, err := c.ReserveRefund(0); err != nil {
			t.Fatalf("refund of the captured charge: %v", err)
		}
	})
	save(t, s, owned("key_a", "ch_a_more", payrouter.StatusDeclined))
	rf.Status = payrouter.RefundSucceeded
	changeRefund(t, s, rf, payrouter.RefundPending, func(c *payrouter.Charge) { c.RefundApplied(rf.Amount) })
	got, err := s.Charge(t.Context(), "ch_b")
	if err != nil || got.Status != payrouter.StatusRefunded || got.Refunded != 5000 {
		t.Fatalf("the refunded charge: %+v, %v; want refunded 5000", got, err)
	}
	if r, err := s.Refund(t.Context(), "re_b"); err != nil || r.Status != payrouter.RefundSucceeded {
		t.Fatalf("its refund: %+v, %v", r, err)
	}
	checkUsage(t, s)
}

// Which settled charges may go to make room: those holding no money (declined, failed, voided,
// refunded in full) may; a captured one with anything left to refund, partially refunded
// included, stays until its retention; processing and requires_capture ones stay.
func TestBoundsRoomTakesOnlyChargesHoldingNoMoney(t *testing.T) {
	partly := charge("ch_partly", payrouter.StatusPartiallyRefunded)
	partly.Refunded = 40
	full := charge("ch_full", payrouter.StatusRefunded)
	full.Refunded = full.Amount
	reservedAll := charge("ch_reserved_all", payrouter.StatusSucceeded)
	reservedAll.RefundsReserved = reservedAll.Amount // its refund's answer is not known yet
	for _, tc := range []struct {
		c    *payrouter.Charge
		kept bool
	}{
		{charge("ch_captured", payrouter.StatusSucceeded), true},
		{partly, true},
		{charge("ch_auth", payrouter.StatusRequiresCapture), true},
		{charge("ch_proc", payrouter.StatusProcessing), true},
		{full, false},
		{reservedAll, false}, // nothing left to refund; a pending refund would pin it
		{charge("ch_declined", payrouter.StatusDeclined), false},
		{charge("ch_failed", payrouter.StatusFailed), false},
		{charge("ch_voided", payrouter.StatusVoided), false},
	} {
		t.Run(string(tc.c.Status)+"/"+tc.c.ID, func(t *testing.T) {
			clock := newFakeClock()
			two := bytesOf(t, tc.c, charge("ch_decl_0", payrouter.StatusDeclined))
			s := newStore(t, memstore.WithClock(clock.Now), memstore.WithBounds(time.Hour, forCharges(two+two/4)))
			save(t, s, tc.c)
			clock.Advance(time.Second)
			for i := range 3 {
				save(t, s, charge(fmt.Sprintf("ch_decl_%d", i), payrouter.StatusDeclined))
				clock.Advance(time.Second)
			}
			if got := present(t, s, tc.c.ID); got != tc.kept {
				t.Fatalf("present after 3 newer declines = %v, want %v", got, tc.kept)
			}
			checkUsage(t, s)
		})
	}
}

// A charge holding money goes after its retention like any settled charge, and a write that
// leaves nothing to refund makes it one that may go to make room.
func TestBoundsChargeHoldingMoneyAfterRetention(t *testing.T) {
	clock := newFakeClock()
	two := bytesOf(t, charge("ch_captured", payrouter.StatusSucceeded), charge("ch_auth", payrouter.StatusRequiresCapture))
	s := newStore(t, memstore.WithClock(clock.Now), memstore.WithBounds(time.Hour, forCharges(two+two/4)))
	save(t, s, charge("ch_captured", payrouter.StatusSucceeded))
	save(t, s, charge("ch_auth", payrouter.StatusRequiresCapture))
	refused(t, s, charge("ch_new", payrouter.StatusDeclined))
	clock.Advance(time.Hour)
	save(t, s, charge("ch_new", payrouter.StatusDeclined))
	if present(t, s, "ch_captured") || !present(t, s, "ch_auth") {
		t.Fatal("want the captured charge dropped after its retention, the authorization kept")
	}

	save(t, s, charge("ch_new", payrouter.StatusSucceeded)) // now holds money too
	refused(t, s, charge("ch_refused", payrouter.StatusSucceeded))
	done := charge("ch_new", payrouter.StatusRefunded)
	done.Refunded = done.Amount
	save(t, s, done)
	save(t, s, charge("ch_next", payrouter.StatusDeclined))
	if present(t, s, "ch_new") || !present(t, s, "ch_next") {
		t.Error("the charge refunded in full was not dropped to make room")
	}
	checkUsage(t, s)
}

// An owner whose charges fill all its share new charges may take still claims keys, within the
// reserve kept for them: the captures and voids that settle what it holds are never refused
// for its own authorizations.
func TestBoundsKeysReserve(t *testing.T) {
	s := newStore(t, memstore.WithBounds(time.Hour, 64<<10))
	n := 0
	for ; ; n++ {
		err := s.SaveCharge(t.Context(), owned(owner, fmt.Sprintf("ch_auth_%03d", n), payrouter.StatusRequiresCapture))
		if errors.Is(err, memstore.ErrFull) {
			break
		}
		if err != nil || n > 1000 {
			t.Fatalf("authorization %d: %v", n, err)
		}
	}
	for i := range 10 {
		if _, h, err := s.Claim(t.Context(), owner, fmt.Sprintf("void-%d", i), "fp", time.Minute); err != nil || !h.Held() {
			t.Fatalf("the key of void %d, with %d authorizations filling the share: %v", i, n, err)
		}
		save(t, s, owned(owner, fmt.Sprintf("ch_auth_%03d", i), payrouter.StatusVoided))
	}
	if got, q := s.OwnerBytes(owner), s.MaxBytesPerOwner(); got > q {
		t.Errorf("the owner holds %d bytes, over its share of %d", got, q)
	}
	checkUsage(t, s)
}

// A new charge its owner's share cannot take is refused by ClaimCharge as by SaveCharge (503,
// sent again later), and its key is not left held by the refusal: the retry is not told 409.
func TestBoundsClaimChargeRefusedHoldsNothing(t *testing.T) {
	two := bytesOf(t, charge("ch_proc", payrouter.StatusProcessing), charge("ch_auth", payrouter.StatusRequiresCapture))
	s := newStore(t, memstore.WithBounds(0, forCharges(two+two/8)))
	save(t, s, charge("ch_proc", payrouter.StatusProcessing))
	save(t, s, charge("ch_auth", payrouter.StatusRequiresCapture))
	c := charge("ch_new", payrouter.StatusProcessing)
	got, err := s.ClaimCharge(t.Context(), "", "k-new", "fp", time.Minute, c)
	if !errors.Is(err, memstore.ErrFull) || !errors.Is(err, payrouter.ErrStateUnavailable) {
		t.Fatalf("ClaimCharge = %+v, %v; want ErrFull and ErrStateUnavailable", got, err)
	}
	if c.Hold.Held() || got.Hold.Held() || present(t, s, "ch_new") {
		t.Errorf("a refused ClaimCharge left a hold (%+v, %+v) or the charge stored", c.Hold, got.Hold)
	}
	if rec, err := s.Peek(t.Context(), "k-new", "fp"); rec != nil || err != nil {
		t.Errorf("Peek of the refused key = %+v, %v; want it free", rec, err)
	}
	checkUsage(t, s)
}
