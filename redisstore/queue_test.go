package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/redisstore"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

// The queue's own tests, beyond the shared suite: what only a shared, networked queue can
// meet. redistest runs redis-server without persistence, so a queue surviving a restart is not
// tested here; a restart without persistence is a FLUSHALL as far as the queue can tell, and
// that is tested.

func queueTask(chargeID string) payrouter.Task {
	return payrouter.Task{Kind: payrouter.TaskVoid, Gateway: "paywell", ChargeID: chargeID,
		Reference: payrouter.AttemptReference(chargeID, 1), CreatedAt: time.Now().UTC()}
}

// pollTake calls Take until it hands out a task, failing t after a deadline. Idle is counted by
// the Redis server's clock, so the test waits by asking rather than by sleeping.
func pollTake(t *testing.T, s *redisstore.Store, consumer string, idle time.Duration) []payrouter.Task {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := s.Take(t.Context(), consumer, 10, idle)
		if err != nil {
			t.Fatalf("Take(%s): %v", consumer, err)
		}
		if len(got) > 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("Take(%s, idle %v): nothing handed out within 5s", consumer, idle)
		}
		<-tick.C
	}
}

func take(t *testing.T, s *redisstore.Store, consumer string, idle time.Duration) []payrouter.Task {
	t.Helper()
	got, err := s.Take(t.Context(), consumer, 10, idle)
	if err != nil {
		t.Fatalf("Take(%s): %v", consumer, err)
	}
	return got
}

func enqueue(t *testing.T, s *redisstore.Store, task payrouter.Task) string {
	t.Helper()
	id, err := s.Enqueue(t.Context(), task)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return id
}

func depth(t *testing.T, s *redisstore.Store) int64 {
	t.Helper()
	n, err := s.QueueDepth(t.Context())
	if err != nil {
		t.Fatalf("QueueDepth: %v", err)
	}
	return n
}

// TestQueueCrashedConsumer: an instance takes a task and dies before acknowledging it; another
// instance on the same Redis takes it back once it has been idle long enough, so a queued
// refund is never lost with the instance that held it.
func TestQueueCrashedConsumer(t *testing.T) {
	srv := redistest.Start(t)
	o := redisstore.Options{Timeout: suiteTimeout, Prefix: "crash:"}
	const idle = 200 * time.Millisecond

	a, err := redisstore.Open(srv.URL(), o)
	if err != nil {
		t.Fatal(err)
	}
	id := enqueue(t, a, queueTask("ch_crash"))
	if got := take(t, a, "instance-a", idle); len(got) != 1 || got[0].ID != id {
		t.Fatalf("instance a took %v, want the task %s", got, id)
	}
	a.Close() // never acknowledges

	b := openStore(t, srv.URL(), o)
	if got := take(t, b, "instance-b", time.Hour); len(got) != 0 {
		t.Fatalf("instance b took %v at once, want nothing while a's task is not idle", got)
	}
	got := pollTake(t, b, "instance-b", idle)
	if len(got) != 1 || got[0].ID != id || got[0].ChargeID != "ch_crash" || got[0].Deliveries != 2 {
		t.Fatalf("instance b took %+v, want task %s for ch_crash, delivered twice", got, id)
	}
	if n := depth(t, b); n != 1 {
		t.Fatalf("QueueDepth = %d before the ack, want 1", n)
	}
	if err := b.Ack(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if n := depth(t, b); n != 0 {
		t.Fatalf("QueueDepth = %d after the ack, want 0", n)
	}
}

// TestQueueLostGroup: Redis loses the stream and its group (FLUSHALL, or a restart without
// persistence), or only the group; Take makes the group again, at once, and hands out every
// entry the stream holds, those added before the group was made included.
func TestQueueLostGroup(t *testing.T) {
	srv := redistest.Start(t)
	raw := rawClient(t, srv)
	s := openStore(t, srv.URL(), redisstore.Options{Timeout: suiteTimeout, Prefix: "nogroup:"})
	ctx := t.Context()

	first := enqueue(t, s, queueTask("ch_1"))
	if got := take(t, s, "c1", time.Hour); len(got) != 1 || got[0].ID != first {
		t.Fatalf("Take = %+v, want %s", got, first)
	}

	t.Run("FLUSHALL", func(t *testing.T) {
		if err := raw.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if n := depth(t, s); n != 0 {
			t.Fatalf("QueueDepth after FLUSHALL = %d, want 0", n)
		}
		if err := s.Ack(ctx, first); err != nil {
			t.Fatalf("Ack of a task Redis forgot: %v", err)
		}
		// Enqueued before any Take: XADD makes the stream, with no group yet.
		id := enqueue(t, s, queueTask("ch_2"))
		got := take(t, s, "c1", time.Hour)
		if len(got) != 1 || got[0].ID != id || got[0].Deliveries != 1 {
			t.Fatalf("Take after FLUSHALL = %+v, want %s delivered once", got, id)
		}
		if err := s.Ack(ctx, id); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("group destroyed, stream kept", func(t *testing.T) {
		id := enqueue(t, s, queueTask("ch_3"))
		if err := raw.XGroupDestroy(ctx, "nogroup:{tasks}", "workers").Err(); err != nil {
			t.Fatal(err)
		}
		got := take(t, s, "c2", time.Hour)
		if len(got) != 1 || got[0].ID != id {
			t.Fatalf("Take after the group was destroyed = %+v, want %s", got, id)
		}
		if err := s.Ack(ctx, id); err != nil {
			t.Fatal(err)
		}
		if n := depth(t, s); n != 0 {
			t.Fatalf("QueueDepth = %d, want 0", n)
		}
	})

	t.Run("Redis restarted empty", func(t *testing.T) {
		srv.Stop()
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		id := enqueue(t, s, queueTask("ch_4"))
		got := take(t, s, "c3", time.Hour)
		if len(got) != 1 || got[0].ID != id {
			t.Fatalf("Take after a restart = %+v, want %s", got, id)
		}
	})
}

// TestQueueEntriesThatAreNotTasks: an entry deleted while pending is dropped from the pending
// list, and one whose task cannot be read is left in the queue, neither ever handed out nor
// stopping the others.
func TestQueueEntriesThatAreNotTasks(t *testing.T) {
	srv := redistest.Start(t)
	raw := rawClient(t, srv)
	s := openStore(t, srv.URL(), redisstore.Options{Timeout: suiteTimeout, Prefix: "odd:"})
	ctx := t.Context()
	const stream = "odd:{tasks}"

	deleted := enqueue(t, s, queueTask("ch_deleted"))
	if got := take(t, s, "c1", time.Hour); len(got) != 1 {
		t.Fatalf("Take = %+v, want 1 task", got)
	}
	if err := raw.XDel(ctx, stream, deleted).Err(); err != nil { // deleted, not acknowledged
		t.Fatal(err)
	}
	garbled, err := raw.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"task", "{not json"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	good := enqueue(t, s, queueTask("ch_good"))

	got := take(t, s, "c2", 0)
	if len(got) != 1 || got[0].ID != good {
		t.Fatalf("Take = %+v, want only %s", got, good)
	}
	pending, err := raw.XPending(ctx, stream, "workers").Result()
	if err != nil {
		t.Fatal(err)
	}
	// The garbled entry and the good task are pending; the deleted entry is not.
	if pending.Count != 2 {
		t.Fatalf("pending entries = %d (%+v), want 2: the garbled one (%s) and %s", pending.Count, pending, garbled, good)
	}
	if n := depth(t, s); n != 2 {
		t.Fatalf("QueueDepth = %d, want 2: the garbled entry is still in the queue", n)
	}
}

// TestQueueStoredForm: the keys the queue and refunds write, each with a hash tag, and refunds
// expiring like charges.
func TestQueueStoredForm(t *testing.T) {
	srv := redistest.Start(t)
	raw := rawClient(t, srv)
	const chargeTTL = time.Hour
	s := openStore(t, srv.URL(), redisstore.Options{Timeout: suiteTimeout, ChargeTTL: chargeTTL, Prefix: "qform:"})
	ctx := t.Context()

	if err := s.SaveRefund(ctx, &payrouter.Refund{ID: "re_1", ChargeID: "ch_1", Amount: 1, Currency: "USD",
		Status: payrouter.RefundQueued, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	id := enqueue(t, s, queueTask("ch_1"))

	ttl, err := raw.PTTL(ctx, "qform:refund:{re_1}").Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl > chargeTTL || ttl < chargeTTL-10*time.Second {
		t.Errorf("PTTL(qform:refund:{re_1}) = %v, want about %v", ttl, chargeTTL)
	}
	entries, err := raw.XRange(ctx, "qform:{tasks}", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].ID != id || len(entries[0].Values) != 1 || entries[0].Values["task"] == nil {
		t.Fatalf("stream qform:{tasks} holds %+v, want one entry %s with one field, task", entries, id)
	}
}
