package memstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/payrouter/payrouter"
)

// queued is one task of the queue with its delivery state.
type queued struct {
	task     payrouter.Task
	handedAt time.Time // zero: never handed out
}

// ChangeRefund writes ch (payrouter.RefundStore): the refund from ch.From, its charge at its
// version, the task and the events, all under the store's locks, or nothing and
// payrouter.ErrStale.
func (s *Store) ChangeRefund(ctx context.Context, ch payrouter.RefundChange) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	r := ch.Refund
	if r == nil || r.ID == "" {
		return errors.New("memstore: change refund: no refund id")
	}
	if ch.Charge != nil {
		if err := checkCharge("change refund "+r.ID, ch.Charge); err != nil {
			return err
		}
		if ch.Charge.Stored.Version == 0 {
			return fmt.Errorf("memstore: change refund %s: its charge %s was never read from the store", r.ID, ch.Charge.ID)
		}
	}
	s.chargeMu.Lock()
	defer s.chargeMu.Unlock()
	if ch.Charge != nil {
		if err := s.current(ch.Charge); err != nil {
			return err
		}
	}
	s.queueMu.Lock()
	old := s.refunds[r.ID]
	var from payrouter.RefundStatus
	if old != nil {
		from = old.Status
	}
	if old == nil && ch.From != "" || old != nil && (ch.From == "" || from != ch.From) {
		s.queueMu.Unlock()
		return fmt.Errorf("memstore: refund %s is %q, not %q: %w", r.ID, from, ch.From, payrouter.ErrStale)
	}
	cp := *r
	switch {
	case old == nil:
		s.refundsOf[r.ChargeID] = append(s.refundsOf[r.ChargeID], r.ID)
		if pinning(r.Status) {
			s.pin(r.ChargeID)
		}
	case pinning(r.Status) && !pinning(old.Status):
		s.pin(r.ChargeID)
	case !pinning(r.Status) && pinning(old.Status):
		s.unpin(r.ChargeID)
	}
	s.refunds[r.ID] = &cp
	if ch.Task != nil {
		ch.Task.ID = s.enqueue(*ch.Task)
	}
	s.queueMu.Unlock()
	// Counted to its charge, with which it is dropped: never refused, since the refund's
	// request holds its key already and may have reached the gateway (WithBounds).
	e := s.entries[r.ChargeID]
	n := refundBytes(&cp)
	switch {
	case e == nil: // a refund of a charge not stored: its entry holds the refunds alone
		e = &chargeEntry{id: r.ChargeID, owner: r.Owner}
		s.entries[r.ChargeID] = e
		n += chargeFixedBytes
	case old != nil:
		n -= refundBytes(old)
	}
	for _, t := range payrouter.RefundEvents(from, r.Status) {
		ev := s.newEvent(t, nil, &cp)
		s.insertEvent(ev, r.ChargeID)
		n += eventBytes(&ev.ev)
	}
	e.bytes += n
	s.add(e.owner, n, false)
	if ch.Charge != nil {
		// Pinned above, while its refund is pending or queued: making room drops nothing of it.
		if err := s.putCharge(ch.Charge); err != nil {
			return err
		}
	}
	return nil
}

// Refund returns a copy of the refund with that id, or an error wrapping payrouter.ErrNotFound.
func (s *Store) Refund(ctx context.Context, id string) (*payrouter.Refund, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	r, ok := s.refunds[id]
	if !ok {
		return nil, fmt.Errorf("refund %q: %w", id, payrouter.ErrNotFound)
	}
	cp := *r
	return &cp, nil
}

// Enqueue adds a task. The queue lives in this process only: a restart loses what it holds,
// which is why a fleet, or anyone who queues refunds, runs on Redis.
func (s *Store) Enqueue(ctx context.Context, t payrouter.Task) (string, error) {
	if err := s.usable(ctx); err != nil {
		return "", err
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	return s.enqueue(t), nil
}

// enqueue adds a task and returns its id; queueMu must be held.
func (s *Store) enqueue(t payrouter.Task) string {
	s.queueSeq++
	t = cloneTask(t) // the caller's delivery is its own to change
	t.ID = fmt.Sprintf("%d-0", s.queueSeq)
	t.Deliveries = 0
	s.queue = append(s.queue, &queued{task: t})
	s.pin(t.ChargeID)
	return t.ID
}

// Take hands out up to max tasks whose NotBefore has come: those handed out more than idle ago
// and not acknowledged first, then those never handed out, each in the order they were queued.
func (s *Store) Take(ctx context.Context, consumer string, max int, idle time.Duration) ([]payrouter.Task, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	now := s.now()
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	var out []payrouter.Task
	take := func(q *queued) {
		q.handedAt = now
		q.task.Deliveries++
		out = append(out, cloneTask(q.task))
	}
	for _, q := range s.queue {
		if len(out) < max && !q.handedAt.IsZero() && now.Sub(q.handedAt) >= idle && !now.Before(q.task.NotBefore) {
			take(q)
		}
	}
	for _, q := range s.queue {
		if len(out) < max && q.handedAt.IsZero() && !now.Before(q.task.NotBefore) {
			take(q)
		}
	}
	return out, nil
}

// Ack removes the task with that id; an unknown id is no error (it was acknowledged already).
func (s *Store) Ack(ctx context.Context, id string) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	s.queue = slices.DeleteFunc(s.queue, func(q *queued) bool {
		if q.task.ID != id {
			return false
		}
		s.unpin(q.task.ChargeID)
		return true
	})
	return nil
}

// QueueDepth counts the tasks not acknowledged yet.
func (s *Store) QueueDepth(ctx context.Context) (int64, error) {
	if err := s.usable(ctx); err != nil {
		return 0, err
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	return int64(len(s.queue)), nil
}

// Tasks lists the tasks queued, due or not, handed out or not, in the order they were queued,
// without handing any out: what a test or a debugging session wants to see of the queue.
func (s *Store) Tasks() []payrouter.Task {
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	out := make([]payrouter.Task, len(s.queue))
	for i, q := range s.queue {
		out[i] = cloneTask(q.task)
	}
	return out
}
