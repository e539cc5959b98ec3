package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of payrouter_rate_limited_total.
const (
	LimitKeyRate        = "key_rate"        // an API key over limits.requests_per_second: 429
	LimitKeyConcurrency = "key_concurrency" // an API key holding its share of a gateway's bulkhead: that gateway passed as bulkhead_full
	LimitAuthFailures   = "auth_failures"   // an address over limits.auth_failures_per_minute: 429
)

func newRateLimited() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "payrouter_rate_limited_total",
		Help: "Requests refused by a limit (docs/limits.md), by reason: key_rate (an API key over its rate: 429), key_concurrency (an attempt refused at a gateway because its API key held its share of the bulkhead), auth_failures (a client address over its failed authentications: 429).",
	}, []string{"reason"})
	for _, r := range []string{LimitKeyRate, LimitKeyConcurrency, LimitAuthFailures} {
		c.WithLabelValues(r)
	}
	return c
}

// RateLimited counts a request refused by a limit, by reason (LimitKeyRate, ...).
func (m *Metrics) RateLimited(reason string) { m.rateLimited.WithLabelValues(reason).Inc() }

// KeyShareRejected counts an attempt refused because its API key held its share of the
// gateway's bulkhead (resilience.KeyShareObserver).
func (m *Metrics) KeyShareRejected(string) { m.RateLimited(LimitKeyConcurrency) }

// WatchMemoryStore exports the in-memory store's bounds, read at each scrape:
// payrouter_memstore_charges (charges held now) and payrouter_memstore_evictions_total (final
// charges dropped for state.retention or state.max_charges). Call it once, when the money
// state is in memory.
func (m *Metrics) WatchMemoryStore(charges, evicted func() float64) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "payrouter_memstore_charges",
			Help: "Charges the in-memory store holds now, final or not; at most state.max_charges.",
		}, charges),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "payrouter_memstore_evictions_total",
			Help: "Final charges the in-memory store dropped, with their refunds: older than state.retention, or the oldest beyond state.max_charges.",
		}, evicted),
	)
}
