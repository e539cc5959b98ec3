// Package telemetry is payrouter's view from outside: the Prometheus collectors of
// docs/metrics.md on a registry of our own, and the slog set-up.
package telemetry

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/resilience"
)

// Metrics holds every collector payrouter exports. It implements resilience.Observer, so the
// guards report to it directly.
type Metrics struct {
	Registry *prometheus.Registry

	breakerState       *prometheus.GaugeVec
	breakerFailures    *prometheus.CounterVec
	breakerTransitions *prometheus.CounterVec
	breakerRejections  *prometheus.CounterVec
	breakerInfo        *breakerInfo
	reloads            *reloadInfo
	gatewayDuration    *prometheus.HistogramVec
	bulkheadInFlight   *prometheus.GaugeVec
	bulkheadCapacity   *prometheus.GaugeVec
	bulkheadRejections *prometheus.CounterVec
	charges            *prometheus.CounterVec
	fallbacks          *prometheus.CounterVec
	hedges             *prometheus.CounterVec
	queueDepth         *prometheus.GaugeVec
	reconciled         *prometheus.HistogramVec
	tasksNotQueued     *prometheus.CounterVec
	httpDuration       *prometheus.HistogramVec
	stateStoreUp       prometheus.Gauge
	databaseUp         prometheus.Gauge
	probeUp            *prometheus.GaugeVec
	probes             *prometheus.CounterVec
	probeDuration      *prometheus.HistogramVec
	authFailures       *prometheus.CounterVec
	rateLimited        *prometheus.CounterVec // limits.go
	coordinationErrors *prometheus.CounterVec // coordination.go
	connections        *connections           // connections.go
	logDrops           *logDrops              // logsink.go

	// webhooks.go
	webhookDispatched      *prometheus.CounterVec
	webhookDeliveries      *prometheus.CounterVec
	webhookLatency         *prometheus.HistogramVec
	webhookAttemptDuration *prometheus.HistogramVec
	webhookInFlight        *prometheus.GaugeVec
	webhookDisabled        *prometheus.GaugeVec
	webhookBacklog         *prometheus.GaugeVec
	gatewayWebhooks        *prometheus.CounterVec
}

// gatewayBuckets reach from a fast local answer to a gateway sitting at a 20-second timeout.
var gatewayBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30}

// NewMetrics registers every collector on a new registry, with the Go and process collectors.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		breakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "circuit_breaker_state",
			Help: "State of each breaker: 0 closed, 1 open, 2 half_open.",
		}, []string{"gateway", "operation"}),
		breakerFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "circuit_breaker_failures_total",
			Help: "Gateway calls that counted as failures against their breaker, by outcome (unavailable, timeout, unknown).",
		}, []string{"gateway", "operation", "outcome"}),
		breakerTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "circuit_breaker_transitions_total",
			Help: "Breaker state changes.",
		}, []string{"gateway", "operation", "from", "to"}),
		breakerRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "circuit_breaker_rejections_total",
			Help: "Calls refused without a network call because the breaker was open.",
		}, []string{"gateway", "operation"}),
		breakerInfo: newBreakerInfo(),
		rateLimited: newRateLimited(),
		connections: newConnections(),
		reloads:     newReloadInfo(),
		gatewayDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "payrouter_gateway_request_duration_seconds",
			Help:    "Duration of gateway calls, by outcome.",
			Buckets: gatewayBuckets,
		}, []string{"gateway", "operation", "outcome"}),
		bulkheadInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "payrouter_bulkhead_in_flight",
			Help: "Gateway calls holding a bulkhead slot now.",
		}, []string{"gateway"}),
		bulkheadCapacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "payrouter_bulkhead_capacity",
			Help: "Bulkhead slots of each gateway (max_concurrent).",
		}, []string{"gateway"}),
		bulkheadRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrouter_bulkhead_rejections_total",
			Help: "Calls refused because no bulkhead slot was free within max_wait.",
		}, []string{"gateway"}),
		charges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrouter_charges_total",
			Help: "Charges answered, by the gateway that decided them (none when no gateway took it) and status.",
		}, []string{"gateway", "status"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrouter_fallbacks_total",
			Help: "Operations answered by their fallback because no gateway could take them.",
		}, []string{"operation", "fallback"}),
		hedges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrouter_hedges_total",
			Help: "Hedged charges by result: won_primary, won_hedge (which attempt's approval was kept), voided (approvals voided because another won).",
		}, []string{"result"}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "payrouter_queue_depth",
			Help: "Tasks waiting in the durable queue (queued refunds, voids, rechecks of late approvals), not acknowledged yet.",
		}, []string{"queue"}),
		tasksNotQueued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrouter_tasks_not_queued_total",
			Help: "Tasks of money work that could not be queued, by kind: refund (not sent: the refund failed; its answer lost: it stays pending and refund.not_queued names it), void and recheck (an approval no charge keeps may stay held at its gateway: look at its ledger). Any increase needs ops.",
		}, []string{"kind"}),
		reconciled: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "payrouter_reconcile_duration_seconds",
			Help:    "How long processing charges took to become final, from creation to the reconciler's answer, by final status.",
			Buckets: []float64{1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600},
		}, []string{"status"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "payrouter_http_request_duration_seconds",
			Help:    "Duration of storefront API requests, by route and status code.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "code"}),
		stateStoreUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "payrouter_state_store_up",
			Help: "1 when Redis, the fleet's coordination store, answers; 0 while this instance's breakers decide alone (no money is affected).",
		}),
		databaseUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "payrouter_database_up",
			Help: "1 when the store holding money state answers; 0 while every money request answers 503 state-unavailable and no gateway is called.",
		}),
		probeUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "payrouter_probe_up",
			Help: "Out-of-band probes: 1 when the gateway's last health probe succeeded, 0 when it failed.",
		}, []string{"gateway"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrouter_probes_total",
			Help: "Out-of-band health probes, by gateway and result (healthy, failed).",
		}, []string{"gateway", "result"}),
		probeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "payrouter_probe_duration_seconds",
			Help:    "Duration of out-of-band health probes, by gateway.",
			Buckets: gatewayBuckets,
		}, []string{"gateway"}),
	}
	m.stateStoreUp.Set(1)
	m.databaseUp.Set(1)
	for _, r := range []string{"won_primary", "won_hedge", "voided"} {
		m.hedges.WithLabelValues(r) // shown at 0 from the start: a dashboard's rate() needs the series
	}
	m.queueDepth.WithLabelValues(TaskQueue)
	m.authFailures = newAuthFailures(reg)
	m.coordinationErrors = newCoordinationErrors(reg)
	m.logDrops = newLogDrops()
	reg.MustRegister(m.rateLimited, m.connections, m.logDrops)
	reg.MustRegister(m.newWebhookMetrics()...)
	m.gatewayWebhooks = newGatewayWebhooks()
	reg.MustRegister(m.gatewayWebhooks)
	reg.MustRegister(m.stateStoreUp, m.databaseUp, m.probeUp, m.probes, m.probeDuration,

		m.breakerState, m.breakerFailures, m.breakerTransitions, m.breakerRejections, m.breakerInfo, m.reloads,
		m.gatewayDuration, m.bulkheadInFlight, m.bulkheadCapacity, m.bulkheadRejections,
		m.charges, m.fallbacks, m.hedges, m.queueDepth, m.reconciled, m.tasksNotQueued, m.httpDuration,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// Shown at 0 from the start, so that an alert's increase() sees the first one.
	for _, kind := range []payrouter.TaskKind{payrouter.TaskRefund, payrouter.TaskVoid, payrouter.TaskRecheck} {
		m.tasksNotQueued.WithLabelValues(string(kind))
	}
	return m
}

// Handler serves the registry: in the Prometheus text format, or in OpenMetrics to a scraper
// that asks for it (Accept: application/openmetrics-text), which is the only format that shows
// the duration histograms' exemplars (observe).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry, EnableOpenMetrics: true})
}

// observe adds one observation to h. When ctx holds a sampled span the observation carries its
// trace id as an exemplar, so that a slow bucket on a dashboard leads to the trace of one of the
// calls in it; a span not sampled is not exported, and an exemplar would lead nowhere.
func observe(ctx context.Context, h prometheus.Observer, v float64) {
	sc := trace.SpanContextFromContext(ctx)
	if eo, ok := h.(prometheus.ExemplarObserver); ok && sc.IsSampled() {
		eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": sc.TraceID().String()})
		return
	}
	h.Observe(v)
}

// stateValue is the gauge value docs/metrics.md gives: 0 closed, 1 open, 2 half_open.
func stateValue(s resilience.State) float64 {
	switch s {
	case resilience.StateOpen:
		return 1
	case resilience.StateHalfOpen:
		return 2
	default:
		return 0
	}
}

// InitBreaker exports a breaker's state before anything happens to it, so that dashboards show
// every breaker from the first scrape.
func (m *Metrics) InitBreaker(gateway string, op payrouter.Operation, s resilience.State) {
	m.breakerState.WithLabelValues(gateway, string(op)).Set(stateValue(s))
}

// InitBulkhead exports a gateway's bulkhead capacity and an in-flight count of zero.
func (m *Metrics) InitBulkhead(gateway string, capacity int) {
	m.bulkheadCapacity.WithLabelValues(gateway).Set(float64(capacity))
	m.bulkheadInFlight.WithLabelValues(gateway).Set(0)
}

// BreakerTransition implements resilience.Observer.
func (m *Metrics) BreakerTransition(gateway string, op payrouter.Operation, from, to resilience.State, _ resilience.Counts, _ time.Duration) {
	m.breakerState.WithLabelValues(gateway, string(op)).Set(stateValue(to))
	m.breakerTransitions.WithLabelValues(gateway, string(op), string(from), string(to)).Inc()
}

// BreakerRejected implements resilience.Observer.
func (m *Metrics) BreakerRejected(gateway string, op payrouter.Operation) {
	m.breakerRejections.WithLabelValues(gateway, string(op)).Inc()
}

// CallDone implements resilience.Observer: the duration of calls that reached the gateway (with
// the attempt's trace id as an exemplar, ctx holding its span), and the failures counted against
// its breaker.
func (m *Metrics) CallDone(ctx context.Context, gateway string, op payrouter.Operation, outcome payrouter.Outcome, d time.Duration) {
	if outcome == payrouter.OutcomeBreakerOpen || outcome == payrouter.OutcomeBulkheadFull {
		return // no call was made; the rejection counters say it
	}
	observe(ctx, m.gatewayDuration.WithLabelValues(gateway, string(op), string(outcome)), d.Seconds())
	if outcome.IsFailure() {
		m.breakerFailures.WithLabelValues(gateway, string(op), string(outcome)).Inc()
	}
}

// BulkheadChanged implements resilience.Observer.
func (m *Metrics) BulkheadChanged(gateway string, inFlight, capacity int) {
	m.bulkheadInFlight.WithLabelValues(gateway).Set(float64(inFlight))
	m.bulkheadCapacity.WithLabelValues(gateway).Set(float64(capacity))
}

// BulkheadRejected implements resilience.Observer.
func (m *Metrics) BulkheadRejected(gateway string) {
	m.bulkheadRejections.WithLabelValues(gateway).Inc()
}

// ChargeAnswered counts a charge answered to the storefront; gateway is "" when none took it.
func (m *Metrics) ChargeAnswered(gateway string, status payrouter.ChargeStatus) {
	if gateway == "" {
		gateway = "none"
	}
	m.charges.WithLabelValues(gateway, string(status)).Inc()
}

// FallbackUsed counts an operation answered by its fallback.
func (m *Metrics) FallbackUsed(op payrouter.Operation, fallback string) {
	m.fallbacks.WithLabelValues(string(op), fallback).Inc()
}

// HTTPRequest observes one storefront API request; ctx is the request's, with its span (an
// exemplar's trace id).
func (m *Metrics) HTTPRequest(ctx context.Context, route string, code int, d time.Duration) {
	observe(ctx, m.httpDuration.WithLabelValues(route, strconv.Itoa(code)), d.Seconds())
}

// DatabaseUp sets payrouter_database_up.
func (m *Metrics) DatabaseUp(up bool) {
	if up {
		m.databaseUp.Set(1)
	} else {
		m.databaseUp.Set(0)
	}
}

// StateStoreUp sets payrouter_state_store_up.
func (m *Metrics) StateStoreUp(up bool) {
	if up {
		m.stateStoreUp.Set(1)
	} else {
		m.stateStoreUp.Set(0)
	}
}

// ProbeDone implements resilience.Observer.
func (m *Metrics) ProbeDone(gateway string, healthy bool, d time.Duration) {
	result, up := "failed", 0.0
	if healthy {
		result, up = "healthy", 1
	}
	m.probeUp.WithLabelValues(gateway).Set(up)
	m.probes.WithLabelValues(gateway, result).Inc()
	m.probeDuration.WithLabelValues(gateway).Observe(d.Seconds())
}
