package resilience

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
)

// health is a HealthCheck whose answer the test sets, counting its calls.
type health struct {
	healthy atomic.Bool
	calls   atomic.Int64
}

func (h *health) check(context.Context) error {
	h.calls.Add(1)
	if h.healthy.Load() {
		return nil
	}
	return errors.New("gateway health endpoint: 503")
}

// probed returns Domains with one out-of-band gateway, paywell (3 failures trip it, 30s
// cooldown, probe every 5s), and a Prober running on it until the test ends.
func probed(t *testing.T, rec *recorder, h *health, o ProberOptions) *Domains {
	t.Helper()
	s := threeThenCool
	s.Probe, s.ProbeInterval = ProbeOutOfBand, 5*time.Second
	d := NewDomains([]GatewaySettings{{Name: "paywell", Breaker: s}}, rec)
	p := NewProber(d, map[string]HealthCheck{"paywell": h.check}, rec, o)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return d
}

// While an out-of-band breaker is half-open, customers are refused: the probe decides.
func TestProberClosesHalfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec, h := newRecorder(), &health{}
		d := probed(t, rec, h, ProberOptions{})
		b := d.Breaker("paywell", payrouter.OpCharge)
		trip(t, b)

		time.Sleep(threeThenCool.Cooldown + time.Millisecond) // cooldown over, before the next probe
		expectState(t, b, StateHalfOpen)
		if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
			t.Fatalf("customer call in half-open, probe out_of_band: got %v, want ErrOpen", err)
		}
		h.healthy.Store(true)
		time.Sleep(5 * time.Second) // the next probe
		synctest.Wait()
		expectState(t, b, StateClosed)
		expectMoves(t, rec, "closed>open", "open>half_open", "half_open>closed")
		if _, err := b.Allow(); err != nil {
			t.Errorf("customer call after the probe closed the breaker: %v", err)
		}
	})
}

// A failed probe in half-open opens the breaker for another cooldown.
func TestProberReopensHalfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec, h := newRecorder(), &health{}
		d := probed(t, rec, h, ProberOptions{})
		b := d.Breaker("paywell", payrouter.OpRefund) // every operation of the gateway is probed
		trip(t, b)
		time.Sleep(threeThenCool.Cooldown + time.Millisecond)
		expectState(t, b, StateHalfOpen)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		expectState(t, b, StateOpen)
		if got, want := b.OpenUntil(), time.Now().Add(threeThenCool.Cooldown); got.Sub(want).Abs() > 5*time.Second {
			t.Errorf("OpenUntil after a failed probe: got %v, want about %v", got, want)
		}
		expectMoves(t, rec, "closed>open", "open>half_open", "half_open>open")
	})
}

// Probe results never enter the customer window: failing probes never open a closed breaker, and
// healthy probes never close an open one before its cooldown.
func TestProbesNeverEnterTheCustomerWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec, h := newRecorder(), &health{}
		d := probed(t, rec, h, ProberOptions{})
		charge, refund := d.Breaker("paywell", payrouter.OpCharge), d.Breaker("paywell", payrouter.OpRefund)

		time.Sleep(20 * 5 * time.Second) // 20 failed probes
		synctest.Wait()
		if n := h.calls.Load(); n != 20 {
			t.Fatalf("probes in 100s at a 5s interval: got %d, want 20", n)
		}
		expectState(t, charge, StateClosed)
		if c := charge.Snapshot().Counts; c != (Counts{}) {
			t.Errorf("customer counts after 20 failed probes: got %+v, want none", c)
		}

		trip(t, refund)
		h.healthy.Store(true)
		time.Sleep(threeThenCool.Cooldown - time.Second) // 5 healthy probes within the cooldown
		synctest.Wait()
		expectState(t, refund, StateOpen)
		expectMoves(t, rec, "closed>open")

		rec.mu.Lock()
		defer rec.mu.Unlock()
		failed := 0
		for _, p := range rec.probes {
			if !p.Healthy {
				failed++
			}
		}
		if failed != 20 || len(rec.probes) < 25 {
			t.Errorf("probe verdicts heard: %d failed of %d, want 20 failed of at least 25", failed, len(rec.probes))
		}
	})
}

// leases is a payrouter.Leases the test decides.
type leases struct{ held atomic.Bool }

func (l *leases) HoldLease(context.Context, string, string, time.Duration) (bool, error) {
	return l.held.Load(), nil
}
func (l *leases) DropLease(context.Context, string, string) error { return nil }

// A prober that does not hold the gateway's lease leaves it to the one that does.
func TestProberLeadsOnlyWithTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, l := &health{}, &leases{}
		probed(t, newRecorder(), h, ProberOptions{Leases: l, Holder: "b"})
		time.Sleep(3 * 5 * time.Second)
		synctest.Wait()
		if n := h.calls.Load(); n != 0 {
			t.Fatalf("probes without the lease: got %d, want 0", n)
		}
		l.held.Store(true)
		time.Sleep(2 * 5 * time.Second)
		synctest.Wait()
		if n := h.calls.Load(); n != 2 {
			t.Errorf("probes with the lease over two intervals: got %d, want 2", n)
		}
	})
}

// Only out-of-band gateways are probed.
func TestProberSkipsInBandGateways(t *testing.T) {
	d := NewDomains([]GatewaySettings{{Name: "paywell"}, {Name: "ding", Breaker: BreakerSettings{Probe: ProbeOutOfBand}}}, nil)
	ok := func(context.Context) error { return nil }
	p := NewProber(d, map[string]HealthCheck{"paywell": ok, "ding": ok}, nil, ProberOptions{})
	if got := p.Gateways(); len(got) != 1 || got[0] != "ding" {
		t.Errorf("gateways probed: got %v, want [ding]", got)
	}
}
