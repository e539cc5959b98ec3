package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// reloadInfo exports the configuration reloads (SIGHUP, POST /admin/reload): how many, and
// whether the last one was taken, so that an alert can say "the file on disk is not what runs".
type reloadInfo struct {
	total       *prometheus.CounterVec
	lastOK      prometheus.Gauge
	lastSuccess prometheus.Gauge
}

func newReloadInfo() *reloadInfo {
	r := &reloadInfo{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "payrouter_config_reloads_total",
			Help: "Configuration reloads (SIGHUP or POST /admin/reload), by result: applied, or refused (the file did not load; the running configuration stayed).",
		}, []string{"result"}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "payrouter_config_last_reload_successful",
			Help: "1 when the last configuration reload was applied (or none was asked for), 0 when it was refused.",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "payrouter_config_last_reload_success_timestamp_seconds",
			Help: "Unix time the running configuration was loaded: at start-up, then at each applied reload.",
		}),
	}
	r.total.WithLabelValues("applied")
	r.total.WithLabelValues("refused")
	r.lastOK.Set(1)
	r.lastSuccess.Set(float64(time.Now().Unix()))
	return r
}

// Describe implements prometheus.Collector.
func (r *reloadInfo) Describe(ch chan<- *prometheus.Desc) {
	r.total.Describe(ch)
	r.lastOK.Describe(ch)
	r.lastSuccess.Describe(ch)
}

// Collect implements prometheus.Collector.
func (r *reloadInfo) Collect(ch chan<- prometheus.Metric) {
	r.total.Collect(ch)
	r.lastOK.Collect(ch)
	r.lastSuccess.Collect(ch)
}

// ConfigReloaded counts one reload: applied, or refused.
func (m *Metrics) ConfigReloaded(applied bool) {
	if !applied {
		m.reloads.total.WithLabelValues("refused").Inc()
		m.reloads.lastOK.Set(0)
		return
	}
	m.reloads.total.WithLabelValues("applied").Inc()
	m.reloads.lastOK.Set(1)
	m.reloads.lastSuccess.Set(float64(time.Now().Unix()))
}

// ForgetGateways drops every series of the named gateways, removed by a reload: a dashboard must
// not show a gateway that is gone as if it were still open or saturated.
func (m *Metrics) ForgetGateways(names []string) {
	for _, name := range names {
		l := prometheus.Labels{"gateway": name}
		for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
			m.breakerState, m.breakerFailures, m.breakerTransitions, m.breakerRejections,
			m.breakerInfo.cooldown, m.breakerInfo.opened, m.gatewayDuration,
			m.bulkheadInFlight, m.bulkheadCapacity, m.bulkheadRejections, m.probeUp, m.probes, m.probeDuration,
		} {
			v.DeletePartialMatch(l)
		}
	}
}
