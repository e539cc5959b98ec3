package telemetry

import "github.com/prometheus/client_golang/prometheus"

// Results of payrouter_gateway_webhooks_total (docs/metrics.md).
const (
	GatewayWebhookSettled       = "settled"        // the look-up moved the charge on
	GatewayWebhookUnchanged     = "unchanged"      // verified; nothing to change (a duplicate, a charge final or unknown, still pending)
	GatewayWebhookIgnored       = "ignored"        // verified; an event that settles nothing
	GatewayWebhookBadSignature  = "bad_signature"  // a missing or wrong signature, or a timestamp out of tolerance: 400
	GatewayWebhookBadRequest    = "bad_request"    // a body over the limit, or signed but in a form the adapter does not know: 400
	GatewayWebhookNotConfigured = "not_configured" // no webhook for that gateway: 404
	GatewayWebhookRateLimited   = "rate_limited"   // the address failed too often lately: 429
	GatewayWebhookError         = "error"          // the store failed: 5xx, the gateway sends it again
)

// GatewayWebhookNoGateway is the gateway label of a call naming no gateway with a webhook: the
// path's name is never a label value, so no caller can add series.
const GatewayWebhookNoGateway = "none"

var gatewayWebhookResults = []string{GatewayWebhookSettled, GatewayWebhookUnchanged, GatewayWebhookIgnored, GatewayWebhookBadSignature,
	GatewayWebhookBadRequest, GatewayWebhookNotConfigured, GatewayWebhookRateLimited, GatewayWebhookError}

func newGatewayWebhooks() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "payrouter_gateway_webhooks_total",
		Help: "Gateways' webhook calls (POST /webhooks/{gateway}) by how they ended: settled, unchanged, ignored (verified: 200), bad_signature, bad_request (400), not_configured (404; gateway none), rate_limited (429), error (5xx).",
	}, []string{"gateway", "result"})
}

// GatewayWebhook counts one gateway webhook call by its result (GatewayWebhookSettled, ...).
func (m *Metrics) GatewayWebhook(gateway, result string) {
	m.gatewayWebhooks.WithLabelValues(gateway, result).Inc()
}

// InitGatewayWebhooks shows the series of each gateway with a webhook at 0 from the start, and
// forgets those of gateways that no longer have one.
func (m *Metrics) InitGatewayWebhooks(gateways, removed []string) {
	for _, g := range removed {
		for _, r := range gatewayWebhookResults {
			m.gatewayWebhooks.DeleteLabelValues(g, r)
		}
	}
	for _, g := range gateways {
		for _, r := range gatewayWebhookResults {
			m.gatewayWebhooks.WithLabelValues(g, r)
		}
	}
}
