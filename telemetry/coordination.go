package telemetry

import "github.com/prometheus/client_golang/prometheus"

// CoordinationCalls are the calls to the coordination store that payrouter_state_store_errors_total
// counts by name, each shown at 0 from the start: an alert's rate() needs the series before the
// first failure. resilience.Fleet and resilience.Prober name their calls so.
var CoordinationCalls = []string{
	"sync", "report_outcomes", "open_breaker", "take_trial", "return_trial", "trial_succeeded",
	"close_breaker", "hold_lease", "drop_lease",
}

// newCoordinationErrors registers payrouter_state_store_errors_total.
func newCoordinationErrors(reg *prometheus.Registry) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "payrouter_state_store_errors_total",
		Help: "Calls to Redis, the fleet's coordination store, that failed, by call (sync, report_outcomes, open_breaker, take_trial, return_trial, trial_succeeded, close_breaker, hold_lease, drop_lease). An outage (payrouter_state_store_up 0) fails the few calls still made at once. No money is affected.",
	}, []string{"call"})
	for _, call := range CoordinationCalls {
		c.WithLabelValues(call)
	}
	reg.MustRegister(c)
	return c
}

// CoordinationFailed counts one failed call to the coordination store
// (resilience.FleetOptions.Failed, resilience.ProberOptions.Failed).
func (m *Metrics) CoordinationFailed(call string) {
	m.coordinationErrors.WithLabelValues(call).Inc()
}
