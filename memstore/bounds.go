package memstore

import (
	"container/list"
	"fmt"
	"time"

	"github.com/payrouter/payrouter"
)

// ErrFull is wrapped (with payrouter.ErrStateUnavailable, so the caller answers 503
// state-unavailable with Retry-After) by a save of a new charge, or a claim of a new
// idempotency key, when the store holds its maximum and nothing in it may be dropped: every
// charge held is still moving money, or every key is within its TTL. Nothing is ever dropped to
// make room but a final charge, and an answer promised for a key is kept for its whole TTL.
var ErrFull = payrouter.ErrStateFull

// KeysPerCharge is how many idempotency keys the store holds at most for each charge it may
// hold (WithBounds): a charge has one key, and its capture, void and refunds one each; keys
// outlive their charges for their TTL.
const KeysPerCharge = 10

// WithBounds bounds the store's memory (docs/limits.md). A charge whose status is final and
// settled (succeeded, declined, failed, voided, refunded, partially_refunded, with no refund
// queued or pending and no task queued for it) is dropped, with its refunds, once it was last
// written longer than retention ago; and when the store holds maxCharges charges, the settled
// charges written longest ago are dropped to make room for a new one. A charge still moving
// money (processing, requires_capture, or with a refund or task pending) is never dropped: when
// they alone fill the store, a new charge is refused with ErrFull. Idempotency keys are bounded
// too, at KeysPerCharge × maxCharges: they are forgotten only once expired, and a new key is
// refused with ErrFull while the store holds that many unexpired ones.
//
// retention 0: no expiry; maxCharges 0: no count bound (and none on keys). Each write costs
// amortised O(1): the settled charges are kept in the order they were last written.
func WithBounds(retention time.Duration, maxCharges int) Option {
	return func(s *Store) {
		s.retention = max(retention, 0)
		s.maxCharges = max(maxCharges, 0)
		s.maxKeys = KeysPerCharge * s.maxCharges
	}
}

// settledEntry is one charge in the order settled charges were last written.
type settledEntry struct {
	id string
	at time.Time
}

func (s *Store) bounded() bool { return s.retention > 0 || s.maxCharges > 0 }

// settled reports whether a charge in status st may be dropped (pins aside): final, and not an
// authorization waiting for its capture or void.
func settled(st payrouter.ChargeStatus) bool {
	return st.Final() && st != payrouter.StatusRequiresCapture
}

// errFull is ErrFull for what could not be added.
func errFull(what string) error {
	return fmt.Errorf("%w: %s: %w", ErrFull, what, payrouter.ErrStateUnavailable)
}

// makeRoom drops the settled charges past retention and, when adding a charge to a store at
// maxCharges, the settled charges written longest ago until there is room; it reports false
// when there is none. chargeMu and queueMu must be held.
func (s *Store) makeRoom(now time.Time, adding bool) bool {
	for _, id := range s.unpinned {
		if c := s.charges[id]; c != nil && settled(c.Status) && s.order[id] == nil && s.pins[id] == 0 {
			s.order[id] = s.settledOrder.PushBack(&settledEntry{id: id, at: now})
		}
	}
	s.unpinned = s.unpinned[:0]
	for s.retention > 0 {
		front := s.settledOrder.Front()
		if front == nil || now.Sub(front.Value.(*settledEntry).at) < s.retention {
			break
		}
		s.dropOrPark(front)
	}
	if !adding || s.maxCharges == 0 {
		return true
	}
	for len(s.charges) >= s.maxCharges {
		front := s.settledOrder.Front()
		if front == nil {
			return false
		}
		s.dropOrPark(front)
	}
	return true
}

// dropOrPark takes a charge out of the settled order and drops it with its refunds, unless a
// refund or task pins it: then it only leaves the order, and comes back at the end of it when
// its last pin goes (unpin). Each charge leaves the order once per write or unpin, so dropping
// is amortised O(1) however many pinned charges there are.
func (s *Store) dropOrPark(e *list.Element) {
	id := e.Value.(*settledEntry).id
	s.settledOrder.Remove(e)
	delete(s.order, id)
	if s.pins[id] > 0 {
		return
	}
	if c := s.charges[id]; c != nil {
		delete(s.charges, id)
		s.unindex(c)
	}
	for _, rid := range s.refundsOf[id] {
		delete(s.refunds, rid)
	}
	delete(s.refundsOf, id)
	s.dropEvents(id)
	s.evicted.Add(1)
}

// ordered puts charge id, just written in status st at now, at the end of the settled order, or
// takes it out when it is not settled. chargeMu must be held.
func (s *Store) ordered(id string, st payrouter.ChargeStatus, now time.Time) {
	e := s.order[id]
	switch {
	case settled(st) && e != nil:
		e.Value.(*settledEntry).at = now
		s.settledOrder.MoveToBack(e)
	case settled(st):
		s.order[id] = s.settledOrder.PushBack(&settledEntry{id: id, at: now})
	case e != nil:
		s.settledOrder.Remove(e)
		delete(s.order, id)
	}
}

// pin marks charge id as still moving money (a refund queued or pending, a task queued for it);
// queueMu must be held.
func (s *Store) pin(id string) {
	if id != "" {
		s.pins[id]++
	}
}

// unpin takes one pin off charge id; its last one puts it back in the settled order at the
// next write. queueMu must be held.
func (s *Store) unpin(id string) {
	if id == "" || s.pins[id] == 0 {
		return
	}
	if s.pins[id]--; s.pins[id] == 0 {
		delete(s.pins, id)
		if s.bounded() {
			s.unpinned = append(s.unpinned, id)
		}
	}
}

// pinning reports whether a refund in status st pins its charge.
func pinning(st payrouter.RefundStatus) bool {
	return st == payrouter.RefundQueued || st == payrouter.RefundPending
}

// ChargesLen is how many charges the store holds, final or not.
func (s *Store) ChargesLen() int {
	s.chargeMu.RLock()
	defer s.chargeMu.RUnlock()
	return len(s.charges)
}

// Evicted is how many settled charges the store dropped for its bounds since it was made.
func (s *Store) Evicted() int64 { return s.evicted.Load() }
