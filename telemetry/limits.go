package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Reasons of payrouter_rate_limited_total.
const (
	LimitKeyRate         = "key_rate"         // an API key over limits.requests_per_second: 429
	LimitKeyConcurrency  = "key_concurrency"  // an API key holding its share of a gateway's bulkhead: that gateway passed as bulkhead_full
	LimitAuthFailures    = "auth_failures"    // an address over limits.auth_failures_per_minute: 429
	LimitKeyMemory       = "key_memory"       // an API key holding its share of state.max_memory: 503
	LimitWebhookFailures = "webhook_failures" // an address over limits.auth_failures_per_minute of failed gateway webhook calls: 429
)

func newRateLimited() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "payrouter_rate_limited_total",
		Help: "Requests refused by a limit (docs/limits.md), by reason: key_rate (an API key over its rate: 429), key_concurrency (an attempt refused at a gateway because its API key held its share of the bulkhead), auth_failures (a client address over its failed authentications: 429), key_memory (an API key holding its share of state.max_memory: 503), webhook_failures (a client address over its failed gateway webhook calls: 429).",
	}, []string{"reason"})
	for _, r := range []string{LimitKeyRate, LimitKeyConcurrency, LimitAuthFailures, LimitKeyMemory, LimitWebhookFailures} {
		c.WithLabelValues(r)
	}
	return c
}

// RateLimited counts a request refused by a limit, by reason (LimitKeyRate, ...).
func (m *Metrics) RateLimited(reason string) { m.rateLimited.WithLabelValues(reason).Inc() }

// KeyShareRejected counts an attempt refused because its API key held its share of the
// gateway's bulkhead (resilience.KeyShareObserver).
func (m *Metrics) KeyShareRejected(string) { m.RateLimited(LimitKeyConcurrency) }

// MemoryStore is what WatchMemoryStore reads of the in-memory money store (memstore.Store).
type MemoryStore interface {
	ChargesLen() int
	Evicted() int64
	Bytes() int64
	MaxBytesPerOwner() int64
}

// WatchMemoryStore exports the in-memory store's bounds, read at each scrape:
// payrouter_memstore_charges (charges held now), payrouter_memstore_bytes (what it holds, as its
// quotas count it), payrouter_memstore_key_limit_bytes (each API key's share of
// state.max_memory) and payrouter_memstore_evictions_total (final charges dropped for
// state.retention or to make room in their key's share). Call it once, when the money state is
// in memory.
func (m *Metrics) WatchMemoryStore(s MemoryStore) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "payrouter_memstore_charges",
			Help: "Charges the in-memory store holds now, final or not.",
		}, func() float64 { return float64(s.ChargesLen()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "payrouter_memstore_bytes",
			Help: "Bytes the in-memory store holds now, as state.max_memory counts them: every key's charges (with refunds and events) and Idempotency-Keys (with answers).",
		}, func() float64 { return float64(s.Bytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "payrouter_memstore_key_limit_bytes",
			Help: "Each API key's share of state.max_memory: the most bytes one key's charges and Idempotency-Keys may hold (0: no bound).",
		}, func() float64 { return float64(s.MaxBytesPerOwner()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "payrouter_memstore_evictions_total",
			Help: "Final charges the in-memory store dropped, with their refunds: older than state.retention, or the oldest holding no money of a key at its share of state.max_memory.",
		}, func() float64 { return float64(s.Evicted()) }),
	)
}
