package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// webhookTask is the delivery task a dispatcher queues for event ev to endpoint.
func webhookTask(endpoint string, ev payrouter.Event) payrouter.Task {
	return payrouter.Task{
		Kind: payrouter.TaskWebhook, CreatedAt: base,
		Webhook: &payrouter.WebhookDelivery{
			ID: payrouter.WebhookDeliveryID(endpoint, ev.ID), Endpoint: endpoint, EventID: ev.ID, EventType: ev.Type,
			EventAt: ev.CreatedAt, Body: []byte(`{"id":"` + ev.ID + `"}`), Attempt: 1,
		},
	}
}

// decided saves a new charge of owner's and decides it: one charge.succeeded event.
func decided(t *testing.T, s payrouter.Store, id, owner string) {
	t.Helper()
	c := &payrouter.Charge{ID: id, Status: payrouter.StatusProcessing, Amount: 100, Currency: "USD", Owner: owner, CreatedAt: base}
	mustSave(t, s, c)
	c.Status = payrouter.StatusSucceeded
	mustSave(t, s, c)
}

func mustWebhookEvents(t *testing.T, s payrouter.Store, endpoint, owner string, limit int) payrouter.EventPage {
	t.Helper()
	page, err := s.WebhookEvents(t.Context(), endpoint, owner, limit)
	if err != nil {
		t.Fatalf("WebhookEvents(%s): %v", endpoint, err)
	}
	return page
}

func eventCharges(evs []payrouter.Event) []string {
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.Charge.ID
	}
	return ids
}

// takeAll takes every task due now, for good (holdIdle).
func takeAll(t *testing.T, s payrouter.Store) []payrouter.Task {
	t.Helper()
	return mustTake(t, s, "c1", 1000, holdIdle)
}

// testWebhookCursor: an endpoint's cursor starts at the end of the feed, lists its owner's events
// after it in order, and moves with the deliveries it dispatched, both or neither.
func testWebhookCursor(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	decided(t, s, "ch_before", owner)
	first := mustWebhookEvents(t, s, "shop", owner, 10)
	if len(first.Events) != 0 || first.More || first.From != first.To {
		t.Fatalf("a new endpoint's first page = %v (more %v, %s..%s), want nothing: it starts after the events written before it",
			eventCharges(first.Events), first.More, first.From, first.To)
	}
	for i := range 3 {
		decided(t, s, fmt.Sprintf("ch_after_%d", i), owner)
	}
	decided(t, s, "ch_other_owner", otherOwner)

	page := mustWebhookEvents(t, s, "shop", owner, 2)
	if got := eventCharges(page.Events); !slices.Equal(got, []string{"ch_after_0", "ch_after_1"}) || !page.More || page.From != first.From {
		t.Fatalf("page of 2 = %v (more %v, from %s), want ch_after_0 and ch_after_1, more, from %s", got, page.More, page.From, first.From)
	}
	if e := page.Events[0]; e.Type != payrouter.EventChargeSucceeded || e.Owner != owner || e.ID == "" || e.CreatedAt.IsZero() {
		t.Fatalf("event %+v, want charge.succeeded of %s with its id and time", e, owner)
	}
	again := mustWebhookEvents(t, s, "shop", owner, 2)
	if !slices.Equal(eventCharges(again.Events), eventCharges(page.Events)) || again.To != page.To {
		t.Fatal("reading the same cursor again gave another page")
	}
	if other := mustWebhookEvents(t, s, "other-endpoint", owner, 10); len(other.Events) != 0 {
		t.Fatalf("an endpoint created now lists %v, want none", eventCharges(other.Events))
	}

	tasks := []payrouter.Task{webhookTask("shop", page.Events[0]), webhookTask("shop", page.Events[1])}
	if err := s.AdvanceWebhook(ctx, "shop", page.From, page.To, tasks); err != nil {
		t.Fatalf("AdvanceWebhook: %v", err)
	}
	taken := takeAll(t, s)
	if len(taken) != 2 {
		t.Fatalf("tasks queued by AdvanceWebhook = %d, want 2", len(taken))
	}
	for i, task := range taken {
		want := tasks[i]
		if task.Kind != payrouter.TaskWebhook || task.Webhook == nil {
			t.Fatalf("task %d = %+v, want a webhook delivery", i, task)
		}
		got := *task.Webhook
		if !got.EventAt.Equal(want.Webhook.EventAt) {
			t.Errorf("delivery EventAt = %v, want %v", got.EventAt, want.Webhook.EventAt)
		}
		got.EventAt = want.Webhook.EventAt
		if fmt.Sprint(got) != fmt.Sprint(*want.Webhook) {
			t.Errorf("delivery kept as %+v, want %+v", got, *want.Webhook)
		}
	}

	if err := s.AdvanceWebhook(ctx, "shop", page.From, page.To, tasks); !errors.Is(err, payrouter.ErrStale) {
		t.Fatalf("AdvanceWebhook from a position the cursor left = %v, want ErrStale", err)
	}
	wantDepth(t, s, 2) // nothing queued by the stale one

	rest := mustWebhookEvents(t, s, "shop", owner, 10)
	if got := eventCharges(rest.Events); !slices.Equal(got, []string{"ch_after_2"}) || rest.More || rest.From != page.To {
		t.Fatalf("after advancing: %v (more %v, from %s), want ch_after_2 alone, from %s", got, rest.More, rest.From, page.To)
	}
	// Passed over with no delivery (an event the endpoint does not want): the cursor moves all
	// the same.
	if err := s.AdvanceWebhook(ctx, "shop", rest.From, rest.To, nil); err != nil {
		t.Fatalf("AdvanceWebhook with no task: %v", err)
	}
	if end := mustWebhookEvents(t, s, "shop", owner, 10); len(end.Events) != 0 || end.From != rest.To {
		t.Fatalf("at the end: %v from %s, want nothing from %s", eventCharges(end.Events), end.From, rest.To)
	}
	wantDepth(t, s, 2)
	if err := s.AdvanceWebhook(ctx, "shop", "not a position", rest.To, nil); err == nil || errors.Is(err, payrouter.ErrStale) {
		t.Fatalf("AdvanceWebhook from a malformed position = %v, want an error that is not ErrStale", err)
	}
}

// testWebhookConcurrentDispatch: instances reading and advancing one endpoint's cursor at once
// queue each event's delivery exactly once: a page one of them dispatched is ErrStale to the
// others.
func testWebhookConcurrentDispatch(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	mustWebhookEvents(t, s, "shop", owner, 1) // the cursor, before the events
	const events = 30
	for i := range events {
		decided(t, s, fmt.Sprintf("ch_race_%02d", i), owner)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	advanced, stale := 0, 0
	for range 4 {
		wg.Go(func() {
			for range 200 {
				page, err := s.WebhookEvents(ctx, "shop", owner, 4)
				if err != nil {
					t.Error(err)
					return
				}
				if len(page.Events) == 0 {
					return
				}
				tasks := make([]payrouter.Task, len(page.Events))
				for i, ev := range page.Events {
					tasks[i] = webhookTask("shop", ev)
				}
				err = s.AdvanceWebhook(ctx, "shop", page.From, page.To, tasks)
				mu.Lock()
				switch {
				case err == nil:
					advanced++
				case errors.Is(err, payrouter.ErrStale):
					stale++
				default:
					t.Error(err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	seen := map[string]int{}
	for _, task := range takeAll(t, s) {
		seen[task.Webhook.EventID]++
	}
	if len(seen) != events {
		t.Fatalf("%d events got a delivery, want %d", len(seen), events)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %s got %d deliveries, want 1", id, n)
		}
	}
	t.Logf("%d pages dispatched, %d found already dispatched", advanced, stale)
}

// testTakeSkipsNotDue: a task whose NotBefore has not come is not handed out, and a task due
// behind it is.
func testTakeSkipsNotDue(t *testing.T, s payrouter.Store) {
	later := newTask(1)
	later.NotBefore = time.Now().Add(time.Hour)
	laterID := mustEnqueue(t, s, later)
	due := newTask(2)
	dueID := mustEnqueue(t, s, due)
	got := mustTake(t, s, "c1", 10, 0)
	if ids := taskIDs(got); !slices.Equal(ids, []string{dueID}) {
		t.Fatalf("Take = %v, want %s alone (%s is not due for an hour)", ids, dueID, laterID)
	}
	wantDepth(t, s, 2)
}

// testRequeueTask: a task put back for later replaces the one handed out, once: a second
// instance holding the same task finds it gone.
func testRequeueTask(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	ev := payrouter.Event{ID: "evt_REQUEUE", Type: payrouter.EventChargeFailed, CreatedAt: base}
	mustEnqueue(t, s, webhookTask("shop", ev))
	taken := takeAll(t, s)
	if len(taken) != 1 {
		t.Fatalf("Take = %d tasks, want 1", len(taken))
	}
	next := taken[0]
	next.Webhook.Attempt, next.Webhook.LastError, next.Webhook.LastStatus = 2, "answered 503", 503
	next.Webhook.LastAttemptAt = base
	next.NotBefore = time.Now().Add(time.Hour)
	if err := s.RequeueTask(ctx, taken[0].ID, &next); err != nil {
		t.Fatalf("RequeueTask: %v", err)
	}
	if next.ID == "" || next.ID == taken[0].ID {
		t.Fatalf("RequeueTask set ID %q, want a new id", next.ID)
	}
	wantDepth(t, s, 1)
	if got := mustTake(t, s, "c2", 10, 0); len(got) != 0 {
		t.Fatalf("Take after requeueing for an hour = %v, want none", taskIDs(got))
	}
	again := taken[0]
	if err := s.RequeueTask(ctx, taken[0].ID, &again); !errors.Is(err, payrouter.ErrNotFound) {
		t.Fatalf("RequeueTask of a task requeued already = %v, want ErrNotFound", err)
	}
	wantDepth(t, s, 1)

	// Due at once: handed out again, as written.
	now := next
	now.NotBefore = time.Time{}
	if err := s.RequeueTask(ctx, next.ID, &now); err != nil {
		t.Fatal(err)
	}
	got := mustTake(t, s, "c2", 10, holdIdle)
	if len(got) != 1 || got[0].Webhook.Attempt != 2 || got[0].Webhook.LastError != "answered 503" || got[0].Webhook.LastStatus != 503 ||
		!got[0].Webhook.LastAttemptAt.Equal(base) {
		t.Fatalf("requeued task taken = %+v, want attempt 2 with its last error", got)
	}
}

// testDeadLetters: a delivery given up leaves the queue for the dead letters in one step, once;
// redelivering it puts it back, once.
func testDeadLetters(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	wantBacklog := func(queued, dead int64) {
		t.Helper()
		q, d, err := s.WebhookBacklog(ctx)
		if err != nil || q != queued || d != dead {
			t.Fatalf("WebhookBacklog = %d queued, %d dead, %v; want %d, %d", q, d, err, queued, dead)
		}
	}
	mustEnqueue(t, s, newTask(9)) // not a webhook: not in the backlog
	var ids []string
	for i := range 2 {
		ev := payrouter.Event{ID: fmt.Sprintf("evt_DEAD%d", i), Type: payrouter.EventChargeSucceeded, CreatedAt: base}
		ids = append(ids, mustEnqueue(t, s, webhookTask("shop", ev)))
	}
	wantBacklog(2, 0)
	taken := takeAll(t, s)
	var hooks []payrouter.Task
	for _, task := range taken {
		if task.Kind == payrouter.TaskWebhook {
			hooks = append(hooks, task)
		}
	}
	if len(hooks) != 2 {
		t.Fatalf("took %d webhook tasks, want 2", len(hooks))
	}
	for i, task := range hooks {
		task.Webhook.Attempt, task.Webhook.LastError, task.Webhook.LastStatus = 8, "answered 500", 500
		dl := payrouter.DeadLetter{Task: task, Reason: "the last of 8 attempts failed", At: base.Add(time.Duration(i) * time.Minute)}
		if err := s.DeadLetterTask(ctx, task.ID, dl); err != nil {
			t.Fatalf("DeadLetterTask: %v", err)
		}
		if err := s.DeadLetterTask(ctx, task.ID, dl); !errors.Is(err, payrouter.ErrNotFound) {
			t.Fatalf("DeadLetterTask of a task dead-lettered already = %v, want ErrNotFound", err)
		}
	}
	wantBacklog(0, 2)
	wantDepth(t, s, 1)

	dls, err := s.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 2 || dls[0].Task.Webhook.EventID != "evt_DEAD1" || dls[1].Task.Webhook.EventID != "evt_DEAD0" {
		t.Fatalf("DeadLetters = %+v, want evt_DEAD1 then evt_DEAD0 (newest first)", dls)
	}
	d := dls[0]
	if d.Reason != "the last of 8 attempts failed" || !d.At.Equal(base.Add(time.Minute)) || d.Task.Webhook.Attempt != 8 ||
		d.Task.Webhook.LastError != "answered 500" || string(d.Task.Webhook.Body) != `{"id":"evt_DEAD1"}` || d.Task.Kind != payrouter.TaskWebhook {
		t.Fatalf("dead letter kept as %+v (%+v)", d, d.Task.Webhook)
	}
	if one, err := s.DeadLetters(ctx, 1); err != nil || len(one) != 1 {
		t.Fatalf("DeadLetters(1) = %d, %v", len(one), err)
	}
	delivery := d.Task.Webhook.ID
	of, err := s.DeadLetterOf(ctx, delivery)
	if err != nil || of.Task.Webhook.EventID != "evt_DEAD1" {
		t.Fatalf("DeadLetterOf(%s) = %+v, %v", delivery, of, err)
	}
	if _, err := s.DeadLetterOf(ctx, "whd_NOSUCH"); !errors.Is(err, payrouter.ErrNotFound) {
		t.Fatalf("DeadLetterOf an unknown delivery = %v, want ErrNotFound", err)
	}

	redo := of.Task
	redo.Webhook.Attempt, redo.NotBefore = 1, time.Time{}
	if err := s.Redeliver(ctx, delivery, &redo); err != nil || redo.ID == "" {
		t.Fatalf("Redeliver = %v (id %q)", err, redo.ID)
	}
	if err := s.Redeliver(ctx, delivery, &redo); !errors.Is(err, payrouter.ErrNotFound) {
		t.Fatalf("Redeliver again = %v, want ErrNotFound", err)
	}
	wantBacklog(1, 1)
	got := mustTake(t, s, "c3", 10, holdIdle)
	if len(got) != 1 || got[0].ID != redo.ID || got[0].Webhook.Attempt != 1 || got[0].Webhook.ID != delivery {
		t.Fatalf("Take after Redeliver = %+v, want the delivery at attempt 1", got)
	}

	// A delivery dead again replaces its earlier dead letter.
	if err := s.DeadLetterTask(ctx, got[0].ID, payrouter.DeadLetter{Task: got[0], Reason: "again", At: base.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeadLetterTask(ctx, ids[0], payrouter.DeadLetter{Task: got[0], Reason: "gone", At: base}); !errors.Is(err, payrouter.ErrNotFound) {
		t.Fatalf("DeadLetterTask of a task no longer queued = %v, want ErrNotFound", err)
	}
	wantBacklog(0, 2)
	if of, err := s.DeadLetterOf(ctx, delivery); err != nil || of.Reason != "again" {
		t.Fatalf("DeadLetterOf after dying again = %+v, %v; want the new reason", of, err)
	}
}

// testWebhookDisabled: an endpoint disabled by a 410 stays so until enabled.
func testWebhookDisabled(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	d := payrouter.WebhookDisabled{URL: "https://shop.example/hooks", Reason: "answered 410 Gone", At: base}
	if err := s.SetWebhookDisabled(ctx, "shop", &d); err != nil {
		t.Fatal(err)
	}
	got, err := s.WebhooksDisabled(ctx)
	if err != nil || len(got) != 1 || got["shop"].URL != d.URL || got["shop"].Reason != d.Reason || !got["shop"].At.Equal(base) {
		t.Fatalf("WebhooksDisabled = %+v, %v; want shop", got, err)
	}
	if err := s.SetWebhookDisabled(ctx, "shop", nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.WebhooksDisabled(ctx); err != nil || len(got) != 0 {
		t.Fatalf("WebhooksDisabled after enabling = %+v, %v; want none", got, err)
	}
}
