package statestore

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/memstore"
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

// fakePrimary is a shared store in memory with an off switch: while down every call, Ping
// included, fails with errRefused. It counts calls so tests can tell that a down Store never
// touches it. The embedded memstore is the shared store's content; tests read and write it
// directly (as another instance would) without going through the switch or the counters.
type fakePrimary struct {
	*memstore.Store
	down   atomic.Bool
	calls  atomic.Int64 // every call but Ping
	claims atomic.Int64 // calls of Claim
	pings  atomic.Int64

	mu       sync.Mutex
	failSave map[string]error // SaveCharge of these ids fails with this (not unavailable) error
}

func newFake() *fakePrimary {
	return &fakePrimary{Store: memstore.New(), failSave: map[string]error{}}
}

var _ Shared = (*fakePrimary)(nil)

func (f *fakePrimary) enter() error {
	f.calls.Add(1)
	if f.down.Load() {
		return errRefused
	}
	return nil
}

func (f *fakePrimary) setFailSave(id string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.failSave, id)
		return
	}
	f.failSave[id] = err
}

func (f *fakePrimary) Ping(ctx context.Context) error {
	f.pings.Add(1)
	if f.down.Load() {
		return errRefused
	}
	return f.Store.Ping(ctx)
}

func (f *fakePrimary) SaveCharge(ctx context.Context, c *payrouter.Charge) error {
	if err := f.enter(); err != nil {
		return err
	}
	if c != nil {
		f.mu.Lock()
		err := f.failSave[c.ID]
		f.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return f.Store.SaveCharge(ctx, c)
}

func (f *fakePrimary) Charge(ctx context.Context, id string) (*payrouter.Charge, error) {
	if err := f.enter(); err != nil {
		return nil, err
	}
	return f.Store.Charge(ctx, id)
}

func (f *fakePrimary) ChargesByStatus(ctx context.Context, status payrouter.ChargeStatus, limit int) ([]*payrouter.Charge, error) {
	if err := f.enter(); err != nil {
		return nil, err
	}
	return f.Store.ChargesByStatus(ctx, status, limit)
}

func (f *fakePrimary) Claim(ctx context.Context, key, fingerprint string, ttl time.Duration) (*payrouter.IdempotencyRecord, error) {
	f.claims.Add(1)
	if err := f.enter(); err != nil {
		return nil, err
	}
	return f.Store.Claim(ctx, key, fingerprint, ttl)
}

// CompleteCharge is SaveCharge then Complete, each failing as the fake is told.
func (f *fakePrimary) CompleteCharge(ctx context.Context, c *payrouter.Charge, key string, rec payrouter.IdempotencyRecord, ttl time.Duration) error {
	if err := f.SaveCharge(ctx, c); err != nil {
		return err
	}
	return f.Complete(ctx, key, rec, ttl)
}

func (f *fakePrimary) Complete(ctx context.Context, key string, rec payrouter.IdempotencyRecord, ttl time.Duration) error {
	if err := f.enter(); err != nil {
		return err
	}
	return f.Store.Complete(ctx, key, rec, ttl)
}

func (f *fakePrimary) Release(ctx context.Context, key string) error {
	if err := f.enter(); err != nil {
		return err
	}
	return f.Store.Release(ctx, key)
}

func (f *fakePrimary) SetForced(ctx context.Context, breaker string, forced payrouter.Forced) error {
	if err := f.enter(); err != nil {
		return err
	}
	return f.Store.SetForced(ctx, breaker, forced)
}

func (f *fakePrimary) ForcedStates(ctx context.Context) (map[string]payrouter.Forced, error) {
	if err := f.enter(); err != nil {
		return nil, err
	}
	return f.Store.ForcedStates(ctx)
}

func (f *fakePrimary) SaveRefund(ctx context.Context, r *payrouter.Refund) error {
	if err := f.enter(); err != nil {
		return err
	}
	return f.Store.SaveRefund(ctx, r)
}

func (f *fakePrimary) Refund(ctx context.Context, id string) (*payrouter.Refund, error) {
	if err := f.enter(); err != nil {
		return nil, err
	}
	return f.Store.Refund(ctx, id)
}

func (f *fakePrimary) Enqueue(ctx context.Context, t payrouter.Task) (string, error) {
	if err := f.enter(); err != nil {
		return "", err
	}
	return f.Store.Enqueue(ctx, t)
}

func (f *fakePrimary) Take(ctx context.Context, consumer string, max int, idle time.Duration) ([]payrouter.Task, error) {
	if err := f.enter(); err != nil {
		return nil, err
	}
	return f.Store.Take(ctx, consumer, max, idle)
}

func (f *fakePrimary) Ack(ctx context.Context, id string) error {
	if err := f.enter(); err != nil {
		return err
	}
	return f.Store.Ack(ctx, id)
}

func (f *fakePrimary) QueueDepth(ctx context.Context) (int64, error) {
	if err := f.enter(); err != nil {
		return 0, err
	}
	return f.Store.QueueDepth(ctx)
}

// The fleet's methods are stubs: statestore only passes them through or refuses them.

func (f *fakePrimary) ReportOutcomes(context.Context, string, payrouter.BreakerRules, payrouter.BreakerReport, string) (bool, payrouter.BreakerCounts, error) {
	return false, payrouter.BreakerCounts{}, f.enter()
}

func (f *fakePrimary) OpenBreaker(context.Context, string, time.Duration, payrouter.BreakerCounts, string) (bool, error) {
	return true, f.enter()
}

func (f *fakePrimary) TakeTrial(context.Context, string, int, time.Duration) (bool, error) {
	return true, f.enter()
}

func (f *fakePrimary) ReturnTrial(context.Context, string) error { return f.enter() }

func (f *fakePrimary) TrialSucceeded(context.Context, string, int, string) (bool, error) {
	return true, f.enter()
}

func (f *fakePrimary) CloseBreaker(context.Context, string, string) (bool, error) {
	return true, f.enter()
}

func (f *fakePrimary) ForceBreaker(context.Context, string, payrouter.Forced, string) error {
	return f.enter()
}

func (f *fakePrimary) ResetBreaker(context.Context, string, string) error { return f.enter() }

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

// syncBuffer is a log sink safe for the health goroutine and the test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

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
	log     *syncBuffer
	changes *changes
}

func start(t *testing.T, f *fakePrimary) *harness {
	t.Helper()
	h := &harness{fake: f, log: &syncBuffer{}, changes: &changes{}}
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
