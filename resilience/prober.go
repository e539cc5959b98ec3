package resilience

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/payrouter/payrouter"
)

// DefaultProbeInterval and DefaultProbeTimeout are the prober's timings when GatewaySettings
// leaves them 0.
const (
	DefaultProbeInterval = 5 * time.Second
	DefaultProbeTimeout  = 2 * time.Second
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
	// Log receives each change of a gateway's probe verdict; nil: discarded.
	Log *slog.Logger
}

// Prober tests the recovery of the gateways whose breakers say OutOfBand (DESIGN.md, Breakers):
// one goroutine per gateway calls its health endpoint every ProbeInterval, and while a breaker
// of that gateway is half-open it is the probe, not a customer's call, that closes it or opens it
// again. Probe results never enter the customer counts: a closed breaker never opens, and an
// open one never closes before its cooldown, because of a probe. Each gateway's verdict (its
// last probe, and the run of failures) is the prober's own, reported to the Observer and logged
// when it changes.
type Prober struct {
	d      *Domains
	checks map[string]HealthCheck
	o      ProberOptions
	obs    Observer
}

// NewProber returns a prober of every gateway of d whose breakers are OutOfBand and that has a
// check in checks; obs nil is NopObserver.
func NewProber(d *Domains, checks map[string]HealthCheck, obs Observer, o ProberOptions) *Prober {
	if obs == nil {
		obs = NopObserver{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	p := &Prober{d: d, checks: map[string]HealthCheck{}, o: o, obs: obs}
	for _, gd := range d.gateways {
		if c := checks[gd.settings.Name]; c != nil && gd.settings.Breaker.OutOfBand {
			p.checks[gd.settings.Name] = c
		}
	}
	return p
}

// Gateways returns the names of the gateways it probes.
func (p *Prober) Gateways() []string {
	var out []string
	for _, gd := range p.d.gateways {
		if p.checks[gd.settings.Name] != nil {
			out = append(out, gd.settings.Name)
		}
	}
	return out
}

// Run probes every gateway until ctx ends, then gives up its leases.
func (p *Prober) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, name := range p.Gateways() {
		gd := p.d.byName[name]
		wg.Go(func() { p.probeLoop(ctx, gd) })
	}
	wg.Wait()
}

// probeLoop is one gateway's prober.
func (p *Prober) probeLoop(ctx context.Context, gd *gatewayDomain) {
	s := gd.settings
	lease := "probe/" + s.Name
	leading := false
	failures := 0
	defer func() {
		if leading && p.o.Leases != nil {
			ctx, cancel := context.WithTimeout(context.Background(), s.ProbeTimeout)
			defer cancel()
			p.o.Leases.DropLease(ctx, lease, p.o.Holder)
		}
	}()
	tick := time.NewTicker(s.ProbeInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !p.lead(ctx, lease, s, &leading) {
			continue
		}
		healthy, d := p.probe(ctx, gd)
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
				p.o.Log.Warn("probe.failing", "gateway", s.Name, "timeout_ms", s.ProbeTimeout.Milliseconds())
			}
		}
		for _, g := range gd.guards {
			g.breaker.ProbeResult(healthy)
		}
	}
}

// lead takes or renews the gateway's lease; without Leases this prober always leads. A lease
// outlives three intervals, so one missed renewal does not hand the gateway to another prober.
func (p *Prober) lead(ctx context.Context, lease string, s GatewaySettings, leading *bool) bool {
	if p.o.Leases == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, s.ProbeTimeout)
	defer cancel()
	held, err := p.o.Leases.HoldLease(ctx, lease, p.o.Holder, 3*s.ProbeInterval)
	if err != nil {
		// The store is away: probing anyway keeps this instance's breakers honest; a second
		// prober calling /health for a while costs the gateway nothing.
		held = true
	}
	if held != *leading {
		p.o.Log.Info("probe.lead", "gateway", s.Name, "leading", held, "holder", p.o.Holder)
	}
	*leading = held
	return held
}

// probe calls the gateway's health check within ProbeTimeout.
func (p *Prober) probe(ctx context.Context, gd *gatewayDomain) (bool, time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, gd.settings.ProbeTimeout)
	defer cancel()
	start := time.Now()
	err := p.checks[gd.settings.Name](ctx)
	return err == nil, time.Since(start)
}
