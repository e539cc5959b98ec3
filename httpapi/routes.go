package httpapi

import "github.com/labstack/echo/v4"

// storefrontRoutes lists every route of the storefront listener.
func (s *server) storefrontRoutes(e *echo.Echo) {
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.POST("/charge", s.createCharge, s.requireAPIKey, s.audit(auditCharge))
	e.GET("/charge/:id", s.getCharge, s.requireAPIKey)
	e.POST("/charge/:id/capture", s.captureCharge, s.requireAPIKey, s.audit(auditCapture))
	e.POST("/charge/:id/void", s.voidCharge, s.requireAPIKey, s.audit(auditVoid))
	e.POST("/charge/:id/refund", s.refundCharge, s.requireAPIKey, s.audit(auditRefund))
	e.GET("/refund/:id", s.getRefund, s.requireAPIKey)
}

// adminRoutes lists every route of the admin listener.
func (s *server) adminRoutes(e *echo.Echo) {
	e.GET("/healthz", s.healthz)
	e.GET("/metrics", echo.WrapHandler(s.Metrics.Handler()))
	e.GET("/admin/", s.statusPage)                    // no token: static, no data (statuspage.go)
	e.GET("/admin/statuspage.js", s.statusPageScript) // likewise
	admin := e.Group("/admin", s.requireAdmin)
	admin.GET("/breakers", s.listBreakers)
	admin.POST("/breakers/:gateway/:operation/:action", s.breakerAction, s.audit(auditBreaker))
	admin.GET("/gateways", s.listGateways)
	admin.GET("/charges", s.listCharges)
	admin.POST("/reload", s.reloadConfig, s.audit(auditReload))
}
