package memstore

import (
	"container/list"
	"fmt"
	"maps"
	"time"

	"github.com/payrouter/payrouter"
)

// ErrFull is wrapped (with payrouter.ErrStateUnavailable, so the caller answers 503
// state-unavailable with Retry-After) by a save of a new charge, or a claim of a new
// idempotency key, of an owner that holds its quota (WithBounds) when nothing of its own may be
// dropped to make room: every charge it holds holds money or may come to, or an unexpired key
// answers from it, and every key it holds is within its TTL. Another owner's charges and keys
// are never dropped to make room, nor is an answer promised for a key before its TTL.
var ErrFull = payrouter.ErrStateFull

// WithBounds bounds the store's memory (docs/limits.md, Memory).
//
// Each owner (the API key scope a charge or an idempotency key belongs to) may hold at most
// maxBytesPerOwner bytes of charges (with their versions kept by events, their events and their
// refunds) and idempotency keys (with their records), counted as size.go says; its new charges
// may take all of it but a reserve for its keys (KeysReserve). An owner at its quota first
// loses its own settled charges that hold no money (declined, failed, voided, refunded in full,
// with no refund or task pending and no unexpired key answering from them), written longest
// ago first; when none is left its new charge and its new idempotency key are refused with
// ErrFull. A write to a charge held, a completion of a key held, or a refund of a
// charge held, is never refused: it records what a gateway may already have done. So an owner's
// count may pass its quota by what its requests under way add, never by a new charge or key.
// Nothing of another owner is ever dropped or refused because of it.
//
// A settled charge (final, with no refund queued or pending and no task queued) is dropped,
// with its refunds and events, once it was last written longer than retention ago, unless an
// unexpired idempotency key answers from it (it goes once the key expires). A charge that holds
// money or may come to is never dropped to make room: not one still moving money (processing,
// requires_capture, or with a refund or task pending), which is never dropped at all, nor a
// captured one with anything left to refund (payrouter.Charge.RefundLeft), which goes only after
// retention. Otherwise one key's declines could drop another key's captured charge, and its
// refund would find nothing while the gateway holds the money.
//
// retention 0: no expiry; maxBytesPerOwner 0: no quota (SetMaxBytesPerOwner changes it). Each
// write costs amortised O(1) plus O(owners) for retention: settled charges are kept in the
// order they were last written, in one list of those holding money (dropped for retention
// only) and one list per owner of those holding none (dropped for retention or room).
func WithBounds(retention time.Duration, maxBytesPerOwner int64) Option {
	return func(s *Store) {
		s.retention = max(retention, 0)
		s.quota.Store(max(maxBytesPerOwner, 0))
	}
}

// SetMaxBytesPerOwner changes each owner's quota (WithBounds) while the store is in use, as the
// number of API keys sharing state.max_memory changes on a reload. An owner left above a smaller
// quota keeps what it holds: only its new charges and keys are refused until it is back under.
func (s *Store) SetMaxBytesPerOwner(n int64) { s.quota.Store(max(n, 0)) }

// MaxBytesPerOwner is each owner's quota in bytes; 0: none.
func (s *Store) MaxBytesPerOwner() int64 { return s.quota.Load() }

// chargeEntry is the bookkeeping of one charge (or of a charge id that has refunds and no
// charge): its owner and what it is counted at, the body its versions share, and its place in a
// settled order. Guarded by chargeMu.
type chargeEntry struct {
	id    string
	owner string
	// bytes is everything counted for the charge (chargeFixedBytes, its body, the versions
	// kept, its events and refunds): what dropping it gives back to its owner.
	bytes int64
	// cur is what the current version alone is counted at (versionBytes); curKept is true when
	// an event holds that version, so that replacing it frees nothing.
	cur     int64
	curKept bool
	// md, desc and cust are the body of the charge's first version: every later version equal
	// to it shares these, so that the body is held, and counted, once however many versions
	// the charge's events keep.
	md         map[string]string
	desc, cust string
	// written is when the charge was last written; keyedUntil is when the last unexpired key
	// answering from the charge expires (payrouter.IdempotencyRecord.ChargeID): until then it is
	// never dropped.
	written    time.Time
	keyedUntil time.Time
	// elem is the charge's element in a settled order (heldOrder when held, else its owner's
	// list in free), nil when in neither; at is when it entered it.
	elem *list.Element
	held bool
	at   time.Time
}

// shares reports whether version v of the charge shares its body with the charge's first
// version (putCharge makes every version equal to it share it).
func (e *chargeEntry) shares(v *payrouter.Charge) bool {
	return maps.Equal(v.Metadata, e.md) && v.Description == e.desc && v.CustomerID == e.cust
}

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

// ownerUsage is what one owner holds, in bytes: its charges (under chargeMu) and its
// idempotency keys (under idemMu), both counted under usageMu so that either side checks the
// owner's quota against the sum.
type ownerUsage struct {
	charges, keys int64
}

// KeysReserve is the part of each owner's quota (1/KeysReserve of it) that its new charges may
// not take and its new idempotency keys may: an owner whose charges fill the rest still claims
// the keys of the captures, voids and refunds that settle them, rather than being stuck with
// authorizations it cannot void until their keys expire.
const KeysReserve = 16

// limit is what an owner's count may reach with a new key (keys) or a new charge, in quota q.
func limit(q int64, keys bool) int64 {
	if keys {
		return q
	}
	return q - q/KeysReserve
}

// tryAdd adds n bytes (of charges, or of keys when keys is true) to owner's count unless n is
// positive and would take the owner past its limit (a new key may fill its quota, a new charge
// all but the keys' reserve); it reports whether it added them.
func (s *Store) tryAdd(owner string, n int64, keys bool) bool {
	return s.count(owner, n, keys, true)
}

// add adds n bytes to owner's count, whatever its quota.
func (s *Store) add(owner string, n int64, keys bool) {
	s.count(owner, n, keys, false)
}

// count is tryAdd when bounded is true, add when it is false.
func (s *Store) count(owner string, n int64, keys, bounded bool) bool {
	if n == 0 {
		return true
	}
	s.usageMu.Lock()
	defer s.usageMu.Unlock()
	u := s.usage[owner]
	if u == nil {
		u = &ownerUsage{}
	}
	if q := s.quota.Load(); bounded && n > 0 && q > 0 && u.charges+u.keys+n > limit(q, keys) {
		return false
	}
	s.usage[owner] = u
	if keys {
		u.keys += n
	} else {
		u.charges += n
	}
	if u.charges == 0 && u.keys == 0 {
		delete(s.usage, owner)
	}
	s.total.Add(n)
	return true
}

// room makes room for n more bytes of owner's charges or keys and counts them: while they do
// not fit its quota, owner's settled charges holding no money go, written longest ago first.
// false, with nothing counted, when nothing more of owner's may go. chargeMu and queueMu must
// be held.
func (s *Store) room(owner string, n int64, keys bool, now time.Time) bool {
	for !s.tryAdd(owner, n, keys) {
		l := s.free[owner]
		if l == nil || l.Front() == nil {
			return false
		}
		s.dropOrPark(l.Front().Value.(*chargeEntry), now)
	}
	return true
}

// tidy does what time and finished work ask of the settled orders before a write: charges whose
// last pin or key went come back in an order, and settled charges last written longer than
// retention ago go. writing, the charge being written (nil: none), is left alone: its write puts
// it where it belongs. chargeMu and queueMu must be held.
func (s *Store) tidy(now time.Time, writing *chargeEntry) {
	for _, id := range s.unpinned {
		if e := s.entries[id]; e != writing {
			s.reenter(e, now)
		}
	}
	s.unpinned = s.unpinned[:0]
	for {
		next, ok := s.keyed.peek()
		if !ok || now.Before(next.at) {
			break
		}
		s.keyed.pop()
		if e := s.entries[next.key]; e != nil && e != writing && !e.keyedUntil.After(now) {
			s.reenter(e, now)
		}
	}
	s.keyed.shrink()
	if s.retention > 0 {
		s.expire(s.heldOrder, now)
		for _, l := range s.free {
			s.expire(l, now)
		}
	}
}

// reenter puts a settled charge nothing holds any more (no pin, no unexpired key) back in its
// settled order as written now, or drops it at once when it is past its retention; a charge
// in an order already, or not settled, or still held, is left as it is.
func (s *Store) reenter(e *chargeEntry, now time.Time) {
	if e == nil || e.elem != nil || s.pins[e.id] > 0 || e.keyedUntil.After(now) {
		return
	}
	c := s.charges[e.id]
	if c == nil || !settled(c.Status) {
		return
	}
	if s.retention > 0 && now.Sub(e.written) >= s.retention {
		s.drop(e)
		return
	}
	s.push(e, c, now)
}

// expire drops (or parks) the charges of order that entered it longer than retention ago.
func (s *Store) expire(order *list.List, now time.Time) {
	for {
		front := order.Front()
		if front == nil || now.Sub(front.Value.(*chargeEntry).at) < s.retention {
			return
		}
		s.dropOrPark(front.Value.(*chargeEntry), now)
	}
}

// push puts settled charge c at the end of the order its money says, as entering it at now; it
// is in neither.
func (s *Store) push(e *chargeEntry, c *payrouter.Charge, now time.Time) {
	e.held, e.at = holdsMoney(c), now
	if e.held {
		e.elem = s.heldOrder.PushBack(e)
		return
	}
	l := s.free[e.owner]
	if l == nil {
		l = list.New()
		s.free[e.owner] = l
	}
	e.elem = l.PushBack(e)
}

// unorder takes the charge out of its settled order, if it is in one.
func (s *Store) unorder(e *chargeEntry) {
	if e.elem == nil {
		return
	}
	if e.held {
		s.heldOrder.Remove(e.elem)
	} else if l := s.free[e.owner]; l != nil {
		l.Remove(e.elem)
		if l.Len() == 0 {
			delete(s.free, e.owner)
		}
	}
	e.elem = nil
}

// dropOrPark takes a charge out of its settled order and drops it with its refunds and events,
// unless a refund or task pins it or an unexpired key answers from it: then it only leaves the
// order, and comes back at the end of one when its last pin goes (unpin) or its key expires
// (tidy). Each charge leaves an order once per write, unpin or key, so dropping is amortised
// O(1) however many held charges there are.
func (s *Store) dropOrPark(e *chargeEntry, now time.Time) {
	s.visits++
	s.unorder(e)
	if s.pins[e.id] > 0 || e.keyedUntil.After(now) {
		return
	}
	s.drop(e)
}

// drop forgets charge e, its refunds and its events, and gives its bytes back to its owner.
// chargeMu and queueMu must be held.
func (s *Store) drop(e *chargeEntry) {
	s.unorder(e)
	if c := s.charges[e.id]; c != nil {
		delete(s.charges, e.id)
		s.unindex(c)
	}
	for _, rid := range s.refundsOf[e.id] {
		delete(s.refunds, rid)
	}
	delete(s.refundsOf, e.id)
	s.dropEvents(e.id)
	delete(s.entries, e.id)
	s.add(e.owner, -e.bytes, false)
	s.evicted.Add(1)
}

// keep marks charge id as answered by an idempotency key until until: it is not dropped before
// (a replay renders its answer from it). chargeMu must be held.
func (s *Store) keep(id string, until time.Time) {
	e := s.entries[id]
	if e == nil || !until.After(e.keyedUntil) {
		return
	}
	e.keyedUntil = until
	s.keyed.push(expiry{at: until, key: id})
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
		s.unpinned = append(s.unpinned, id)
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

// Bytes is what the store holds in all, counted as its quotas count it (size.go): every owner's
// charges and idempotency keys.
func (s *Store) Bytes() int64 { return s.total.Load() }

// OwnerBytes is what owner holds, counted as its quota counts it.
func (s *Store) OwnerBytes(owner string) int64 {
	s.usageMu.Lock()
	defer s.usageMu.Unlock()
	if u := s.usage[owner]; u != nil {
		return u.charges + u.keys
	}
	return 0
}
