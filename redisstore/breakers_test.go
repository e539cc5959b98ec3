package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/redisstore"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

// fleetTimeout bounds each Redis call of these tests, which check behaviour, not speed: a loaded
// CI machine running -race must not fail them for being slow. The fail-fast tests set their own.
const fleetTimeout = time.Second

// fleetDeadline is how long a poll waits for a state that should come within milliseconds. It is
// generous: a store that is late makes a test slow to fail, not flaky.
const fleetDeadline = 5 * time.Second

// eventWithin is how soon every instance must learn a transition (docs/architecture.md, Breakers).
const eventWithin = 100 * time.Millisecond

// fleetSeq gives every fleet a key prefix of its own.
var fleetSeq atomic.Int64

// fleet is one redis-server and one key prefix shared by every Store a test opens on it: each
// Store is one payrouter instance.
type fleet struct {
	srv    *redistest.Server
	raw    *redis.Client // reads what the stores wrote, as an operator with redis-cli would
	prefix string
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	srv := redistest.Start(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { raw.Close() })
	return &fleet{srv: srv, raw: raw, prefix: fmt.Sprintf("fleet%d:", fleetSeq.Add(1))}
}

// instance opens one more instance's Store on the fleet's Redis.
func (f *fleet) instance(t *testing.T) *redisstore.Store {
	t.Helper()
	return f.instanceAt(t, f.srv.URL(), fleetTimeout)
}

// instanceAt opens a Store with the fleet's prefix on the Redis at url (a proxy, a silent port).
func (f *fleet) instanceAt(t *testing.T, url string, timeout time.Duration) *redisstore.Store {
	t.Helper()
	s, err := redisstore.Open(url, redisstore.Options{Prefix: f.prefix, Timeout: timeout})
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func (f *fleet) channel() string { return f.prefix + "breakers" }

// keys lists every key the fleet's stores wrote.
func (f *fleet) keys(t *testing.T) []string {
	t.Helper()
	keys, err := f.raw.Keys(t.Context(), f.prefix+"*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	return keys
}

func breakerState(t *testing.T, s *redisstore.Store, breaker string) payrouter.SharedBreaker {
	t.Helper()
	states, err := s.BreakerStates(t.Context(), []string{breaker})
	if err != nil {
		t.Fatalf("BreakerStates(%s): %v", breaker, err)
	}
	st, ok := states[breaker]
	if !ok {
		t.Fatalf("BreakerStates(%s) = %v: the breaker is missing", breaker, states)
	}
	return st
}

// fleetEventually polls cond until it holds, failing t after fleetDeadline: Redis expires keys by
// its own clock, so a test waits for the state itself, never for a guessed duration.
func fleetEventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(fleetDeadline)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting until %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, fleetDeadline)
		}
		<-tick.C
	}
}

// halfOpen opens breaker with a short cooldown and waits for the cooldown to run out.
func halfOpen(t *testing.T, s *redisstore.Store, breaker string) {
	t.Helper()
	if opened, err := s.OpenBreaker(t.Context(), breaker, 30*time.Millisecond, payrouter.BreakerCounts{}, 0, "test"); err != nil || !opened {
		t.Fatalf("OpenBreaker(%s) = %v, %v; want true", breaker, opened, err)
	}
	fleetEventually(t, breaker+" is half-open", func() (bool, error) {
		return breakerState(t, s, breaker).HalfOpen, nil
	})
}

// breakerWatcher runs WatchBreakers in a goroutine, as an instance does, and queues its events.
type breakerWatcher struct {
	events chan payrouter.BreakerEvent
	cancel context.CancelFunc
	done   chan struct{} // closed when WatchBreakers has returned err
	err    error
}

// watch starts s watching and returns once Redis counts the subscription, so that every event
// published after watch returns must reach it.
func (f *fleet) watch(t *testing.T, s *redisstore.Store) *breakerWatcher {
	t.Helper()
	before := f.subscribers(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := &breakerWatcher{events: make(chan payrouter.BreakerEvent, 64), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.err = s.WatchBreakers(ctx, nil, func(ev payrouter.BreakerEvent) {
			select {
			case w.events <- ev:
			case <-ctx.Done():
			}
		})
	}()
	t.Cleanup(func() { w.cancel(); <-w.done })
	fleetEventually(t, "the watch is subscribed", func() (bool, error) {
		select {
		case <-w.done:
			return false, fmt.Errorf("WatchBreakers returned %v before subscribing", w.err)
		default:
		}
		return f.subscribers(t) > before, nil
	})
	return w
}

func (f *fleet) subscribers(t *testing.T) int64 {
	t.Helper()
	n, err := f.raw.PubSubNumSub(t.Context(), f.channel()).Result()
	if err != nil {
		t.Fatalf("PUBSUB NUMSUB: %v", err)
	}
	return n[f.channel()]
}

// next returns the next event, failing t when none comes within d or the watch has ended.
func (w *breakerWatcher) next(t *testing.T, d time.Duration) payrouter.BreakerEvent {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case ev := <-w.events:
		return ev
	case <-w.done:
		t.Fatalf("WatchBreakers returned %v; want it still watching", w.err)
	case <-timer.C:
		t.Fatalf("no breaker event within %v", d)
	}
	return payrouter.BreakerEvent{}
}

// want fails t unless the next event is ev.
func (w *breakerWatcher) want(t *testing.T, ev payrouter.BreakerEvent) {
	t.Helper()
	if got := w.next(t, fleetDeadline); got != ev {
		t.Fatalf("event = %+v, want %+v", got, ev)
	}
}

// wantNothingBefore checks that nothing was published since the last event read: it publishes a
// marker and wants the marker next. Redis delivers one connection's messages in order, so this
// proves the absence without waiting for it.
func (w *breakerWatcher) wantNothingBefore(t *testing.T, f *fleet) {
	t.Helper()
	marker := payrouter.BreakerEvent{Breaker: "marker/" + t.Name(), Kind: payrouter.BreakerForced, Origin: "marker"}
	if err := f.raw.Publish(t.Context(), f.channel(), fmt.Sprintf(`{"breaker":%q,"kind":"forced","origin":"marker"}`, marker.Breaker)).Err(); err != nil {
		t.Fatalf("PUBLISH: %v", err)
	}
	if got := w.next(t, fleetDeadline); got != marker {
		t.Fatalf("event = %+v, want nothing before the marker", got)
	}
}

func TestReportOutcomesBreakerRules(t *testing.T) {
	type step struct {
		report payrouter.BreakerReport
		opened bool
		counts payrouter.BreakerCounts
	}
	tests := []struct {
		name  string
		rules payrouter.BreakerRules
		steps []step
	}{
		{
			name:  "consecutive failures add up across reports",
			rules: payrouter.BreakerRules{ConsecutiveFailures: 3},
			steps: []step{
				{failure(1), false, counts(1, 1, 1)},
				{failure(1), false, counts(2, 2, 2)},
				{failure(1), true, counts(3, 3, 3)},
			},
		},
		{
			name:  "a success resets consecutive failures to the trailing ones",
			rules: payrouter.BreakerRules{ConsecutiveFailures: 3},
			steps: []step{
				{failure(2), false, counts(2, 2, 2)},
				{mixed(1, 1, 1), false, counts(4, 3, 1)},
				{failure(1), false, counts(5, 4, 2)},
				{failure(1), true, counts(6, 5, 3)},
			},
		},
		{
			name:  "a report ending in a success resets them to zero",
			rules: payrouter.BreakerRules{ConsecutiveFailures: 3},
			steps: []step{
				{failure(2), false, counts(2, 2, 2)},
				{mixed(1, 5, 0), false, counts(8, 7, 0)},
				{failure(2), false, counts(10, 9, 2)},
			},
		},
		{
			name:  "trailing failures of one report open at once",
			rules: payrouter.BreakerRules{ConsecutiveFailures: 3},
			steps: []step{
				{failure(1), false, counts(1, 1, 1)},
				{mixed(2, 4, 3), true, counts(7, 5, 3)},
			},
		},
		{
			name:  "failures in the window, successes between them",
			rules: payrouter.BreakerRules{FailuresInWindow: 4, Window: time.Minute},
			steps: []step{
				{mixed(5, 2, 0), false, counts(7, 2, 0)},
				{mixed(5, 1, 1), false, counts(13, 3, 1)},
				{mixed(1, 1, 0), true, counts(15, 4, 0)},
			},
		},
		{
			name:  "failure rate waits for the minimum of requests",
			rules: payrouter.BreakerRules{FailureRate: 0.5, MinRequests: 10, Window: time.Minute},
			steps: []step{
				{failure(4), false, counts(4, 4, 4)},
				{mixed(4, 1, 1), false, counts(9, 5, 1)},
				{failure(1), true, counts(10, 6, 2)},
			},
		},
		{
			name:  "failure rate below the threshold",
			rules: payrouter.BreakerRules{FailureRate: 0.5, MinRequests: 10},
			steps: []step{
				{mixed(6, 4, 0), false, counts(10, 4, 0)},
				{failure(1), false, counts(11, 5, 1)},
				{mixed(2, 1, 1), false, counts(14, 6, 1)},
			},
		},
		{
			name:  "failure rate at the threshold opens",
			rules: payrouter.BreakerRules{FailureRate: 0.5, MinRequests: 4},
			steps: []step{
				{mixed(2, 1, 0), false, counts(3, 1, 0)},
				{failure(1), true, counts(4, 2, 1)},
			},
		},
		{
			name:  "successes alone never open, whatever the rules",
			rules: payrouter.BreakerRules{ConsecutiveFailures: 1, FailuresInWindow: 1, FailureRate: 0.01, MinRequests: 1},
			steps: []step{
				{success(100), false, counts(100, 0, 0)},
				{success(1), false, counts(101, 0, 0)},
			},
		},
		{
			name:  "every rule off never opens",
			rules: payrouter.BreakerRules{},
			steps: []step{
				{failure(100), false, counts(100, 100, 100)},
				{failure(1), false, counts(101, 101, 101)},
			},
		},
		{
			name:  "an empty report changes nothing",
			rules: payrouter.BreakerRules{ConsecutiveFailures: 2},
			steps: []step{
				{failure(1), false, counts(1, 1, 1)},
				{payrouter.BreakerReport{}, false, counts(1, 1, 1)},
				{failure(1), true, counts(2, 2, 2)},
			},
		},
	}
	fl := newFleet(t)
	a, b := fl.instance(t), fl.instance(t)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			breaker := fmt.Sprintf("gateway%d/charge", i)
			tc.rules.Cooldown = time.Minute
			for n, st := range tc.steps {
				reporter := []*redisstore.Store{a, b}[n%2] // the fleet's counts, not one instance's
				opened, got, err := reporter.ReportOutcomes(t.Context(), breaker, tc.rules, st.report, "test")
				if err != nil {
					t.Fatalf("step %d: ReportOutcomes(%+v): %v", n, st.report, err)
				}
				if opened != st.opened || got != st.counts {
					t.Fatalf("step %d: ReportOutcomes(%+v) = %v, %+v; want %v, %+v", n, st.report, opened, got, st.opened, st.counts)
				}
				state := breakerState(t, a, breaker)
				if st.opened {
					if !state.Open || state.Counts != (payrouter.BreakerCounts{}) {
						t.Fatalf("step %d: state after opening = %+v, want open with counts cleared", n, state)
					}
					continue
				}
				if state.Open || state.HalfOpen || state.Counts != st.counts {
					t.Fatalf("step %d: state = %+v, want closed with counts %+v", n, state, st.counts)
				}
			}
		})
	}
}

func failure(n int64) payrouter.BreakerReport {
	return payrouter.BreakerReport{Failures: n, TrailingFailures: n}
}

func success(n int64) payrouter.BreakerReport { return payrouter.BreakerReport{Successes: n} }

func mixed(successes, failures, trailing int64) payrouter.BreakerReport {
	return payrouter.BreakerReport{Successes: successes, Failures: failures, TrailingFailures: trailing}
}

func counts(requests, failures, consecutive int64) payrouter.BreakerCounts {
	return payrouter.BreakerCounts{Requests: requests, Failures: failures, ConsecutiveFailures: consecutive}
}

func TestReportOutcomesBreakerWindowExpiry(t *testing.T) {
	fl := newFleet(t)
	s := fl.instance(t)
	const breaker = "paywell/charge"
	rules := payrouter.BreakerRules{ConsecutiveFailures: 3, FailuresInWindow: 3, Window: 300 * time.Millisecond, Cooldown: time.Minute}
	report := func(r payrouter.BreakerReport, wantOpened bool, want payrouter.BreakerCounts) {
		t.Helper()
		opened, got, err := s.ReportOutcomes(t.Context(), breaker, rules, r, "test")
		if err != nil || opened != wantOpened || got != want {
			t.Fatalf("ReportOutcomes(%+v) = %v, %+v, %v; want %v, %+v", r, opened, got, err, wantOpened, want)
		}
	}

	report(failure(2), false, counts(2, 2, 2))
	// Failures in a row leave the window with the rest, as in the local gobreaker.
	fleetEventually(t, "the failures leave the window", func() (bool, error) {
		return breakerState(t, s, breaker).Counts == payrouter.BreakerCounts{}, nil
	})
	// Counting the two that left, this would be 4 failures, 4 in a row.
	report(failure(2), false, counts(2, 2, 2))
	report(failure(1), true, counts(3, 3, 3))
}

func TestReportOutcomesBreakerWithoutWindowKeepsCounts(t *testing.T) {
	fl := newFleet(t)
	s := fl.instance(t)
	const breaker = "paywell/charge"
	// Window 0: gobreaker's Interval 0, counts kept until the breaker opens.
	rules := payrouter.BreakerRules{FailuresInWindow: 3, Cooldown: time.Minute}
	if _, _, err := s.ReportOutcomes(t.Context(), breaker, rules, failure(2), "test"); err != nil {
		t.Fatal(err)
	}
	// The window hash of a windowed breaker loses its buckets as Redis's clock moves on; this
	// one's single bucket must survive a real move of that clock.
	start := redisNow(t, fl)
	fleetEventually(t, "Redis's clock moves 50ms", func() (bool, error) {
		return redisNow(t, fl).Sub(start) > 50*time.Millisecond, nil
	})
	if got := breakerState(t, s, breaker).Counts; got != counts(2, 2, 2) {
		t.Fatalf("counts = %+v, want the two failures kept", got)
	}
	opened, got, err := s.ReportOutcomes(t.Context(), breaker, rules, failure(1), "test")
	if err != nil || !opened || got != counts(3, 3, 3) {
		t.Fatalf("ReportOutcomes = %v, %+v, %v; want opened at 3 failures", opened, got, err)
	}
}

func redisNow(t *testing.T, f *fleet) time.Time {
	t.Helper()
	now, err := f.raw.Time(t.Context()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now
}

func TestBreakerOpenedEventReachesEveryInstance(t *testing.T) {
	fl := newFleet(t)
	a, b := fl.instance(t), fl.instance(t)
	w := fl.watch(t, b)
	const breaker = "paywell/charge"

	rules := payrouter.BreakerRules{ConsecutiveFailures: 2, Cooldown: 30 * time.Second}
	start := time.Now()
	opened, _, err := a.ReportOutcomes(t.Context(), breaker, rules, failure(2), "test")
	if err != nil || !opened {
		t.Fatalf("ReportOutcomes = %v, %v; want opened", opened, err)
	}
	ev := w.next(t, eventWithin)
	if took := time.Since(start); took > eventWithin {
		t.Fatalf("the other instance learned the trip %v after it, want within %v", took, eventWithin)
	}
	want := payrouter.BreakerEvent{Breaker: breaker, Kind: payrouter.BreakerOpened, OpenFor: 30 * time.Second, Counts: counts(2, 2, 2), Origin: "test"}
	if ev != want {
		t.Fatalf("event = %+v, want %+v", ev, want)
	}

	// An instance whose own counts tripped tells the fleet its counts and name.
	if opened, err := a.OpenBreaker(t.Context(), "ding/charge", time.Minute, counts(9, 5, 5), 0, "instance-a"); err != nil || !opened {
		t.Fatalf("OpenBreaker = %v, %v; want opened", opened, err)
	}
	w.want(t, payrouter.BreakerEvent{Breaker: "ding/charge", Kind: payrouter.BreakerOpened, OpenFor: time.Minute, Counts: counts(9, 5, 5), Origin: "instance-a"})
}

func TestOpenBreakerLeavesAnOpenBreakerAlone(t *testing.T) {
	fl := newFleet(t)
	a, b := fl.instance(t), fl.instance(t)
	w := fl.watch(t, a)
	const breaker = "paywell/charge"

	if opened, err := a.OpenBreaker(t.Context(), breaker, time.Minute, counts(5, 5, 5), 0, "a"); err != nil || !opened {
		t.Fatalf("first OpenBreaker = %v, %v; want opened", opened, err)
	}
	w.want(t, payrouter.BreakerEvent{Breaker: breaker, Kind: payrouter.BreakerOpened, OpenFor: time.Minute, Counts: counts(5, 5, 5), Origin: "a"})
	if opened, err := b.OpenBreaker(t.Context(), breaker, time.Hour, counts(7, 7, 7), 0, "b"); err != nil || opened {
		t.Fatalf("OpenBreaker of an open breaker = %v, %v; want false", opened, err)
	}
	w.wantNothingBefore(t, fl)
	if st := breakerState(t, b, breaker); !st.Open || st.OpenFor <= 0 || st.OpenFor > time.Minute {
		t.Fatalf("state = %+v, want still open for at most the first cooldown", st)
	}
}

func TestBreakerHalfOpenAfterCooldown(t *testing.T) {
	fl := newFleet(t)
	s := fl.instance(t)
	const breaker, cooldown = "paywell/charge", 200 * time.Millisecond

	if opened, err := s.OpenBreaker(t.Context(), breaker, cooldown, payrouter.BreakerCounts{}, 0, "a"); err != nil || !opened {
		t.Fatalf("OpenBreaker = %v, %v; want opened", opened, err)
	}
	if st := breakerState(t, s, breaker); !st.Open || st.HalfOpen || st.OpenFor <= 0 || st.OpenFor > cooldown {
		t.Fatalf("state just after opening = %+v, want open for at most %v", st, cooldown)
	}
	if gen, err := s.TakeTrial(t.Context(), breaker, 1, time.Minute); err != nil || gen != 0 {
		t.Fatalf("TakeTrial while open = %v, %v; want false", gen, err)
	}
	fleetEventually(t, "the breaker is half-open", func() (bool, error) {
		st := breakerState(t, s, breaker)
		if st.Open && st.HalfOpen {
			return false, fmt.Errorf("state %+v is both open and half-open", st)
		}
		return st.HalfOpen, nil
	})
	if st := breakerState(t, s, breaker); st.Open || st.OpenFor != 0 {
		t.Fatalf("half-open state = %+v, want not open", st)
	}
	if gen, err := s.TakeTrial(t.Context(), breaker, 1, time.Minute); err != nil || gen == 0 {
		t.Fatalf("TakeTrial when half-open = %v, %v; want true", gen, err)
	}
}

func TestTakeTrialBreakerSlots(t *testing.T) {
	fl := newFleet(t)
	a, b := fl.instance(t), fl.instance(t)

	t.Run("exactly max across the fleet", func(t *testing.T) {
		const breaker, max = "paywell/charge", 3
		halfOpen(t, a, breaker)
		var taken atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, 20)
		for i := range 20 {
			wg.Go(func() {
				<-start
				gen, err := []*redisstore.Store{a, b}[i%2].TakeTrial(t.Context(), breaker, max, time.Minute)
				if err != nil {
					errs <- err
				}
				if gen != 0 {
					taken.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("TakeTrial: %v", err)
		}
		if taken.Load() != max {
			t.Fatalf("20 callers took %d trial slots, want %d", taken.Load(), max)
		}

		if err := b.ReturnTrial(t.Context(), breaker, breakerState(t, a, breaker).Gen); err != nil {
			t.Fatalf("ReturnTrial: %v", err)
		}
		if gen, err := a.TakeTrial(t.Context(), breaker, max, time.Minute); err != nil || gen == 0 {
			t.Fatalf("TakeTrial after a slot was returned = %v, %v; want true", gen, err)
		}
		if gen, err := b.TakeTrial(t.Context(), breaker, max, time.Minute); err != nil || gen != 0 {
			t.Fatalf("TakeTrial with every slot taken again = %v, %v; want false", gen, err)
		}
	})

	t.Run("returning slots never taken frees none", func(t *testing.T) {
		const breaker = "ding/charge"
		halfOpen(t, a, breaker)
		for range 3 {
			if err := a.ReturnTrial(t.Context(), breaker, breakerState(t, a, breaker).Gen); err != nil {
				t.Fatalf("ReturnTrial: %v", err)
			}
		}
		if gen, err := a.TakeTrial(t.Context(), breaker, 1, time.Minute); err != nil || gen == 0 {
			t.Fatalf("first TakeTrial = %v, %v; want true", gen, err)
		}
		if gen, err := b.TakeTrial(t.Context(), breaker, 1, time.Minute); err != nil || gen != 0 {
			t.Fatalf("second TakeTrial of max 1 = %v, %v; want false", gen, err)
		}
	})

	t.Run("the ttl frees a slot never reported", func(t *testing.T) {
		const breaker = "tranglo/charge"
		halfOpen(t, a, breaker)
		if gen, err := a.TakeTrial(t.Context(), breaker, 1, 100*time.Millisecond); err != nil || gen == 0 {
			t.Fatalf("TakeTrial = %v, %v; want true", gen, err)
		}
		if gen, err := b.TakeTrial(t.Context(), breaker, 1, 100*time.Millisecond); err != nil || gen != 0 {
			t.Fatalf("TakeTrial while the slot is held = %v, %v; want false", gen, err)
		}
		fleetEventually(t, "the slot's ttl frees it", func() (bool, error) {
			gen, err := b.TakeTrial(t.Context(), breaker, 1, time.Minute)
			return gen != 0, err
		})
	})

	t.Run("no trial while closed", func(t *testing.T) {
		if gen, err := a.TakeTrial(t.Context(), "never/opened", 5, time.Minute); err != nil || gen != 0 {
			t.Fatalf("TakeTrial of a closed breaker = %v, %v; want false", gen, err)
		}
		for _, k := range fl.keys(t) {
			if strings.Contains(k, "never/opened") {
				t.Fatalf("TakeTrial of a closed breaker wrote %s", k)
			}
		}
	})
}

func TestTrialSucceededClosesBreaker(t *testing.T) {
	fl := newFleet(t)
	a, b := fl.instance(t), fl.instance(t)
	const breaker = "paywell/charge"
	halfOpen(t, a, breaker)
	w := fl.watch(t, b)

	var gens []payrouter.TrialGen
	for _, s := range []*redisstore.Store{a, b} {
		gen, err := s.TakeTrial(t.Context(), breaker, 2, time.Minute)
		if err != nil || gen == 0 {
			t.Fatalf("TakeTrial = %v, %v; want a generation", gen, err)
		}
		gens = append(gens, gen)
	}
	if gens[0] != gens[1] || gens[0] != breakerState(t, a, breaker).Gen {
		t.Fatalf("TakeTrial's generations %v, state's %v; want one, the breaker's", gens, breakerState(t, a, breaker).Gen)
	}
	gen := gens[0]
	if closed, err := a.TrialSucceeded(t.Context(), breaker, gen, 2, "a"); err != nil || closed {
		t.Fatalf("first TrialSucceeded of 2 = %v, %v; want false", closed, err)
	}
	w.wantNothingBefore(t, fl)
	if st := breakerState(t, a, breaker); !st.HalfOpen {
		t.Fatalf("state after one success of 2 = %+v, want half-open", st)
	}
	if closed, err := b.TrialSucceeded(t.Context(), breaker, gen, 2, "b"); err != nil || !closed {
		t.Fatalf("second TrialSucceeded of 2 = %v, %v; want closed", closed, err)
	}
	w.want(t, payrouter.BreakerEvent{Breaker: breaker, Kind: payrouter.BreakerClosed, Origin: "b"})
	if st := breakerState(t, a, breaker); st != (payrouter.SharedBreaker{}) {
		t.Fatalf("state after closing = %+v, want closed and cleared", st)
	}
	if gen, err := a.TakeTrial(t.Context(), breaker, 2, time.Minute); err != nil || gen != 0 {
		t.Fatalf("TakeTrial after closing = %v, %v; want false", gen, err)
	}
	if closed, err := a.TrialSucceeded(t.Context(), breaker, gen, 1, "a"); err != nil || closed {
		t.Fatalf("TrialSucceeded of a closed breaker = %v, %v; want false", closed, err)
	}
	w.wantNothingBefore(t, fl)
	if keys := fl.keys(t); len(keys) != 1 || !strings.HasSuffix(keys[0], ":gen") {
		t.Fatalf("a closed breaker left keys %v, want its generation only", keys)
	}
}

func TestTrialSucceededWhileOpenIsNotCounted(t *testing.T) {
	fl := newFleet(t)
	s := fl.instance(t)
	const breaker = "paywell/charge"
	if opened, err := s.OpenBreaker(t.Context(), breaker, 150*time.Millisecond, payrouter.BreakerCounts{}, 0, "a"); err != nil || !opened {
		t.Fatalf("OpenBreaker = %v, %v", opened, err)
	}
	gen := breakerState(t, s, breaker).Gen
	// A success of this generation while it is still open: no trial could have run.
	if closed, err := s.TrialSucceeded(t.Context(), breaker, gen, 1, "a"); err != nil || closed {
		t.Fatalf("TrialSucceeded while open = %v, %v; want false", closed, err)
	}
	fleetEventually(t, "the breaker is half-open", func() (bool, error) {
		return breakerState(t, s, breaker).HalfOpen, nil
	})
	if closed, err := s.TrialSucceeded(t.Context(), breaker, gen, 2, "a"); err != nil || closed {
		t.Fatalf("first TrialSucceeded of 2 = %v, %v; want false: the one while open must not count", closed, err)
	}
	if closed, err := s.TrialSucceeded(t.Context(), breaker, gen, 2, "a"); err != nil || !closed {
		t.Fatalf("second TrialSucceeded of 2 = %v, %v; want closed", closed, err)
	}
}

func TestFailedTrialReopensBreaker(t *testing.T) {
	fl := newFleet(t)
	a, b := fl.instance(t), fl.instance(t)
	w := fl.watch(t, b)
	const breaker = "paywell/charge"
	halfOpen(t, a, breaker)
	w.next(t, fleetDeadline) // halfOpen's opening

	gen, err := a.TakeTrial(t.Context(), breaker, 1, time.Minute)
	if err != nil || gen == 0 {
		t.Fatalf("TakeTrial = %v, %v; want a generation", gen, err)
	}
	// The trial failed: the instance reopens the breaker.
	if opened, err := a.OpenBreaker(t.Context(), breaker, 150*time.Millisecond, counts(1, 1, 1), gen, "a"); err != nil || !opened {
		t.Fatalf("OpenBreaker of a half-open breaker = %v, %v; want reopened", opened, err)
	}
	w.want(t, payrouter.BreakerEvent{Breaker: breaker, Kind: payrouter.BreakerOpened, OpenFor: 150 * time.Millisecond, Counts: counts(1, 1, 1), Origin: "a"})
	if st := breakerState(t, b, breaker); !st.Open || st.HalfOpen {
		t.Fatalf("state after the failed trial = %+v, want open", st)
	}
	if gen, err := b.TakeTrial(t.Context(), breaker, 1, time.Minute); err != nil || gen != 0 {
		t.Fatalf("TakeTrial after reopening = %v, %v; want false", gen, err)
	}
	fleetEventually(t, "the breaker is half-open again", func() (bool, error) {
		return breakerState(t, b, breaker).HalfOpen, nil
	})
	// Reopening cleared the slot the failed trial held.
	if gen, err := b.TakeTrial(t.Context(), breaker, 1, time.Minute); err != nil || gen == 0 {
		t.Fatalf("TakeTrial in the next half-open spell = %v, %v; want true", gen, err)
	}
}

// TestTrialOfAnEarlierGenerationDoesNotCount: a trial taken in one half-open period and reported
// after the breaker reopened and went half-open again counts for nothing in the new period: its
// success does not close it, its failure does not reopen it, and its slot given back does not
// free one of the new period's.
func TestTrialOfAnEarlierGenerationDoesNotCount(t *testing.T) {
	fl := newFleet(t)
	a, b := fl.instance(t), fl.instance(t)
	const breaker = "paywell/charge"
	halfOpen(t, a, breaker)
	// Period N: two trials, the late one on a and the one on b that fails and reopens.
	late, err := a.TakeTrial(t.Context(), breaker, 2, time.Minute)
	if err != nil || late == 0 {
		t.Fatalf("TakeTrial = %v, %v; want a generation", late, err)
	}
	failed, err := b.TakeTrial(t.Context(), breaker, 2, time.Minute)
	if err != nil || failed != late {
		t.Fatalf("second TakeTrial of the period = %v, %v; want generation %v", failed, err, late)
	}
	if opened, err := b.OpenBreaker(t.Context(), breaker, 30*time.Millisecond, counts(1, 1, 1), failed, "b"); err != nil || !opened {
		t.Fatalf("OpenBreaker of the failed trial = %v, %v; want reopened", opened, err)
	}
	fleetEventually(t, "half-open again", func() (bool, error) { return breakerState(t, a, breaker).HalfOpen, nil })
	// Period N+1, with 2 slots: one taken here.
	next, err := b.TakeTrial(t.Context(), breaker, 2, time.Minute)
	if err != nil || next == 0 || next == late {
		t.Fatalf("TakeTrial of the next period = %v, %v; want a generation other than %v", next, err, late)
	}
	if gen := breakerState(t, a, breaker).Gen; gen != next {
		t.Fatalf("state's generation %v, want the next period's %v", gen, next)
	}

	t.Run("late success", func(t *testing.T) {
		if closed, err := a.TrialSucceeded(t.Context(), breaker, late, 2, "a"); err != nil || closed {
			t.Fatalf("TrialSucceeded of the earlier period = %v, %v; want dropped", closed, err)
		}
		// Had it counted, this first success of the period would be the second and close it.
		if closed, err := b.TrialSucceeded(t.Context(), breaker, next, 2, "b"); err != nil || closed {
			t.Fatalf("first TrialSucceeded of the period, of 2 = %v, %v; want still half-open", closed, err)
		}
		if st := breakerState(t, a, breaker); !st.HalfOpen || st.Gen != next {
			t.Fatalf("state = %+v, want half-open in generation %v", st, next)
		}
	})
	t.Run("late return", func(t *testing.T) {
		// The second slot of the period, then the earlier period's slot given back.
		if gen, err := a.TakeTrial(t.Context(), breaker, 2, time.Minute); err != nil || gen != next {
			t.Fatalf("TakeTrial = %v, %v; want generation %v", gen, err, next)
		}
		if err := a.ReturnTrial(t.Context(), breaker, late); err != nil {
			t.Fatalf("ReturnTrial: %v", err)
		}
		if gen, err := b.TakeTrial(t.Context(), breaker, 2, time.Minute); err != nil || gen != 0 {
			t.Fatalf("TakeTrial with both slots of the period taken = %v, %v; want none: the late return freed one", gen, err)
		}
	})
	t.Run("late failure", func(t *testing.T) {
		if opened, err := a.OpenBreaker(t.Context(), breaker, time.Minute, counts(1, 1, 1), late, "a"); err != nil || opened {
			t.Fatalf("OpenBreaker of the earlier period's failed trial = %v, %v; want dropped", opened, err)
		}
		if st := breakerState(t, a, breaker); !st.HalfOpen || st.Gen != next {
			t.Fatalf("state = %+v, want still half-open in generation %v", st, next)
		}
	})
	// The period's own trials still decide.
	if closed, err := a.TrialSucceeded(t.Context(), breaker, next, 2, "a"); err != nil || !closed {
		t.Fatalf("second TrialSucceeded of the period = %v, %v; want closed", closed, err)
	}
}

// TestGenerationsOutliveReset: a reset does not start the generations over, so a trial taken
// before it never counts in a half-open period after it.
func TestGenerationsOutliveReset(t *testing.T) {
	fl := newFleet(t)
	s := fl.instance(t)
	const breaker = "paywell/charge"
	halfOpen(t, s, breaker)
	before, err := s.TakeTrial(t.Context(), breaker, 1, time.Minute)
	if err != nil || before == 0 {
		t.Fatalf("TakeTrial = %v, %v", before, err)
	}
	if err := s.ResetBreaker(t.Context(), breaker, "admin"); err != nil {
		t.Fatal(err)
	}
	halfOpen(t, s, breaker)
	if gen := breakerState(t, s, breaker).Gen; gen <= before {
		t.Fatalf("generation after a reset and a new opening = %v, want after %v", gen, before)
	}
	if closed, err := s.TrialSucceeded(t.Context(), breaker, before, 1, "a"); err != nil || closed {
		t.Fatalf("TrialSucceeded of a trial from before the reset = %v, %v; want dropped", closed, err)
	}
}

func TestCloseBreakerOnlyWhenHalfOpen(t *testing.T) {
	fl := newFleet(t)
	a, b := fl.instance(t), fl.instance(t)
	w := fl.watch(t, b)
	tests := []struct {
		name   string
		setup  func(t *testing.T, breaker string) // leaves no event unread
		closed bool
	}{
		{"closed", func(t *testing.T, breaker string) {}, false},
		{"open", func(t *testing.T, breaker string) {
			if _, err := a.OpenBreaker(t.Context(), breaker, time.Minute, payrouter.BreakerCounts{}, 0, "a"); err != nil {
				t.Fatal(err)
			}
			w.next(t, fleetDeadline)
		}, false},
		{"half-open", func(t *testing.T, breaker string) {
			halfOpen(t, a, breaker)
			w.next(t, fleetDeadline)
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			breaker := "paywell/" + tc.name
			tc.setup(t, breaker)
			before := breakerState(t, a, breaker)
			closed, err := a.CloseBreaker(t.Context(), breaker, "prober")
			if err != nil || closed != tc.closed {
				t.Fatalf("CloseBreaker = %v, %v; want %v", closed, err, tc.closed)
			}
			if !tc.closed {
				w.wantNothingBefore(t, fl)
				if after := breakerState(t, a, breaker); after.Open != before.Open || after.HalfOpen != before.HalfOpen {
					t.Fatalf("state = %+v after a refused close, want it as it was: %+v", after, before)
				}
				return
			}
			w.want(t, payrouter.BreakerEvent{Breaker: breaker, Kind: payrouter.BreakerClosed, Origin: "prober"})
			if st := breakerState(t, a, breaker); st != (payrouter.SharedBreaker{}) {
				t.Fatalf("state after closing = %+v, want closed", st)
			}
		})
	}
}

func TestForceBreakerAndResetBreaker(t *testing.T) {
	fl := newFleet(t)
	a, b := fl.instance(t), fl.instance(t)
	w := fl.watch(t, b)
	const breaker = "paywell/charge"
	ctx := t.Context()

	forcedStates := func(want map[string]payrouter.Forced) {
		t.Helper()
		forcedEqual(t, b, want)
	}

	if err := a.ForceBreaker(ctx, breaker, payrouter.ForcedOpen, "admin-a"); err != nil {
		t.Fatalf("ForceBreaker: %v", err)
	}
	w.want(t, payrouter.BreakerEvent{Breaker: breaker, Kind: payrouter.BreakerForced, Forced: payrouter.ForcedOpen, Origin: "admin-a"})
	if st := breakerState(t, b, breaker); st.Forced != payrouter.ForcedOpen {
		t.Fatalf("state = %+v, want forced open", st)
	}
	forcedStates(map[string]payrouter.Forced{breaker: payrouter.ForcedOpen})

	// With no origin, the event says none.
	if err := a.ForceBreaker(ctx, "ding/charge", payrouter.ForcedClosed, ""); err != nil {
		t.Fatalf("ForceBreaker: %v", err)
	}
	w.want(t, payrouter.BreakerEvent{Breaker: "ding/charge", Kind: payrouter.BreakerForced, Forced: payrouter.ForcedClosed})
	forcedStates(map[string]payrouter.Forced{breaker: payrouter.ForcedOpen, "ding/charge": payrouter.ForcedClosed})
	if err := a.ForceBreaker(ctx, "ding/charge", payrouter.ForcedNone, "admin-a"); err != nil {
		t.Fatalf("ForceBreaker(none): %v", err)
	}
	w.want(t, payrouter.BreakerEvent{Breaker: "ding/charge", Kind: payrouter.BreakerForced, Origin: "admin-a"})
	forcedStates(map[string]payrouter.Forced{breaker: payrouter.ForcedOpen})

	// Reset clears everything: forcing, the open state, counts and trials.
	rules := payrouter.BreakerRules{ConsecutiveFailures: 10, Cooldown: time.Minute}
	if _, _, err := a.ReportOutcomes(ctx, "tranglo/charge", rules, failure(3), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.OpenBreaker(ctx, breaker, time.Minute, counts(4, 4, 4), 0, "a"); err != nil {
		t.Fatal(err)
	}
	w.next(t, fleetDeadline)
	for _, br := range []string{breaker, "tranglo/charge"} {
		if err := a.ResetBreaker(ctx, br, "admin-b"); err != nil {
			t.Fatalf("ResetBreaker(%s): %v", br, err)
		}
		w.want(t, payrouter.BreakerEvent{Breaker: br, Kind: payrouter.BreakerReset, Origin: "admin-b"})
		if st := breakerState(t, b, br); st != (payrouter.SharedBreaker{}) {
			t.Fatalf("state of %s after reset = %+v, want closed, not forced, no counts", br, st)
		}
	}
	forcedStates(map[string]payrouter.Forced{})

	// A half-open breaker with trials taken is reset too.
	halfOpen(t, a, breaker)
	w.next(t, fleetDeadline)
	if gen, err := a.TakeTrial(ctx, breaker, 1, time.Minute); err != nil || gen == 0 {
		t.Fatalf("TakeTrial = %v, %v", gen, err)
	}
	if err := b.ResetBreaker(ctx, breaker, ""); err != nil {
		t.Fatalf("ResetBreaker: %v", err)
	}
	w.want(t, payrouter.BreakerEvent{Breaker: breaker, Kind: payrouter.BreakerReset})
	// Only the generations stay (and expire): a trial taken before a reset never counts after it.
	for _, k := range fl.keys(t) {
		if !strings.HasSuffix(k, ":gen") {
			t.Fatalf("keys left after resetting every breaker: %v, want generations only", fl.keys(t))
		}
	}
}

func TestReportOutcomesDroppedWhileBreakerOpen(t *testing.T) {
	fl := newFleet(t)
	s := fl.instance(t)
	const breaker = "paywell/charge"
	rules := payrouter.BreakerRules{ConsecutiveFailures: 2, FailuresInWindow: 2, Cooldown: 150 * time.Millisecond}
	if opened, _, err := s.ReportOutcomes(t.Context(), breaker, rules, failure(2), "test"); err != nil || !opened {
		t.Fatalf("ReportOutcomes = %v, %v; want opened", opened, err)
	}
	w := fl.watch(t, s)
	drop := func(when string) {
		t.Helper()
		for _, r := range []payrouter.BreakerReport{failure(5), success(5)} {
			opened, got, err := s.ReportOutcomes(t.Context(), breaker, rules, r, "test")
			if err != nil || opened || got != (payrouter.BreakerCounts{}) {
				t.Fatalf("ReportOutcomes(%+v) while %s = %v, %+v, %v; want dropped", r, when, opened, got, err)
			}
		}
		if st := breakerState(t, s, breaker); st.Counts != (payrouter.BreakerCounts{}) {
			t.Fatalf("counts while %s = %+v, want none", when, st.Counts)
		}
	}
	drop("open")
	fleetEventually(t, "the breaker is half-open", func() (bool, error) {
		return breakerState(t, s, breaker).HalfOpen, nil
	})
	drop("half-open")
	w.wantNothingBefore(t, fl) // no second opening
	if st := breakerState(t, s, breaker); !st.HalfOpen {
		t.Fatalf("state = %+v, want still half-open", st)
	}
}

func TestBreakerKeysExpire(t *testing.T) {
	fl := newFleet(t)
	s := fl.instance(t)
	ctx := t.Context()
	rules := payrouter.BreakerRules{ConsecutiveFailures: 5, Window: time.Minute, Cooldown: time.Minute}
	if _, _, err := s.ReportOutcomes(ctx, "counting/charge", rules, failure(1), "test"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ReportOutcomes(ctx, "unwindowed/charge", payrouter.BreakerRules{Cooldown: time.Minute}, failure(1), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OpenBreaker(ctx, "open/charge", time.Minute, payrouter.BreakerCounts{}, 0, ""); err != nil {
		t.Fatal(err)
	}
	halfOpen(t, s, "trial/charge")
	gen, err := s.TakeTrial(ctx, "trial/charge", 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TrialSucceeded(ctx, "trial/charge", gen, 2, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.ForceBreaker(ctx, "forced/charge", payrouter.ForcedOpen, ""); err != nil {
		t.Fatal(err)
	}

	forced := fl.prefix + "breakers:forced"
	want := []string{
		fl.prefix + "breaker:{counting/charge}:window",
		fl.prefix + "breaker:{unwindowed/charge}:window",
		fl.prefix + "breaker:{open/charge}:tripped",
		fl.prefix + "breaker:{open/charge}:open",
		fl.prefix + "breaker:{open/charge}:gen",
		fl.prefix + "breaker:{trial/charge}:gen",
		fl.prefix + "breaker:{trial/charge}:tripped",
		fl.prefix + "breaker:{trial/charge}:trials",
		fl.prefix + "breaker:{trial/charge}:trialok",
		forced,
	}
	keys := fl.keys(t)
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("keys = %v, want %v", keys, want)
	}
	for _, k := range keys {
		ttl, err := fl.raw.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatalf("PTTL %s: %v", k, err)
		}
		if k == forced {
			if ttl != -1 {
				t.Errorf("%s expires in %v: ops' forcing must hold until lifted", k, ttl)
			}
			continue
		}
		if ttl <= 0 {
			t.Errorf("%s has no expiry (PTTL %v): a breaker nobody uses would leave it for ever", k, ttl)
		}
	}
}

func TestBreakerStatesOfManyBreakers(t *testing.T) {
	fl := newFleet(t)
	s := fl.instance(t)
	ctx := t.Context()
	rules := payrouter.BreakerRules{ConsecutiveFailures: 5, Window: time.Minute, Cooldown: time.Minute}
	if _, _, err := s.ReportOutcomes(ctx, "ding/charge", rules, mixed(3, 2, 1), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OpenBreaker(ctx, "paywell/charge", time.Minute, payrouter.BreakerCounts{}, 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.ForceBreaker(ctx, "tranglo/refund", payrouter.ForcedClosed, ""); err != nil {
		t.Fatal(err)
	}
	names := []string{"ding/charge", "paywell/charge", "tranglo/refund", "unknown/charge"}
	states, err := s.BreakerStates(ctx, names)
	if err != nil {
		t.Fatalf("BreakerStates: %v", err)
	}
	if len(states) != len(names) {
		t.Fatalf("BreakerStates = %v, want every one of %v", states, names)
	}
	if st := states["ding/charge"]; st != (payrouter.SharedBreaker{Counts: counts(5, 2, 1)}) {
		t.Errorf("ding/charge = %+v, want closed with its counts", st)
	}
	if st := states["paywell/charge"]; !st.Open || st.OpenFor <= 0 || st.OpenFor > time.Minute || st.HalfOpen || st.Forced != "" {
		t.Errorf("paywell/charge = %+v, want open", st)
	}
	if st := states["tranglo/refund"]; st != (payrouter.SharedBreaker{Forced: payrouter.ForcedClosed}) {
		t.Errorf("tranglo/refund = %+v, want forced closed", st)
	}
	if st := states["unknown/charge"]; st != (payrouter.SharedBreaker{}) {
		t.Errorf("unknown/charge = %+v, want closed", st)
	}
	if states, err := s.BreakerStates(ctx, nil); err != nil || states == nil || len(states) != 0 {
		t.Errorf("BreakerStates(nil) = %v, %v; want an empty map", states, err)
	}
}

func TestBreakerInvalidArguments(t *testing.T) {
	fl := newFleet(t)
	s := fl.instance(t)
	rules := payrouter.BreakerRules{ConsecutiveFailures: 1, Cooldown: time.Minute}
	const b = "paywell/charge"
	tests := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"report: empty name", func(ctx context.Context) error {
			_, _, err := s.ReportOutcomes(ctx, "", rules, failure(1), "test")
			return err
		}},
		{"report: no cooldown", func(ctx context.Context) error {
			_, _, err := s.ReportOutcomes(ctx, b, payrouter.BreakerRules{ConsecutiveFailures: 1}, failure(1), "test")
			return err
		}},
		{"report: negative rule", func(ctx context.Context) error {
			_, _, err := s.ReportOutcomes(ctx, b, payrouter.BreakerRules{FailuresInWindow: -1, Cooldown: time.Minute}, failure(1), "test")
			return err
		}},
		{"report: rate above 1", func(ctx context.Context) error {
			_, _, err := s.ReportOutcomes(ctx, b, payrouter.BreakerRules{FailureRate: 1.5, Cooldown: time.Minute}, failure(1), "test")
			return err
		}},
		{"report: a rate without min requests", func(ctx context.Context) error {
			_, _, err := s.ReportOutcomes(ctx, b, payrouter.BreakerRules{FailureRate: 0.5, Cooldown: time.Minute}, failure(1), "test")
			return err
		}},
		{"report: more trailing failures than failures", func(ctx context.Context) error {
			_, _, err := s.ReportOutcomes(ctx, b, rules, mixed(1, 1, 2), "test")
			return err
		}},
		{"report: negative counts", func(ctx context.Context) error {
			_, _, err := s.ReportOutcomes(ctx, b, rules, mixed(-1, 1, 1), "test")
			return err
		}},
		{"open: no cooldown", func(ctx context.Context) error {
			_, err := s.OpenBreaker(ctx, b, 0, payrouter.BreakerCounts{}, 0, "")
			return err
		}},
		{"open: empty name", func(ctx context.Context) error {
			_, err := s.OpenBreaker(ctx, "", time.Minute, payrouter.BreakerCounts{}, 0, "")
			return err
		}},
		{"take trial: no ttl", func(ctx context.Context) error {
			_, err := s.TakeTrial(ctx, b, 1, 0)
			return err
		}},
		{"return trial: empty name", func(ctx context.Context) error { return s.ReturnTrial(ctx, "", 1) }},
		{"trial succeeded: empty name", func(ctx context.Context) error {
			_, err := s.TrialSucceeded(ctx, "", 1, 1, "")
			return err
		}},
		{"close: empty name", func(ctx context.Context) error {
			_, err := s.CloseBreaker(ctx, "", "")
			return err
		}},
		{"force: unknown state", func(ctx context.Context) error {
			return s.ForceBreaker(ctx, b, payrouter.Forced("half_open"), "")
		}},
		{"force: empty name", func(ctx context.Context) error { return s.ForceBreaker(ctx, "", payrouter.ForcedOpen, "") }},
		{"reset: empty name", func(ctx context.Context) error { return s.ResetBreaker(ctx, "", "") }},
		{"states: empty name", func(ctx context.Context) error {
			_, err := s.BreakerStates(ctx, []string{b, ""})
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(t.Context()); err == nil {
				t.Fatal("succeeded, want an error")
			}
		})
	}
	if keys := fl.keys(t); len(keys) != 0 {
		t.Fatalf("refused calls wrote %v", keys)
	}
}

func TestWatchBreakersSkipsMalformedMessages(t *testing.T) {
	fl := newFleet(t)
	s := fl.instance(t)
	w := fl.watch(t, s)
	for _, msg := range []string{
		"not json",
		`{"kind":"opened"}`,                     // no breaker
		`{"breaker":"paywell/charge"}`,          // no kind
		`{"breaker":"paywell/charge","kind":7}`, // kind of the wrong type
		`{"breaker":"paywell/charge","kind":"melted"}`,
		"",
	} {
		if err := fl.raw.Publish(t.Context(), fl.channel(), msg).Err(); err != nil {
			t.Fatalf("PUBLISH: %v", err)
		}
	}
	if err := s.ForceBreaker(t.Context(), "paywell/charge", payrouter.ForcedOpen, "a"); err != nil {
		t.Fatal(err)
	}
	w.want(t, payrouter.BreakerEvent{Breaker: "paywell/charge", Kind: payrouter.BreakerForced, Forced: payrouter.ForcedOpen, Origin: "a"})
	if err := s.ResetBreaker(t.Context(), "paywell/charge", "a"); err != nil {
		t.Fatal(err)
	}
	w.want(t, payrouter.BreakerEvent{Breaker: "paywell/charge", Kind: payrouter.BreakerReset, Origin: "a"})
}

func TestWatchBreakersEndsWithContext(t *testing.T) {
	fl := newFleet(t)
	s := fl.instance(t)
	w := fl.watch(t, s)
	w.cancel()
	select {
	case <-w.done:
	case <-time.After(fleetDeadline):
		t.Fatalf("WatchBreakers still runs %v after its context ended", fleetDeadline)
	}
	if !errors.Is(w.err, context.Canceled) {
		t.Fatalf("WatchBreakers = %v, want context.Canceled", w.err)
	}
	fleetEventually(t, "the subscription is gone", func() (bool, error) {
		return fl.subscribers(t) == 0, nil
	})
}

func TestWatchBreakersEndsWhenRedisStops(t *testing.T) {
	fl := newFleet(t)
	s := fl.instance(t)
	w := fl.watch(t, s)
	fl.srv.Stop()
	select {
	case <-w.done:
	case <-time.After(fleetDeadline):
		t.Fatalf("WatchBreakers still runs %v after redis-server stopped", fleetDeadline)
	}
	if w.err == nil || errors.Is(w.err, context.Canceled) {
		t.Fatalf("WatchBreakers = %v, want an error saying the subscription failed", w.err)
	}

	// The caller watches again once Redis is back, and hears the fleet again.
	if err := fl.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	again := fl.watch(t, s)
	if err := s.ForceBreaker(t.Context(), "paywell/charge", payrouter.ForcedOpen, "a"); err != nil {
		t.Fatal(err)
	}
	again.want(t, payrouter.BreakerEvent{Breaker: "paywell/charge", Kind: payrouter.BreakerForced, Forced: payrouter.ForcedOpen, Origin: "a"})
}

func TestWatchBreakersEndsOnSilentConnection(t *testing.T) {
	fl := newFleet(t)
	proxy := startFreezingProxy(t, fl.srv.Addr())
	const timeout = 50 * time.Millisecond // a quiet spell is 10 timeouts: 500ms
	s := fl.instanceAt(t, proxy.url(), timeout)
	w := fl.watch(t, s)

	// A quiet channel is normal: the watch pings and goes on.
	fleetEventually(t, "the quiet watch pings Redis", func() (bool, error) {
		list, err := fl.raw.ClientList(t.Context()).Result()
		for line := range strings.SplitSeq(list, "\n") {
			if strings.Contains(line, " sub=1 ") && strings.Contains(line, " cmd=ping ") {
				return true, err
			}
		}
		return false, err
	})
	publisher := fl.instance(t)
	if err := publisher.ForceBreaker(t.Context(), "paywell/charge", payrouter.ForcedOpen, "a"); err != nil {
		t.Fatal(err)
	}
	w.want(t, payrouter.BreakerEvent{Breaker: "paywell/charge", Kind: payrouter.BreakerForced, Forced: payrouter.ForcedOpen, Origin: "a"})

	// A network that drops everything raises no error: only the unanswered ping tells.
	proxy.freeze()
	select {
	case <-w.done:
	case <-time.After(fleetDeadline):
		t.Fatalf("WatchBreakers still runs %v after its connection went silent", fleetDeadline)
	}
	if w.err == nil || errors.Is(w.err, context.Canceled) {
		t.Fatalf("WatchBreakers = %v, want an error", w.err)
	}
}

// freezingProxy forwards TCP connections to Redis until frozen, then swallows everything both
// ways while keeping the connections open: a network that silently drops packets.
type freezingProxy struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func startFreezingProxy(t *testing.T, target string) *freezingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezingProxy{ln: ln, target: target}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			wg.Go(func() { p.pipe(up, c) })
			wg.Go(func() { p.pipe(c, up) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	return p
}

func (p *freezingProxy) url() string { return "redis://" + p.ln.Addr().String() + "/0" }

func (p *freezingProxy) freeze() { p.frozen.Store(true) }

func (p *freezingProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			dst.Close()
			return
		}
		if p.frozen.Load() {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			src.Close()
			return
		}
	}
}

// fleetCalls are every method of the fleet's shared state, each made so that it would succeed
// with Redis up.
func fleetCalls(s *redisstore.Store) []struct {
	name string
	call func(ctx context.Context) error
} {
	const b = "paywell/charge"
	rules := payrouter.BreakerRules{ConsecutiveFailures: 1, Window: time.Minute, Cooldown: time.Minute}
	return []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"ReportOutcomes", func(ctx context.Context) error {
			_, _, err := s.ReportOutcomes(ctx, b, rules, failure(1), "test")
			return err
		}},
		{"OpenBreaker", func(ctx context.Context) error {
			_, err := s.OpenBreaker(ctx, b, time.Minute, payrouter.BreakerCounts{}, 0, "")
			return err
		}},
		{"TakeTrial", func(ctx context.Context) error { _, err := s.TakeTrial(ctx, b, 1, time.Minute); return err }},
		{"ReturnTrial", func(ctx context.Context) error { return s.ReturnTrial(ctx, b, 1) }},
		{"TrialSucceeded", func(ctx context.Context) error { _, err := s.TrialSucceeded(ctx, b, 1, 1, ""); return err }},
		{"CloseBreaker", func(ctx context.Context) error { _, err := s.CloseBreaker(ctx, b, ""); return err }},
		{"ForceBreaker", func(ctx context.Context) error { return s.ForceBreaker(ctx, b, payrouter.ForcedClosed, "") }},
		{"ResetBreaker", func(ctx context.Context) error { return s.ResetBreaker(ctx, b, "") }},
		{"BreakerStates", func(ctx context.Context) error {
			_, err := s.BreakerStates(ctx, []string{b, "ding/charge"})
			return err
		}},
		{"WatchBreakers", func(ctx context.Context) error {
			return s.WatchBreakers(ctx, nil, func(payrouter.BreakerEvent) {})
		}},
		{"HoldLease", func(ctx context.Context) error { _, err := s.HoldLease(ctx, "prober", "a", time.Minute); return err }},
		{"DropLease", func(ctx context.Context) error { return s.DropLease(ctx, "prober", "a") }},
	}
}

func TestBreakerAndLeaseCallsFailFastWithRedisDown(t *testing.T) {
	fl := newFleet(t)
	silent := silentRedis(t)
	tests := []struct {
		name string
		url  func() string
	}{
		{"stopped", func() string { fl.srv.Stop(); return fl.srv.URL() }},
		{"accepting but never answering", func() string { return silent }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := fl.instanceAt(t, tc.url(), redisstore.DefaultTimeout)
			for _, c := range fleetCalls(s) {
				start := time.Now()
				err := c.call(context.Background())
				took := time.Since(start)
				if err == nil {
					t.Errorf("%s succeeded with Redis %s", c.name, tc.name)
				}
				if took > 3*redisstore.DefaultTimeout {
					t.Errorf("%s took %v to fail, want at most 3 × the %v timeout", c.name, took, redisstore.DefaultTimeout)
				}
			}
		})
	}
}

// silentRedis is a port that accepts connections and never answers: a Redis stuck in a long
// command or behind a dead network, which only timeouts reveal.
func silentRedis(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "redis://" + ln.Addr().String() + "/0"
}

func TestBreakerCallsWorkAfterRedisReturns(t *testing.T) {
	fl := newFleet(t)
	s := fl.instance(t)
	fl.srv.Stop()
	if _, err := s.BreakerStates(t.Context(), []string{"paywell/charge"}); err == nil {
		t.Fatal("BreakerStates succeeded with Redis stopped")
	}
	if err := fl.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Scripts are gone from the restarted server's cache: EVALSHA must fall back to EVAL.
	for _, c := range fleetCalls(s) {
		if c.name == "WatchBreakers" {
			continue // it only returns when it fails; TestWatchBreakersEndsWhenRedisStops watches again
		}
		if err := c.call(t.Context()); err != nil {
			t.Errorf("%s after Redis returned: %v", c.name, err)
		}
	}
}
