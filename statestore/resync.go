package statestore

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/memstore"
)

// The re-sync pushes to the shared store what was written locally, and forgets what it pushed.
// Only Run's goroutine pushes, so two copies of one charge or forced state are never pushed at
// once, and the version check below keeps anything written locally during a push pending.
//
//   - A charge saved locally is saved to the shared store: the local copy is the newer one,
//     since every save of a pending charge goes to it. So is a refund saved locally.
//   - An idempotency record completed locally is Completed on the shared store, with what is
//     left of its ttl. Complete keeps the first record, so when another instance stored one for
//     the key during the outage, that one stays and is what every instance replays.
//   - A key claimed on the shared store before the outage and released during it is released
//     there, while its claim has not expired: until then it is still this instance's claim, so
//     the release cannot touch another instance's.
//   - A forced state set locally is set on the shared store with SetForced, which does not
//     publish it: other instances learn it at their next refresh.
//   - A shared task acknowledged while down is acknowledged there, before the local tasks are
//     moved, so that the store never comes up offering work already done.
//   - A task of the local queue not acknowledged yet is enqueued on the shared store, then
//     acknowledged locally (queue.go, pushTask), unless it is in a worker's hands: it is moved
//     at a later push if its worker does not acknowledge it in time. A task moved gets a shared
//     id and starts its deliveries again; the worker of a local id acknowledges it locally.
//
// What fails to push stays pending and is pushed again at the next push: every CheckUp while up,
// and at the next re-sync. Keys claimed locally and still in flight stay local; their Complete
// is queued and pushed at once.

// pushStats counts what one push saved to the shared store, and what is still pending after it.
type pushStats struct {
	charges, refunds, records, releases, forced, acks, tasks, left int
}

// pending reports whether anything waits to be pushed.
func (s *Store) pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pendingLocked() > 0
}

// push pushes everything pending once. It stops at the first error saying the shared store is
// unavailable and returns it; other errors are logged and leave their item pending.
func (s *Store) push(ctx context.Context) (st pushStats, err error) {
	forgot := false
	defer func() {
		if forgot {
			s.compact()
		}
		st.left = s.pendingCount()
	}()

	s.mu.Lock()
	releases := maps.Clone(s.releases)
	charges := maps.Clone(s.charges)
	refunds := maps.Clone(s.refunds)
	acks := maps.Clone(s.acks)
	tasks := slices.Collect(maps.Keys(s.tasks))
	records := maps.Clone(s.records)
	forced := maps.Clone(s.forced)
	s.mu.Unlock()

	for key, expires := range releases {
		if time.Now().Before(expires) {
			err := s.primary.Release(ctx, key)
			if stop := s.pushFailed(ctx, err, "release", key); stop != nil {
				return st, stop
			}
			if err != nil {
				continue
			}
			st.releases++
		}
		s.forget(func() bool {
			if s.releases[key] != expires {
				return false
			}
			delete(s.releases, key)
			return true
		})
	}

	for id, version := range charges {
		c, err := s.localCharge(ctx, id)
		if err != nil {
			if errors.Is(err, payrouter.ErrNotFound) {
				continue // a pending charge is always kept locally; nothing to push
			}
			return st, err // the local store is closed, or ctx ended
		}
		err = s.primary.SaveCharge(ctx, c)
		if stop := s.pushFailed(ctx, err, "charge", id); stop != nil {
			return st, stop
		}
		if err != nil {
			continue
		}
		st.charges++
		forgot = s.forget(func() bool {
			if s.charges[id] != version {
				return false // saved again meanwhile: the newer copy is pushed next time
			}
			delete(s.charges, id)
			return true
		}) || forgot
	}

	for id, version := range refunds {
		r, err := s.localRefund(ctx, id)
		if err != nil {
			if errors.Is(err, payrouter.ErrNotFound) {
				continue // a pending refund is always kept locally; nothing to push
			}
			return st, err // the local store is closed, or ctx ended
		}
		err = s.primary.SaveRefund(ctx, r)
		if stop := s.pushFailed(ctx, err, "refund", id); stop != nil {
			return st, stop
		}
		if err != nil {
			continue
		}
		st.refunds++
		forgot = s.forget(func() bool {
			if s.refunds[id] != version {
				return false // saved again meanwhile: the newer copy is pushed next time
			}
			delete(s.refunds, id)
			return true
		}) || forgot
	}

	for key, r := range records {
		if left := time.Until(r.expires); left > 0 {
			err := s.primary.Complete(ctx, key, r.rec, left)
			if stop := s.pushFailed(ctx, err, "idempotency record", key); stop != nil {
				return st, stop
			}
			if err != nil {
				continue
			}
			st.records++
		}
		forgot = s.forget(func() bool {
			if cur, ok := s.records[key]; !ok || !cur.expires.Equal(r.expires) {
				return false
			}
			delete(s.records, key)
			return true
		}) || forgot
	}

	for breaker, p := range forced {
		err := s.primary.SetForced(ctx, breaker, p.f)
		if stop := s.pushFailed(ctx, err, "forced state", breaker); stop != nil {
			return st, stop
		}
		if err != nil {
			continue
		}
		st.forced++
		s.forget(func() bool {
			if s.forced[breaker].version != p.version {
				return false
			}
			delete(s.forced, breaker)
			return true
		})
	}

	for id := range acks {
		err := s.primary.Ack(ctx, id)
		if stop := s.pushFailed(ctx, err, "task ack", id); stop != nil {
			return st, stop
		}
		if err != nil {
			continue
		}
		st.acks++
		s.forget(func() bool {
			delete(s.acks, id)
			return true
		})
	}

	now := time.Now()
	for _, id := range tasks {
		pushed, err := s.pushTask(ctx, id, now)
		if stop := s.pushFailed(ctx, err, "task", localTaskPrefix+id); stop != nil {
			return st, stop
		}
		if pushed {
			st.tasks++
		}
	}
	return st, nil
}

// pushFailed returns err when it stops the push (the shared store is unavailable, or ctx
// ended), and logs any other error, whose item stays pending.
func (s *Store) pushFailed(ctx context.Context, err error, kind, id string) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case s.o.Unavailable(err):
		return err
	}
	s.o.Log.Warn("state_store.push_failed", "kind", kind, "id", id, "err", err)
	return nil
}

// forget runs drop under mu and returns what it returns.
func (s *Store) forget(drop func() bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return drop()
}

func (s *Store) pendingCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pendingLocked()
}

// pendingLocked counts what waits to be pushed; the caller holds mu.
func (s *Store) pendingLocked() int {
	return len(s.charges) + len(s.refunds) + len(s.records) + len(s.releases) + len(s.forced) +
		len(s.acks) + len(s.tasks)
}

// compact swaps the local store for a fresh one holding only what is still pending, the keys
// claimed locally and the forced-state mirror: what was pushed is forgotten, so memory does not
// grow with every outage (the local store cannot delete a charge or a refund). The local queue
// is not in it: Ack deletes its tasks.
func (s *Store) compact() {
	s.localMu.Lock()
	defer s.localMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return
	}
	// Background: this is the Store's own bookkeeping. Errors would come only from a closed
	// store, and everything copied was accepted by a memstore once already.
	ctx := context.Background()
	now := time.Now()
	fresh := memstore.New()
	for id := range s.charges {
		if c, err := s.local.Charge(ctx, id); err == nil {
			_ = fresh.SaveCharge(ctx, c)
		}
	}
	for id := range s.refunds {
		if r, err := s.local.Refund(ctx, id); err == nil {
			_ = fresh.SaveRefund(ctx, r)
		}
	}
	for key, r := range s.records {
		if left := r.expires.Sub(now); left > 0 {
			_ = fresh.Complete(ctx, key, r.rec, left)
		}
	}
	for key, c := range s.claims {
		if left := c.expires.Sub(now); c.local && left > 0 {
			_, _ = fresh.Claim(ctx, key, c.fingerprint, left)
		}
	}
	if forced, err := s.local.ForcedStates(ctx); err == nil {
		for b, f := range forced {
			_ = fresh.SetForced(ctx, b, f)
		}
	}
	s.local = fresh
}

// prune forgets claims, records and releases whose time has passed: a handler that never
// completes or releases its key must not make the map grow forever.
func (s *Store) prune(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, c := range s.claims {
		if !now.Before(c.expires) {
			delete(s.claims, key)
		}
	}
	for key, r := range s.records {
		if !now.Before(r.expires) {
			delete(s.records, key)
		}
	}
	for key, expires := range s.releases {
		if !now.Before(expires) {
			delete(s.releases, key)
		}
	}
}
