package memstore

import (
	"context"
	"fmt"
	"sort"

	"github.com/payrouter/payrouter"
)

// storedEvent is one event and its place in the one sequence of this store: events are numbered
// under chargeMu as their change is written, so their order is the order of the changes.
type storedEvent struct {
	seq  int64
	ev   payrouter.Event
	gone bool // dropped with its charge (bounds.go); compacted away later
}

// ownerEvents is one owner's events, oldest first, with how many of them are gone.
type ownerEvents struct {
	list []*storedEvent
	gone int
}

// newEvent is an event of type t for charge c (the stored copy, never changed in place) or
// refund r, numbered in the store's sequence; insertEvent records it. chargeMu must be held.
func (s *Store) newEvent(t payrouter.EventType, c *payrouter.Charge, r *payrouter.Refund) *storedEvent {
	s.eventSeq++
	e := &storedEvent{seq: s.eventSeq, ev: payrouter.Event{ID: payrouter.NewEventID(), Type: t, CreatedAt: s.now().UTC()}}
	if t.OfRefund() {
		cp := *r
		e.ev.Refund, e.ev.Owner = &cp, r.Owner
	} else {
		e.ev.Charge, e.ev.Owner = c, c.Owner
	}
	return e
}

// insertEvent records e, an event of charge chargeID (or of one of its refunds), where the
// feed and its charge find it; its bytes are the caller's to count. chargeMu must be held.
func (s *Store) insertEvent(e *storedEvent, chargeID string) {
	oe := s.events[e.ev.Owner]
	if oe == nil {
		oe = &ownerEvents{}
		s.events[e.ev.Owner] = oe
	}
	oe.list = append(oe.list, e)
	s.eventByID[e.ev.ID] = e
	s.eventsOf[chargeID] = append(s.eventsOf[chargeID], e)
}

// dropEvents forgets the events of a charge dropped by the bounds; chargeMu must be held. An
// owner's list is compacted once half of it is gone, so dropping costs amortised O(1).
func (s *Store) dropEvents(chargeID string) {
	for _, e := range s.eventsOf[chargeID] {
		e.gone = true
		delete(s.eventByID, e.ev.ID)
		oe := s.events[e.ev.Owner]
		if oe.gone++; oe.gone*2 > len(oe.list) {
			kept := oe.list[:0]
			for _, x := range oe.list {
				if !x.gone {
					kept = append(kept, x)
				}
			}
			clear(oe.list[len(kept):])
			oe.list, oe.gone = kept, 0
		}
	}
	delete(s.eventsOf, chargeID)
}

// Events returns up to limit of owner's events after the one with id after, oldest first
// (payrouter.EventStore). Copies: the caller may change them.
func (s *Store) Events(ctx context.Context, owner, after string, limit int) ([]payrouter.Event, bool, error) {
	if err := s.usable(ctx); err != nil {
		return nil, false, err
	}
	s.chargeMu.RLock()
	defer s.chargeMu.RUnlock()
	oe := s.events[owner]
	start := 0
	if after != "" {
		e := s.eventByID[after]
		if e == nil || e.ev.Owner != owner || oe == nil {
			return nil, false, fmt.Errorf("memstore: event %q: %w", after, payrouter.ErrNotFound)
		}
		start = sort.Search(len(oe.list), func(i int) bool { return oe.list[i].seq > e.seq })
	}
	if oe == nil || limit <= 0 {
		return nil, false, nil
	}
	var out []payrouter.Event
	for _, e := range oe.list[start:] {
		if e.gone {
			continue
		}
		if len(out) == limit {
			return out, true, nil
		}
		ev := e.ev
		if ev.Charge != nil {
			ev.Charge = cloneCharge(ev.Charge)
		}
		if ev.Refund != nil {
			cp := *ev.Refund
			ev.Refund = &cp
		}
		out = append(out, ev)
	}
	return out, false, nil
}
