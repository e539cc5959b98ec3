package resilience

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/payrouter/payrouter"
)

// windowBuckets is how many buckets the rolling window has: the oldest tenth of the window is
// forgotten at once, which is fine-grained enough for a health signal.
const windowBuckets = 10

// readyToTrip applies the trip rules to the counts of the closed state.
func (s BreakerSettings) readyToTrip(c gobreaker.Counts) bool {
	if s.ConsecutiveFailures > 0 && int64(c.ConsecutiveFailures) >= int64(s.ConsecutiveFailures) {
		return true
	}
	if s.FailuresInWindow > 0 && int64(c.TotalFailures) >= int64(s.FailuresInWindow) {
		return true
	}
	if s.FailureRate > 0 {
		answered := int64(c.TotalSuccesses) + int64(c.TotalFailures)
		if answered >= int64(s.MinRequests) && float64(c.TotalFailures) >= s.FailureRate*float64(answered) {
			return true
		}
	}
	return false
}

// Counts are a breaker's counts in its current state (and, when closed, its window).
type Counts struct{ Requests, Failures, ConsecutiveFailures int64 }

func countsOf(c gobreaker.Counts) Counts {
	return Counts{
		Requests:            int64(c.Requests),
		Failures:            int64(c.TotalFailures),
		ConsecutiveFailures: int64(c.ConsecutiveFailures),
	}
}

// Snapshot is one breaker as the admin API shows it.
type Snapshot struct {
	Name      string // "<gateway>/<operation>"
	Gateway   string
	Operation payrouter.Operation
	State     State
	Forced    payrouter.Forced
	OpenUntil time.Time // zero unless open (forced open: zero; state open by trip: when it becomes half-open)
	Counts    Counts
}

// Breaker is the circuit breaker of one failure domain "<gateway>/<operation>".
//
// While closed, admission is gobreaker's TwoStepCircuitBreaker, with no lock of ours and no
// network call: it counts outcomes in its rolling window and applies the trip rules. When it
// trips, the breaker opens and the machine is replaced by a fresh one; open and half-open are
// ours, because they must be shared: a fleet (Fleet) opens, closes and forces a breaker on every
// instance, and its trials are counted fleet-wide. Ops' forcing sits above all of it.
//
// Locks: gobreaker calls our callbacks with its own mutex held, and they take b.mu; so b.mu is
// never held while calling into gobreaker.
type Breaker struct {
	name     string
	gateway  string
	op       payrouter.Operation
	settings BreakerSettings
	obs      Observer

	// machine counts the closed state; it is swapped whole on every change of state, so a
	// call admitted before the change reports into a machine nobody reads.
	machine atomic.Pointer[machine]
	// forcing mirrors forced, and closed mirrors state == StateClosed, for the hot path.
	forcing atomic.Pointer[payrouter.Forced]
	closed  atomic.Bool
	// fleet shares the breaker with other instances; nil when the state store is not shared.
	fleet *fleetLink

	mu             sync.Mutex
	state          State            // the breaker's own state, forcing aside
	forced         payrouter.Forced // what ops imposed
	openUntil      time.Time        // while open: when it becomes half-open
	gen            uint64           // the generation of the current state: every change starts a new one
	trials         int              // while half-open: trial calls admitted here and not yet reported
	trialSuccesses int64            // while half-open: trial calls that succeeded here
	changedAt      time.Time        // when state last changed here (Fleet.Sync leaves fresh news alone)
	asking         bool             // a fleet trial slot is being asked for
	askAgain       time.Time        // the fleet said no trial slot: do not ask again before this
}

// The values forcing points to, so that forcing allocates nothing.
var (
	forcedNone   = payrouter.ForcedNone
	forcedOpen   = payrouter.ForcedOpen
	forcedClosed = payrouter.ForcedClosed
)

func forcingOf(f payrouter.Forced) *payrouter.Forced {
	switch f {
	case payrouter.ForcedOpen:
		return &forcedOpen
	case payrouter.ForcedClosed:
		return &forcedClosed
	default:
		return &forcedNone
	}
}

// NewBreaker returns a closed breaker for the failure domain "<gateway>/<op>"; obs nil is
// NopObserver. Domains makes one per gateway and operation; NewBreaker is for tests and tools.
func NewBreaker(gateway string, op payrouter.Operation, s BreakerSettings, obs Observer) *Breaker {
	if obs == nil {
		obs = NopObserver{}
	}
	b := &Breaker{
		name:     gateway + "/" + string(op),
		gateway:  gateway,
		op:       op,
		settings: s.withDefaults(),
		obs:      obs,
		state:    StateClosed,
	}
	b.machine.Store(b.newMachine())
	b.forcing.Store(&forcedNone)
	b.closed.Store(true)
	return b
}

// Name returns "<gateway>/<operation>".
func (b *Breaker) Name() string { return b.name }

// Settings returns the breaker's rules, zero values replaced by what they mean.
func (b *Breaker) Settings() BreakerSettings { return b.settings }

// machine is one gobreaker counting one closed period.
type machine struct {
	b  *Breaker
	cb *gobreaker.TwoStepCircuitBreaker[struct{}]
	// tripCounts is what ReadyToTrip last tripped on, guarded by cb's own mutex: gobreaker clears
	// its counts before OnStateChange.
	tripCounts gobreaker.Counts
}

func (b *Breaker) newMachine() *machine {
	m := &machine{b: b}
	s := b.settings
	m.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:          b.name,
		Interval:      s.Window,
		BucketPeriod:  s.Window / windowBuckets,
		Timeout:       s.Cooldown, // unused: a tripped machine is replaced at once
		ReadyToTrip:   m.readyToTrip,
		OnStateChange: m.onStateChange,
		IsSuccessful:  isSuccessful,
		IsExcluded:    isExcluded,
	})
	return m
}

func (m *machine) readyToTrip(c gobreaker.Counts) bool {
	if !m.b.settings.readyToTrip(c) {
		return false
	}
	m.tripCounts = c
	return true
}

func isSuccessful(err error) bool { return verdictOf(err) == countedSuccess }

func isExcluded(err error) bool { return verdictOf(err) == excluded }

// onStateChange hears the machine trip; it never sees another change, being replaced at once.
func (m *machine) onStateChange(_ string, from, to gobreaker.State) {
	if from == gobreaker.StateClosed && to == gobreaker.StateOpen {
		m.b.tripped(m, countsOf(m.tripCounts))
	}
}

// tripped opens the breaker when the machine of its closed period trips.
func (b *Breaker) tripped(m *machine, c Counts) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.machine.Load() != m || b.state != StateClosed {
		return // replaced: its news is stale
	}
	b.openLocked(time.Now(), b.settings.Cooldown, c)
	if b.fleet != nil {
		b.fleet.opened(b, b.settings.Cooldown, c, 0)
	}
}

// openLocked opens the breaker for cooldown. b.mu held.
func (b *Breaker) openLocked(now time.Time, cooldown time.Duration, c Counts) {
	from := b.shown()
	b.setState(now, StateOpen)
	b.openUntil = now.Add(cooldown)
	b.report(from, c)
}

// closeLocked closes the breaker with a fresh count. b.mu held.
func (b *Breaker) closeLocked(now time.Time, c Counts) {
	from := b.shown()
	b.setState(now, StateClosed)
	b.report(from, c)
}

// setState enters a state with nothing of the previous one kept. b.mu held.
func (b *Breaker) setState(now time.Time, s State) {
	b.machine.Store(b.newMachine())
	b.state = s
	b.gen++
	b.openUntil = time.Time{}
	b.trials, b.trialSuccesses = 0, 0
	b.askAgain = time.Time{}
	b.changedAt = now
	b.closed.Store(s == StateClosed)
}

// advance moves an open breaker whose cooldown is over to half-open: nothing else does, so the
// admin API and the metrics show half_open once someone looks, traffic or not. As in gobreaker,
// the cooldown is over strictly after openUntil. b.mu held.
func (b *Breaker) advance(now time.Time) {
	if b.state == StateOpen && now.After(b.openUntil) {
		from := b.shown()
		b.setState(now, StateHalfOpen)
		b.report(from, Counts{})
	}
}

// shown is the state the breaker shows: the forced one, else its own. b.mu held.
func (b *Breaker) shown() State {
	switch b.forced {
	case payrouter.ForcedOpen:
		return StateOpen
	case payrouter.ForcedClosed:
		return StateClosed
	default:
		return b.state
	}
}

// report tells the observer, under b.mu so that reports keep their order, when the shown state
// is no longer from.
func (b *Breaker) report(from State, c Counts) {
	if to := b.shown(); to != from {
		b.obs.BreakerTransition(b.gateway, b.op, from, to, c, b.settings.Cooldown)
	}
}

// trialKind says whether an admitted call is a half-open trial, and whose slot it holds.
type trialKind uint8

const (
	noTrial    trialKind = iota
	localTrial           // a slot of this instance's half-open
	fleetTrial           // a slot of the fleet's half-open (payrouter.FleetBreakers.TakeTrial)
)

// admission is one admitted call, handed back to finish with its outcome.
type admission struct {
	m     *machine    // the closed period's machine that counted the call; nil otherwise
	done  func(error) // m's report
	trial trialKind
	// gen is the half-open period a trial was admitted in (Breaker.gen), and fleetGen the
	// fleet's generation of its slot (fleetTrial): a trial's outcome counts in that period
	// only, as in gobreaker, whose generations drop the outcome of a call admitted before the
	// state changed.
	gen      uint64
	fleetGen payrouter.TrialGen
}

// allow admits one call or returns ErrOpen. An admitted call must be finished exactly once.
func (b *Breaker) allow() (admission, error) {
	switch *b.forcing.Load() {
	case payrouter.ForcedOpen:
		b.obs.BreakerRejected(b.gateway, b.op)
		return admission{}, ErrOpen
	case payrouter.ForcedClosed:
		return admission{}, nil // bypasses every count: nothing can trip it
	}
	if b.closed.Load() {
		m := b.machine.Load()
		if done, err := m.cb.Allow(); err == nil {
			return admission{m: m, done: done}, nil
		}
		// The machine tripped between the two loads: the breaker is open by now.
	}
	return b.allowSlow()
}

// allowSlow admits a call while the breaker is not closed: only half-open trials get through.
func (b *Breaker) allowSlow() (admission, error) {
	now := time.Now()
	b.mu.Lock()
	b.advance(now)
	switch {
	case b.state == StateClosed: // closed again meanwhile
		b.mu.Unlock()
		m := b.machine.Load()
		if done, err := m.cb.Allow(); err == nil {
			return admission{m: m, done: done}, nil
		}
		return b.reject()
	case b.state != StateHalfOpen, b.settings.OutOfBand(), b.trials >= b.settings.HalfOpenRequests:
		b.mu.Unlock()
		return b.reject()
	}
	if b.fleet == nil || !b.fleet.usable() {
		b.trials++
		gen := b.gen
		b.mu.Unlock()
		return admission{trial: localTrial, gen: gen}, nil
	}
	// The fleet's trial slots: one question at a time from this instance, and none for a while
	// after the fleet said no, so that a half-open breaker under load costs Redis almost nothing.
	if b.asking || now.Before(b.askAgain) {
		b.mu.Unlock()
		return b.reject()
	}
	b.asking = true
	asked := b.gen
	b.mu.Unlock()
	fleetGen, err := b.fleet.takeTrial(b)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asking = false
	switch {
	case err != nil: // the fleet cannot answer: this instance decides alone, as without one
		if b.state == StateHalfOpen && b.trials < b.settings.HalfOpenRequests {
			b.trials++
			return admission{trial: localTrial, gen: b.gen}, nil
		}
	case fleetGen == 0:
		b.askAgain = time.Now().Add(askAgainAfter)
	case b.state == StateHalfOpen && b.gen == asked:
		b.trials++
		return admission{trial: fleetTrial, gen: b.gen, fleetGen: fleetGen}, nil
	default: // closed or reopened while asking: the slot is not needed
		b.fleet.returnTrial(b, fleetGen)
	}
	b.obs.BreakerRejected(b.gateway, b.op)
	return admission{}, ErrOpen
}

// askAgainAfter is how long an instance waits before asking the fleet for a trial slot again
// after it said no: the trial under way elsewhere reports within its timeout, and the news comes
// by pub/sub.
const askAgainAfter = 100 * time.Millisecond

func (b *Breaker) reject() (admission, error) {
	b.obs.BreakerRejected(b.gateway, b.op)
	return admission{}, ErrOpen
}

// finish reports the outcome of an admitted call.
func (b *Breaker) finish(a admission, report error) {
	switch {
	case a.m != nil:
		a.done(report) // may trip the machine, which opens the breaker
		if b.fleet != nil {
			if v := verdictOf(report); v != excluded {
				b.fleet.count(b, v == countedFailure)
			}
		}
	case a.trial != noTrial:
		b.trialDone(a, verdictOf(report))
	}
}

// trialDone applies a trial call's verdict: any failure reopens, HalfOpenRequests successes
// close, an excluded outcome gives the slot back. A trial of an earlier period counts for
// nothing: not even its slot is given back here, since the period it held one in is over.
func (b *Breaker) trialDone(a admission, v verdict) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != StateHalfOpen || b.gen != a.gen {
		// Closed, reopened or reset while the trial ran (and perhaps half-open again since):
		// its news is stale here. The fleet's slot goes back with its generation, which the
		// fleet drops if it has moved on too.
		if a.trial == fleetTrial && v == excluded {
			b.fleet.returnTrial(b, a.fleetGen)
		}
		return
	}
	switch v {
	case excluded:
		b.trials--
		if a.trial == fleetTrial {
			b.fleet.returnTrial(b, a.fleetGen)
		}
	case countedFailure:
		c := Counts{Requests: b.trialSuccesses + 1, Failures: 1, ConsecutiveFailures: 1}
		b.openLocked(now, b.settings.Cooldown, c)
		if b.fleet != nil {
			b.fleet.opened(b, b.settings.Cooldown, c, a.fleetGen)
		}
	default:
		b.trialSuccesses++
		if a.trial == fleetTrial {
			b.fleet.trialSucceeded(b, a.gen, a.fleetGen) // the fleet closes it when all its trials succeeded
		} else if b.trialSuccesses >= int64(b.settings.HalfOpenRequests) {
			b.closeLocked(now, Counts{Requests: b.trialSuccesses})
		}
	}
}

// Allow asks the breaker to admit one call. If it does, the caller must call done exactly once
// with the call's outcome (a trial call in half-open that is never reported holds its place for
// good). err is ErrOpen when the breaker refuses: open, forced open, or half-open with its trial
// calls taken.
func (b *Breaker) Allow() (done func(payrouter.Outcome), err error) {
	a, err := b.allow()
	if err != nil {
		return nil, err
	}
	return func(o payrouter.Outcome) { b.finish(a, reportOf(o)) }, nil
}

// ProbeResult is the out-of-band prober's verdict on the gateway's health. It decides a
// half-open breaker only (healthy closes it, unhealthy opens it for another cooldown); closed
// and open breakers are left alone, so a probe never enters the customer counts.
func (b *Breaker) ProbeResult(healthy bool) {
	now := time.Now()
	b.mu.Lock()
	b.advance(now)
	if b.state != StateHalfOpen {
		b.mu.Unlock()
		return
	}
	if !healthy {
		c := Counts{Requests: 1, Failures: 1, ConsecutiveFailures: 1}
		b.openLocked(now, b.settings.Cooldown, c)
		if b.fleet != nil {
			b.fleet.opened(b, b.settings.Cooldown, c, 0)
		}
		b.mu.Unlock()
		return
	}
	if b.fleet == nil || !b.fleet.usable() {
		b.closeLocked(now, Counts{Requests: 1})
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	// The fleet closes it, and the news reaches every instance, this one included.
	if closed, err := b.fleet.closeHalfOpen(b); err != nil || closed {
		b.mu.Lock()
		if b.state == StateHalfOpen {
			b.closeLocked(time.Now(), Counts{Requests: 1})
		}
		b.mu.Unlock()
	}
}

// Force imposes a state: ForcedOpen refuses every call; ForcedClosed admits every call and
// nothing can trip it; ForcedNone clears forcing and shows the breaker's own state again, which
// forcing left to run its course (a cooldown still ends). Any other value is taken as
// ForcedNone. It changes this instance only; Fleet.Force shares it.
func (b *Breaker) Force(f payrouter.Forced) {
	f = *forcingOf(f)
	mc := b.machineCounts()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(time.Now())
	from, was := b.shown(), b.forced
	b.forced = f
	b.forcing.Store(forcingOf(f))
	b.report(from, b.countsLocked(mc))
	if f != was {
		b.obs.BreakerForced(b.gateway, b.op, f)
	}
}

// Reset closes the breaker, clears its counts and its forcing. Calls admitted before the reset
// report into a machine that is gone and change nothing. It changes this instance only;
// Fleet.Force shares it.
func (b *Breaker) Reset() {
	mc := b.machineCounts()
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.countsLocked(mc)
	from, was := b.shown(), b.forced
	b.setState(time.Now(), StateClosed)
	b.forced = payrouter.ForcedNone
	b.forcing.Store(&forcedNone)
	b.report(from, c)
	if was != payrouter.ForcedNone {
		b.obs.BreakerForced(b.gateway, b.op, payrouter.ForcedNone)
	}
}

// machineCounts reads the closed period's counts. Never with b.mu held: gobreaker takes its own
// lock to answer, and calls tripped, which takes b.mu, with that lock held.
func (b *Breaker) machineCounts() Counts {
	return countsOf(b.machine.Load().cb.Counts())
}

// countsLocked returns the counts of the current period, mc being machineCounts read just
// before b.mu was taken. b.mu held.
func (b *Breaker) countsLocked(mc Counts) Counts {
	if b.state == StateClosed {
		return mc
	}
	if b.state == StateHalfOpen {
		return Counts{Requests: b.trialSuccesses}
	}
	return Counts{}
}

// OpenUntil returns when the breaker, opened by a trip, lets trial calls through; zero when it is
// not open, or is forced open (that holds until reset).
func (b *Breaker) OpenUntil() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(time.Now())
	return b.openUntilLocked()
}

func (b *Breaker) openUntilLocked() time.Time {
	if b.forced != payrouter.ForcedNone || b.state != StateOpen {
		return time.Time{}
	}
	return b.openUntil
}

// Snapshot returns the breaker as the admin API shows it.
func (b *Breaker) Snapshot() Snapshot {
	mc := b.machineCounts()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(time.Now())
	return Snapshot{
		Name:      b.name,
		Gateway:   b.gateway,
		Operation: b.op,
		State:     b.shown(),
		Forced:    b.forced,
		OpenUntil: b.openUntilLocked(),
		Counts:    b.countsLocked(mc),
	}
}

// State returns the state the breaker shows (forcing included).
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(time.Now())
	return b.shown()
}
