package statestore

import (
	"context"
	"strings"
	"time"

	"github.com/payrouter/payrouter"
)

// The queue has two halves: the shared queue, and a local one (a memstore of its own) for tasks
// queued while the shared store is down. Local tasks carry ids that start with localTaskPrefix,
// which no shared store's id does (a Redis stream id is digits and a dash), so Ack knows where
// a task lives from its id alone, whether the store is up or down by then.
//
// A local task stays local until it is acknowledged or the re-sync moves it to the shared queue
// (Enqueue there, then Ack here). Meanwhile it is handed out by Take, down or up, so that
// nothing queued during an outage waits for the re-sync. A local task in a worker's hands (handed
// out less than the Take's idle ago) is not moved: it would be handed out twice.
//
// A shared task acknowledged while the shared store is down is remembered and acknowledged there
// by the re-sync, before the store is up again, so that it is not worked again.

// localTaskPrefix starts the id of every task of the local queue.
const localTaskPrefix = "local:"

// localTask is a task of the local queue, as it was enqueued, and until when it is in the hands
// of the worker it was last handed to (zero: never handed out).
type localTask struct {
	task      payrouter.Task
	heldUntil time.Time
}

// Enqueue adds t to the shared queue while it is up, and to the local queue while it is down or
// when the shared store fails this very call.
func (s *Store) Enqueue(ctx context.Context, t payrouter.Task) (string, error) {
	if s.up.Load() {
		id, err := s.primary.Enqueue(ctx, t)
		if !s.fallBack(ctx, err) {
			return id, err
		}
	}
	s.mu.Lock()
	id, err := s.queue.Enqueue(ctx, t)
	if err == nil {
		t.ID, t.Deliveries = "", 0
		s.tasks[id] = localTask{task: t}
	}
	s.mu.Unlock()
	if err != nil {
		return "", err
	}
	if s.up.Load() {
		signal(s.pushSoon)
	}
	return localTaskPrefix + id, nil
}

// Take hands consumer up to max tasks. While the shared store is up they are the shared queue's,
// then, to fill max, local ones left from an outage; while it is down, or when it fails this very
// call, local ones only.
func (s *Store) Take(ctx context.Context, consumer string, max int, idle time.Duration) ([]payrouter.Task, error) {
	var tasks []payrouter.Task
	if s.up.Load() {
		got, err := s.primary.Take(ctx, consumer, max, idle)
		if err == nil {
			tasks = got
		} else if !s.fallBack(ctx, err) {
			return nil, err
		}
	}
	if len(tasks) >= max {
		return tasks, nil
	}
	local, err := s.takeLocal(ctx, consumer, max-len(tasks), idle)
	if err != nil {
		if len(tasks) > 0 {
			// The shared tasks are handed out already: returned, they are worked now rather than
			// after idle. The local ones wait for the next Take.
			return tasks, nil
		}
		return nil, err
	}
	return append(tasks, local...), nil
}

// takeLocal hands out up to max tasks of the local queue, with their local ids, and records
// until when each is in its worker's hands.
func (s *Store) takeLocal(ctx context.Context, consumer string, max int, idle time.Duration) ([]payrouter.Task, error) {
	s.takeMu.Lock()
	defer s.takeMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tasks) == 0 {
		return nil, nil
	}
	got, err := s.queue.Take(ctx, consumer, max, idle)
	if err != nil {
		return nil, err
	}
	heldUntil := time.Now().Add(idle)
	for i := range got {
		if lt, ok := s.tasks[got[i].ID]; ok {
			lt.heldUntil = heldUntil
			s.tasks[got[i].ID] = lt
		}
		got[i].ID = localTaskPrefix + got[i].ID
	}
	return got, nil
}

// Ack removes a task that is done: from the local queue for a local id, else from the shared
// queue, or, while the shared store is down, once it is up again (the re-sync acknowledges it
// there). An unknown id is no error.
func (s *Store) Ack(ctx context.Context, id string) error {
	if local, ok := strings.CutPrefix(id, localTaskPrefix); ok {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.queue.Ack(ctx, local); err != nil {
			return err
		}
		delete(s.tasks, local)
		return nil
	}
	if s.up.Load() {
		err := s.primary.Ack(ctx, id)
		if !s.fallBack(ctx, err) {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	s.acks[id] = struct{}{}
	s.mu.Unlock()
	if s.up.Load() {
		signal(s.pushSoon)
	}
	return nil
}

// QueueDepth counts the tasks not acknowledged yet: the shared queue's and the local queue's
// while the shared store is up, the local queue's only while it is down (the shared queue's
// tasks cannot be counted then).
func (s *Store) QueueDepth(ctx context.Context) (int64, error) {
	s.mu.Lock()
	local, err := s.queue.QueueDepth(ctx)
	s.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if s.up.Load() {
		n, err := s.primary.QueueDepth(ctx)
		if err == nil {
			return n + local, nil
		}
		if !s.fallBack(ctx, err) {
			return 0, err
		}
	}
	return local, nil
}

// pushTask moves the local task with that id to the shared queue, unless it was acknowledged
// meanwhile or is in a worker's hands; pushed says whether it moved. It holds takeMu across the
// shared store's Enqueue (one bounded call), so no local Take can hand the task out between the
// check and the move.
func (s *Store) pushTask(ctx context.Context, id string, now time.Time) (pushed bool, err error) {
	s.takeMu.Lock()
	defer s.takeMu.Unlock()
	s.mu.Lock()
	lt, ok := s.tasks[id]
	s.mu.Unlock()
	if !ok || now.Before(lt.heldUntil) {
		return false, nil
	}
	if _, err := s.primary.Enqueue(ctx, lt.task); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Without ctx's end: the task is in the shared queue now, and left here too it would be
	// pushed, and worked, twice. The local store fails only when closed.
	_ = s.queue.Ack(context.WithoutCancel(ctx), id)
	delete(s.tasks, id)
	return true, nil
}
