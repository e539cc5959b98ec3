package httpapi

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/payments"
	"github.com/payrouter/payrouter/telemetry"
)

// Gateway webhooks in (docs/webhooks.md, Gateway webhooks in): POST /webhooks/{gateway}, where a
// gateway calls back. No API key: the gateway's signature, checked by its adapter with the
// secrets of gateways.<name>.webhook, is the credential. A call that does not verify is 400,
// counted against its address, and an address over limits.auth_failures_per_minute of those is
// answered 429 before its body is read. A verified call is 200 whatever it came to: the gateway
// has nothing to send again.

// MaxGatewayWebhookBody is the largest gateway webhook body read: a Stripe event with its
// PaymentIntent is a few KB.
const MaxGatewayWebhookBody = 256 << 10

// auditGatewayWebhook is the audit action of a gateway's call back.
const auditGatewayWebhook = "gateway_webhook"

// gatewayWebhookAnswer is the body of a verified call's 200.
type gatewayWebhookAnswer struct {
	Result string `json:"result"`
}

func (s *server) gatewayWebhook(c *echo.Context) error {
	gateway := c.Param("gateway")
	req := c.Request()
	if s.Limits != nil {
		if wait, blocked := s.Limits.hooks.Blocked(clientAddress(c), time.Now()); blocked {
			s.countGatewayWebhook(gateway, telemetry.GatewayWebhookRateLimited)
			return s.rateLimited(c, telemetry.LimitWebhookFailures, wait,
				"too many webhook calls from this address failed verification lately: refused until Retry-After")
		}
	}
	if !s.Payments.HasWebhook(gateway) {
		// Refused before the body is read: a name with no webhook has nothing to verify it.
		s.refusedGatewayWebhook(c, telemetry.GatewayWebhookNoGateway, telemetry.GatewayWebhookNotConfigured)
		return writeProblem(c, newProblem(payrouter.ENotFound, "no gateway with a webhook is configured by that name"))
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, MaxGatewayWebhookBody))
	if err != nil {
		s.refusedGatewayWebhook(c, gateway, telemetry.GatewayWebhookBadRequest)
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return writeProblem(c, newProblem(payrouter.EInvalid, "the webhook body is over 256 KiB; nothing was read or changed"))
		}
		return writeProblem(c, newProblem(payrouter.EInvalid, "the webhook body could not be read; nothing was changed"))
	}
	res, ev, err := s.Payments.GatewayWebhook(req.Context(), gateway, req.Header, body)
	switch {
	case errors.Is(err, payments.ErrNoWebhook):
		s.refusedGatewayWebhook(c, telemetry.GatewayWebhookNoGateway, telemetry.GatewayWebhookNotConfigured)
		return writeProblem(c, newProblem(payrouter.ENotFound, "no gateway with a webhook is configured by that name"))
	case errors.Is(err, payrouter.ErrWebhookSignature):
		s.refusedGatewayWebhook(c, gateway, telemetry.GatewayWebhookBadSignature)
		s.Log.WarnContext(req.Context(), "gateway_webhook.refused", "gateway", gateway, "client_address", clientAddress(c), "err", err)
		return writeProblem(c, newProblem(payrouter.EInvalid, "the webhook's signature does not verify with a configured secret within the tolerance; nothing was changed"))
	case errors.Is(err, payrouter.ErrWebhookForm):
		// Signed by the gateway: not counted against the address, but answered 400 so that the
		// gateway's dashboard shows it.
		s.countGatewayWebhook(gateway, telemetry.GatewayWebhookBadRequest)
		s.Log.WarnContext(req.Context(), "gateway_webhook.unreadable", "gateway", gateway, "err", err)
		return writeProblem(c, newProblem(payrouter.EInvalid, "the webhook is signed, but not in a form payrouter reads for this gateway; nothing was changed"))
	case err != nil:
		s.countGatewayWebhook(gateway, telemetry.GatewayWebhookError)
		return err // the store's trouble: 5xx, and the gateway sends it again
	}
	c.Set("actor", "gateway:"+gateway)
	if id, _, ok := payrouter.ChargeOfReference(ev.Reference); ok && res == payments.WebhookSettled {
		c.Set("charge_id", id)
	}
	s.countGatewayWebhook(gateway, string(res))
	return c.JSON(http.StatusOK, gatewayWebhookAnswer{Result: string(res)})
}

// refusedGatewayWebhook counts a call that did not verify, against its address too.
func (s *server) refusedGatewayWebhook(c *echo.Context, gateway, result string) {
	s.countGatewayWebhook(gateway, result)
	if s.Limits != nil {
		s.Limits.hooks.Failed(clientAddress(c), time.Now())
	}
}

func (s *server) countGatewayWebhook(gateway, result string) {
	if s.Metrics == nil {
		return
	}
	if !s.Payments.HasWebhook(gateway) {
		gateway = telemetry.GatewayWebhookNoGateway // the path's name is never a label value unless configured
	}
	s.Metrics.GatewayWebhook(gateway, result)
}
