package telemetry

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/payrouter/payrouter/listener"
)

// Listener label values: the storefront listener (listen) and the admin listener (admin_listen).
const (
	ListenerStorefront = "storefront"
	ListenerAdmin      = "admin"
)

// connections exports what each listener's cap on connections and per-address share do
// (docs/limits.md, Connections).
type connections struct {
	open    *prometheus.GaugeVec
	closed  *prometheus.CounterVec
	refused *prometheus.CounterVec

	mu      sync.Mutex
	sources map[string]func() int // a listener's count of open connections, read at each scrape
}

func newConnections() *connections {
	c := &connections{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "payrouter_connections_open",
			Help: "Connections the listener holds open now, counted against max_connections (admin_max_connections).",
		}, []string{"listener"}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrouter_connections_closed_for_room_total",
			Help: "Connections closed to make room for a new one, by reason (max_connections: the listener was full; address_share: the new connection's own address held max_connections_per_address) and state (awaiting_head: it had not sent a whole request head; idle: a keep-alive connection with nothing sent since its last answer). A connection serving a request is never closed for room.",
		}, []string{"listener", "reason", "state"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrouter_connections_refused_total",
			Help: "New connections closed at once, before anything was read, because their client address held max_connections_per_address connections, each serving a request.",
		}, []string{"listener"}),
		sources: map[string]func() int{},
	}
	for _, l := range []string{ListenerStorefront, ListenerAdmin} {
		c.open.WithLabelValues(l)
		c.refused.WithLabelValues(l)
		for _, r := range []string{listener.ReasonMaxConnections, listener.ReasonAddressShare} {
			for _, s := range []string{listener.StateAwaitingHead, listener.StateIdle} {
				c.closed.WithLabelValues(l, r, s)
			}
		}
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *connections) Describe(ch chan<- *prometheus.Desc) {
	c.open.Describe(ch)
	c.closed.Describe(ch)
	c.refused.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *connections) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	for l, open := range c.sources {
		c.open.WithLabelValues(l).Set(float64(open()))
	}
	c.mu.Unlock()
	c.open.Collect(ch)
	c.closed.Collect(ch)
	c.refused.Collect(ch)
}

// WatchConnections exports open, the count of connections a listener (ListenerStorefront or
// ListenerAdmin) holds, read at each scrape as payrouter_connections_open.
func (m *Metrics) WatchConnections(listener string, open func() int) {
	m.connections.mu.Lock()
	defer m.connections.mu.Unlock()
	m.connections.sources[listener] = open
}

// Connections returns the listener.Observer of a listener (ListenerStorefront or
// ListenerAdmin): it counts the connections closed to make room and those refused.
func (m *Metrics) Connections(listener string) ConnectionCounter {
	return ConnectionCounter{c: m.connections, listener: listener}
}

// ConnectionCounter counts what one listener's cap and per-address share do to connections.
type ConnectionCounter struct {
	c        *connections
	listener string
}

// ConnectionClosedForRoom implements listener.Observer.
func (o ConnectionCounter) ConnectionClosedForRoom(reason, state string) {
	o.c.closed.WithLabelValues(o.listener, reason, state).Inc()
}

// ConnectionRefused implements listener.Observer.
func (o ConnectionCounter) ConnectionRefused() {
	o.c.refused.WithLabelValues(o.listener).Inc()
}

var _ listener.Observer = ConnectionCounter{}
