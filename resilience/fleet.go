package resilience

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/payrouter/payrouter"
)

// Defaults of FleetOptions.
const (
	DefaultFleetTimeout = 100 * time.Millisecond
	DefaultFleetRefresh = time.Second
	DefaultReportEvery  = 100 * time.Millisecond
	// watchRetry is how long the watcher waits before subscribing again after a failure.
	watchRetry = 250 * time.Millisecond
	// jobQueue bounds the fleet calls waiting to be made; they are rare (one per transition or
	// trial), so a full queue means the store is far behind, and dropping is the safe choice:
	// the next Sync repairs what a dropped call would have said.
	jobQueue = 256
)

// FleetOptions configures a Fleet; every zero value is documented.
type FleetOptions struct {
	// Origin names this instance in the events it causes (for whoever reads them).
	Origin string
	// Timeout bounds each call to the shared store; the only one a customer call may wait for is
	// taking a half-open trial slot. 0: DefaultFleetTimeout.
	Timeout time.Duration
	// Refresh is how often every breaker is re-read from the shared store, the safety net for
	// pub/sub messages lost while not subscribed. 0: DefaultFleetRefresh.
	Refresh time.Duration
	// ReportEvery is how often counted successes are sent to the shared store; failures are sent
	// at once, since they are what opens a breaker. 0: DefaultReportEvery.
	ReportEvery time.Duration
	// Up reports whether the shared store is reachable (statestore.Store.Up); while it is not,
	// each instance decides alone, on its own counts and trials. nil: always.
	Up func() bool
	// Log receives what goes wrong with the shared store; nil: discarded. A failed call is
	// logged when the store is still up after it, once per run of failures of that call: an
	// outage is logged once by whoever marks the store down (statestore).
	Log *slog.Logger
	// Failed counts each call to the shared store that failed, by name (sync, report_outcomes,
	// open_breaker, take_trial, return_trial, trial_succeeded, close_breaker); nil: not counted.
	Failed func(call string)
}

func (o FleetOptions) withDefaults() FleetOptions {
	if o.Timeout <= 0 {
		o.Timeout = DefaultFleetTimeout
	}
	if o.Refresh <= 0 {
		o.Refresh = DefaultFleetRefresh
	}
	if o.ReportEvery <= 0 {
		o.ReportEvery = DefaultReportEvery
	}
	if o.Up == nil {
		o.Up = func() bool { return true }
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Failed == nil {
		o.Failed = func(string) {}
	}
	return o
}

// Fleet shares every breaker of a Domains with the other instances of a fleet through a
// payrouter.FleetBreakers (docs/architecture.md, Breakers). Admission is local and costs no network
// call: each instance's breaker counts its own calls and trips on its own counts, and besides
// that
//   - counted outcomes go to the shared store (failures at once, successes every ReportEvery),
//     whose script trips the breaker on the fleet's counts;
//   - an instance that trips its breaker, or fails a trial, opens it fleet-wide;
//   - every instance learns each change by pub/sub, and re-reads all breakers every Refresh;
//   - half-open trials are the fleet's: HalfOpenRequests trial calls run fleet-wide;
//   - forced states and resets are the fleet's (Force).
//
// While the shared store does not answer, each instance keeps deciding alone; Resync, called
// when it answers again, tells it what this instance decided meanwhile and reads the fleet's state.
type Fleet struct {
	shared payrouter.FleetBreakers
	o      FleetOptions
	// linked is every breaker's link, swapped whole when the Domains are updated.
	linked atomic.Pointer[fleetLinks]
	wake   chan struct{}
	jobs   chan func(context.Context)
	// watching is true while subscribed to the fleet's events.
	watching atomic.Bool
	// failing holds the calls whose last attempt failed, so that a run of failures is logged once.
	failing sync.Map // call name -> struct{}
}

// fleetLink is one breaker's tie to the fleet.
type fleetLink struct {
	f        *Fleet
	b        *Breaker
	rules    payrouter.BreakerRules
	trialTTL time.Duration
	// Counted outcomes not yet sent. trailing is the failures since the last success; the three
	// are read apart, which can misplace an outcome or two between reports, never lose one.
	successes, failures, trailing atomic.Int64

	mu           sync.Mutex
	pendingForce *payrouter.Forced // a Force the store did not take, sent again by Resync
	// openPending is set while an open of this breaker has not reached the store: the fleet's
	// state read meanwhile says closed and must not close it here; sendPendingOpens (each
	// Refresh) and Resync send it again.
	openPending atomic.Bool
}

// NewFleet ties every breaker of d to shared. Call it before d serves any call; then Sync once
// (an instance restarted while a breaker is open comes back open) and Run.
func NewFleet(d *Domains, shared payrouter.FleetBreakers, o FleetOptions) *Fleet {
	f := &Fleet{
		shared: shared,
		o:      o.withDefaults(),
		wake:   make(chan struct{}, 1),
		jobs:   make(chan func(context.Context), jobQueue),
	}
	f.link(d.Current())
	d.OnUpdate(f.link)
	return f
}

// fleetLinks are the links of one DomainSet.
type fleetLinks struct {
	all    []*fleetLink
	byName map[string]*fleetLink
}

// link ties every breaker of set (retired gateways' included: their charges' captures, voids and
// refunds still count) to the fleet, keeping the links of breakers that had one. A new breaker's
// state is read at the next Sync, within Refresh.
func (f *Fleet) link(set *DomainSet) {
	next := &fleetLinks{byName: map[string]*fleetLink{}}
	for _, gd := range set.byName {
		for _, g := range gd.guards {
			l := g.breaker.fleet
			if l == nil {
				l = &fleetLink{
					f: f, b: g.breaker,
					rules: g.breaker.settings.BreakerRules,
					// A trial slot whose holder died is freed once the trial could no longer be
					// running.
					trialTTL: g.timeout + time.Second,
				}
				g.breaker.fleet = l
			}
			next.all = append(next.all, l)
			next.byName[g.breaker.name] = l
		}
	}
	f.linked.Store(next)
}

func (f *Fleet) links() []*fleetLink { return f.linked.Load().all }

// Run reports outcomes, makes the queued fleet calls, watches the fleet's events and re-reads
// every breaker each Refresh, until ctx ends.
func (f *Fleet) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { f.write(ctx) })
	wg.Go(func() { f.watch(ctx) })
	wg.Go(func() {
		tick := time.NewTicker(f.o.Refresh)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if f.o.Up() {
					f.sendPendingOpens(ctx)
					f.done("sync", "", f.Sync(ctx), "each breaker keeps its state here until the next refresh")
				}
			}
		}
	})
	wg.Wait()
}

// bound gives ctx the fleet's timeout.
func (f *Fleet) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, f.o.Timeout)
}

// Sync reads every breaker's fleet-wide state and applies it here.
func (f *Fleet) Sync(ctx context.Context) error {
	links := f.links()
	names := make([]string, len(links))
	for i, l := range links {
		names[i] = l.b.name
	}
	ctx, cancel := f.bound(ctx)
	defer cancel()
	states, err := f.shared.BreakerStates(ctx, names)
	if err != nil {
		return err
	}
	// News older than this that disagrees with a change made here since is not applied: the
	// change may not have reached the store when it was read.
	readAt := time.Now().Add(-f.o.Timeout)
	for _, l := range links {
		st, ok := states[l.b.name]
		if !ok {
			continue
		}
		l.mu.Lock()
		pending := l.pendingForce != nil
		l.mu.Unlock()
		if !pending {
			l.b.fleetForced(st.Forced)
		}
		switch {
		case st.Open:
			l.b.fleetOpened(st.OpenFor, countsFrom(st.Counts))
		case l.openPending.Load():
			// Opened here, and the store has not heard of it yet: what it says is older.
		case st.HalfOpen:
			l.b.fleetHalfOpen(readAt)
		default:
			l.b.fleetClosed(readAt)
		}
	}
	return nil
}

// Resync is for the moment the shared store answers again: it sends what this instance decided
// alone meanwhile (forced states, breakers it opened), then reads the fleet's state.
func (f *Fleet) Resync(ctx context.Context) error {
	for _, l := range f.links() {
		l.mu.Lock()
		pf := l.pendingForce
		l.mu.Unlock()
		if pf != nil {
			if err := l.share(ctx, *pf); err != nil {
				return err
			}
		}
		if err := l.sendOwnOpen(ctx); err != nil {
			return err
		}
	}
	return f.Sync(ctx)
}

// sendOwnOpen opens the breaker fleet-wide for what is left of its cooldown when it is open here
// by its own state, and forgets a pending open once the store has it or the breaker is no
// longer open.
func (l *fleetLink) sendOwnOpen(ctx context.Context) error {
	until, c, open := l.b.ownOpen()
	if !open {
		l.openPending.Store(false)
		return nil
	}
	ctx, cancel := l.f.bound(ctx)
	defer cancel()
	_, err := l.f.shared.OpenBreaker(ctx, l.b.name, time.Until(until), payrouter.BreakerCounts(c), 0, l.f.o.Origin)
	if err == nil {
		l.openPending.Store(false)
	}
	return err
}

// sendPendingOpens sends again the opens the store did not take (opened), before a refresh reads
// the fleet's state.
func (f *Fleet) sendPendingOpens(ctx context.Context) {
	for _, l := range f.links() {
		if l.openPending.Load() {
			f.done("open_breaker", l.b.name, l.sendOwnOpen(ctx), "sent again at the next refresh")
		}
	}
}

// done records the result of a call to the shared store: a failure is counted, and logged once
// per run of failures of that call while the store is up (an outage is logged where the store
// is marked down, and Resync repairs what it cost); a success ends the run. then says what
// happens next.
func (f *Fleet) done(call, breaker string, err error, then string) {
	if err == nil {
		f.failing.Delete(call)
		return
	}
	f.o.Failed(call)
	if _, already := f.failing.LoadOrStore(call, struct{}{}); already || !f.o.Up() {
		return
	}
	f.o.Log.Warn("fleet.call_failed", "call", call, "breaker", breaker, "err", err.Error(), "then", then)
}

// Force applies an ops decision to b (ForcedNone is a reset) and shares it with the fleet. It
// goes through write, after whatever this instance sent before, and applies here once the store
// has taken it: a reset must not be undone by the open, or the failures, of the trip it resets.
// When the store does not answer it still applies here at once, whatever the store says; Resync
// sends it again later, and the error says that other instances have not heard of it yet.
func (f *Fleet) Force(ctx context.Context, b *Breaker, forced payrouter.Forced) error {
	l := f.linked.Load().byName[b.name]
	if l == nil || l.b != b {
		return errors.New("resilience: breaker " + b.name + " is not of this fleet")
	}
	var once sync.Once
	apply := func() {
		once.Do(func() {
			if forced != payrouter.ForcedNone {
				b.Force(forced)
				return
			}
			b.Reset()
			l.successes.Store(0) // outcomes counted before the reset are not sent after it
			l.failures.Store(0)
			l.trailing.Store(0)
		})
	}
	done := make(chan error, 1)
	err := errors.New("resilience: the fleet's queue is full")
	if f.enqueue(func(ctx context.Context) {
		err := l.share(ctx, forced)
		apply()
		done <- err
	}) {
		wait, cancel := context.WithTimeout(ctx, forceWait)
		defer cancel()
		select {
		case err = <-done:
		case <-wait.Done():
			err = wait.Err()
		}
	}
	apply() // at once when write could not take it
	if err != nil {
		l.mu.Lock()
		l.pendingForce = &forced
		l.mu.Unlock()
		return err
	}
	return nil
}

// forceWait bounds how long Force waits for the fleet to take a change: the calls queued before
// it each take at most Timeout.
const forceWait = 2 * time.Second

// share sends a forced state (ForcedNone: a reset) to the store, and forgets the pending one
// when it was that.
func (l *fleetLink) share(ctx context.Context, forced payrouter.Forced) error {
	ctx, cancel := l.f.bound(ctx)
	defer cancel()
	var err error
	if forced == payrouter.ForcedNone {
		err = l.f.shared.ResetBreaker(ctx, l.b.name, l.f.o.Origin)
	} else {
		err = l.f.shared.ForceBreaker(ctx, l.b.name, forced, l.f.o.Origin)
	}
	if err == nil {
		l.mu.Lock()
		if l.pendingForce != nil && *l.pendingForce == forced {
			l.pendingForce = nil
		}
		l.mu.Unlock()
	}
	return err
}

// apply applies one fleet event here. Events this instance caused are applied too: applying
// them again changes nothing, and skipping them would let an older event from another instance,
// delivered after this instance's own reset, have the last word.
func (f *Fleet) apply(ev payrouter.BreakerEvent) {
	l := f.linked.Load().byName[ev.Breaker]
	if l == nil {
		return
	}
	if ev.Origin != f.o.Origin {
		// Says where the transition logged next (circuit.opened, ...) came from: another
		// instance, the prober, or ops through another instance's admin API.
		f.o.Log.Info("fleet.event", "breaker", ev.Breaker, "kind", string(ev.Kind), "origin", ev.Origin)
	}
	switch ev.Kind {
	case payrouter.BreakerOpened:
		l.b.fleetOpened(ev.OpenFor, countsFrom(ev.Counts))
	case payrouter.BreakerClosed:
		l.b.fleetClosed(time.Time{})
	case payrouter.BreakerForced:
		l.b.fleetForced(ev.Forced)
	case payrouter.BreakerReset:
		l.b.Reset()
	}
}

func countsFrom(c payrouter.BreakerCounts) Counts { return Counts(c) }

// watch applies the fleet's events as they are published, subscribing again after a failure.
// Once subscribed it re-reads every breaker: what was published before is in that read, what is
// published after comes as events.
func (f *Fleet) watch(ctx context.Context) {
	subscribed := func() {
		f.watching.Store(true)
		f.done("sync", "", f.Sync(ctx), "events still come; the next refresh reads the rest")
	}
	for {
		err := f.shared.WatchBreakers(ctx, subscribed, f.apply)
		f.watching.Store(false)
		if ctx.Err() != nil {
			return
		}
		if err != nil && f.o.Up() {
			f.o.Log.Warn("fleet.watch_failed", "err", err.Error())
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(watchRetry):
		}
	}
}

// Watching reports whether the fleet's events reach this instance as they are published; while
// not, it learns of changes at the next Refresh.
func (f *Fleet) Watching() bool { return f.watching.Load() }

// write makes every change this instance sends to the fleet, one at a time and in order: the
// queued calls (opens, trial results, forcing and resets) and the counted outcomes (at once
// after a failure, every ReportEvery otherwise). One writer keeps a reset from being overtaken
// by the open, or the failures, that came before it.
func (f *Fleet) write(ctx context.Context) {
	tick := time.NewTicker(f.o.ReportEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case job := <-f.jobs:
			job(ctx)
		case <-f.wake:
			f.sendOutcomes(ctx)
		case <-tick.C:
			f.sendOutcomes(ctx)
		}
	}
}

func (f *Fleet) sendOutcomes(ctx context.Context) {
	for _, l := range f.links() {
		l.send(ctx)
	}
}

// send reports l's pending outcomes, and opens the breaker here when they tripped the fleet's.
func (l *fleetLink) send(ctx context.Context) {
	r := payrouter.BreakerReport{Successes: l.successes.Swap(0), Failures: l.failures.Swap(0), TrailingFailures: l.trailing.Swap(0)}
	if r.Successes == 0 && r.Failures == 0 {
		return
	}
	r.TrailingFailures = min(r.TrailingFailures, r.Failures)
	if r.Successes == 0 {
		r.TrailingFailures = r.Failures
	}
	if !l.f.o.Up() {
		return // the store is away: this instance's own counts decide meanwhile
	}
	ctx, cancel := l.f.bound(ctx)
	defer cancel()
	opened, c, err := l.f.shared.ReportOutcomes(ctx, l.b.name, l.rules, r, l.f.o.Origin)
	// Not sent again: a report that timed out may have been counted, and counting it twice
	// could open the fleet's breaker on failures that did not happen. This instance's breaker
	// counted them and trips on its own counts.
	l.f.done("report_outcomes", l.b.name, err, "these outcomes count here only")
	if err == nil && opened {
		l.b.fleetOpened(l.rules.Cooldown, countsFrom(c))
	}
}

// enqueue queues a fleet call for write; it never blocks, since it is called with a breaker's
// lock held. It reports false when the queue is full and the call dropped.
func (f *Fleet) enqueue(job func(ctx context.Context)) bool {
	select {
	case f.jobs <- job:
		return true
	default:
		f.o.Log.Warn("fleet.queue_full", "dropped", "a breaker change; the next refresh repairs it")
		return false
	}
}

// The Breaker's side of the link: called by the breaker, some with its lock held, so none of
// them waits except takeTrial and closeHalfOpen, which are called without it.

func (l *fleetLink) usable() bool { return l.f.o.Up() }

func (l *fleetLink) count(_ *Breaker, failure bool) {
	if !failure {
		l.successes.Add(1)
		l.trailing.Store(0)
		return
	}
	l.failures.Add(1)
	l.trailing.Add(1)
	select {
	case l.f.wake <- struct{}{}:
	default:
	}
}

// opened sends an opening of b to the fleet: trial is the fleet's generation of the trial that
// failed, or 0 when b tripped on its own counts.
func (l *fleetLink) opened(b *Breaker, cooldown time.Duration, c Counts, trial payrouter.TrialGen) {
	// Pending until the store has it: a refresh meanwhile must not close it on the fleet's older
	// word, and sends it again (Resync does when the store comes back).
	l.openPending.Store(true)
	if !l.usable() {
		return
	}
	l.f.enqueue(func(ctx context.Context) {
		cctx, cancel := l.f.bound(ctx)
		defer cancel()
		_, err := l.f.shared.OpenBreaker(cctx, b.name, cooldown, payrouter.BreakerCounts(c), trial, l.f.o.Origin)
		if err == nil {
			l.openPending.Store(false)
		}
		l.f.done("open_breaker", b.name, err, "open here; sent again at the next refresh")
	})
}

// takeTrial asks the fleet for a trial slot; its generation, 0 when none was free.
func (l *fleetLink) takeTrial(b *Breaker) (payrouter.TrialGen, error) {
	ctx, cancel := l.f.bound(context.Background())
	defer cancel()
	gen, err := l.f.shared.TakeTrial(ctx, b.name, b.settings.HalfOpenRequests, l.trialTTL)
	l.f.done("take_trial", b.name, err, "this instance runs its own trial")
	return gen, err
}

func (l *fleetLink) returnTrial(b *Breaker, gen payrouter.TrialGen) {
	l.f.enqueue(func(ctx context.Context) {
		ctx, cancel := l.f.bound(ctx)
		defer cancel()
		l.f.done("return_trial", b.name, l.f.shared.ReturnTrial(ctx, b.name, gen),
			"the trial slot is free again once its hold runs out")
	})
}

// trialSucceeded tells the fleet that a trial of its generation fleetGen, admitted in b's
// period gen, succeeded.
func (l *fleetLink) trialSucceeded(b *Breaker, gen uint64, fleetGen payrouter.TrialGen) {
	l.f.enqueue(func(ctx context.Context) {
		ctx, cancel := l.f.bound(ctx)
		defer cancel()
		closed, err := l.f.shared.TrialSucceeded(ctx, b.name, fleetGen, b.settings.HalfOpenRequests, l.f.o.Origin)
		then := "the breaker stays half-open until the fleet's other trials decide"
		if b.settings.HalfOpenRequests <= 1 {
			then = "this instance's trial closes the breaker here"
		}
		l.f.done("trial_succeeded", b.name, err, then)
		switch {
		case err != nil && b.settings.HalfOpenRequests <= 1:
			b.trialClosed(gen) // the store is away: this instance's trial decides
		case closed:
			b.fleetClosed(time.Time{})
		}
	})
}

func (l *fleetLink) closeHalfOpen(b *Breaker) (bool, error) {
	ctx, cancel := l.f.bound(context.Background())
	defer cancel()
	closed, err := l.f.shared.CloseBreaker(ctx, b.name, l.f.o.Origin)
	l.f.done("close_breaker", b.name, err, "the probe's verdict closes the breaker here")
	return closed, err
}

// The fleet's news, applied to a Breaker. Opening always applies (it is the safe direction);
// closing and half-opening do not undo a change made here after the news was read (changedAt
// after since), which may not have reached the store yet.

// fleetOpened opens b for openFor, or keeps it open at least that long.
func (b *Breaker) fleetOpened(openFor time.Duration, c Counts) {
	now := time.Now()
	until := now.Add(openFor)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == StateOpen {
		if until.After(b.openUntil) {
			b.openUntil = until
		}
		return
	}
	b.openLocked(now, openFor, c)
}

// fleetHalfOpen makes b half-open: the fleet's cooldown is over.
func (b *Breaker) fleetHalfOpen(since time.Time) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.state == StateOpen:
		b.openUntil = now
		b.advance(now)
	case b.state == StateClosed && !b.changedAt.After(since):
		from := b.shown()
		b.setState(now, StateHalfOpen)
		b.report(from, Counts{})
	}
}

// trialClosed closes b on its own trial's success, unless b has left the half-open period gen
// the trial was admitted in meanwhile.
func (b *Breaker) trialClosed(gen uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != StateHalfOpen || b.gen != gen {
		return
	}
	b.closeLocked(time.Now(), Counts{Requests: b.trialSuccesses})
}

// fleetClosed closes b: the fleet's trials succeeded, or it is closed fleet-wide.
func (b *Breaker) fleetClosed(since time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == StateClosed || (!since.IsZero() && b.changedAt.After(since)) {
		return
	}
	b.closeLocked(time.Now(), Counts{Requests: b.trialSuccesses})
}

// fleetForced applies the fleet's forced state when it differs from b's.
func (b *Breaker) fleetForced(f payrouter.Forced) {
	b.mu.Lock()
	same := b.forced == *forcingOf(f)
	b.mu.Unlock()
	if !same {
		b.Force(f)
	}
}

// ownOpen returns when b's cooldown ends and what opened it, if b is open by its own state.
func (b *Breaker) ownOpen() (until time.Time, c Counts, open bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(time.Now())
	if b.state != StateOpen {
		return time.Time{}, Counts{}, false
	}
	return b.openUntil, Counts{Failures: 1}, true
}
