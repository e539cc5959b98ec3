package resilience

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/payrouter/payrouter"
)

// Defaults of BreakerSettings, the same as config's.
const (
	DefaultCooldown = 30 * time.Second
	// windowBuckets is how many buckets the rolling window has: the oldest tenth of the window
	// is forgotten at once, which is fine-grained enough for a health signal.
	windowBuckets = 10
)

// BreakerSettings holds the trip rules of a breaker. Any rule trips it; a rule at 0 is off.
type BreakerSettings struct {
	// ConsecutiveFailures trips after N failures in a row; 0 off.
	ConsecutiveFailures int
	// FailuresInWindow trips after N failures within Window; 0 off.
	FailuresInWindow int
	// FailureRate trips when failures/(requests-exclusions) >= rate over Window, once MinRequests
	// are counted; 0 off. Only answered calls count: one still in flight has no outcome yet, and
	// counting it would dilute the rate exactly when a gateway hangs.
	FailureRate float64
	// MinRequests is how many answered, non-excluded calls Window must hold before FailureRate
	// applies; 0 is taken as 1.
	MinRequests int
	// Window is the rolling window of FailuresInWindow and FailureRate (gobreaker's Interval,
	// in buckets of Window/10). 0: counts are kept until the breaker changes state.
	Window time.Duration
	// Cooldown is how long the breaker stays open before it lets trial calls through;
	// 0: DefaultCooldown.
	Cooldown time.Duration
	// HalfOpenRequests is how many trial calls half-open admits; all must succeed to close,
	// any failure opens it again. 0 is taken as 1.
	HalfOpenRequests int
}

// withDefaults returns s with its zero values replaced by what they mean.
func (s BreakerSettings) withDefaults() BreakerSettings {
	if s.Cooldown <= 0 {
		s.Cooldown = DefaultCooldown
	}
	if s.HalfOpenRequests <= 0 {
		s.HalfOpenRequests = 1
	}
	if s.MinRequests <= 0 {
		s.MinRequests = 1
	}
	return s
}

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

// Breaker is the circuit breaker of one failure domain "<gateway>/<operation>": gobreaker's
// state machine, plus forcing by ops and an atomic reset.
//
// Locks: gobreaker calls our callbacks with its own mutex held, and they take b.mu; so b.mu is
// never held while calling into gobreaker.
type Breaker struct {
	name     string
	gateway  string
	op       payrouter.Operation
	settings BreakerSettings
	obs      Observer

	// machine is swapped whole by Reset; the hot path reads it without a lock.
	machine atomic.Pointer[machine]
	// forcing mirrors forced for the hot path.
	forcing atomic.Pointer[payrouter.Forced]

	mu        sync.Mutex
	under     State            // the state machine's last state, as its callbacks told
	forced    payrouter.Forced // what ops imposed
	openUntil time.Time        // when the machine, opened by a trip, becomes half-open
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
		under:    StateClosed,
	}
	b.machine.Store(b.newMachine())
	b.forcing.Store(&forcedNone)
	return b
}

// Name returns "<gateway>/<operation>".
func (b *Breaker) Name() string { return b.name }

// Settings returns the breaker's rules, zero values replaced by what they mean.
func (b *Breaker) Settings() BreakerSettings { return b.settings }

// machine is one gobreaker with the state its callbacks keep. Reset replaces it whole, and a
// replaced machine's late callbacks are ignored.
type machine struct {
	b  *Breaker
	cb *gobreaker.TwoStepCircuitBreaker[struct{}]

	// Guarded by cb's own mutex: gobreaker calls ReadyToTrip, IsSuccessful and OnStateChange
	// with it held, and only they touch these.
	state          gobreaker.State
	tripCounts     gobreaker.Counts // the counts ReadyToTrip last tripped on
	trialSuccesses int64            // successful trial calls in this half-open period
}

func (b *Breaker) newMachine() *machine {
	m := &machine{b: b, state: gobreaker.StateClosed}
	s := b.settings
	m.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:          b.name,
		MaxRequests:   uint32(s.HalfOpenRequests),
		Interval:      s.Window,
		BucketPeriod:  s.Window / windowBuckets,
		Timeout:       s.Cooldown,
		ReadyToTrip:   m.readyToTrip,
		OnStateChange: m.onStateChange,
		IsSuccessful:  m.isSuccessful,
		IsExcluded:    isExcluded,
	})
	return m
}

func (m *machine) readyToTrip(c gobreaker.Counts) bool {
	if !m.b.settings.readyToTrip(c) {
		return false
	}
	m.tripCounts = c // gobreaker clears its counts before OnStateChange: keep what tripped it
	return true
}

func (m *machine) isSuccessful(err error) bool {
	ok := verdictOf(err) == countedSuccess
	if ok && m.state == gobreaker.StateHalfOpen {
		m.trialSuccesses++
	}
	return ok
}

func isExcluded(err error) bool { return verdictOf(err) == excluded }

func (m *machine) onStateChange(_ string, from, to gobreaker.State) {
	m.state = to
	// The counts of the period that ended; gobreaker has already cleared its own.
	var c Counts
	switch {
	case from == gobreaker.StateClosed && to == gobreaker.StateOpen:
		c = countsOf(m.tripCounts)
	case from == gobreaker.StateHalfOpen && to == gobreaker.StateOpen:
		c = Counts{Requests: m.trialSuccesses + 1, Failures: 1, ConsecutiveFailures: 1}
	case from == gobreaker.StateHalfOpen && to == gobreaker.StateClosed:
		c = Counts{Requests: m.trialSuccesses}
	}
	m.trialSuccesses = 0
	m.b.machineChanged(m, stateOf(to), c)
}

func stateOf(s gobreaker.State) State {
	switch s {
	case gobreaker.StateOpen:
		return StateOpen
	case gobreaker.StateHalfOpen:
		return StateHalfOpen
	default:
		return StateClosed
	}
}

// machineChanged records a transition of m and reports it if it changes what the breaker shows.
func (b *Breaker) machineChanged(m *machine, to State, c Counts) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.machine.Load() != m {
		return // replaced by Reset: its news is stale
	}
	from := b.shown()
	b.under = to
	if to == StateOpen {
		b.openUntil = time.Now().Add(b.settings.Cooldown)
	} else {
		b.openUntil = time.Time{}
	}
	b.report(from, c)
}

// shown is the state the breaker shows: the forced one, else the machine's. b.mu held.
func (b *Breaker) shown() State {
	switch b.forced {
	case payrouter.ForcedOpen:
		return StateOpen
	case payrouter.ForcedClosed:
		return StateClosed
	default:
		return b.under
	}
}

// report tells the observer, under b.mu so that reports keep their order, when the shown state
// is no longer from.
func (b *Breaker) report(from State, c Counts) {
	if to := b.shown(); to != from {
		b.obs.BreakerTransition(b.gateway, b.op, from, to, c)
	}
}

// sync makes gobreaker move an open breaker whose cooldown is over to half-open: it only does so
// when asked, and the admin API and metrics must show half_open with no traffic too.
func (m *machine) sync() gobreaker.Counts {
	m.cb.State()
	return m.cb.Counts()
}

// allow is Allow without the wrapping of done, for Guard: done takes the report itself.
func (b *Breaker) allow() (done func(error), err error) {
	switch *b.forcing.Load() {
	case payrouter.ForcedOpen:
		b.obs.BreakerRejected(b.gateway, b.op)
		return nil, ErrOpen
	case payrouter.ForcedClosed:
		return ignoreReport, nil
	}
	done, err = b.machine.Load().cb.Allow()
	if err != nil {
		b.obs.BreakerRejected(b.gateway, b.op)
		return nil, ErrOpen
	}
	return done, nil
}

// ignoreReport is done for calls admitted while forced closed: they bypass the state machine, so
// nothing they return can trip it, and its counts are left as they were.
func ignoreReport(error) {}

// Allow asks the breaker to admit one call. If it does, the caller must call done exactly once
// with the call's outcome (a trial call in half-open that is never reported holds its place for
// good). err is ErrOpen when the breaker refuses: open, forced open, or half-open with its trial
// calls taken.
func (b *Breaker) Allow() (done func(payrouter.Outcome), err error) {
	d, err := b.allow()
	if err != nil {
		return nil, err
	}
	return func(o payrouter.Outcome) { d(reportOf(o)) }, nil
}

// Force imposes a state: ForcedOpen refuses every call; ForcedClosed admits every call and
// nothing can trip it; ForcedNone clears forcing and shows the state machine's state again,
// which forcing left as it was. Any other value is taken as ForcedNone.
func (b *Breaker) Force(f payrouter.Forced) {
	f = *forcingOf(f)
	m := b.machine.Load()
	c := countsOf(m.sync())
	b.mu.Lock()
	defer b.mu.Unlock()
	from := b.shown()
	b.forced = f
	b.forcing.Store(forcingOf(f))
	b.report(from, c)
}

// Reset closes the breaker, clears its counts and its forcing. The state machine is replaced by
// a fresh one, so calls admitted before the reset report into the old one and change nothing.
func (b *Breaker) Reset() {
	fresh := b.newMachine()
	c := countsOf(b.machine.Load().cb.Counts())
	b.mu.Lock()
	defer b.mu.Unlock()
	from := b.shown()
	b.machine.Store(fresh)
	b.under = StateClosed
	b.forced = payrouter.ForcedNone
	b.forcing.Store(&forcedNone)
	b.openUntil = time.Time{}
	b.report(from, c)
}

// OpenUntil returns when the breaker, opened by a trip, lets trial calls through; zero when it is
// not open, or is forced open (that holds until reset).
func (b *Breaker) OpenUntil() time.Time {
	b.machine.Load().cb.State() // an elapsed cooldown means half-open: no reopening to wait for
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.openUntilLocked()
}

func (b *Breaker) openUntilLocked() time.Time {
	if b.forced != payrouter.ForcedNone || b.under != StateOpen {
		return time.Time{}
	}
	return b.openUntil
}

// Snapshot returns the breaker as the admin API shows it.
func (b *Breaker) Snapshot() Snapshot {
	c := countsOf(b.machine.Load().sync())
	b.mu.Lock()
	defer b.mu.Unlock()
	return Snapshot{
		Name:      b.name,
		Gateway:   b.gateway,
		Operation: b.op,
		State:     b.shown(),
		Forced:    b.forced,
		OpenUntil: b.openUntilLocked(),
		Counts:    c,
	}
}

// State returns the state the breaker shows (forcing included).
func (b *Breaker) State() State {
	b.machine.Load().cb.State()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.shown()
}
