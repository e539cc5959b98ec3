package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/resilience"
)

// breakerInfo exports what an alert needs, besides circuit_breaker_state, to say that a breaker
// has kept its gateway out for longer than two cooldowns without a number written in the rule:
// each breaker's configured cooldown, and when it last left closed.
//
// The second is deliberately not "time of the last transition": a breaker whose half-open trial
// fails goes open→half_open→open once per cooldown, and a timestamp reset by each of those would
// never grow past one cooldown. It moves only when the breaker leaves closed, so it measures how
// long the gateway has been kept out, trials included (configs/prometheus/alerts.yml).
//
// forced is the other thing circuit_breaker_state cannot say: whether ops imposed the state. It is
// a state set (one series per forced state, 1 for the one in force, 0 for the other), so that
// "forced closed, and forgotten" can be graphed and alerted on.
type breakerInfo struct {
	cooldown *prometheus.GaugeVec
	opened   *prometheus.GaugeVec
	forced   *prometheus.GaugeVec
}

func newBreakerInfo() *breakerInfo {
	return &breakerInfo{
		cooldown: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "circuit_breaker_cooldown_seconds",
			Help: "Configured cooldown of each breaker: how long it stays open before a half-open trial.",
		}, []string{"gateway", "operation"}),
		opened: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "circuit_breaker_opened_timestamp_seconds",
			Help: "Unix time each breaker last left closed (tripped, forced open, or half-opened by the fleet). A failed half-open trial re-opening it does not move it: while circuit_breaker_state is not 0, time() minus this is how long the gateway has been kept out.",
		}, []string{"gateway", "operation"}),
		forced: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "circuit_breaker_forced",
			Help: "1 for the state ops forced a breaker into (forced=\"open\" or \"closed\", through the admin API, shared by the fleet), 0 for the other; both 0 when the breaker runs by its own rules. circuit_breaker_state shows a forced state like the breaker's own.",
		}, []string{"gateway", "operation", "forced"}),
	}
}

// Describe implements prometheus.Collector.
func (b *breakerInfo) Describe(ch chan<- *prometheus.Desc) {
	b.cooldown.Describe(ch)
	b.opened.Describe(ch)
	b.forced.Describe(ch)
}

// Collect implements prometheus.Collector.
func (b *breakerInfo) Collect(ch chan<- prometheus.Metric) {
	b.cooldown.Collect(ch)
	b.opened.Collect(ch)
	b.forced.Collect(ch)
}

// BreakerCooldown exports the configured cooldown of a breaker, set once at start-up.
func (m *Metrics) BreakerCooldown(gateway string, op payrouter.Operation, cooldown time.Duration) {
	m.breakerInfo.cooldown.WithLabelValues(gateway, string(op)).Set(cooldown.Seconds())
}

// BreakerForced implements resilience.Observer: the forced state set of a breaker. Service sets
// it to ForcedNone at start-up (InitBreaker), so both series exist before the first change.
func (m *Metrics) BreakerForced(gateway string, op payrouter.Operation, f payrouter.Forced) {
	open, closed := 0.0, 0.0
	switch f {
	case payrouter.ForcedOpen:
		open = 1
	case payrouter.ForcedClosed:
		closed = 1
	}
	m.breakerInfo.forced.WithLabelValues(gateway, string(op), "open").Set(open)
	m.breakerInfo.forced.WithLabelValues(gateway, string(op), "closed").Set(closed)
}

// breakerLeftClosed records now as the time a breaker left closed, when from→to does that.
// Observer.BreakerTransition calls it before circuit_breaker_state moves: a scrape that reads the
// new state beside the older timestamp would see a breaker open for a long time. A scrape is no
// snapshot, so this narrows that window without closing it; the alert's `for` covers the rest.
func (m *Metrics) breakerLeftClosed(gateway string, op payrouter.Operation, from, to resilience.State, now time.Time) {
	if from == resilience.StateClosed && to != resilience.StateClosed {
		m.breakerInfo.opened.WithLabelValues(gateway, string(op)).Set(float64(now.UnixNano()) / 1e9)
	}
}
