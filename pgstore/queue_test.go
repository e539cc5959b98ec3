package pgstore

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/pgstore/pgtest"
)

func testTask(n int) payrouter.Task {
	return payrouter.Task{Kind: payrouter.TaskRecheck, Gateway: "tranglo", ChargeID: fmt.Sprintf("ch_%d", n),
		Reference: payrouter.AttemptReference(fmt.Sprintf("ch_%d", n), 1), CreatedAt: time.Now().UTC()}
}

// TestTakeTwoConsumersNeverShare: two instances taking from one queue at once, each through its
// own pool, never both get a task while it is not idle, and between them get every one.
func TestTakeTwoConsumersNeverShare(t *testing.T) {
	url := pgtest.NewDatabase(t)
	a, b := open(t, url, Options{}), open(t, url, Options{})
	const tasks = 100
	for n := range tasks {
		if _, err := a.Enqueue(t.Context(), testTask(n)); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu    sync.Mutex
		taken = map[string]string{}
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for consumer, s := range map[string]*Store{"a": a, "b": b} {
		wg.Go(func() {
			<-start
			for {
				got, err := s.Take(t.Context(), consumer, 4, time.Hour)
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
					if task.Deliveries != 1 {
						t.Errorf("task %s: Deliveries = %d, want 1", task.ID, task.Deliveries)
					}
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
	if depth, err := a.QueueDepth(t.Context()); err != nil || depth != tasks {
		t.Fatalf("QueueDepth = %d, %v; want %d: taken is not done", depth, err, tasks)
	}
}

// TestTakeBackFromCrashedConsumer: tasks a consumer took and never acknowledged (it crashed) are
// handed to another consumer once idle, before any new task, with their deliveries counted.
func TestTakeBackFromCrashedConsumer(t *testing.T) {
	url := pgtest.NewDatabase(t)
	crashed := open(t, url, Options{})
	ctx := t.Context()
	var ids []string
	for n := range 3 {
		id, err := crashed.Enqueue(ctx, testTask(n))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	got, err := crashed.Take(ctx, "crashed", 2, time.Hour)
	if err != nil || len(got) != 2 {
		t.Fatalf("Take = %v, %v; want 2 tasks", got, err)
	}
	takenAt := time.Now()
	crashed.Close()

	const idle = 300 * time.Millisecond
	survivor := open(t, url, Options{})
	fresh, err := survivor.Enqueue(ctx, testTask(99))
	if err != nil {
		t.Fatal(err)
	}
	// With a long idle, only what was never handed out, in queue order.
	early, err := survivor.Take(ctx, "survivor", 10, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{ids[2], fresh}; !slices.Equal(taskIDs(early), want) {
		t.Fatalf("Take with a long idle = %v; want the new ones %v", taskIDs(early), want)
	}
	time.Sleep(idle - time.Since(takenAt) + 50*time.Millisecond)
	if _, err := survivor.Enqueue(ctx, testTask(100)); err != nil {
		t.Fatal(err)
	}
	back, err := survivor.Take(ctx, "survivor", 2, idle)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{ids[0], ids[1]}; !slices.Equal(taskIDs(back), want) {
		t.Fatalf("Take after idle, max 2 = %v; want the crashed consumer's %v first", taskIDs(back), want)
	}
	for _, task := range back {
		if task.Deliveries != 2 {
			t.Errorf("task %s taken back: Deliveries = %d, want 2", task.ID, task.Deliveries)
		}
		if task.ChargeID == "" || task.Kind != payrouter.TaskRecheck {
			t.Errorf("task %s taken back lost its fields: %+v", task.ID, task)
		}
		if err := survivor.Ack(ctx, task.ID); err != nil {
			t.Fatal(err)
		}
	}
	if depth, err := survivor.QueueDepth(ctx); err != nil || depth != 3 {
		t.Fatalf("QueueDepth after acknowledging 2 of 5 = %d, %v; want 3", depth, err)
	}
}

func taskIDs(tasks []payrouter.Task) []string {
	ids := make([]string, len(tasks))
	for i, task := range tasks {
		ids[i] = task.ID
	}
	return ids
}
