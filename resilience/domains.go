package resilience

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
)

const (
	// DefaultDialTimeout is short because a gateway that cannot take a connection has not seen
	// the request: failing the dial early gives an honest unavailable (safe to fail over) instead
	// of a timeout (which may have charged).
	DefaultDialTimeout = 2 * time.Second
	// tlsHandshakeTimeout bounds the handshake on its own for the same reason; the context
	// deadline bounds it anyway.
	tlsHandshakeTimeout = 5 * time.Second
	idleConnTimeout     = 90 * time.Second
	// probeConns bounds the prober's own pool: one probe at a time, one spare.
	probeConns = 2
)

// GatewaySettings holds one gateway's failure-domain settings: the policies' own (settings.go)
// and what the gateway's connections need.
type GatewaySettings struct {
	Name string
	// Endpoint names what the gateway's breakers and connections measure (its kind and base
	// URL); an Update that changes it starts both afresh.
	Endpoint string
	TimeoutSettings
	BulkheadSettings
	// Breaker holds the rules of the gateway's breakers, one per operation.
	Breaker BreakerSettings
	// DialTimeout bounds connecting to the gateway; 0: DefaultDialTimeout.
	DialTimeout time.Duration
	// TLS is the TLS configuration of the gateway's connections, customer and probe alike
	// (gatewayhttp.ClientTLS.Load builds it); nil: gatewayhttp.DefaultTLSConfig, the system pool.
	// It is not compared between Updates: TLSFingerprint stands for it.
	TLS *tls.Config
	// TLSFingerprint names what TLS was built from, the files' contents included
	// (gatewayhttp.ClientTLS.Load): an Update that changes it renews the gateway's connections,
	// so a rotated client certificate or CA file is used from the next call on.
	TLSFingerprint string
}

// withDefaults returns s with its zero values replaced by what they mean.
func (s GatewaySettings) withDefaults() GatewaySettings {
	if s.Timeout <= 0 {
		s.Timeout = DefaultTimeout
	}
	if s.MaxConcurrent <= 0 {
		s.MaxConcurrent = DefaultMaxConcurrent
	}
	if s.DialTimeout <= 0 {
		s.DialTimeout = DefaultDialTimeout
	}
	s.Breaker = s.Breaker.withDefaults()
	return s
}

// Domains holds every failure domain: for each gateway a bulkhead, an http.Client with its own
// Transport, and one Breaker and Guard per operation (payrouter.Operations). Update swaps in a new
// configuration while calls go on: lookups read the current DomainSet, and a call keeps the Guard
// it started with.
type Domains struct {
	obs Observer
	cur atomic.Pointer[DomainSet]
	// mu orders Updates and the hooks registered with OnUpdate.
	mu    sync.Mutex
	hooks []func(*DomainSet)
	// keyShare is SetKeyShare's share, given to every bulkhead made after it; guarded by mu.
	keyShare float64
}

// DomainSet is one configuration's failure domains; it never changes. Gateways removed by an
// Update stay in it as retired: no route or pin reaches them, no prober probes them and no list
// shows them, but the capture, void, refund and look-up of charges they hold still go through
// their guards until the process restarts.
type DomainSet struct {
	gateways []*gatewayDomain          // live, in the order given
	byName   map[string]*gatewayDomain // live and retired
}

type gatewayDomain struct {
	settings  GatewaySettings
	retired   bool
	bulkhead  *Bulkhead
	transport *http.Transport
	client    *http.Client
	// probeTransport and probeClient are the out-of-band prober's own pool (docs/architecture.md,
	// Breakers): a customer pool full of calls to a busy gateway must not fail its probe.
	probeTransport *http.Transport
	probeClient    *http.Client
	guards         []*Guard // in payrouter.Operations order
}

// NewDomains builds the failure domains of gateways; obs nil is NopObserver. It panics on an
// empty or repeated gateway name, which config refuses before.
func NewDomains(gateways []GatewaySettings, obs Observer) *Domains {
	if obs == nil {
		obs = NopObserver{}
	}
	d := &Domains{obs: obs, keyShare: 1}
	set, _, err := d.build(&DomainSet{byName: map[string]*gatewayDomain{}}, gateways)
	if err != nil {
		panic("resilience: " + err.Error())
	}
	d.cur.Store(set)
	return d
}

// UpdateReport says what an Update did to each gateway.
type UpdateReport struct {
	// Added are new gateways; Changed those whose settings differ (Update says which parts
	// started afresh in Renewed); Removed are retired; Kept are untouched.
	Added, Changed, Removed, Kept []string
	// Renewed lists, for each changed gateway, the parts that started afresh: "breakers" (state
	// and counts), "bulkhead", "connections". A part not listed kept its state.
	Renewed map[string][]string
}

// Update makes gateways the live set. A gateway with the same settings keeps its domain as it
// is. A changed one gets new guards (its timeouts), and keeps each part whose own settings did not
// change: its breakers (state, counts and forced state) unless the breaker rules or the endpoint
// changed (new rules on the same endpoint keep a forced state and an opening still running:
// carryOver), its bulkhead (and the calls holding slots) unless its size or wait changed, its
// connection pool unless the endpoint, size or dial timeout changed. Calls under way finish on
// the guard they started with. Removed gateways are retired (see DomainSet). The hooks of
// OnUpdate see the new set before any call does.
func (d *Domains) Update(gateways []GatewaySettings) (UpdateReport, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	set, report, err := d.build(d.cur.Load(), gateways)
	if err != nil {
		return UpdateReport{}, err
	}
	for _, h := range d.hooks {
		h(set)
	}
	// Only the live gateways' bulkheads report their use: one replaced, or of a gateway
	// retired, would otherwise set the gateway's gauges back to its old size as its last calls end.
	live := map[*Bulkhead]bool{}
	for _, gd := range set.gateways {
		live[gd.bulkhead] = true
		gd.bulkhead.quiet.Store(false)
	}
	pools := map[*http.Transport]bool{}
	for _, gd := range set.byName {
		pools[gd.transport], pools[gd.probeTransport] = true, true
	}
	prev := d.cur.Load()
	for _, gd := range prev.byName {
		if !live[gd.bulkhead] {
			gd.bulkhead.quiet.Store(true)
		}
	}
	d.cur.Store(set)
	// A pool replaced (a new endpoint, size or TLS configuration: a rotated client certificate)
	// lets its idle connections go now rather than after idleConnTimeout; calls under way on it
	// finish on their connections.
	for _, gd := range prev.byName {
		for _, tr := range []*http.Transport{gd.transport, gd.probeTransport} {
			if !pools[tr] {
				tr.CloseIdleConnections()
			}
		}
	}
	return report, nil
}

// SetKeyShare sets the share of each gateway's bulkhead one API key scope may hold
// (Bulkhead.SetKeyShare) on every gateway, now and after every Update; 1: no limit.
func (d *Domains) SetKeyShare(share float64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.keyShare = share
	for _, gd := range d.cur.Load().byName {
		gd.bulkhead.SetKeyShare(share)
	}
}

// OnUpdate registers fn to see every new set before it is used (the Fleet links new breakers).
func (d *Domains) OnUpdate(fn func(*DomainSet)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hooks = append(d.hooks, fn)
}

// Current returns the set in use now.
func (d *Domains) Current() *DomainSet { return d.cur.Load() }

// build returns the set of gateways, reusing what it can of prev.
func (d *Domains) build(prev *DomainSet, gateways []GatewaySettings) (*DomainSet, UpdateReport, error) {
	set := &DomainSet{byName: make(map[string]*gatewayDomain, len(gateways))}
	report := UpdateReport{Renewed: map[string][]string{}}
	for _, s := range gateways {
		if s.Name == "" {
			return nil, UpdateReport{}, errors.New("a gateway without a name")
		}
		if _, dup := set.byName[s.Name]; dup {
			return nil, UpdateReport{}, fmt.Errorf("gateway %s given twice", s.Name)
		}
		s = s.withDefaults()
		old := prev.byName[s.Name]
		var gd *gatewayDomain
		switch {
		case old == nil:
			gd = d.newGatewayDomain(s, nil)
			report.Added = append(report.Added, s.Name)
		case !old.retired && sameSettings(old.settings, s):
			gd = old
			report.Kept = append(report.Kept, s.Name)
		default: // changed, or retired and back
			gd = d.newGatewayDomain(s, old)
			report.Changed = append(report.Changed, s.Name)
			report.Renewed[s.Name] = gd.renewedFrom(old)
		}
		set.gateways = append(set.gateways, gd)
		set.byName[s.Name] = gd
	}
	for name, old := range prev.byName {
		if set.byName[name] != nil {
			continue
		}
		if !old.retired {
			report.Removed = append(report.Removed, name)
			retired := *old
			retired.retired = true
			old = &retired
		}
		set.byName[name] = old
	}
	slices.Sort(report.Removed)
	return set, report, nil
}

// newGatewayDomain builds a gateway's domain, taking from old (nil: none) each part whose own
// settings are the same.
func (d *Domains) newGatewayDomain(s GatewaySettings, old *gatewayDomain) *gatewayDomain {
	gd := &gatewayDomain{settings: s}
	var o GatewaySettings
	if old != nil {
		o = old.settings
	}
	if old != nil && o.MaxConcurrent == s.MaxConcurrent && o.MaxWait == s.MaxWait {
		gd.bulkhead = old.bulkhead
	} else {
		gd.bulkhead = NewBulkhead(s.Name, s.MaxConcurrent, s.MaxWait, d.obs)
		gd.bulkhead.SetKeyShare(d.keyShare)
	}
	sameTLS := old != nil && o.Endpoint == s.Endpoint && o.TLSFingerprint == s.TLSFingerprint
	if sameTLS && o.MaxConcurrent == s.MaxConcurrent && o.DialTimeout == s.DialTimeout {
		gd.transport, gd.client = old.transport, old.client
	} else {
		gd.transport = newTransport(s, s.MaxConcurrent)
		// gatewayhttp.NewClient: no redirect is followed, and no Client.Timeout (every call
		// carries the Guard's deadline). Trace context on every call: propagate.go.
		gd.client = gatewayhttp.NewClient(propagate(gd.transport))
	}
	if sameTLS && o.DialTimeout == s.DialTimeout {
		gd.probeTransport, gd.probeClient = old.probeTransport, old.probeClient
	} else {
		gd.probeTransport = newTransport(s, probeConns)
		gd.probeClient = gatewayhttp.NewClient(gd.probeTransport)
	}
	keepBreakers := old != nil && o.Endpoint == s.Endpoint && o.Breaker.machine() == s.Breaker.machine()
	for i, op := range payrouter.Operations {
		var b *Breaker
		switch {
		case keepBreakers:
			b = old.guards[i].breaker
		case old != nil && o.Endpoint == s.Endpoint:
			b = NewBreaker(s.Name, op, s.Breaker, d.obs)
			carryOver(b, old.guards[i].breaker)
		default:
			b = NewBreaker(s.Name, op, s.Breaker, d.obs)
		}
		gd.guards = append(gd.guards, NewGuard(b, gd.bulkhead, s.TimeoutFor(op), d.obs))
	}
	return gd
}

// carryOver gives a breaker made afresh for new rules what was decided about the same endpoint
// under the old ones: a forced state (ops took the gateway out; new rules must not put it back),
// and an opening still running, until its open_until. Counts start over. A new endpoint carries
// nothing: the breaker measured another server.
func carryOver(b, old *Breaker) {
	if f := old.Snapshot().Forced; f != payrouter.ForcedNone {
		b.Force(f)
	}
	if until, c, open := old.ownOpen(); open {
		b.fleetOpened(time.Until(until), c)
	}
}

// renewedFrom names the parts of gd that are not old's.
func (gd *gatewayDomain) renewedFrom(old *gatewayDomain) []string {
	var out []string
	if gd.guards[0].breaker != old.guards[0].breaker {
		out = append(out, "breakers")
	}
	if gd.bulkhead != old.bulkhead {
		out = append(out, "bulkhead")
	}
	if gd.transport != old.transport {
		out = append(out, "connections")
	}
	return out
}

// sameSettings reports whether two gateways' settings are the same; TLS is compared through
// TLSFingerprint (two loads of the same files build equal but distinct *tls.Config values).
func sameSettings(a, b GatewaySettings) bool {
	a.TLS, b.TLS = nil, nil
	return reflect.DeepEqual(a, b)
}

// newTransport returns a transport of a gateway's own: its own connection pool of conns
// connections (the bulkhead's size for customer calls), so that one gateway's connections never
// wait behind another's, and its TLS settings. The customer pool and the prober's both come from
// here.
func newTransport(s GatewaySettings, conns int) *http.Transport {
	dialer := &net.Dialer{Timeout: s.DialTimeout, KeepAlive: 30 * time.Second}
	tlsConfig := gatewayhttp.DefaultTLSConfig()
	if s.TLS != nil {
		tlsConfig = s.TLS.Clone() // each transport its own: net/http adds its ALPN protocols to it
	}
	return &http.Transport{
		// Gateways are reached directly: an HTTP_PROXY in the environment must not reroute
		// payments.
		Proxy:               nil,
		DialContext:         dialer.DialContext,
		ForceAttemptHTTP2:   true,
		TLSClientConfig:     tlsConfig,
		MaxConnsPerHost:     conns, // the bulkhead already bounds the calls in flight
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns, // the default 2 would redial under any real load
		IdleConnTimeout:     idleConnTimeout,
		TLSHandshakeTimeout: tlsHandshakeTimeout,
	}
}

// Guard returns the guard of "<gateway>/<op>" in the current set (retired gateways included),
// nil if unknown.
func (d *Domains) Guard(gateway string, op payrouter.Operation) *Guard {
	return d.Current().Guard(gateway, op)
}

// Breaker returns the current breaker of "<gateway>/<op>", nil if unknown.
func (d *Domains) Breaker(gateway string, op payrouter.Operation) *Breaker {
	return d.Current().Breaker(gateway, op)
}

// Bulkhead returns the gateway's current bulkhead, nil if unknown.
func (d *Domains) Bulkhead(gateway string) *Bulkhead { return d.Current().Bulkhead(gateway) }

// Client returns the gateway's current http.Client, nil if unknown.
func (d *Domains) Client(gateway string) *http.Client { return d.Current().Client(gateway) }

// ProbeClient returns the gateway's current probe client (DomainSet.ProbeClient), nil if unknown.
func (d *Domains) ProbeClient(gateway string) *http.Client { return d.Current().ProbeClient(gateway) }

// Settings returns the gateway's current settings with defaults applied.
func (d *Domains) Settings(gateway string) (GatewaySettings, bool) {
	return d.Current().Settings(gateway)
}

// Live reports whether gateway is configured now (not retired, not unknown).
func (d *Domains) Live(gateway string) bool { return d.Current().Live(gateway) }

// Gateways returns the live gateways' names in the order given.
func (d *Domains) Gateways() []string { return d.Current().Gateways() }

// Snapshots returns every live breaker (DomainSet.Snapshots).
func (d *Domains) Snapshots() []Snapshot { return d.Current().Snapshots() }

// Close closes the idle connections of every gateway's transport, retired ones included.
func (d *Domains) Close() {
	for _, gd := range d.Current().byName {
		gd.transport.CloseIdleConnections()
		gd.probeTransport.CloseIdleConnections()
	}
}

// Guard returns the guard of "<gateway>/<op>", nil if unknown.
func (s *DomainSet) Guard(gateway string, op payrouter.Operation) *Guard {
	gd := s.byName[gateway]
	if gd == nil {
		return nil
	}
	for _, g := range gd.guards {
		if g.op == op {
			return g
		}
	}
	return nil
}

// Breaker returns the breaker of "<gateway>/<op>", nil if unknown.
func (s *DomainSet) Breaker(gateway string, op payrouter.Operation) *Breaker {
	if g := s.Guard(gateway, op); g != nil {
		return g.breaker
	}
	return nil
}

// Bulkhead returns the gateway's bulkhead, nil if unknown.
func (s *DomainSet) Bulkhead(gateway string) *Bulkhead {
	if gd := s.byName[gateway]; gd != nil {
		return gd.bulkhead
	}
	return nil
}

// Client returns the gateway's http.Client for its adapter, nil if unknown. It has no timeout of
// its own: the Guard gives every call a context deadline.
func (s *DomainSet) Client(gateway string) *http.Client {
	if gd := s.byName[gateway]; gd != nil {
		return gd.client
	}
	return nil
}

// ProbeClient returns the http.Client of the gateway's out-of-band probes, on a connection pool
// of its own with the gateway's TLS settings, nil if unknown.
func (s *DomainSet) ProbeClient(gateway string) *http.Client {
	if gd := s.byName[gateway]; gd != nil {
		return gd.probeClient
	}
	return nil
}

// Settings returns the gateway's settings with defaults applied (for /admin/gateways).
func (s *DomainSet) Settings(gateway string) (GatewaySettings, bool) {
	if gd := s.byName[gateway]; gd != nil {
		return gd.settings, true
	}
	return GatewaySettings{}, false
}

// Live reports whether gateway is in the set and not retired.
func (s *DomainSet) Live(gateway string) bool {
	gd := s.byName[gateway]
	return gd != nil && !gd.retired
}

// Gateways returns the live gateways' names in the order given.
func (s *DomainSet) Gateways() []string {
	names := make([]string, len(s.gateways))
	for i, gd := range s.gateways {
		names[i] = gd.settings.Name
	}
	return names
}

// Snapshots returns every live breaker, gateways in the order given, then operations in
// payrouter.Operations order.
func (s *DomainSet) Snapshots() []Snapshot {
	out := make([]Snapshot, 0, len(s.gateways)*len(payrouter.Operations))
	for _, gd := range s.gateways {
		for _, g := range gd.guards {
			out = append(out, g.breaker.Snapshot())
		}
	}
	return out
}
