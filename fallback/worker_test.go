package fallback_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/memstore"
)

// The worker's tests run in a synctest bubble: time.Sleep there moves the bubble's fake clock
// (which memstore reads too) as soon as every goroutine is blocked; nothing waits on a real clock.

// handler answers each task by its charge id and remembers what it was given.
type handler struct {
	mu      sync.Mutex
	answer  map[string]error
	seen    []string // "<charge id>#<delivery>"
	timeout time.Duration
}

func (h *handler) handle(ctx context.Context, t payrouter.Task) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = append(h.seen, fmt.Sprintf("%s#%d", t.ChargeID, t.Deliveries))
	if d, ok := ctx.Deadline(); ok {
		h.timeout = time.Until(d)
	}
	if t.ChargeID == "panics" {
		panic("a bad task")
	}
	return h.answer[t.ChargeID]
}

func (h *handler) Seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen...)
}

func enqueue(t *testing.T, q payrouter.Queue, charges ...string) {
	t.Helper()
	for _, c := range charges {
		if _, err := q.Enqueue(t.Context(), payrouter.Task{Kind: payrouter.TaskRefund, ChargeID: c}); err != nil {
			t.Fatal(err)
		}
	}
}

// refunds is the handlers of a worker that does refund tasks with h.
func refunds(h fallback.Handler) map[payrouter.TaskKind]fallback.Handler {
	return map[payrouter.TaskKind]fallback.Handler{payrouter.TaskRefund: h}
}

// running starts w in the bubble and returns its stop, which waits for Run to return.
func running(w *fallback.Worker) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

func sameList(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func TestWorkerAcksDoneTasksAndLeavesTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		h := &handler{answer: map[string]error{
			"later":  fmt.Errorf("%w: breaker open", fallback.ErrLater),
			"broken": errors.New("store down"),
		}}
		var mu sync.Mutex
		var depths []int64
		w := &fallback.Worker{Queue: store, Consumer: "a", Handlers: refunds(h.handle), Depth: func(n int64) {
			mu.Lock()
			defer mu.Unlock()
			depths = append(depths, n)
		}}
		enqueue(t, store, "done", "later", "broken", "panics")
		stop := running(w)
		defer stop()

		time.Sleep(fallback.DefaultInterval + fallback.DefaultInterval/2) // one round, at +1s
		synctest.Wait()
		if got, want := h.Seen(), []string{"done#1", "later#1", "broken#1", "panics#1"}; !sameList(got, want) {
			t.Fatalf("first round handled %v, want %v", got, want)
		}
		mu.Lock()
		reported := fmt.Sprint(depths)
		mu.Unlock()
		if n, _ := store.QueueDepth(t.Context()); n != 3 || reported != "[3]" {
			t.Errorf("depth %d, reported %s; want the done task acknowledged, 3 left", n, reported)
		}
		if h.timeout <= 0 || h.timeout > fallback.DefaultIdle/2 {
			t.Errorf("a handler ran with %v left; want a deadline within half of Idle", h.timeout)
		}

		// Left tasks come back once idle for Idle, not before: handed out at +1s, again at +11s.
		time.Sleep(fallback.DefaultIdle - 2*fallback.DefaultInterval) // +9.5s
		synctest.Wait()
		if n := len(h.Seen()); n != 4 {
			t.Fatalf("%d handled before Idle passed, want 4: %v", n, h.Seen())
		}
		time.Sleep(2 * fallback.DefaultInterval) // +11.5s
		synctest.Wait()
		if got, want := h.Seen()[4:], []string{"later#2", "broken#2", "panics#2"}; !sameList(got, want) {
			t.Errorf("after Idle handled %v, want %v", got, want)
		}
	})
}

func TestWorkerWake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		h := &handler{}
		w := &fallback.Worker{Queue: store, Consumer: "a", Handlers: refunds(h.handle), Interval: time.Hour}
		w.Wake() // before Run: kept, harmless
		stop := running(w)
		defer stop()
		synctest.Wait()
		enqueue(t, store, "fresh")
		start := time.Now()
		w.Wake()
		w.Wake() // a second wake while one is pending is the same one
		synctest.Wait()
		if got := h.Seen(); !sameList(got, []string{"fresh#1"}) || time.Since(start) != 0 {
			t.Errorf("after Wake handled %v at +%v, want the fresh task at once", got, time.Since(start))
		}
	})
}

// flakyQueue fails Take while down.
type flakyQueue struct {
	*memstore.Store
	mu   sync.Mutex
	down bool
}

func (q *flakyQueue) setDown(d bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.down = d
}

func (q *flakyQueue) Take(ctx context.Context, consumer string, max int, idle time.Duration) ([]payrouter.Task, error) {
	q.mu.Lock()
	down := q.down
	q.mu.Unlock()
	if down {
		return nil, errors.New("connection refused")
	}
	return q.Store.Take(ctx, consumer, max, idle)
}

// logLines counts log records by message.
type logLines struct {
	mu sync.Mutex
	n  map[string]int
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n[r.Message]++
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }
func (l *logLines) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[msg]
}

func TestWorkerSurvivesAStoreOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := &flakyQueue{Store: memstore.New(), down: true}
		logs := &logLines{n: map[string]int{}}
		h := &handler{}
		w := &fallback.Worker{Queue: q, Consumer: "a", Handlers: refunds(h.handle), Log: slog.New(logs)}
		enqueue(t, q, "waiting")
		stop := running(w)
		defer stop()

		time.Sleep(5*fallback.DefaultInterval + fallback.DefaultInterval/2)
		synctest.Wait()
		if len(h.Seen()) != 0 || logs.count("queue.store_failed") != 1 {
			t.Fatalf("store down for 5 rounds: handled %v, logged %d times; want nothing handled, one line", h.Seen(), logs.count("queue.store_failed"))
		}
		q.setDown(false)
		time.Sleep(fallback.DefaultInterval)
		synctest.Wait()
		if !sameList(h.Seen(), []string{"waiting#1"}) || logs.count("queue.store_recovered") != 1 {
			t.Errorf("store back: handled %v, recovered logged %d times", h.Seen(), logs.count("queue.store_recovered"))
		}
	})
}

// A batch whose handlers are slow is cut before a task could be handed out again while its
// handler still runs; the rest wait for a later round.
func TestWorkerCutsARoundBeforeTasksGoIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		var mu sync.Mutex
		var seen []string
		slow := func(ctx context.Context, t payrouter.Task) error {
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s#%d", t.ChargeID, t.Deliveries))
			mu.Unlock()
			<-ctx.Done() // a gateway that never answers: the handler's deadline ends it
			return fallback.ErrLater
		}
		w := &fallback.Worker{Queue: store, Consumer: "a", Handlers: refunds(slow), Idle: 10 * time.Second, Timeout: 4 * time.Second}
		enqueue(t, store, "one", "two", "three")
		stop := running(w)
		defer stop()
		time.Sleep(9*time.Second + 500*time.Millisecond)
		synctest.Wait()
		mu.Lock()
		got := append([]string(nil), seen...)
		mu.Unlock()
		// one: 0-4s, two: 4-8s; three would run until 12s, past the 10s idle: left.
		if !sameList(got, []string{"one#1", "two#1"}) {
			t.Errorf("handled %v, want one and two only", got)
		}
	})
}

func TestWorkerStopsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		started := make(chan struct{})
		w := &fallback.Worker{Queue: store, Consumer: "a", Handlers: refunds(func(ctx context.Context, _ payrouter.Task) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})}
		enqueue(t, store, "long")
		stop := running(w)
		<-started
		stop() // returns only once Run has: the handler's context ended with Run's
		if n, _ := store.QueueDepth(t.Context()); n != 1 {
			t.Errorf("depth %d, want the interrupted task kept", n)
		}
	})
}

// The worker runs a task of any kind by the handler of its kind, a kind that calls no gateway
// included, not before its NotBefore; a kind it has no handler for stays queued, logged.
func TestWorkerRunsEveryKindByItsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		const notify payrouter.TaskKind = "notify" // calls no gateway
		var mu sync.Mutex
		var seen []string
		record := func(_ context.Context, task payrouter.Task) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, string(task.Kind)+":"+task.ChargeID)
			return nil
		}
		logs := &logLines{n: map[string]int{}}
		w := &fallback.Worker{Queue: store, Consumer: "a", Log: slog.New(logs),
			Handlers: map[payrouter.TaskKind]fallback.Handler{payrouter.TaskRefund: record, notify: record}}
		for _, task := range []payrouter.Task{
			{Kind: notify, ChargeID: "ch_1"},
			{Kind: payrouter.TaskRefund, ChargeID: "ch_2"},
			{Kind: notify, ChargeID: "ch_later", NotBefore: time.Now().Add(5 * time.Second)},
			{Kind: "from_a_later_version", ChargeID: "ch_3"},
		} {
			if _, err := store.Enqueue(t.Context(), task); err != nil {
				t.Fatal(err)
			}
		}
		stop := running(w)
		defer stop()
		time.Sleep(fallback.DefaultInterval + fallback.DefaultInterval/2)
		synctest.Wait()
		mu.Lock()
		got := fmt.Sprint(seen)
		mu.Unlock()
		if got != "[notify:ch_1 refund:ch_2]" {
			t.Errorf("first round handled %s, want the notify and the refund task, not the one due later", got)
		}
		if n, _ := store.QueueDepth(t.Context()); n != 2 || logs.count("task.failed") != 1 {
			t.Errorf("depth %d, task.failed logged %d times; want the later one and the unknown kind kept, the unknown one logged", n, logs.count("task.failed"))
		}
		time.Sleep(15 * time.Second)
		synctest.Wait()
		mu.Lock()
		got = fmt.Sprint(seen)
		mu.Unlock()
		if got != "[notify:ch_1 refund:ch_2 notify:ch_later]" {
			t.Errorf("once due, handled %s, want the later notify too", got)
		}
	})
}
