package resilience

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/internal/testlog"
)

// errTimeout is what a shared store that does not answer in time returns; it does not mark the
// store down (statestore does that for outages only).
var errTimeout = errors.New("redis: i/o timeout")

// flakyFleet is a shared store in memory whose calls fail while the test says so. Its breakers
// are always closed fleet-wide, except those it was told to open.
type flakyFleet struct {
	mu          sync.Mutex
	failOpen    int  // the next failOpen OpenBreaker calls fail
	failReports bool // ReportOutcomes fails
	opened      map[string]bool
	opens       int // OpenBreaker calls that succeeded
	reports     int
}

func newFlakyFleet() *flakyFleet { return &flakyFleet{opened: map[string]bool{}} }

func (f *flakyFleet) ReportOutcomes(context.Context, string, payrouter.BreakerRules, payrouter.BreakerReport, string) (bool, payrouter.BreakerCounts, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reports++
	if f.failReports {
		return false, payrouter.BreakerCounts{}, errTimeout
	}
	return false, payrouter.BreakerCounts{}, nil
}

func (f *flakyFleet) OpenBreaker(_ context.Context, breaker string, _ time.Duration, _ payrouter.BreakerCounts, _ payrouter.TrialGen, _ string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failOpen > 0 {
		f.failOpen--
		return false, errTimeout
	}
	f.opens++
	f.opened[breaker] = true
	return true, nil
}

func (f *flakyFleet) TakeTrial(context.Context, string, int, time.Duration) (payrouter.TrialGen, error) {
	return 0, nil
}
func (f *flakyFleet) ReturnTrial(context.Context, string, payrouter.TrialGen) error { return nil }
func (f *flakyFleet) TrialSucceeded(context.Context, string, payrouter.TrialGen, int, string) (bool, error) {
	return false, nil
}
func (f *flakyFleet) CloseBreaker(context.Context, string, string) (bool, error) { return false, nil }
func (f *flakyFleet) ForceBreaker(context.Context, string, payrouter.Forced, string) error {
	return nil
}
func (f *flakyFleet) ResetBreaker(context.Context, string, string) error { return nil }

func (f *flakyFleet) BreakerStates(_ context.Context, names []string) (map[string]payrouter.SharedBreaker, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]payrouter.SharedBreaker{}
	for _, n := range names {
		out[n] = payrouter.SharedBreaker{Open: f.opened[n], OpenFor: time.Minute}
	}
	return out, nil
}

func (f *flakyFleet) WatchBreakers(ctx context.Context, subscribed func(), _ func(payrouter.BreakerEvent)) error {
	subscribed()
	<-ctx.Done()
	return ctx.Err()
}

// failures counts the calls a Fleet or Prober said failed, by name.
type failures struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *failures) count(call string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[call]++
}

func (c *failures) of(call string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[call]
}

// runFleet runs a Fleet of one gateway (three failures trip it, a minute's cooldown) on shared,
// refreshing every second, until the returned stop.
func runFleet(t *testing.T, shared payrouter.FleetBreakers, log *bytes.Buffer, failed *failures) (*Breaker, func()) {
	t.Helper()
	d := NewDomains([]GatewaySettings{{Name: "paywell", Breaker: BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 3, Cooldown: time.Minute}, HalfOpenRequests: 1}}}, nil)
	f := NewFleet(d, shared, FleetOptions{
		Origin: "a", Refresh: time.Second, Log: slog.New(slog.NewJSONHandler(log, nil)), Failed: failed.count,
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { f.Run(ctx) })
	return d.Breaker("paywell", payrouter.OpCharge), func() { cancel(); wg.Wait(); d.Close() }
}

// TestFleetOpenThatFailsIsSentAgain: a breaker this instance opened while the shared store timed
// out stays open here (the fleet's older "closed" does not undo it at the next refresh), the
// failure is logged once and counted, and the open is sent again until the store takes it.
func TestFleetOpenThatFailsIsSentAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared, log, failed := newFlakyFleet(), &bytes.Buffer{}, &failures{}
		shared.failOpen = 2 // the open, and its first resend
		b, stop := runFleet(t, shared, log, failed)
		defer stop()

		trip(t, b)
		synctest.Wait()
		time.Sleep(1500 * time.Millisecond) // one refresh: the resend fails too
		synctest.Wait()
		expectState(t, b, StateOpen)
		if n := failed.of("open_breaker"); n != 2 {
			t.Errorf("open_breaker failures counted: %d, want 2", n)
		}
		lines := testlog.Lines(t, log.String(), "fleet.call_failed")
		if len(lines) != 1 || lines[0]["call"] != "open_breaker" || lines[0]["breaker"] != "paywell/charge" || lines[0]["err"] != errTimeout.Error() {
			t.Fatalf("fleet.call_failed lines %v, want one for open_breaker of paywell/charge with the error", lines)
		}

		time.Sleep(time.Second) // the next refresh sends it again, and the store takes it
		synctest.Wait()
		shared.mu.Lock()
		opens, open := shared.opens, shared.opened["paywell/charge"]
		shared.mu.Unlock()
		if opens != 1 || !open {
			t.Errorf("opens the store took: %d (open %v), want 1", opens, open)
		}
		expectState(t, b, StateOpen)
		time.Sleep(3 * time.Second) // nothing pending: no more resends
		synctest.Wait()
		shared.mu.Lock()
		opens = shared.opens
		shared.mu.Unlock()
		if opens != 1 || failed.of("open_breaker") != 2 {
			t.Errorf("after the store took it: %d opens, %d failures, want 1 and 2", opens, failed.of("open_breaker"))
		}
	})
}

// TestFleetReportThatFailsIsCountedAndLoggedOnce: outcomes the store does not take are counted
// each time and logged at the first failure of a run, and again only after a success.
func TestFleetReportThatFailsIsCountedAndLoggedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared, log, failed := newFlakyFleet(), &bytes.Buffer{}, &failures{}
		shared.failReports = true
		b, stop := runFleet(t, shared, log, failed)
		defer stop()

		report := func() { // one success, sent at the next report tick
			done, err := b.Allow()
			if err != nil {
				t.Fatal(err)
			}
			done(payrouter.OutcomeSucceeded)
			time.Sleep(DefaultReportEvery)
			synctest.Wait()
		}
		for range 5 {
			report()
		}
		if n := failed.of("report_outcomes"); n != 5 {
			t.Errorf("report_outcomes failures counted: %d, want 5", n)
		}
		if n := len(testlog.Lines(t, log.String(), "fleet.call_failed")); n != 1 {
			t.Errorf("%d fleet.call_failed lines for one run of failures, want 1:\n%s", n, log)
		}
		shared.mu.Lock()
		shared.failReports = false
		shared.mu.Unlock()
		report()
		shared.mu.Lock()
		shared.failReports = true
		shared.mu.Unlock()
		report()
		if n := len(testlog.Lines(t, log.String(), "fleet.call_failed")); n != 2 {
			t.Errorf("%d fleet.call_failed lines for two runs of failures, want 2:\n%s", n, log)
		}
	})
}

// failingLeases is a payrouter.Leases whose store does not answer.
type failingLeases struct{}

func (failingLeases) HoldLease(context.Context, string, string, time.Duration) (bool, error) {
	return false, errTimeout
}
func (failingLeases) DropLease(context.Context, string, string) error { return errTimeout }

// TestProberSaysItsLeaseFailed: a prober whose lease calls fail says so once, counts each, and
// keeps probing (its instance's breakers stay honest); giving up the lease at the end is
// counted and logged too.
func TestProberSaysItsLeaseFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log, failed, h := &bytes.Buffer{}, &failures{}, &health{}
		h.healthy.Store(true)
		s := threeThenCool
		s.Probe, s.ProbeInterval, s.ProbeTimeout = ProbeOutOfBand, 5*time.Second, time.Second
		d := NewDomains([]GatewaySettings{{Name: "paywell", Breaker: s}}, nil)
		defer d.Close()
		p := NewProber(d, map[string]HealthCheck{"paywell": h.check}, nil, ProberOptions{
			Leases: failingLeases{}, Holder: "a", Log: slog.New(slog.NewJSONHandler(log, nil)), Failed: failed.count,
		})
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { p.Run(ctx) })
		time.Sleep(3*5*time.Second + time.Millisecond)
		synctest.Wait()
		if n := h.calls.Load(); n != 3 {
			t.Errorf("probes while the lease store fails: %d, want 3", n)
		}
		if n := failed.of("hold_lease"); n != 3 {
			t.Errorf("hold_lease failures counted: %d, want 3", n)
		}
		lines := testlog.Lines(t, log.String(), "probe.lease_failed")
		if len(lines) != 1 || lines[0]["gateway"] != "paywell" || lines[0]["err"] != errTimeout.Error() {
			t.Errorf("probe.lease_failed lines %v, want one naming paywell and the error", lines)
		}
		cancel()
		wg.Wait()
		if n := failed.of("drop_lease"); n != 1 || len(testlog.Lines(t, log.String(), "probe.lease_drop_failed")) != 1 {
			t.Errorf("drop_lease failures: %d counted, log:\n%s\nwant 1 counted and logged", n, log)
		}
	})
}
