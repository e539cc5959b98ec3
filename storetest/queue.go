package storetest

import (
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// The queue's idle times. holdIdle is longer than any test, so a task taken with it is never
// handed out again during the test; shortIdle is short enough to wait for with polling, as the
// stores keep their own time (a Redis server's clock, not the test's).
const (
	holdIdle  = time.Hour
	shortIdle = 100 * time.Millisecond
)

// unknownTaskID is a well-formed id no store ever gives: a Redis stream id of 1970, and a
// sequence number memstore never uses.
const unknownTaskID = "1-1"

// newTask returns a task with every stored field set, so that a store losing any of them is
// caught; TestNewTaskSetsEveryField fails when a new field is not set. n tells tasks apart.
func newTask(n int) payrouter.Task {
	return payrouter.Task{
		Kind:             payrouter.TaskRecheck,
		Gateway:          "tranglo",
		ChargeID:         fmt.Sprintf("ch_task_%d", n),
		RefundID:         fmt.Sprintf("re_task_%d", n),
		Reference:        payrouter.AttemptReference(fmt.Sprintf("ch_task_%d", n), 1),
		GatewayReference: "T-9981",
		Amount:           1999,
		Currency:         "USD",
		Webhook: &payrouter.WebhookDelivery{
			ID: "whd_X", Endpoint: "shop", EventID: "evt_X", EventType: payrouter.EventChargeSucceeded, EventAt: base,
			Body: []byte(`{"id":"evt_X"}`), Attempt: 3, Deferrals: 2, LastError: "answered 500", LastStatus: 500, LastAttemptAt: base,
		},
		NotBefore: base.Add(5*time.Minute + 123456789*time.Nanosecond),
		CreatedAt: base.Add(987654321 * time.Nanosecond),
	}
}

// diffTask describes how got differs from want, the task as enqueued with id, taken for the
// deliveries-th time, or returns "". Times are compared as instants.
func diffTask(got, want payrouter.Task, id string, deliveries int) string {
	switch {
	case got.ID != id:
		return fmt.Sprintf("ID = %q, want %q", got.ID, id)
	case got.Deliveries != deliveries:
		return fmt.Sprintf("Deliveries = %d, want %d", got.Deliveries, deliveries)
	case !got.NotBefore.Equal(want.NotBefore):
		return fmt.Sprintf("NotBefore = %v, want %v", got.NotBefore, want.NotBefore)
	case !got.CreatedAt.Equal(want.CreatedAt):
		return fmt.Sprintf("CreatedAt = %v, want %v", got.CreatedAt, want.CreatedAt)
	}
	got.ID, got.Deliveries, got.NotBefore, got.CreatedAt = "", 0, time.Time{}, time.Time{}
	want.ID, want.Deliveries, want.NotBefore, want.CreatedAt = "", 0, time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		return fmt.Sprintf("\n got %+v\nwant %+v", got, want)
	}
	return ""
}

func mustEnqueue(t *testing.T, s payrouter.Store, task payrouter.Task) string {
	t.Helper()
	id, err := s.Enqueue(t.Context(), task)
	if err != nil {
		t.Fatalf("Enqueue(%s): %v", task.ChargeID, err)
	}
	if id == "" {
		t.Fatalf("Enqueue(%s) returned an empty id", task.ChargeID)
	}
	return id
}

func mustTake(t *testing.T, s payrouter.Store, consumer string, max int, idle time.Duration) []payrouter.Task {
	t.Helper()
	got, err := s.Take(t.Context(), consumer, max, idle)
	if err != nil {
		t.Fatalf("Take(%s, %d, %v): %v", consumer, max, idle, err)
	}
	if len(got) > max {
		t.Fatalf("Take(%s, %d, %v) handed out %d tasks, more than max", consumer, max, idle, len(got))
	}
	return got
}

func mustAck(t *testing.T, s payrouter.Store, id string) {
	t.Helper()
	if err := s.Ack(t.Context(), id); err != nil {
		t.Fatalf("Ack(%s): %v", id, err)
	}
}

func wantDepth(t *testing.T, s payrouter.Store, want int64) {
	t.Helper()
	got, err := s.QueueDepth(t.Context())
	if err != nil {
		t.Fatalf("QueueDepth: %v", err)
	}
	if got != want {
		t.Fatalf("QueueDepth = %d, want %d", got, want)
	}
}

func taskIDs(tasks []payrouter.Task) []string {
	ids := make([]string, len(tasks))
	for i, task := range tasks {
		ids[i] = task.ID
	}
	return ids
}

func testQueueEmpty(t *testing.T, s payrouter.Store) {
	wantDepth(t, s, 0)
	if got := mustTake(t, s, "c1", 10, 0); len(got) != 0 {
		t.Fatalf("Take from an empty queue = %v, want none", taskIDs(got))
	}
}

func testQueueEnqueueAndTake(t *testing.T, s payrouter.Store) {
	want := newTask(1)
	id := mustEnqueue(t, s, want)
	wantDepth(t, s, 1)

	got := mustTake(t, s, "c1", 10, holdIdle)
	if len(got) != 1 {
		t.Fatalf("Take = %v, want the one task enqueued (%s)", taskIDs(got), id)
	}
	if d := diffTask(got[0], want, id, 1); d != "" {
		t.Fatalf("Take after Enqueue: %s", d)
	}
	wantDepth(t, s, 1) // taken is not done

	t.Run("not handed out again before idle", func(t *testing.T) {
		for _, consumer := range []string{"c1", "c2"} {
			if again := mustTake(t, s, consumer, 10, holdIdle); len(again) != 0 {
				t.Fatalf("Take(%s) right after the task was taken = %v, want none", consumer, taskIDs(again))
			}
		}
	})
	t.Run("ack removes it", func(t *testing.T) {
		mustAck(t, s, id)
		wantDepth(t, s, 0)
		if again := mustTake(t, s, "c2", 10, 0); len(again) != 0 {
			t.Fatalf("Take after Ack = %v, want none", taskIDs(again))
		}
	})
	t.Run("ack again is no error", func(t *testing.T) {
		mustAck(t, s, id)
		wantDepth(t, s, 0)
	})
}

// testQueueHandedOutAgain: a task taken and never acknowledged, as by a consumer that crashed,
// comes back once idle, to another consumer and to the same one, counting its deliveries.
func testQueueHandedOutAgain(t *testing.T, s payrouter.Store) {
	want := newTask(1)
	id := mustEnqueue(t, s, want)
	beforeTake := time.Now()
	if got := mustTake(t, s, "c1", 10, shortIdle); len(got) != 1 || got[0].ID != id {
		t.Fatalf("Take = %v, want [%s]", taskIDs(got), id)
	}

	var again []payrouter.Task
	waitFor(t, "the task handed out again after idle", func() (bool, error) {
		var err error
		again, err = s.Take(t.Context(), "c2", 10, shortIdle)
		return len(again) > 0, err
	})
	// beforeTake is no later than the task was handed out, so this can fail only when the
	// store handed it out again early.
	if waited := time.Since(beforeTake); waited < shortIdle {
		t.Fatalf("handed out again %v after it was taken, before the idle time %v", waited, shortIdle)
	}
	if len(again) != 1 {
		t.Fatalf("Take after idle = %v, want [%s]", taskIDs(again), id)
	}
	if d := diffTask(again[0], want, id, 2); d != "" {
		t.Fatalf("the task handed out again to another consumer: %s", d)
	}
	if got := mustTake(t, s, "c1", 10, holdIdle); len(got) != 0 {
		t.Fatalf("Take(c1) right after c2 took the task back = %v, want none", taskIDs(got))
	}

	// An idle of zero is "whatever is pending": the consumer's own task included.
	third := mustTake(t, s, "c2", 10, 0)
	if len(third) != 1 {
		t.Fatalf("Take(c2, idle 0) = %v, want [%s] again", taskIDs(third), id)
	}
	if d := diffTask(third[0], want, id, 3); d != "" {
		t.Fatalf("the task handed out again to the consumer that holds it: %s", d)
	}
	wantDepth(t, s, 1)

	// Any consumer may acknowledge it: the one that took it first finished after all.
	mustAck(t, s, id)
	wantDepth(t, s, 0)
	if got := mustTake(t, s, "c3", 10, 0); len(got) != 0 {
		t.Fatalf("Take after Ack = %v, want none", taskIDs(got))
	}
}

// testQueueDepth: the depth counts every task not acknowledged, taken or not.
func testQueueDepth(t *testing.T, s payrouter.Store) {
	var ids []string
	for n := range 3 {
		ids = append(ids, mustEnqueue(t, s, newTask(n)))
	}
	wantDepth(t, s, 3)
	if got := mustTake(t, s, "c1", 2, holdIdle); len(got) != 2 {
		t.Fatalf("Take(max 2) = %v, want 2 tasks", taskIDs(got))
	}
	wantDepth(t, s, 3)
	for i, id := range ids {
		mustAck(t, s, id)
		wantDepth(t, s, int64(len(ids)-i-1))
	}
}

// testQueueMax: max bounds the tasks handed out, reclaimed and new ones together, and reclaimed
// ones come first.
func testQueueMax(t *testing.T, s payrouter.Store) {
	if got := mustTake(t, s, "c1", 0, 0); len(got) != 0 {
		t.Fatalf("Take(max 0) = %v, want none", taskIDs(got))
	}
	queued := map[string]bool{}
	for n := range 5 {
		queued[mustEnqueue(t, s, newTask(n))] = true
	}
	if got := mustTake(t, s, "c1", 0, 0); len(got) != 0 {
		t.Fatalf("Take(max 0) = %v, want none", taskIDs(got))
	}

	first := mustTake(t, s, "c1", 2, holdIdle)
	if len(first) != 2 {
		t.Fatalf("Take(max 2) of 5 = %v, want 2 tasks", taskIDs(first))
	}
	// Idle 0 reclaims the two taken at once: they fill max, and no new task is handed out.
	reclaimed := mustTake(t, s, "c2", 2, 0)
	if got, want := sortedIDs(reclaimed), sortedIDs(first); !slices.Equal(got, want) {
		t.Fatalf("Take(max 2, idle 0) after 2 were taken = %v, want those 2 back (%v)", got, want)
	}
	for _, task := range reclaimed {
		if task.Deliveries != 2 {
			t.Errorf("reclaimed task %s: Deliveries = %d, want 2", task.ID, task.Deliveries)
		}
	}

	seen := map[string]bool{}
	for _, task := range first {
		seen[task.ID] = true
	}
	for _, want := range []int{2, 1, 0} {
		got := mustTake(t, s, "c3", 2, holdIdle)
		if len(got) != want {
			t.Fatalf("Take(max 2) = %v, want %d new tasks", taskIDs(got), want)
		}
		for _, task := range got {
			switch {
			case !queued[task.ID]:
				t.Fatalf("Take handed out %s, which was never enqueued", task.ID)
			case seen[task.ID]:
				t.Fatalf("Take handed out %s again before idle", task.ID)
			case task.Deliveries != 1:
				t.Fatalf("new task %s: Deliveries = %d, want 1", task.ID, task.Deliveries)
			}
			seen[task.ID] = true
		}
	}
	if len(seen) != len(queued) {
		t.Fatalf("handed out %d distinct tasks, want all %d", len(seen), len(queued))
	}
	wantDepth(t, s, 5)
}

func sortedIDs(tasks []payrouter.Task) []string {
	ids := taskIDs(tasks)
	slices.Sort(ids)
	return ids
}

// testQueueConcurrentTakes: consumers taking at once never both get the same new task, and
// between them get every one.
func testQueueConcurrentTakes(t *testing.T, s payrouter.Store) {
	const tasks, consumers = 60, 4
	queued := map[string]bool{}
	for n := range tasks {
		queued[mustEnqueue(t, s, newTask(n))] = true
	}
	var (
		mu    sync.Mutex
		taken = map[string]string{} // task id -> the consumer that got it
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for c := range consumers {
		consumer := fmt.Sprintf("c%d", c)
		wg.Go(func() {
			<-start
			for {
				got, err := s.Take(t.Context(), consumer, 3, holdIdle)
				if err != nil {
					t.Errorf("Take(%s): %v", consumer, err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, task := range got {
					if other, dup := taken[task.ID]; dup {
						t.Errorf("task %s handed to %s and to %s", task.ID, other, consumer)
					}
					taken[task.ID] = consumer
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	if len(taken) != tasks {
		t.Fatalf("%d distinct tasks taken, want all %d", len(taken), tasks)
	}
	for id := range taken {
		if !queued[id] {
			t.Fatalf("Take handed out %s, which was never enqueued", id)
		}
	}
}

func testQueueAckUnknown(t *testing.T, s payrouter.Store) {
	id := mustEnqueue(t, s, newTask(1))
	mustAck(t, s, unknownTaskID)
	wantDepth(t, s, 1)
	if got := mustTake(t, s, "c1", 10, holdIdle); len(got) != 1 || got[0].ID != id {
		t.Fatalf("Take after acknowledging an unknown id = %v, want [%s]", taskIDs(got), id)
	}
}
