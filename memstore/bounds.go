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
// charge held holds money or may come to (WithBounds), or every key is within its TTL. Nothing
// is ever dropped to make room but a final charge holding no money, and an answer promised for
// a key is kept for its whole TTL.
var ErrFull = payrouter.ErrStateFull

// KeysPerCharge is how many idempotency keys the store holds at most for each charge it may
// hold (WithBounds): a charge has one key, and its capture, void and refunds one each; keys
// outlive their charges for their TTL.
const KeysPerCharge = 10

// WithBounds bounds the store's memory (docs/limits.md). A charge whose status is final and
// settled (succeeded, declined, failed, voided, refunded, partially_refunded, with no refund
// queued or pending and no task queued for it) is dropped, with its refunds, once it was last
// written longer than retention ago. When the store holds maxCharges charges, the settled
// charges that hold no money (declined, failed, voided, or refunded in full), written longest
// ago, are dropped to make room for a new one. A charge that holds money or may come to is never
// dropped to make room: not one still moving money (processing, requires_capture, or with a
// refund or task pending), which is never dropped at all, nor a captured one with anything left
// to refund (payrouter.Charge.RefundLeft), which goes only after retention; a store full of them
// refuses a new charge with ErrFull. Otherwise one key's declines could drop another key's
// captured charge, and its refund would find nothing while the gateway holds the money.
// Idempotency keys are bounded too, at KeysPerCharge × maxCharges: they are forgotten only once
// expired, and a new key is refused with ErrFull while the store holds that many unexpired ones.
//
// retention 0: no expiry; maxCharges 0: no count bound (and none on keys). Each write costs
// amortised O(1): the settled charges are kept in two lists in the order they were last
// written, one of those holding no money (dropped for room or retention) and one of those
// holding money (dropped for retention only).
func WithBounds(retention time.Duration, maxCharges int) Option {
	return func(s *Store) {
		s.retention = max(retention, 0)
		s.maxCharges = max(maxCharges, 0)
		s.maxKeys = KeysPerCharge * s.maxCharges
	}
}

// settledEntry is one charge in the order settled charges were last written; held says which
// of the two orders it is in (heldOrder when true, freeOrder when false).
type settledEntry struct {
	id   string
	at   time.Time
	held bool
}

func (s *Store) bounded() bool { return s.retention > 0 || s.maxCharges > 0 }

// settled reports whether a charge in status st may be dropped (pins aside): final, and not an
// authorization waiting for its capture or void.
func settled(st payrouter.ChargeStatus) bool {
	return st.Final() && st != payrouter.StatusRequiresCapture
}

// holdsMoney reports whether settled charge c still holds captured money that may be refunded:
// such a charge is dropped after retention only, never to make room.
func holdsMoney(c *payrouter.Charge) bool {
	return c.Status.Refundable() && c.RefundLeft() > 0
}

// errFull is ErrFull for what could not be added.
func errFull(what string) error {
	return fmt.Errorf("%w: %s: %w", ErrFull, what, payrouter.ErrStateUnavailable)
}

// makeRoom drops the settled charges past retention and, when adding a charge to a store at
// maxCharges, the settled charges holding no money written longest ago until there is room; it
// reports false when there is none. chargeMu and queueMu must be held.
func (s *Store) makeRoom(now time.Time, adding bool) bool {
	for _, id := range s.unpinned {
		if c := s.charges[id]; c != nil && settled(c.Status) && s.order[id] == nil && s.pins[id] == 0 {
			s.push(c, now)
		}
	}
	s.unpinned = s.unpinned[:0]
	if s.retention > 0 {
		s.expire(s.freeOrder, now)
		s.expire(s.heldOrder, now)
	}
	if !adding || s.maxCharges == 0 {
		return true
	}
	for len(s.charges) >= s.maxCharges {
		front := s.freeOrder.Front()
		if front == nil {
			return false
		}
		s.dropOrPark(front)
	}
	return true
}

// expire drops (or parks) the charges of order last written longer than retention ago.
func (s *Store) expire(order *list.List, now time.Time) {
	for {
		front := order.Front()
		if front == nil || now.Sub(front.Value.(*settledEntry).at) < s.retention {
			return
		}
		s.dropOrPark(front)
	}
}

// orderOf is the list that e is in.
func (s *Store) orderOf(e *list.Element) *list.List {
	if e.Value.(*settledEntry).held {
		return s.heldOrder
	}
	return s.freeOrder
}

// push puts settled charge c at the end of its order, as written at now; it is in neither.
func (s *Store) push(c *payrouter.Charge, now time.Time) {
	held := holdsMoney(c)
	order := s.freeOrder
	if held {
		order = s.heldOrder
	}
	s.order[c.ID] = order.PushBack(&settledEntry{id: c.ID, at: now, held: held})
}

// dropOrPark takes a charge out of its settled order and drops it with its refunds, unless a
// refund or task pins it: then it only leaves the order, and comes back at the end of one when
// its last pin goes (unpin). Each charge leaves an order once per write or unpin, so dropping
// is amortised O(1) however many pinned charges there are.
func (s *Store) dropOrPark(e *list.Element) {
	id := e.Value.(*settledEntry).id
	s.orderOf(e).Remove(e)
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

// ordered puts charge c, just written at now, at the end of the settled order its status and
// its money say (holdsMoney), or takes it out of both when it is not settled. chargeMu must be
// held.
func (s *Store) ordered(c *payrouter.Charge, now time.Time) {
	e := s.order[c.ID]
	switch {
	case e != nil && settled(c.Status) && e.Value.(*settledEntry).held == holdsMoney(c):
		e.Value.(*settledEntry).at = now
		s.orderOf(e).MoveToBack(e)
		return
	case e != nil:
		s.orderOf(e).Remove(e)
		delete(s.order, c.ID)
	}
	if settled(c.Status) {
		s.push(c, now)
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
