package statestore

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/internal/testlog"
)

// Test timings: intervals short enough that recovery is seen in milliseconds, and a deadline
// generous enough for a loaded CI machine.
const (
	checkDown = 10 * time.Millisecond
	checkUp   = 20 * time.Millisecond
	deadline  = 5 * time.Second
)

// errRefused is what a Redis client returns when nothing listens: a net.Error.
var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

// isNetError is the tests' Options.Unavailable.
func isNetError(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr)
}

// fakePrimary is a coordination store in memory with an off switch: while down every call,
// Ping included, fails with errRefused. It counts calls so tests can tell that a down Store never
// touches it. Its forced states are its content; tests read them through forcedNow without going
// through the switch or the counters.
type fakePrimary struct {
	down   atomic.Bool
	calls  atomic.Int64 // every call but Ping
	pings  atomic.Int64
	closed atomic.Bool

	mu        sync.Mutex
	forced    map[string]payrouter.Forced
	failForce map[string]error // ForceBreaker of these breakers fails with this error
}

func newFake() *fakePrimary {
	return &fakePrimary{forced: map[string]payrouter.Forced{}, failForce: map[string]error{}}
}

var _ Shared = (*fakePrimary)(nil)

func (f *fakePrimary) enter() error {
	f.calls.Add(1)
	if f.down.Load() {
		return errRefused
	}
	return nil
}

// setFailForce makes ForceBreaker of breaker fail with err; nil lifts it.
func (f *fakePrimary) setFailForce(breaker string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.failForce, breaker)
		return
	}
	f.failForce[breaker] = err
}

// set writes a forced state; ForcedNone deletes it.
func (f *fakePrimary) set(breaker string, forced payrouter.Forced) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if forced == payrouter.ForcedNone {
		delete(f.forced, breaker)
		return
	}
	f.forced[breaker] = forced
}

// forcedNow is the fake's forced states, read behind the Store's back.
func (f *fakePrimary) forcedNow() map[string]payrouter.Forced {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.forced)
}

func (f *fakePrimary) Ping(context.Context) error {
	f.pings.Add(1)
	if f.down.Load() {
		return errRefused
	}
	return nil
}

func (f *fakePrimary) Close() error {
	f.closed.Store(true)
	return nil
}

// The fleet's methods answer as Redis would when there is nothing to do, but for the forced
// states they touch: statestore only passes them through or refuses them.

func (f *fakePrimary) ReportOutcomes(context.Context, string, payrouter.BreakerRules, payrouter.BreakerReport, string) (bool, payrouter.BreakerCounts, error) {
	return false, payrouter.BreakerCounts{}, f.enter()
}

func (f *fakePrimary) OpenBreaker(context.Context, string, time.Duration, payrouter.BreakerCounts, payrouter.TrialGen, string) (bool, error) {
	return true, f.enter()
}

func (f *fakePrimary) TakeTrial(context.Context, string, int, time.Duration) (payrouter.TrialGen, error) {
	return 1, f.enter()
}

func (f *fakePrimary) ReturnTrial(context.Context, string, payrouter.TrialGen) error {
	return f.enter()
}

func (f *fakePrimary) TrialSucceeded(context.Context, string, payrouter.TrialGen, int, string) (bool, error) {
	return true, f.enter()
}

func (f *fakePrimary) CloseBreaker(context.Context, string, string) (bool, error) {
	return true, f.enter()
}

func (f *fakePrimary) ForceBreaker(_ context.Context, breaker string, forced payrouter.Forced, _ string) error {
	if err := f.enter(); err != nil {
		return err
	}
	f.mu.Lock()
	err := f.failForce[breaker]
	f.mu.Unlock()
	if err != nil {
		return err
	}
	f.set(breaker, forced)
	return nil
}

func (f *fakePrimary) ResetBreaker(_ context.Context, breaker, _ string) error {
	if err := f.enter(); err != nil {
		return err
	}
	f.set(breaker, payrouter.ForcedNone)
	return nil
}

func (f *fakePrimary) BreakerStates(_ context.Context, names []string) (map[string]payrouter.SharedBreaker, error) {
	if err := f.enter(); err != nil {
		return nil, err
	}
	states := make(map[string]payrouter.SharedBreaker, len(names))
	for _, n := range names {
		states[n] = payrouter.SharedBreaker{}
	}
	return states, nil
}

func (f *fakePrimary) WatchBreakers(ctx context.Context, _ func(), _ func(payrouter.BreakerEvent)) error {
	if err := f.enter(); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

func (f *fakePrimary) HoldLease(context.Context, string, string, time.Duration) (bool, error) {
	return true, f.enter()
}

func (f *fakePrimary) DropLease(context.Context, string, string) error { return f.enter() }

// changes records OnChange calls.
type changes struct {
	mu  sync.Mutex
	ups []bool
}

func (c *changes) record(up bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ups = append(c.ups, up)
}

func (c *changes) get() []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]bool(nil), c.ups...)
}

// harness is a Store over a fake primary with its health loop running until the test ends.
type harness struct {
	*Store
	fake    *fakePrimary
	log     *testlog.Buffer
	changes *changes
}

func start(t *testing.T, f *fakePrimary) *harness {
	t.Helper()
	h := &harness{fake: f, log: &testlog.Buffer{}, changes: &changes{}}
	h.Store = New(f, Options{
		Unavailable: isNetError,
		CheckDown:   checkDown,
		CheckUp:     checkUp,
		Log:         slog.New(slog.NewTextHandler(h.log, nil)),
		OnChange:    h.changes.record,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done // Run must return when its context ends
	})
	return h
}

// waitFor polls cond until it holds, failing t after deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, deadline)
		}
		<-tick.C
	}
}

// waitChanges waits until OnChange was called exactly as want says.
func (h *harness) waitChanges(t *testing.T, want ...bool) {
	t.Helper()
	waitFor(t, "OnChange calls", func() bool { return len(h.changes.get()) >= len(want) })
	if got := h.changes.get(); !equalBools(got, want) {
		t.Fatalf("OnChange calls = %v, want %v", got, want)
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// goDown switches the fake off and makes one call meet the outage.
func (h *harness) goDown(t *testing.T) {
	t.Helper()
	h.fake.down.Store(true)
	if err := h.Ping(t.Context()); !errors.Is(err, ErrDown) {
		t.Fatalf("Ping of a dead primary = %v, want ErrDown", err)
	}
	h.waitChanges(t, false)
}

// comeUp switches the fake on and waits for the re-sync.
func (h *harness) comeUp(t *testing.T) {
	t.Helper()
	h.fake.down.Store(false)
	waitFor(t, "Up after the primary returns", h.Up)
}

func logCount(log, line string) int {
	return strings.Count(log, "msg="+line+" ")
}
