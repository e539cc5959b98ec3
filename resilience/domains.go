package resilience

import (
	"net"
	"net/http"
	"time"

	"github.com/payrouter/payrouter"
)

// Defaults of GatewaySettings, the same as config's where config has them.
const (
	DefaultTimeout       = 3 * time.Second
	DefaultMaxConcurrent = 20
	// DefaultDialTimeout is short because a gateway that cannot take a connection has not seen
	// the request: failing the dial early gives an honest unavailable (safe to fail over) instead
	// of a timeout (which may have charged).
	DefaultDialTimeout = 2 * time.Second
	// tlsHandshakeTimeout bounds the handshake on its own for the same reason; the context
	// deadline bounds it anyway.
	tlsHandshakeTimeout = 5 * time.Second
	idleConnTimeout     = 90 * time.Second
)

// GatewaySettings holds one gateway's failure-domain settings.
type GatewaySettings struct {
	Name string
	// Timeout bounds each call; 0: DefaultTimeout.
	Timeout time.Duration
	// Timeouts overrides Timeout per operation (missing or 0: Timeout).
	Timeouts map[payrouter.Operation]time.Duration
	// MaxConcurrent is the bulkhead's slots, shared by the gateway's operations; 0:
	// DefaultMaxConcurrent.
	MaxConcurrent int
	// MaxWait is the longest a call waits for a slot; 0: it does not wait.
	MaxWait time.Duration
	// DialTimeout bounds connecting to the gateway; 0: DefaultDialTimeout.
	DialTimeout time.Duration
	// Breaker holds the rules of the gateway's breakers, one per operation.
	Breaker BreakerSettings
	// ProbeInterval is how often the Prober calls the gateway's health endpoint when
	// Breaker.OutOfBand; 0: DefaultProbeInterval.
	ProbeInterval time.Duration
	// ProbeTimeout bounds each probe; 0: DefaultProbeTimeout, at most ProbeInterval.
	ProbeTimeout time.Duration
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
	if s.ProbeInterval <= 0 {
		s.ProbeInterval = DefaultProbeInterval
	}
	if s.ProbeTimeout <= 0 {
		s.ProbeTimeout = DefaultProbeTimeout
	}
	s.ProbeTimeout = min(s.ProbeTimeout, s.ProbeInterval)
	s.Breaker = s.Breaker.withDefaults()
	return s
}

// TimeoutFor returns the timeout of one operation.
func (s GatewaySettings) TimeoutFor(op payrouter.Operation) time.Duration {
	if t := s.Timeouts[op]; t > 0 {
		return t
	}
	return s.Timeout
}

// Domains holds every failure domain: for each gateway a bulkhead, an http.Client with its own
// Transport, and one Breaker and Guard per operation (payrouter.Operations).
type Domains struct {
	gateways []*gatewayDomain // in the order given
	byName   map[string]*gatewayDomain
}

type gatewayDomain struct {
	settings  GatewaySettings
	bulkhead  *Bulkhead
	transport *http.Transport
	client    *http.Client
	guards    []*Guard // in payrouter.Operations order
}

// NewDomains builds the failure domains of gateways; obs nil is NopObserver. It panics on an
// empty or repeated gateway name, which config refuses before.
func NewDomains(gateways []GatewaySettings, obs Observer) *Domains {
	if obs == nil {
		obs = NopObserver{}
	}
	d := &Domains{byName: make(map[string]*gatewayDomain, len(gateways))}
	for _, s := range gateways {
		if s.Name == "" {
			panic("resilience: a gateway without a name")
		}
		if _, dup := d.byName[s.Name]; dup {
			panic("resilience: gateway " + s.Name + " given twice")
		}
		s = s.withDefaults()
		gd := &gatewayDomain{
			settings:  s,
			bulkhead:  NewBulkhead(s.Name, s.MaxConcurrent, s.MaxWait, obs),
			transport: newTransport(s),
		}
		// No Client.Timeout: every call carries the Guard's deadline, and a client-wide timeout
		// would fire the same for every operation.
		gd.client = &http.Client{Transport: gd.transport}
		for _, op := range payrouter.Operations {
			b := NewBreaker(s.Name, op, s.Breaker, obs)
			gd.guards = append(gd.guards, NewGuard(b, gd.bulkhead, s.TimeoutFor(op), obs))
		}
		d.gateways = append(d.gateways, gd)
		d.byName[s.Name] = gd
	}
	return d
}

// newTransport returns a gateway's own transport: its own connection pool, sized to its bulkhead,
// so that one gateway's connections never wait behind another's.
func newTransport(s GatewaySettings) *http.Transport {
	dialer := &net.Dialer{Timeout: s.DialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		// Gateways are reached directly: an HTTP_PROXY in the environment must not reroute
		// payments.
		Proxy:               nil,
		DialContext:         dialer.DialContext,
		ForceAttemptHTTP2:   true,
		MaxConnsPerHost:     s.MaxConcurrent, // the bulkhead already bounds the calls in flight
		MaxIdleConns:        s.MaxConcurrent,
		MaxIdleConnsPerHost: s.MaxConcurrent, // the default 2 would redial under any real load
		IdleConnTimeout:     idleConnTimeout,
		TLSHandshakeTimeout: tlsHandshakeTimeout,
	}
}

func (d *Domains) guard(gateway string, op payrouter.Operation) *Guard {
	gd := d.byName[gateway]
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

// Guard returns the guard of "<gateway>/<op>", nil if unknown.
func (d *Domains) Guard(gateway string, op payrouter.Operation) *Guard {
	return d.guard(gateway, op)
}

// Breaker returns the breaker of "<gateway>/<op>", nil if unknown.
func (d *Domains) Breaker(gateway string, op payrouter.Operation) *Breaker {
	if g := d.guard(gateway, op); g != nil {
		return g.breaker
	}
	return nil
}

// Bulkhead returns the gateway's bulkhead, nil if unknown.
func (d *Domains) Bulkhead(gateway string) *Bulkhead {
	if gd := d.byName[gateway]; gd != nil {
		return gd.bulkhead
	}
	return nil
}

// Client returns the gateway's http.Client for its adapter, nil if unknown. It has no timeout of
// its own: the Guard gives every call a context deadline.
func (d *Domains) Client(gateway string) *http.Client {
	if gd := d.byName[gateway]; gd != nil {
		return gd.client
	}
	return nil
}

// Settings returns the gateway's settings with defaults applied (for /admin/gateways).
func (d *Domains) Settings(gateway string) (GatewaySettings, bool) {
	if gd := d.byName[gateway]; gd != nil {
		return gd.settings, true
	}
	return GatewaySettings{}, false
}

// Gateways returns the gateways' names in the order given.
func (d *Domains) Gateways() []string {
	names := make([]string, len(d.gateways))
	for i, gd := range d.gateways {
		names[i] = gd.settings.Name
	}
	return names
}

// Snapshots returns every breaker, gateways in the order given, then operations in
// payrouter.Operations order.
func (d *Domains) Snapshots() []Snapshot {
	out := make([]Snapshot, 0, len(d.gateways)*len(payrouter.Operations))
	for _, gd := range d.gateways {
		for _, g := range gd.guards {
			out = append(out, g.breaker.Snapshot())
		}
	}
	return out
}

// Close closes the idle connections of every gateway's transport.
func (d *Domains) Close() {
	for _, gd := range d.gateways {
		gd.transport.CloseIdleConnections()
	}
}
