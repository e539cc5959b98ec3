package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/memstore"
)

const shopScope = "name:shop-eu"

// fixture is a Service on an in-memory store whose clock the test moves, with endpoints served
// by httptest servers (real sockets: no synctest bubble here).
type fixture struct {
	store *memstore.Store
	svc   *Service
	mu    sync.Mutex
	now   time.Time
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = t
}

func renderEvent(ev payrouter.Event) ([]byte, error) {
	return json.Marshal(map[string]any{"id": ev.ID, "type": ev.Type, "charge": ev.Charge.ID})
}

func newFixture(t *testing.T, endpoints ...Endpoint) *fixture {
	t.Helper()
	f := &fixture{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	f.store = memstore.New(memstore.WithClock(f.clock))
	f.svc = New(Config{Store: f.store, Render: renderEvent, Now: f.clock, Rand: func() float64 { return 0.5 }})
	t.Cleanup(f.svc.Close)
	if err := f.svc.Update(Settings{Endpoints: endpoints, AllowPrivate: true, PollInterval: 10 * time.Millisecond},
		func(Endpoint) string { return shopScope }); err != nil {
		t.Fatal(err)
	}
	return f
}

// decide writes a charge of owner's decided as status: one event.
func (f *fixture) decide(t *testing.T, id, owner string, status payrouter.ChargeStatus) {
	t.Helper()
	c := &payrouter.Charge{ID: id, Status: payrouter.StatusProcessing, Amount: 100, Currency: "USD", Owner: owner, CreatedAt: f.clock()}
	if err := f.store.SaveCharge(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	c.Status = status
	if err := f.store.SaveCharge(t.Context(), c); err != nil {
		t.Fatal(err)
	}
}

// handleDue takes the tasks due now and hands each to Handle, then waits for the attempts they
// started to end and be recorded.
func (f *fixture) handleDue(t *testing.T) int {
	t.Helper()
	tasks, err := f.store.Take(t.Context(), "test", 100, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if err := f.svc.Handle(t.Context(), task); !errors.Is(err, fallback.ErrHandedOff) {
			t.Fatalf("Handle = %v, want ErrHandedOff", err)
		}
	}
	f.svc.attempts.Wait()
	return len(tasks)
}

func (f *fixture) onlyTask(t *testing.T) payrouter.Task {
	t.Helper()
	tasks := f.store.Tasks()
	if len(tasks) != 1 {
		t.Fatalf("queued: %d tasks, want 1", len(tasks))
	}
	return tasks[0]
}

func endpointAt(name, url string) Endpoint {
	e := testEndpoint(url, testSecret(1))
	e.Name = name
	return e
}

// TestDispatchDeliversEachWantedEventOnce: the endpoint's owner's events of the types it wants
// become one delivery each, signed, with the event's id as webhook-id and the rendered event as
// body; another owner's events and types it does not want are passed over, and a second
// dispatch finds nothing new.
func TestDispatchDeliversEachWantedEventOnce(t *testing.T) {
	got := make(chan received, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- received{r.Header.Clone(), body}
	}))
	defer srv.Close()
	e := endpointAt("shop", srv.URL)
	e.Events = []string{"charge.succeeded", "charge.failed"}
	f := newFixture(t, e)
	if err := f.svc.Dispatch(t.Context(), "shop"); err != nil { // the cursor starts now
		t.Fatal(err)
	}
	f.decide(t, "ch_1", shopScope, payrouter.StatusSucceeded)
	f.decide(t, "ch_2", shopScope, payrouter.StatusDeclined) // not wanted
	f.decide(t, "ch_3", "name:other", payrouter.StatusSucceeded)
	f.decide(t, "ch_4", shopScope, payrouter.StatusFailed)
	if err := f.svc.Dispatch(t.Context(), "shop"); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Dispatch(t.Context(), "shop"); err != nil {
		t.Fatal(err)
	}
	if n := f.handleDue(t); n != 2 {
		t.Fatalf("deliveries queued = %d, want 2 (ch_1 succeeded, ch_4 failed)", n)
	}
	close(got)
	wh, _ := standardwebhooks.NewWebhook(testSecret(1))
	var charges []string
	for r := range got {
		var body struct{ ID, Type, Charge string }
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatal(err)
		}
		if r.header.Get(HeaderID) != body.ID || !strings.HasPrefix(body.ID, "evt_") {
			t.Errorf("webhook-id %q, body id %q: want the event's id", r.header.Get(HeaderID), body.ID)
		}
		if err := wh.VerifyIgnoringTimestamp(r.body, r.header); err != nil {
			t.Errorf("signature: %v", err)
		}
		charges = append(charges, body.Charge)
	}
	slices.Sort(charges) // attempts run at once: no order is promised
	if !slices.Equal(charges, []string{"ch_1", "ch_4"}) {
		t.Errorf("delivered the events of %v, want ch_1 and ch_4", charges)
	}
	if d, _ := f.store.QueueDepth(t.Context()); d != 0 {
		t.Errorf("queue depth %d after every delivery answered 200, want 0", d)
	}
}

// TestScheduleToDeadLetter: a delivery its endpoint keeps failing is attempted on the schedule,
// each attempt recording its answer, and dead-lettered after the last, with the last error.
func TestScheduleToDeadLetter(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	f := newFixture(t, endpointAt("shop", srv.URL))
	_ = f.svc.Dispatch(t.Context(), "shop")
	f.decide(t, "ch_1", shopScope, payrouter.StatusSucceeded)
	if err := f.svc.Dispatch(t.Context(), "shop"); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= Attempts; attempt++ {
		task := f.onlyTask(t)
		if task.Webhook.Attempt != attempt {
			t.Fatalf("attempt %d: the task says attempt %d", attempt, task.Webhook.Attempt)
		}
		if attempt > 1 {
			if wait := task.NotBefore.Sub(f.clock()); wait != Schedule[attempt-1] {
				t.Fatalf("attempt %d is due %v after the one before, want the schedule's %v", attempt, wait, Schedule[attempt-1])
			}
			if task.Webhook.LastStatus != 500 || task.Webhook.LastError != "answered 500 Internal Server Error" {
				t.Fatalf("attempt %d: last outcome %d %q", attempt, task.Webhook.LastStatus, task.Webhook.LastError)
			}
			f.set(task.NotBefore.Add(-time.Millisecond))
			if n := f.handleDue(t); n != 0 {
				t.Fatalf("attempt %d handed out before it was due", attempt)
			}
			f.set(task.NotBefore)
		}
		if n := f.handleDue(t); n != 1 {
			t.Fatalf("attempt %d: %d tasks handed out, want 1", attempt, n)
		}
	}
	if d, _ := f.store.QueueDepth(t.Context()); d != 0 {
		t.Fatalf("queue depth %d after the last attempt, want 0", d)
	}
	if n := hits.Load(); n != int64(Attempts) {
		t.Errorf("the endpoint got %d requests, want %d", n, Attempts)
	}
	dls, err := f.store.DeadLetters(t.Context(), 10)
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters %v, %v; want one", dls, err)
	}
	if want := "the last of 8 attempts failed: answered 500 Internal Server Error"; dls[0].Reason != want {
		t.Errorf("dead letter reason %q, want %q", dls[0].Reason, want)
	}
}

// TestRetryAfterObeyed: an endpoint's Retry-After longer than the schedule's wait moves the next
// attempt there.
func TestRetryAfterObeyed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	f := newFixture(t, endpointAt("shop", srv.URL))
	_ = f.svc.Dispatch(t.Context(), "shop")
	f.decide(t, "ch_1", shopScope, payrouter.StatusSucceeded)
	_ = f.svc.Dispatch(t.Context(), "shop")
	f.handleDue(t)
	task := f.onlyTask(t)
	if wait := task.NotBefore.Sub(f.clock()); wait != time.Hour || task.Webhook.Attempt != 2 || task.Webhook.LastStatus != 503 {
		t.Fatalf("after a 503 with Retry-After 3600: attempt %d due in %v (last %d); want attempt 2 in 1h",
			task.Webhook.Attempt, wait, task.Webhook.LastStatus)
	}
}

// TestGoneDisablesTheEndpoint: a 410 disables the endpoint for the fleet (the store says so),
// dead-letters the delivery, sends nothing more to it, and leaves its place in the feed where it
// is, so that the events written meanwhile are delivered once it is enabled again.
func TestGoneDisablesTheEndpoint(t *testing.T) {
	var hits atomic.Int64
	gone := atomic.Bool{}
	gone.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if gone.Load() {
			w.WriteHeader(http.StatusGone)
		}
	}))
	defer srv.Close()
	f := newFixture(t, endpointAt("shop", srv.URL))
	_ = f.svc.Dispatch(t.Context(), "shop")
	f.decide(t, "ch_1", shopScope, payrouter.StatusSucceeded)
	f.decide(t, "ch_2", shopScope, payrouter.StatusSucceeded)
	_ = f.svc.Dispatch(t.Context(), "shop")
	f.handleDue(t) // both handled; the first 410 disables, the second may be sent before it did
	d, err := f.store.WebhooksDisabled(t.Context())
	if err != nil || d["shop"].URL != srv.URL {
		t.Fatalf("disabled endpoints %+v, %v; want shop at %s", d, err, srv.URL)
	}
	sent := hits.Load()
	dls, _ := f.store.DeadLetters(t.Context(), 10)
	if len(dls) != 2 {
		t.Fatalf("dead letters: %d, want both deliveries", len(dls))
	}
	f.decide(t, "ch_3", shopScope, payrouter.StatusSucceeded)
	if err := f.svc.Dispatch(t.Context(), "shop"); err != nil {
		t.Fatal(err)
	}
	if n := len(f.store.Tasks()); n != 0 || hits.Load() != sent {
		t.Fatalf("while disabled: %d tasks queued, %d more requests; want none", n, hits.Load()-sent)
	}

	gone.Store(false)
	if err := f.svc.Enable(t.Context(), "shop"); err != nil {
		t.Fatal(err)
	}
	if err := f.svc.Dispatch(t.Context(), "shop"); err != nil {
		t.Fatal(err)
	}
	if n := f.handleDue(t); n != 1 {
		t.Fatalf("after enabling: %d deliveries, want ch_3's", n)
	}
	if d, _ := f.store.QueueDepth(t.Context()); d != 0 {
		t.Fatalf("queue depth %d, want ch_3 delivered", d)
	}
}

// TestHangingEndpointNeverDelaysAnother: deliveries to an endpoint that never answers hold its
// own slots and no more; the queue worker never waits on them, and every delivery to a healthy
// endpoint arrives while the hanging endpoint's attempts are all still outstanding.
func TestHangingEndpointNeverDelaysAnother(t *testing.T) {
	release := make(chan struct{})
	var hanging atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hanging.Add(1)
		<-release
	}))
	defer slow.Close()
	defer close(release)
	healthy := make(chan string, 100)
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		healthy <- r.Header.Get(HeaderID)
	}))
	defer fast.Close()

	stuck := endpointAt("stuck", slow.URL)
	stuck.MaxConcurrent, stuck.Timeout = 2, time.Minute // longer than this test may take
	// Real time: the worker's rounds and the deferrals' waits.
	store := memstore.New()
	svc := New(Config{Store: store, Render: renderEvent})
	defer svc.Close()
	if err := svc.Update(Settings{Endpoints: []Endpoint{stuck, endpointAt("shop", fast.URL)}, AllowPrivate: true},
		func(Endpoint) string { return shopScope }); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"stuck", "shop"} {
		_ = svc.Dispatch(t.Context(), name)
	}
	const events = 40
	for i := range events {
		c := &payrouter.Charge{ID: fmt.Sprintf("ch_%02d", i), Status: payrouter.StatusSucceeded, Amount: 100, Currency: "USD", Owner: shopScope, CreatedAt: time.Now()}
		if err := store.SaveCharge(t.Context(), c); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := &fallback.Worker{Queue: store, Consumer: "test", Interval: 10 * time.Millisecond, Idle: 2 * time.Minute, Batch: 8,
		Handlers: map[payrouter.TaskKind]fallback.Handler{payrouter.TaskWebhook: svc.Handle}}
	svc.wake = w.Wake
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx) })
	defer wg.Wait()
	defer cancel()
	// The stuck endpoint's deliveries are queued first: every one of them is ahead of the
	// healthy endpoint's in the queue.
	if err := svc.Dispatch(ctx, "stuck"); err != nil {
		t.Fatal(err)
	}
	if err := svc.Dispatch(ctx, "shop"); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	deadline := time.After(30 * time.Second) // well within the stuck endpoint's 1m timeout
	for len(seen) < events {
		select {
		case id := <-healthy:
			seen[id] = true
		case <-deadline:
			t.Fatalf("the healthy endpoint got %d of %d deliveries while the stuck one hangs", len(seen), events)
		}
	}
	if n := hanging.Load(); n > 2 {
		t.Errorf("the stuck endpoint holds %d requests, more than its 2 slots", n)
	}
	if in := svc.target("stuck").InFlight(); in != 2 {
		t.Errorf("stuck's slots held: %d, want both (its attempts outstanding)", in)
	}
}
