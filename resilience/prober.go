package resilience

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/payrouter/payrouter"
)

// HealthCheck calls a gateway's own health endpoint; nil means healthy. The prober gives each
// gateway's check its own http.Transport, so that a customer pool that is full (a busy gateway
// is not a sick one) can never fail a probe.
type HealthCheck func(ctx context.Context) error

// ProberOptions configures a Prober; every zero value is documented.
type ProberOptions struct {
	// Leases elects one prober per gateway among all the processes probing it (instances and
	// `payrouter probe`); nil: this prober always leads (one instance, nothing shared).
	Leases payrouter.Leases
	// Holder names this prober in the leases; it must differ between processes.
	Holder string
	// Log receives each change of a gateway's probe verdict, and the first of a run of failed
	// lease calls; nil: discarded.
	Log *slog.Logger
	// Failed counts each lease call that failed (hold_lease, drop_lease); nil: not counted.
	Failed func(call string)
}

// Prober tests the recovery of the gateways whose breakers say ProbeOutOfBand
// (docs/architecture.md, Breakers):
// one goroutine per gateway calls its health endpoint every ProbeInterval, and while a breaker
// of that gateway is half-open it is the probe, not a customer's call, that closes it or opens it
// again. Probe results never enter the customer counts: a closed breaker never opens, and an
// open one never closes before its cooldown, because of a probe. Each gateway's verdict (its
// last probe, and the run of failures) is the prober's own, reported to the Observer and logged
// when it changes.
type Prober struct {
	d   *Domains
	o   ProberOptions
	obs Observer

	mu     sync.Mutex
	checks map[string]*probeCheck // by gateway
	wake   chan struct{}          // an Update happened
}

// probeCheck is one gateway's check; a new one (Update) restarts that gateway's prober.
type probeCheck struct{ check HealthCheck }

// NewProber returns a prober of every gateway of d whose breakers are ProbeOutOfBand and that has a
// check in checks; obs nil is NopObserver.
func NewProber(d *Domains, checks map[string]HealthCheck, obs Observer, o ProberOptions) *Prober {
	if obs == nil {
		obs = NopObserver{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Failed == nil {
		o.Failed = func(string) {}
	}
	p := &Prober{d: d, checks: map[string]*probeCheck{}, o: o, obs: obs, wake: make(chan struct{}, 1)}
	for name, c := range checks {
		p.checks[name] = &probeCheck{c}
	}
	return p
}

// Update is for a reload, after the Domains' Update: checks are the checks of the gateways now
// configured, and renewed names those whose check is new although their domain may not be (new
// credentials). Gateways gone stop being probed, new ones start, and changed ones (a new domain,
// or renewed) start over; the others go on as they were.
func (p *Prober) Update(checks map[string]HealthCheck, renewed []string) {
	p.mu.Lock()
	next := map[string]*probeCheck{}
	for name, c := range checks {
		if old := p.checks[name]; old != nil && !slices.Contains(renewed, name) {
			next[name] = old
		} else {
			next[name] = &probeCheck{c}
		}
	}
	p.checks = next
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// probeTarget is one probe loop: a gateway's domain and its check.
type probeTarget struct {
	gd    *gatewayDomain
	check *probeCheck
}

// targets returns the gateways to probe now: live, ProbeOutOfBand, with a check.
func (p *Prober) targets() []probeTarget {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []probeTarget
	for _, gd := range p.d.Current().gateways {
		if c := p.checks[gd.settings.Name]; c != nil && gd.settings.Breaker.OutOfBand() {
			out = append(out, probeTarget{gd, c})
		}
	}
	return out
}

// Gateways returns the names of the gateways it probes.
func (p *Prober) Gateways() []string {
	var out []string
	for _, t := range p.targets() {
		out = append(out, t.gd.settings.Name)
	}
	return out
}

// Run probes every gateway until ctx ends, then gives up its leases. After an Update it stops
// the loops of gateways gone or changed and starts the new ones.
func (p *Prober) Run(ctx context.Context) {
	var wg sync.WaitGroup
	running := map[probeTarget]context.CancelFunc{}
	for {
		want := map[probeTarget]bool{}
		for _, t := range p.targets() {
			want[t] = true
			if running[t] == nil {
				lctx, cancel := context.WithCancel(ctx)
				running[t] = cancel
				wg.Go(func() { p.probeLoop(lctx, t.gd, t.check.check) })
			}
		}
		for t, cancel := range running {
			if !want[t] {
				cancel()
				delete(running, t)
			}
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-p.wake:
		}
	}
}

// probeLoop is one gateway's prober.
func (p *Prober) probeLoop(ctx context.Context, gd *gatewayDomain, check HealthCheck) {
	s := gd.settings
	lease := "probe/" + s.Name
	leading := false
	leaseFailing := false
	failures := 0
	defer func() {
		if leading && p.o.Leases != nil {
			ctx, cancel := context.WithTimeout(context.Background(), s.Breaker.ProbeTimeout)
			defer cancel()
			if err := p.o.Leases.DropLease(ctx, lease, p.o.Holder); err != nil {
				p.o.Failed("drop_lease")
				p.o.Log.Warn("probe.lease_drop_failed", "gateway", s.Name, "holder", p.o.Holder, "err", err.Error(),
					"then", "another prober takes the gateway once the lease runs out")
			}
		}
	}()
	tick := time.NewTicker(s.Breaker.ProbeInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !p.lead(ctx, lease, s, &leading, &leaseFailing) {
			continue
		}
		healthy, d := runCheck(ctx, gd.settings.Breaker.ProbeTimeout, check)
		if ctx.Err() != nil {
			return
		}
		p.obs.ProbeDone(s.Name, healthy, d)
		switch {
		case healthy && failures > 0:
			p.o.Log.Info("probe.healthy", "gateway", s.Name, "after_failures", failures)
			failures = 0
		case !healthy:
			failures++
			if failures == 1 {
				p.o.Log.Warn("probe.failing", "gateway", s.Name, "timeout_ms", s.Breaker.ProbeTimeout.Milliseconds())
			}
		}
		for _, g := range gd.guards {
			g.breaker.ProbeResult(healthy)
		}
	}
}

// lead takes or renews the gateway's lease; without Leases this prober always leads. A lease
// outlives three intervals, so one missed renewal does not hand the gateway to another prober.
// A failed lease call is counted each time and logged at the first of a run (failing).
func (p *Prober) lead(ctx context.Context, lease string, s GatewaySettings, leading, failing *bool) bool {
	if p.o.Leases == nil {
		return true
	}
	lctx, cancel := context.WithTimeout(ctx, s.Breaker.ProbeTimeout)
	defer cancel()
	held, err := p.o.Leases.HoldLease(lctx, lease, p.o.Holder, 3*s.Breaker.ProbeInterval)
	switch {
	case err != nil && ctx.Err() != nil:
		return false // stopping: not a failure of the store
	case err != nil:
		// The store is away: probing anyway keeps this instance's breakers honest; a second
		// prober calling /health for a while costs the gateway nothing.
		p.o.Failed("hold_lease")
		if !*failing {
			p.o.Log.Warn("probe.lease_failed", "gateway", s.Name, "holder", p.o.Holder, "err", err.Error(),
				"then", "probing without the lease until the store answers")
		}
		*failing = true
		held = true
	case *failing:
		p.o.Log.Info("probe.lease_recovered", "gateway", s.Name, "holder", p.o.Holder)
		*failing = false
	}
	if held != *leading {
		p.o.Log.Info("probe.lead", "gateway", s.Name, "leading", held, "holder", p.o.Holder)
	}
	*leading = held
	return held
}

// runCheck calls check within timeout.
func runCheck(ctx context.Context, timeout time.Duration, check HealthCheck) (bool, time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	err := check(ctx)
	return err == nil, time.Since(start)
}
