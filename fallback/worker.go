package fallback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/payrouter/payrouter"
)

// Defaults of Worker.
const (
	DefaultInterval = time.Second
	DefaultIdle     = 10 * time.Second
	DefaultBatch    = 16
)

// Handler does one task: nil when it is done, ErrLater (wrapped or not) when it cannot be done
// now, another error when it failed (logged, and left for later too).
type Handler func(ctx context.Context, t payrouter.Task) error

// Worker drains a payrouter.Queue: every Interval it takes up to Batch tasks and hands each to
// the Handler of its kind, once its NotBefore has come. A task its handler is done with (nil) is
// acknowledged; ErrHandedOff leaves it to its handler, which moved it or goes on with it in the
// background; any other answer leaves it in the queue, to be handed out again once it has been
// idle for Idle, to this worker or to another instance's. Store errors are logged and never
// stop it: the queue is worked again next round.
type Worker struct {
	Queue payrouter.Queue
	// Consumer names this worker among the queue's consumers (the instance's name).
	Consumer string
	// Handlers do the tasks, one per kind (Handler): a kind that calls no gateway is handled
	// like any other. A task of a kind with no handler is left in the queue and logged, never
	// acknowledged undone: an instance of a later version, which knows it, does it.
	Handlers map[payrouter.TaskKind]Handler
	// Interval is how often the worker takes tasks; 0: DefaultInterval.
	Interval time.Duration
	// Idle is how long a task taken and not acknowledged waits before it is handed out again; it
	// must exceed the longest Handle, or a task is worked twice at once. 0: DefaultIdle.
	Idle time.Duration
	// Timeout bounds each Handle; 0 or more than half of Idle: half of Idle, so a task is never
	// handed out again while its handler still runs.
	Timeout time.Duration
	// Batch is the most tasks taken at once; 0: DefaultBatch.
	Batch int
	// Log receives a line per failure; nil: discarded.
	Log *slog.Logger
	// Depth, when set, is told the queue's depth after each round (payrouter_queue_depth).
	Depth func(int64)

	wakeOnce sync.Once
	wake     chan struct{}
	// idle, once SetIdle is called, replaces Idle.
	idle atomic.Int64
}

// SetIdle changes Idle while the worker runs: a reload changed the gateways' timeouts.
func (w *Worker) SetIdle(d time.Duration) { w.idle.Store(int64(d)) }

// settings returns the worker's settings with its zero values replaced by what they mean.
func (w *Worker) settings() (interval, idle, timeout time.Duration, batch int, log *slog.Logger) {
	interval, idle, timeout, batch, log = w.Interval, w.Idle, w.Timeout, w.Batch, w.Log
	if d := time.Duration(w.idle.Load()); d > 0 {
		idle = d
	}
	if interval <= 0 {
		interval = DefaultInterval
	}
	if idle <= 0 {
		idle = DefaultIdle
	}
	if timeout <= 0 || timeout > idle/2 {
		timeout = idle / 2
	}
	if batch <= 0 {
		batch = DefaultBatch
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return interval, idle, timeout, batch, log
}

func (w *Worker) wakeChan() chan struct{} {
	w.wakeOnce.Do(func() { w.wake = make(chan struct{}, 1) })
	return w.wake
}

// Wake makes the worker take tasks now rather than at its next tick: a task just queued is worked
// at once. It never blocks; wakes that come while one is pending are one.
func (w *Worker) Wake() {
	select {
	case w.wakeChan() <- struct{}{}:
	default:
	}
}

// Run works the queue until ctx ends. A handler under way when ctx ends is cancelled with it: its
// task is not acknowledged, and is handed out again later.
func (w *Worker) Run(ctx context.Context) {
	interval, _, _, _, _ := w.settings()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	wake := w.wakeChan()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-wake:
		}
		// A full batch may have more behind it: take again at once, for a while, rather than
		// letting a backlog wait a tick per batch (tasks due now queue behind it).
		for range drainRounds {
			var full bool
			failing, full = w.round(ctx, failing)
			if !full || ctx.Err() != nil {
				break
			}
		}
	}
}

// drainRounds bounds the rounds one tick runs back to back while each takes a full batch.
const drainRounds = 20

// round takes one batch and works it. failing says whether the store failed in the last round:
// a store that is down is logged when it goes down and when it is back, not every round. full
// reports whether it took a whole batch and worked every task of it.
func (w *Worker) round(ctx context.Context, failing bool) (stillFailing, full bool) {
	_, idle, timeout, batch, log := w.settings()
	storeErr := func(what string, err error) {
		if ctx.Err() != nil {
			return // stopping: not the store's fault
		}
		if !stillFailing && !failing {
			log.Warn("queue.store_failed", "consumer", w.Consumer, "op", what, "err", err)
		}
		stillFailing = true
	}

	takenAt := time.Now()
	cut := false
	tasks, err := w.Queue.Take(ctx, w.Consumer, batch, idle)
	if err != nil {
		storeErr("take", err)
	}
	for i, t := range tasks {
		// Another consumer may take a task once it has been idle for Idle since this Take: a
		// handler that could still run then is not started, and the rest wait for the next round.
		if time.Since(takenAt)+timeout > idle {
			log.Info("queue.round_cut", "consumer", w.Consumer, "left", len(tasks)-i)
			cut = true
			break
		}
		err := w.handle(ctx, t, timeout)
		switch {
		case ctx.Err() != nil:
			// Stopping: whatever the handler said, its task is left for later, without a word.
			return stillFailing || failing, false
		case errors.Is(err, ErrHandedOff):
			// The handler moved the task itself, or goes on with it.
		case err == nil:
			if aerr := w.Queue.Ack(ctx, t.ID); aerr != nil {
				// Handed out again after Idle: handlers send the same reference every time, so
				// the gateway does it once.
				storeErr("ack", aerr)
			}
		case errors.Is(err, ErrLater):
			log.Debug("task.later", "task", t.Kind, "task_id", t.ID, "charge_id", t.ChargeID, "deliveries", t.Deliveries, "reason", err)
		default:
			log.Error("task.failed", "task", t.Kind, "task_id", t.ID, "charge_id", t.ChargeID, "gateway", t.Gateway,
				"deliveries", t.Deliveries, "err", err)
		}
	}
	if w.Depth != nil && ctx.Err() == nil {
		if n, err := w.Queue.QueueDepth(ctx); err != nil {
			storeErr("depth", err)
		} else {
			w.Depth(n)
		}
	}
	if failing && !stillFailing {
		log.Info("queue.store_recovered", "consumer", w.Consumer)
	}
	return stillFailing, len(tasks) == batch && !cut
}

// handle runs its kind's handler on one task within timeout; a panic is the task's failure, not the worker's.
func (w *Worker) handle(ctx context.Context, t payrouter.Task, timeout time.Duration) (err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("task handler panicked: %v", p)
		}
	}()
	h := w.Handlers[t.Kind]
	if h == nil {
		return fmt.Errorf("%w: no handler for task kind %q in this version", ErrUnknownKind, t.Kind)
	}
	if time.Now().Before(t.NotBefore) {
		return ErrLater
	}
	return h(ctx, t)
}

// ErrUnknownKind is the failure of a task whose kind this worker has no handler for: it is
// left in the queue, and logged.
var ErrUnknownKind = errors.New("unknown task kind")
