package telemetry

import "github.com/prometheus/client_golang/prometheus"

// newAuthFailures registers payrouter_auth_failures_total, with its four series at 0 from the
// start: an alert's rate() needs them before the first failure.
func newAuthFailures(reg *prometheus.Registry) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "payrouter_auth_failures_total",
		Help: "Requests refused 401 for their credentials, by listener (storefront, admin) and reason (missing: no bearer token; wrong: not a configured key or admin token).",
	}, []string{"listener", "reason"})
	for _, l := range []string{"storefront", "admin"} {
		for _, r := range []string{"missing", "wrong"} {
			c.WithLabelValues(l, r)
		}
	}
	reg.MustRegister(c)
	return c
}

// AuthFailed counts one request refused for its credentials: listener is "storefront" or
// "admin", reason "missing" or "wrong".
func (m *Metrics) AuthFailed(listener, reason string) {
	m.authFailures.WithLabelValues(listener, reason).Inc()
}
