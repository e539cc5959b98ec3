package webhooks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
)

// Store is what the webhooks need of the money store: their own state, and the queue their
// deliveries wait in.
type Store interface {
	payrouter.WebhookStore
	Ack(ctx context.Context, id string) error
}

// Observer is told what happens to deliveries (package telemetry's Metrics implements it).
type Observer interface {
	// Dispatched counts deliveries queued for endpoint.
	Dispatched(endpoint string, n int)
	// Attempted counts one attempt's result (ResultDelivered, ...), with how long it took;
	// latency, for a delivered one, is the time since its event was written.
	Attempted(endpoint, result string, took, latency time.Duration)
	// InFlight is the endpoint's slots held now on this instance.
	InFlight(endpoint string, n int)
	// EndpointDisabled says whether the endpoint is disabled (a 410).
	EndpointDisabled(endpoint string, disabled bool)
	// Backlog is the deliveries queued and the dead letters.
	Backlog(queued, dead int64)
}

// The results of an attempt (Observer.Attempted, payrouter_webhook_deliveries_total).
const (
	// ResultDelivered: the endpoint answered 2xx; the delivery is done.
	ResultDelivered = "delivered"
	// ResultRetried: the attempt failed and another is scheduled.
	ResultRetried = "retried"
	// ResultDeadLettered: the attempt failed and none is left (or the delivery could not be
	// attempted at all: its endpoint disabled); the delivery is a dead letter.
	ResultDeadLettered = "dead_lettered"
	// ResultDisabled: the endpoint answered 410 Gone; it is disabled and the delivery is a dead
	// letter.
	ResultDisabled = "disabled"
)

// Results lists the results, in the order documentation gives them.
var Results = []string{ResultDelivered, ResultRetried, ResultDeadLettered, ResultDisabled}

// Defaults of the dispatcher.
const (
	// PageSize is how many events one read of the feed takes.
	PageSize = 100
	// pagesPerPoll bounds the pages one poll dispatches for one endpoint, so that one
	// endpoint's backlog does not hold the others' polls.
	pagesPerPoll = 20
	// backlogEvery is how often the backlog gauge is read from the store.
	backlogEvery = 5 * time.Second
	// deferFirst is how long a delivery that found every slot of its endpoint held waits the
	// first time; it doubles each time after, up to the endpoint's timeout (a slot is free by
	// then at the latest).
	deferFirst = 250 * time.Millisecond
)

// Config is what New needs.
type Config struct {
	Store Store
	// Render is the body of an event's delivery: the event as GET /events shows it.
	Render func(payrouter.Event) ([]byte, error)
	// Observer is told what happens; nil: nobody.
	Observer Observer
	Log      *slog.Logger
	// Wake makes the queue worker take tasks now (fallback.Worker.Wake): a delivery just queued
	// is attempted at once rather than at the worker's next tick. nil: nothing.
	Wake func()
	// Now and Rand stand in for the clock and the jitter's randomness in tests; nil: the real
	// ones.
	Now  func() time.Time
	Rand func() float64
}

// Service is the storefront webhooks of one instance: the dispatcher that turns the events of
// the feed into deliveries (Run), and the handler of the queue's delivery tasks (Handle). Every
// instance runs both: the store's cursor makes dispatching safe at once from several
// (WebhookStore.AdvanceWebhook), and the queue hands each task to one instance at a time.
type Service struct {
	store    Store
	render   func(payrouter.Event) ([]byte, error)
	obs      Observer
	log      *slog.Logger
	wake     func()
	now      func() time.Time
	rand     func() float64
	targets  atomic.Pointer[targetSet]
	disabled atomic.Pointer[map[string]payrouter.WebhookDisabled]
	// disabling orders the changes of disabled (a copy each), so that two endpoints disabled
	// at once are both kept.
	disabling sync.Mutex

	// ctx is the attempts' context: Close cancels it, and attempts waits for them.
	ctx      context.Context
	stop     context.CancelFunc
	attempts sync.WaitGroup
}

// targetSet is the endpoints of one configuration.
type targetSet struct {
	byName       map[string]*Target
	order        []*Target
	pollInterval time.Duration
}

// New returns a Service with no endpoint; Update gives it the configured ones.
func New(cfg Config) *Service {
	s := &Service{
		store: cfg.Store, render: cfg.Render, obs: cfg.Observer, log: cfg.Log, wake: cfg.Wake,
		now: cfg.Now, rand: cfg.Rand,
	}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.wake == nil {
		s.wake = func() {}
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.rand == nil {
		s.rand = rand.Float64
	}
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.targets.Store(&targetSet{byName: map[string]*Target{}, pollInterval: DefaultPollInterval})
	s.disabled.Store(&map[string]payrouter.WebhookDisabled{})
	return s
}

// Update puts the endpoints of settings in place; owner gives each its API key's scope. An
// endpoint whose settings did not change keeps its Target (connections and bulkhead); a
// changed one gets a new one, while attempts in flight finish on the old, whose idle
// connections are closed. An endpoint new to the store gets its cursor now, at the end of the
// feed: it receives the events written from the moment it is configured.
func (s *Service) Update(settings Settings, owner func(Endpoint) string) error {
	old := s.targets.Load()
	next := &targetSet{byName: map[string]*Target{}, pollInterval: settings.PollInterval}
	var added []string
	if next.pollInterval <= 0 {
		next.pollInterval = DefaultPollInterval
	}
	for _, e := range settings.Endpoints {
		o := owner(e)
		if t := old.byName[e.Name]; t != nil && t.Owner == o && t.allowPrivate == settings.AllowPrivate && sameEndpoint(t.Endpoint, e) {
			next.byName[e.Name], next.order = t, append(next.order, t)
			continue
		}
		t, err := NewTarget(e, o, settings.AllowPrivate)
		if err != nil {
			return err
		}
		next.byName[e.Name], next.order = t, append(next.order, t)
		s.obs.InFlight(e.Name, 0)
		if old.byName[e.Name] == nil {
			added = append(added, e.Name)
		}
	}
	s.targets.Store(next)
	for name, t := range old.byName {
		if next.byName[name] != t {
			t.Close()
		}
	}
	// An endpoint added starts at the end of the feed as it stands now, when it is configured,
	// not at the next poll: a charge answered right after the reload is its first event. A
	// store that does not answer leaves that to the first poll that reaches it.
	for _, name := range added {
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		_, err := s.store.WebhookEvents(ctx, name, next.byName[name].Owner, 0)
		cancel()
		if err != nil {
			s.log.Warn("webhook.cursor_failed", "endpoint", name, "err", err.Error(),
				"then", "its place in the feed is taken at the first poll that reaches the store")
		}
	}
	return nil
}

// target returns the endpoint named name now, nil when none is configured.
func (s *Service) target(name string) *Target { return s.targets.Load().byName[name] }

// disabledNow reports whether t is disabled: its endpoint answered 410 at the URL it has now.
func (s *Service) disabledNow(t *Target) (payrouter.WebhookDisabled, bool) {
	d, ok := (*s.disabled.Load())[t.Endpoint.Name]
	return d, ok && d.URL == t.Endpoint.URL
}

// Close stops the attempts in flight and waits for them: their tasks, not acknowledged, are
// handed out again once idle. Call it after the queue worker stopped, before the store closes.
func (s *Service) Close() {
	s.stop()
	s.attempts.Wait()
	for _, t := range s.targets.Load().byName {
		t.Close()
	}
}

// Run dispatches the events of the feed into deliveries every poll interval until ctx ends.
func (s *Service) Run(ctx context.Context) {
	var lastBacklog time.Time
	failing := false
	for {
		set := s.targets.Load()
		failing = s.poll(ctx, set, failing)
		if len(set.order) > 0 && time.Since(lastBacklog) >= backlogEvery {
			lastBacklog = time.Now()
			if q, d, err := s.store.WebhookBacklog(ctx); err == nil {
				s.obs.Backlog(q, d)
			}
		}
		// Instances polling at once would mostly find each other's pages dispatched: a little
		// jitter spreads them.
		wait := time.Duration(float64(set.pollInterval) * (0.9 + 0.2*s.rand()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// poll refreshes the disabled endpoints and dispatches each endpoint's new events. A store that
// fails is logged when it starts failing and when it answers again.
func (s *Service) poll(ctx context.Context, set *targetSet, failing bool) (stillFailing bool) {
	if len(set.order) == 0 {
		return false
	}
	var firstErr error
	if d, err := s.store.WebhooksDisabled(ctx); err != nil {
		firstErr = err
	} else {
		s.disabling.Lock()
		s.disabled.Store(&d)
		s.disabling.Unlock()
		for _, t := range set.order {
			_, off := s.disabledNow(t)
			s.obs.EndpointDisabled(t.Endpoint.Name, off)
		}
	}
	for _, t := range set.order {
		if err := s.Dispatch(ctx, t.Endpoint.Name); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	switch {
	case ctx.Err() != nil:
	case firstErr != nil && !failing:
		s.log.Warn("webhook.dispatch_failed", "err", firstErr.Error(), "then", "the events wait in the feed; retried every poll")
	case firstErr == nil && failing:
		s.log.Info("webhook.dispatch_recovered")
	}
	return firstErr != nil
}

// Dispatch queues a delivery for each of the endpoint's new events it subscribed to, and moves
// its cursor past them (the others included), a page at a time. A page another instance
// dispatched first is read again from where that one left the cursor. A disabled endpoint's
// cursor stays where it is: enabled again, it gets what it missed.
func (s *Service) Dispatch(ctx context.Context, endpoint string) error {
	t := s.target(endpoint)
	if t == nil {
		return fmt.Errorf("webhooks: no endpoint %q", endpoint)
	}
	if _, off := s.disabledNow(t); off {
		return nil
	}
	for range pagesPerPoll {
		page, err := s.store.WebhookEvents(ctx, endpoint, t.Owner, PageSize)
		if err != nil {
			return err
		}
		if page.From == page.To {
			return nil
		}
		var tasks []payrouter.Task
		for _, ev := range page.Events {
			if !t.Endpoint.Wants(ev.Type) {
				continue
			}
			body, err := s.render(ev)
			if err != nil {
				// Never passed over: the cursor stays before it, and this is loud.
				s.log.Error("webhook.render_failed", "endpoint", endpoint, "event_id", ev.ID, "err", err.Error())
				return fmt.Errorf("webhooks: rendering event %s: %w", ev.ID, err)
			}
			tasks = append(tasks, payrouter.Task{
				Kind: payrouter.TaskWebhook, CreatedAt: s.now().UTC(),
				Webhook: &payrouter.WebhookDelivery{
					ID: payrouter.WebhookDeliveryID(endpoint, ev.ID), Endpoint: endpoint, EventID: ev.ID,
					EventType: ev.Type, EventAt: ev.CreatedAt, Body: body, Attempt: 1,
				},
			})
		}
		err = s.store.AdvanceWebhook(ctx, endpoint, page.From, page.To, tasks)
		switch {
		case errors.Is(err, payrouter.ErrStale):
			continue // another instance dispatched it: read on from where it left the cursor
		case err != nil:
			return err
		}
		if len(tasks) > 0 {
			s.obs.Dispatched(endpoint, len(tasks))
			s.wake()
		}
		if !page.More {
			return nil
		}
	}
	return nil
}

// Handle is the queue's handler of TaskWebhook (fallback.Worker.Handlers). It never waits on an
// endpoint: with a slot of the endpoint's bulkhead it starts the attempt in the background and
// returns fallback.ErrHandedOff, the attempt acknowledging, rescheduling or dead-lettering the
// task when it ends; with every slot held it puts the task back for a little later.
func (s *Service) Handle(ctx context.Context, task payrouter.Task) error {
	d := task.Webhook
	if d == nil {
		return fmt.Errorf("webhooks: task %s carries no delivery", task.ID)
	}
	t := s.target(d.Endpoint)
	switch {
	case d.Attempt > Attempts:
		// Its last attempt's instance stopped before it could say how it ended.
		return s.bury(ctx, task, ResultDeadLettered, fmt.Sprintf("the last of %d attempts ended unrecorded (its instance stopped)", Attempts))
	case t == nil:
		// Removed, or not known to this instance yet (a fleet mid-reload): an attempt that
		// failed, so another instance, or this one reloaded, may still deliver it.
		now := s.now()
		task = withOutcome(task, Result{Err: fmt.Errorf("endpoint %q is not configured on this instance", d.Endpoint)}, now)
		return s.failed(ctx, task, 0, now)
	}
	if off, ok := s.disabledNow(t); ok {
		return s.bury(ctx, task, ResultDeadLettered, "endpoint disabled: "+off.Reason)
	}
	release, ok := t.Acquire()
	if !ok {
		return s.deferTask(ctx, task, t)
	}
	s.obs.InFlight(t.Endpoint.Name, t.InFlight())
	s.attempts.Add(1)
	go func() {
		defer s.attempts.Done()
		defer func() {
			release()
			s.obs.InFlight(t.Endpoint.Name, t.InFlight())
		}()
		s.attempt(t, task)
	}()
	return fallback.ErrHandedOff
}

// deferTask puts a task whose endpoint has no free slot back in the queue for a little later,
// counting no attempt: the wait doubles each time, up to the endpoint's timeout.
func (s *Service) deferTask(ctx context.Context, task payrouter.Task, t *Target) error {
	next := task
	w := *task.Webhook
	next.Webhook = &w
	wait := min(deferFirst<<min(w.Deferrals, 16), t.Endpoint.Timeout)
	w.Deferrals++
	next.NotBefore = s.now().Add(time.Duration(float64(wait) * (0.5 + s.rand())))
	if err := s.store.RequeueTask(ctx, task.ID, &next); err != nil {
		if errors.Is(err, payrouter.ErrNotFound) {
			return fallback.ErrHandedOff // another instance holds it
		}
		return fmt.Errorf("%w: endpoint %s busy, and putting the delivery back failed: %v", fallback.ErrLater, t.Endpoint.Name, err)
	}
	return fallback.ErrHandedOff
}

// attempt sends the delivery and records how it ended; it runs in the background, holding one of
// the endpoint's slots. A store that fails to record it leaves the task as it was handed out: it
// is handed out again once idle, and delivered again (at least once).
func (s *Service) attempt(t *Target, task payrouter.Task) {
	d := task.Webhook
	now := s.now()
	res := t.Send(s.ctx, d.EventID, d.Body, now)
	if s.ctx.Err() != nil {
		return // stopping: the task is handed out again, to another instance
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	var err error
	switch {
	case res.Delivered():
		if err = s.store.Ack(ctx, task.ID); err == nil {
			s.obs.Attempted(t.Endpoint.Name, ResultDelivered, res.Took, s.now().Sub(d.EventAt))
			s.log.Debug("webhook.delivered", "endpoint", t.Endpoint.Name, "delivery", d.ID, "event_id", d.EventID,
				"attempt", d.Attempt, "status", res.Status, "took_ms", res.Took.Milliseconds())
		}
	case res.Gone():
		s.disable(ctx, t, now)
		task = withOutcome(task, res, now)
		err = s.bury(ctx, task, ResultDisabled, "the endpoint answered 410 Gone: it is disabled")
	default:
		task = withOutcome(task, res, now)
		err = s.failed(ctx, task, res.RetryAfter, now)
	}
	if err != nil && !errors.Is(err, fallback.ErrHandedOff) {
		s.log.Warn("webhook.record_failed", "endpoint", t.Endpoint.Name, "delivery", d.ID, "attempt", d.Attempt,
			"err", err.Error(), "then", "the delivery is attempted again once its task is handed out again")
	}
}

// withOutcome is task with its last attempt's outcome written in.
func withOutcome(task payrouter.Task, res Result, at time.Time) payrouter.Task {
	w := *task.Webhook
	w.LastStatus, w.LastAttemptAt, w.Deferrals = res.Status, at.UTC(), 0
	w.LastError = ""
	if res.Err != nil {
		w.LastError = res.Err.Error()
	}
	task.Webhook = &w
	return task
}

// failed schedules the next attempt of a delivery whose attempt failed (task carries its
// outcome, withOutcome), no sooner than retryAfter, or dead-letters it after the last.
func (s *Service) failed(ctx context.Context, task payrouter.Task, retryAfter time.Duration, now time.Time) error {
	d := task.Webhook
	if d.Attempt >= Attempts {
		return s.bury(ctx, task, ResultDeadLettered, fmt.Sprintf("the last of %d attempts failed: %s", Attempts, d.LastError))
	}
	next := task
	w := *d
	w.Attempt++
	next.Webhook = &w
	next.NotBefore = now.Add(Wait(w.Attempt, retryAfter, s.rand())).UTC()
	if err := s.store.RequeueTask(ctx, task.ID, &next); err != nil {
		if errors.Is(err, payrouter.ErrNotFound) {
			return fallback.ErrHandedOff // another instance moved it
		}
		return err
	}
	s.obs.Attempted(d.Endpoint, ResultRetried, 0, 0)
	s.log.Info("webhook.retry", "endpoint", d.Endpoint, "delivery", d.ID, "event_id", d.EventID, "attempt", d.Attempt,
		"status", d.LastStatus, "err", d.LastError, "next_attempt", w.Attempt, "next_at", next.NotBefore.Format(time.RFC3339))
	return fallback.ErrHandedOff
}

// bury dead-letters a delivery with the reason, counted as result.
func (s *Service) bury(ctx context.Context, task payrouter.Task, result, reason string) error {
	d := task.Webhook
	err := s.store.DeadLetterTask(ctx, task.ID, payrouter.DeadLetter{Task: task, Reason: reason, At: s.now().UTC()})
	switch {
	case errors.Is(err, payrouter.ErrNotFound):
		return fallback.ErrHandedOff // another instance moved it
	case err != nil:
		return err
	}
	s.obs.Attempted(d.Endpoint, result, 0, 0)
	s.log.Warn("webhook.dead_lettered", "endpoint", d.Endpoint, "delivery", d.ID, "event_id", d.EventID, "attempt", d.Attempt,
		"reason", reason, "then", "POST /admin/webhooks/"+d.ID+"/redeliver sends it again")
	return fallback.ErrHandedOff
}

// disable records that t's endpoint answered 410 Gone, here at once and for the fleet in the
// store.
func (s *Service) disable(ctx context.Context, t *Target, now time.Time) {
	d := payrouter.WebhookDisabled{URL: t.Endpoint.URL, Reason: "answered 410 Gone", At: now.UTC()}
	s.changeDisabled(func(m map[string]payrouter.WebhookDisabled) { m[t.Endpoint.Name] = d })
	s.obs.EndpointDisabled(t.Endpoint.Name, true)
	err := s.store.SetWebhookDisabled(ctx, t.Endpoint.Name, &d)
	attrs := []any{"endpoint", t.Endpoint.Name, "url", RedactURL(t.Endpoint.URL),
		"then", "no delivery is sent to it until POST /admin/webhooks/endpoints/" + t.Endpoint.Name + "/enable, or its url changes"}
	if err != nil {
		attrs = append(attrs, "store_err", err.Error())
	}
	s.log.Warn("webhook.endpoint_disabled", attrs...)
}

// Enable enables the endpoint again after a 410, for the fleet: deliveries are sent to it again,
// starting with the events written while it was disabled.
func (s *Service) Enable(ctx context.Context, endpoint string) error {
	if err := s.store.SetWebhookDisabled(ctx, endpoint, nil); err != nil {
		return err
	}
	s.changeDisabled(func(m map[string]payrouter.WebhookDisabled) { delete(m, endpoint) })
	s.obs.EndpointDisabled(endpoint, false)
	s.log.Info("webhook.endpoint_enabled", "endpoint", endpoint)
	return nil
}

// changeDisabled replaces the disabled endpoints by a copy that change changed.
func (s *Service) changeDisabled(change func(map[string]payrouter.WebhookDisabled)) {
	s.disabling.Lock()
	defer s.disabling.Unlock()
	m := maps.Clone(*s.disabled.Load())
	if m == nil {
		m = map[string]payrouter.WebhookDisabled{}
	}
	change(m)
	s.disabled.Store(&m)
}

type nopObserver struct{}

func (nopObserver) Dispatched(string, int)                                 {}
func (nopObserver) Attempted(string, string, time.Duration, time.Duration) {}
func (nopObserver) InFlight(string, int)                                   {}
func (nopObserver) EndpointDisabled(string, bool)                          {}
func (nopObserver) Backlog(int64, int64)                                   {}

// EndpointState is one configured endpoint as the admin API shows it: its settings (its
// secrets are never shown), whether a 410 disabled it, and its slots held on this instance.
type EndpointState struct {
	Endpoint Endpoint
	Disabled *payrouter.WebhookDisabled
	InFlight int
}

// Endpoints returns the configured endpoints in configuration order, with the fleet's word on
// which are disabled.
func (s *Service) Endpoints(ctx context.Context) ([]EndpointState, error) {
	disabled, err := s.store.WebhooksDisabled(ctx)
	if err != nil {
		return nil, err
	}
	set := s.targets.Load()
	out := make([]EndpointState, len(set.order))
	for i, t := range set.order {
		out[i] = EndpointState{Endpoint: t.Endpoint, InFlight: t.InFlight()}
		if d, ok := disabled[t.Endpoint.Name]; ok && d.URL == t.Endpoint.URL {
			out[i].Disabled = &d
		}
	}
	return out, nil
}

// DeadLetters returns up to limit dead letters, the newest first.
func (s *Service) DeadLetters(ctx context.Context, limit int) ([]payrouter.DeadLetter, error) {
	return s.store.DeadLetters(ctx, limit)
}

// Backlog counts the deliveries queued and the dead letters.
func (s *Service) Backlog(ctx context.Context) (queued, dead int64, err error) {
	return s.store.WebhookBacklog(ctx)
}

// Redeliver queues the dead letter of delivery again, due now, with a whole schedule of attempts
// before it; its last error stays until the first of them. payrouter.ErrNotFound when there is
// no such dead letter (never was, or redelivered already).
func (s *Service) Redeliver(ctx context.Context, delivery string) (*payrouter.Task, error) {
	dl, err := s.store.DeadLetterOf(ctx, delivery)
	if err != nil {
		return nil, err
	}
	t := dl.Task
	w := *t.Webhook
	w.Attempt, w.Deferrals = 1, 0
	t.Webhook, t.NotBefore, t.ID = &w, time.Time{}, ""
	if err := s.store.Redeliver(ctx, delivery, &t); err != nil {
		return nil, err
	}
	s.wake()
	s.log.Info("webhook.redelivered", "endpoint", w.Endpoint, "delivery", w.ID, "event_id", w.EventID)
	return &t, nil
}

// ErrNoEndpoint is wrapped by Enable for an endpoint that is not configured.
var ErrNoEndpoint = errors.New("no such webhook endpoint")

// EnableEndpoint enables the configured endpoint named name again (Enable) and returns its
// state; an error wrapping ErrNoEndpoint and payrouter.ErrNotFound when none is configured.
func (s *Service) EnableEndpoint(ctx context.Context, name string) (EndpointState, error) {
	t := s.target(name)
	if t == nil {
		return EndpointState{}, fmt.Errorf("%w %q: %w", ErrNoEndpoint, name, payrouter.ErrNotFound)
	}
	if err := s.Enable(ctx, name); err != nil {
		return EndpointState{}, err
	}
	return EndpointState{Endpoint: t.Endpoint, InFlight: t.InFlight()}, nil
}
