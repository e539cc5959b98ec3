package statestore

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/redisstore"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

// holdIdle is an idle time longer than any test: a task taken with it stays in its worker's
// hands for the whole test.
const holdIdle = time.Hour

func task(chargeID string) payrouter.Task {
	return payrouter.Task{Kind: payrouter.TaskRefund, Gateway: "paywell", ChargeID: chargeID,
		RefundID: "re_" + chargeID, Amount: 500, Currency: "USD", CreatedAt: base}
}

func mustEnqueue(t *testing.T, s payrouter.Queue, task payrouter.Task) string {
	t.Helper()
	id, err := s.Enqueue(t.Context(), task)
	if err != nil {
		t.Fatalf("Enqueue(%s): %v", task.ChargeID, err)
	}
	return id
}

func mustTake(t *testing.T, s payrouter.Queue, consumer string, max int, idle time.Duration) []payrouter.Task {
	t.Helper()
	got, err := s.Take(t.Context(), consumer, max, idle)
	if err != nil {
		t.Fatalf("Take(%s): %v", consumer, err)
	}
	return got
}

func mustAck(t *testing.T, s payrouter.Queue, id string) {
	t.Helper()
	if err := s.Ack(t.Context(), id); err != nil {
		t.Fatalf("Ack(%s): %v", id, err)
	}
}

func wantDepth(t *testing.T, s payrouter.Queue, want int64) {
	t.Helper()
	got, err := s.QueueDepth(t.Context())
	if err != nil {
		t.Fatalf("QueueDepth: %v", err)
	}
	if got != want {
		t.Fatalf("QueueDepth = %d, want %d", got, want)
	}
}

// chargesOf lists the tasks' charge ids, sorted, to compare what was handed out.
func chargesOf(tasks []payrouter.Task) []string {
	var ids []string
	for _, t := range tasks {
		ids = append(ids, t.ChargeID)
	}
	slices.Sort(ids)
	return ids
}

// TestQueueWhileDown: tasks and refunds are served locally, at once, without calling the
// primary, and local tasks carry ids that say so.
func TestQueueWhileDown(t *testing.T) {
	h := start(t, newFake())
	mustEnqueue(t, h, task("ch_before")) // in the primary, out of reach during the outage
	h.goDown(t)
	calls := h.fake.calls.Load()

	id := mustEnqueue(t, h, task("ch_out"))
	if !strings.HasPrefix(id, localTaskPrefix) {
		t.Fatalf("Enqueue while down = %q, want a local id (%s...)", id, localTaskPrefix)
	}
	wantDepth(t, h, 1) // the shared queue's tasks cannot be counted while down
	got := mustTake(t, h, "w1", 10, holdIdle)
	if len(got) != 1 || got[0].ID != id || got[0].ChargeID != "ch_out" || got[0].Deliveries != 1 {
		t.Fatalf("Take while down = %+v, want only the local task %s, delivered once", got, id)
	}
	if again := mustTake(t, h, "w2", 10, holdIdle); len(again) != 0 {
		t.Fatalf("Take while the task is held = %+v, want none", again)
	}
	mustAck(t, h, id)
	wantDepth(t, h, 0)

	r := &payrouter.Refund{ID: "re_out", ChargeID: "ch_out", Amount: 500, Currency: "USD", Status: payrouter.RefundQueued}
	if err := h.SaveRefund(t.Context(), r); err != nil {
		t.Fatalf("SaveRefund while down: %v", err)
	}
	if got, err := h.Refund(t.Context(), "re_out"); err != nil || got.Status != payrouter.RefundQueued {
		t.Fatalf("Refund while down = %+v, %v; want the refund saved locally", got, err)
	}
	if _, err := h.Refund(t.Context(), "re_missing"); !errors.Is(err, payrouter.ErrNotFound) {
		t.Fatalf("Refund(re_missing) while down = %v, want ErrNotFound", err)
	}

	if n := h.fake.calls.Load() - calls; n != 0 {
		t.Fatalf("the primary was called %d times while down, want never", n)
	}
}

// TestQueueResync: when the primary returns, the re-sync moves the local tasks nobody holds to
// it, saves the refunds saved locally, and acknowledges there what was acknowledged while it was
// down; a local task in a worker's hands stays local, and its worker acknowledges it locally.
func TestQueueResync(t *testing.T) {
	h := start(t, newFake())
	primary := h.fake.Store
	doneID := mustEnqueue(t, h, task("ch_done"))
	if got := mustTake(t, h, "w1", 10, holdIdle); len(got) != 1 || got[0].ID != doneID {
		t.Fatalf("Take = %+v, want %s", got, doneID)
	}
	h.goDown(t)

	mustAck(t, h, doneID) // worked during the outage: acknowledged when the primary is back
	freeID := mustEnqueue(t, h, task("ch_free"))
	heldID := mustEnqueue(t, h, task("ch_held"))
	got := mustTake(t, h, "w1", 10, holdIdle)
	if ids := chargesOf(got); !slices.Equal(ids, []string{"ch_free", "ch_held"}) {
		t.Fatalf("Take while down = %v, want both local tasks", ids)
	}
	mustAck(t, h, freeID) // done; only ch_held stays, in w1's hands
	freeID2 := mustEnqueue(t, h, task("ch_free2"))
	if err := h.SaveRefund(t.Context(), &payrouter.Refund{ID: "re_out", ChargeID: "ch_free2", Amount: 500,
		Currency: "USD", Status: payrouter.RefundQueued}); err != nil {
		t.Fatal(err)
	}

	h.comeUp(t)
	waitFor(t, "state_store.up logged", func() bool { return logCount(h.log.String(), "state_store.up") == 1 })
	if got := h.log.String(); !strings.Contains(got, "pushed_tasks=1") || !strings.Contains(got, "pushed_acks=1") {
		t.Fatalf("state_store.up does not count the task and the ack pushed; log:\n%s", got)
	}

	t.Run("the free local task is in the primary", func(t *testing.T) {
		got := mustTake(t, primary, "other-instance", 10, holdIdle)
		if len(got) != 1 || got[0].ChargeID != "ch_free2" || strings.HasPrefix(got[0].ID, localTaskPrefix) {
			t.Fatalf("the primary hands out %+v, want only ch_free2 (ch_done was acknowledged)", got)
		}
		mustAck(t, primary, got[0].ID)
	})
	t.Run("the refund saved during the outage is in the primary", func(t *testing.T) {
		r, err := primary.Refund(t.Context(), "re_out")
		if err != nil || r.Status != payrouter.RefundQueued {
			t.Fatalf("primary's Refund(re_out) = %+v, %v", r, err)
		}
	})
	t.Run("the held local task stays local, and its worker acknowledges it", func(t *testing.T) {
		wantDepth(t, h, 1)
		if n, _ := primary.QueueDepth(t.Context()); n != 0 {
			t.Fatalf("primary's QueueDepth = %d, want 0: ch_held is in w1's hands", n)
		}
		mustAck(t, h, heldID)
		wantDepth(t, h, 0)
		waitFor(t, "nothing pending", func() bool { return !h.pending() })
		if n, _ := primary.QueueDepth(t.Context()); n != 0 {
			t.Fatalf("primary's QueueDepth = %d after the local ack, want 0", n)
		}
	})
	t.Run("an id acknowledged twice is no error", func(t *testing.T) {
		mustAck(t, h, freeID2)
		mustAck(t, h, heldID)
	})
}

// TestLocalTasksServedWhileUp: a local task left over from an outage (in a worker's hands when
// the primary came back) is handed out again once idle, with the primary's tasks, while the
// primary is up: it never waits for the re-sync. max counts both.
func TestLocalTasksServedWhileUp(t *testing.T) {
	h := start(t, newFake())
	h.goDown(t)
	localID := mustEnqueue(t, h, task("ch_local"))
	if got := mustTake(t, h, "crashed-worker", 10, holdIdle); len(got) != 1 {
		t.Fatalf("Take while down = %+v, want the local task", got)
	}
	h.comeUp(t)
	sharedID := mustEnqueue(t, h, task("ch_shared"))
	if strings.HasPrefix(sharedID, localTaskPrefix) {
		t.Fatalf("Enqueue while up = %q, want the primary's id", sharedID)
	}
	wantDepth(t, h, 2)

	if got := mustTake(t, h, "w", 1, 0); len(got) != 1 || got[0].ID != sharedID {
		t.Fatalf("Take(max 1) = %+v, want only the primary's task", got)
	}
	// Idle 0: everything handed out before comes back, the primary's and the local one.
	got := mustTake(t, h, "w", 10, 0)
	if ids := chargesOf(got); !slices.Equal(ids, []string{"ch_local", "ch_shared"}) {
		t.Fatalf("Take = %+v, want ch_local and ch_shared", got)
	}
	for _, task := range got {
		if task.Deliveries != 2 {
			t.Errorf("%s handed out with Deliveries %d, want 2", task.ChargeID, task.Deliveries)
		}
		if task.ChargeID == "ch_local" && task.ID != localID {
			t.Errorf("ch_local handed out as %s, want its local id %s", task.ID, localID)
		}
	}
	mustAck(t, h, localID)
	mustAck(t, h, sharedID)
	wantDepth(t, h, 0)
}

// TestQueueRedisOutage: with a real redis-server killed and started again, a task queued while
// it is down is queued locally at once, moved to Redis by the re-sync, and taken there by
// another instance.
func TestQueueRedisOutage(t *testing.T) {
	srv := redistest.Start(t)
	o := redisstore.Options{Timeout: 100 * time.Millisecond, Prefix: "outage:"}
	rs, err := redisstore.Open(srv.URL(), o)
	if err != nil {
		t.Fatalf("redisstore.Open: %v", err)
	}
	s := New(rs, Options{Unavailable: redisstore.IsUnavailable, CheckDown: 20 * time.Millisecond, CheckUp: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		s.Close()
	})

	srv.Stop()
	start := time.Now()
	id := mustEnqueue(t, s, task("ch_out"))
	if took := time.Since(start); took >= time.Second {
		t.Fatalf("Enqueue while Redis is down took %v, want well under a second", took)
	}
	if !strings.HasPrefix(id, localTaskPrefix) || s.Up() {
		t.Fatalf("Enqueue while Redis is down = %q, up %v; want a local id, and the store down", id, s.Up())
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Up after Redis restarts", s.Up)
	wantDepth(t, s, 1) // in Redis now, not counted twice

	other, err := redisstore.Open(srv.URL(), redisstore.Options{Timeout: time.Second, Prefix: o.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	got := mustTake(t, other, "other-instance", 10, holdIdle)
	if len(got) != 1 || got[0].ChargeID != "ch_out" || got[0].RefundID != "re_ch_out" || !got[0].CreatedAt.Equal(base) ||
		strings.HasPrefix(got[0].ID, localTaskPrefix) || got[0].Deliveries != 1 {
		t.Fatalf("another instance took %+v, want ch_out with a Redis id, delivered once", got)
	}
	mustAck(t, other, got[0].ID)
	wantDepth(t, s, 0)
}
