package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/payrouter/payrouter"
)

// GatewayWebhook is gateways.<name>.webhook: the secrets a gateway signs its webhooks with and
// how old a signature may be.
type GatewayWebhook struct {
	// Secrets are the signing secrets the gateway gave (Stripe's "whsec_..."), each a ${VAR}
	// reference like every other secret; a call signed with any one verifies, so a rotation
	// lists the old and the new. Required, at most MaxWebhookSecrets.
	Secrets []string `yaml:"secrets"`
	// Tolerance is how far a call's signed timestamp may be from payrouter's clock, either way.
	// default 5m; at most MaxWebhookTolerance.
	Tolerance time.Duration `yaml:"tolerance"`
}

// Bounds of gateways.<name>.webhook.
const (
	DefaultWebhookTolerance = 5 * time.Minute
	MaxWebhookTolerance     = time.Hour
	MaxWebhookSecrets       = 5
)

// Keys is what verifies the gateway's webhooks.
func (w GatewayWebhook) Keys() payrouter.WebhookKeys {
	return payrouter.WebhookKeys{Secrets: w.Secrets, Tolerance: w.Tolerance}
}

// applyGatewayWebhookDefaults gives a webhook section its default tolerance.
func applyGatewayWebhookDefaults(w *GatewayWebhook, p string, present map[string]bool) {
	if w != nil && !present[p+".webhook.tolerance"] {
		w.Tolerance = DefaultWebhookTolerance
	}
}

// gatewayWebhook checks gateways.<name>.webhook. A secret is never shown, only its path.
func (v *validator) gatewayWebhook(p string, w *GatewayWebhook) {
	if w == nil {
		return
	}
	p += ".webhook"
	if len(w.Secrets) == 0 {
		v.addf(p+".secrets", "at least one signing secret is required: the one the gateway gave for this endpoint (a ${VAR} reference, never the secret itself)")
	}
	if len(w.Secrets) > MaxWebhookSecrets {
		v.addf(p+".secrets", "%d secrets; at most %d (each call is checked against every one)", len(w.Secrets), MaxWebhookSecrets)
	}
	seen := map[string]int{}
	for j, s := range w.Secrets {
		item := fmt.Sprintf("%s.secrets[%d]", p, j)
		if strings.TrimSpace(s) == "" {
			v.empty(item, []string{item}, "must not be empty")
			continue
		}
		if first, dup := seen[s]; dup {
			v.addf(item, "the same secret as %s.secrets[%d]; a rotation lists the old and the new one", p, first)
			continue
		}
		seen[s] = j
	}
	if w.Tolerance <= 0 || w.Tolerance > MaxWebhookTolerance {
		v.addf(p+".tolerance", "must be > 0 and at most %s (how old a signed call may be; Stripe's libraries allow 5m)", fmtDuration(MaxWebhookTolerance))
	}
}
