package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/payrouter/payrouter/webhooks"
)

// The storefront webhooks' collectors (docs/metrics.md, Webhooks). Metrics implements
// webhooks.Observer.

// webhookLatencyBuckets reach from an event delivered at once to one delivered at the end of
// Standard Webhooks' schedule, about 27 hours later.
var webhookLatencyBuckets = []float64{.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200, 18000, 36000, 100000}

func (m *Metrics) newWebhookMetrics() []prometheus.Collector {
	m.webhookDispatched = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "payrouter_webhook_dispatched_total",
		Help: "Webhook deliveries queued, one per event and endpoint subscribed to its type, whichever instance made the change.",
	}, []string{"endpoint"})
	m.webhookDeliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "payrouter_webhook_deliveries_total",
		Help: "Webhook delivery attempts by how they ended: delivered (2xx), retried (failed; another attempt is scheduled), dead_lettered (failed with none left, or its endpoint disabled), disabled (the endpoint answered 410 Gone and is disabled).",
	}, []string{"endpoint", "result"})
	m.webhookLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "payrouter_webhook_delivery_latency_seconds",
		Help:    "From an event written to its delivery's 2xx, retries included: how late the storefront hears of a change.",
		Buckets: webhookLatencyBuckets,
	}, []string{"endpoint"})
	m.webhookAttemptDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "payrouter_webhook_attempt_duration_seconds",
		Help:    "Duration of webhook delivery attempts that got an answer or timed out, by endpoint.",
		Buckets: gatewayBuckets,
	}, []string{"endpoint"})
	m.webhookInFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "payrouter_webhook_in_flight",
		Help: "Webhook attempts holding one of the endpoint's bulkhead slots (max_concurrent) on this instance now.",
	}, []string{"endpoint"})
	m.webhookDisabled = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "payrouter_webhook_endpoint_disabled",
		Help: "1 while the endpoint is disabled (it answered 410 Gone at its configured URL), else 0.",
	}, []string{"endpoint"})
	m.webhookBacklog = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "payrouter_webhook_backlog",
		Help: "Webhook deliveries by state: queued (waiting for an attempt, or for the next one), dead_letter (given up; GET /admin/webhooks lists them). The fleet's, as the store holds them.",
	}, []string{"state"})
	m.webhookBacklog.WithLabelValues("queued")
	m.webhookBacklog.WithLabelValues("dead_letter")
	return []prometheus.Collector{m.webhookDispatched, m.webhookDeliveries, m.webhookLatency, m.webhookAttemptDuration,
		m.webhookInFlight, m.webhookDisabled, m.webhookBacklog}
}

// InitWebhookEndpoints shows each named endpoint's series at 0 from the start (an alert's
// rate() needs them before the first delivery), and forgets those of endpoints no longer
// configured.
func (m *Metrics) InitWebhookEndpoints(names, removed []string) {
	for _, name := range removed {
		for _, v := range []interface {
			DeletePartialMatch(prometheus.Labels) int
		}{m.webhookDispatched, m.webhookDeliveries, m.webhookLatency, m.webhookAttemptDuration, m.webhookInFlight, m.webhookDisabled} {
			v.DeletePartialMatch(prometheus.Labels{"endpoint": name})
		}
	}
	for _, name := range names {
		m.webhookDispatched.WithLabelValues(name)
		for _, r := range webhooks.Results {
			m.webhookDeliveries.WithLabelValues(name, r)
		}
		m.webhookInFlight.WithLabelValues(name)
		m.webhookDisabled.WithLabelValues(name)
	}
}

// Dispatched implements webhooks.Observer.
func (m *Metrics) Dispatched(endpoint string, n int) {
	m.webhookDispatched.WithLabelValues(endpoint).Add(float64(n))
}

// Attempted implements webhooks.Observer.
func (m *Metrics) Attempted(endpoint, result string, took, latency time.Duration) {
	m.webhookDeliveries.WithLabelValues(endpoint, result).Inc()
	if took > 0 {
		m.webhookAttemptDuration.WithLabelValues(endpoint).Observe(took.Seconds())
	}
	if result == webhooks.ResultDelivered {
		m.webhookLatency.WithLabelValues(endpoint).Observe(max(latency, 0).Seconds())
	}
}

// InFlight implements webhooks.Observer.
func (m *Metrics) InFlight(endpoint string, n int) {
	m.webhookInFlight.WithLabelValues(endpoint).Set(float64(n))
}

// EndpointDisabled implements webhooks.Observer.
func (m *Metrics) EndpointDisabled(endpoint string, disabled bool) {
	v := 0.0
	if disabled {
		v = 1
	}
	m.webhookDisabled.WithLabelValues(endpoint).Set(v)
}

// Backlog implements webhooks.Observer.
func (m *Metrics) Backlog(queued, dead int64) {
	m.webhookBacklog.WithLabelValues("queued").Set(float64(queued))
	m.webhookBacklog.WithLabelValues("dead_letter").Set(float64(dead))
}
