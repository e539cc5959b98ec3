package httpapi

import (
	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter/config"
)

// storefrontRoutes lists every route of the storefront listener, each API route with the right
// (auth.api_keys rights) its key needs.
func (s *server) storefrontRoutes(e *echo.Echo) {
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.POST("/charge", s.createCharge, s.requireAPIKey(config.RightCharge), s.audit(auditCharge))
	e.GET("/charge/:id", s.getCharge, s.requireAPIKey(config.RightRead))
	e.POST("/charge/:id/capture", s.captureCharge, s.requireAPIKey(config.RightCapture), s.audit(auditCapture))
	e.POST("/charge/:id/void", s.voidCharge, s.requireAPIKey(config.RightVoid), s.audit(auditVoid))
	e.POST("/charge/:id/refund", s.refundCharge, s.requireAPIKey(config.RightRefund), s.audit(auditRefund))
	e.GET("/refund/:id", s.getRefund, s.requireAPIKey(config.RightRead))
	e.GET("/events", s.listEvents, s.requireAPIKey(config.RightRead))
	// No API key: the gateway's signature is the credential (gatewaywebhooks.go).
	e.POST("/webhooks/:gateway", s.gatewayWebhook, s.audit(auditGatewayWebhook))
}

// adminRoutes lists every route of the admin listener.
func (s *server) adminRoutes(e *echo.Echo) {
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.adminReadyz)
	e.GET("/metrics", echo.WrapHandler(s.Metrics.Handler()))
	e.GET("/admin/", s.statusPage)                    // no token: static, no data (statuspage.go)
	e.GET("/admin/statuspage.js", s.statusPageScript) // likewise
	admin := e.Group("/admin", s.requireAdmin)
	admin.GET("/breakers", s.listBreakers)
	admin.POST("/breakers/:gateway/:operation/:action", s.breakerAction, s.audit(auditBreaker))
	admin.GET("/gateways", s.listGateways)
	admin.GET("/charges", s.listCharges)
	admin.POST("/reload", s.reloadConfig, s.audit(auditReload))
	admin.GET("/webhooks", s.listWebhooks)
	admin.POST("/webhooks/:delivery/redeliver", s.redeliverWebhook, s.audit(auditRedeliver))
	admin.POST("/webhooks/endpoints/:endpoint/enable", s.enableWebhookEndpoint, s.audit(auditEnable))
}
