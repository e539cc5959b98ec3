package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/resilience"
)

// breakerView is a breaker of docs/api.md (GET /admin/breakers): one failure domain as the admin API shows it.
type breakerView struct {
	Name      string           `json:"name"`
	Gateway   string           `json:"gateway"`
	Operation string           `json:"operation"`
	State     resilience.State `json:"state"`
	Forced    *string          `json:"forced"`
	OpenUntil *string          `json:"open_until"`
	Counts    countsView       `json:"counts"`
}

type countsView struct {
	Requests            int64 `json:"requests"`
	Failures            int64 `json:"failures"`
	ConsecutiveFailures int64 `json:"consecutive_failures"`
}

func breakerViewOf(s resilience.Snapshot) breakerView {
	v := breakerView{
		Name: s.Name, Gateway: s.Gateway, Operation: string(s.Operation), State: s.State,
		Counts: countsView{s.Counts.Requests, s.Counts.Failures, s.Counts.ConsecutiveFailures},
	}
	if s.Forced != payrouter.ForcedNone {
		f := string(s.Forced)
		v.Forced = &f
	}
	if !s.OpenUntil.IsZero() {
		t := s.OpenUntil.UTC().Format(time.RFC3339Nano)
		v.OpenUntil = &t
	}
	return v
}

// listBreakers is GET /admin/breakers.
func (s *server) listBreakers(c *echo.Context) error {
	snaps := s.Domains.Snapshots()
	out := make([]breakerView, len(snaps))
	for i, b := range snaps {
		out[i] = breakerViewOf(b)
	}
	return c.JSON(http.StatusOK, map[string]any{"breakers": out})
}

// breakerAction is POST /admin/breakers/{gateway}/{operation}/{force-open|force-close|reset}.
// With a shared store the change is the fleet's: it applies here at once, and reaches every
// instance through the store; when the store does not answer it still applies here (ops must be
// able to act while Redis is down), the answer says so in a Warning header, and it is shared as
// soon as the store is back. Without one, the breaker is this instance's alone, and so is the
// change.
func (s *server) breakerAction(c *echo.Context) error {
	gateway, op := c.Param("gateway"), payrouter.Operation(c.Param("operation"))
	b := s.Domains.Breaker(gateway, op)
	if b == nil {
		return writeProblem(c, newProblem(payrouter.ENotFound, "no breaker "+echoable(gateway)+"/"+echoable(string(op))))
	}
	var forced payrouter.Forced
	switch c.Param("action") {
	case "force-open":
		forced = payrouter.ForcedOpen
	case "force-close":
		forced = payrouter.ForcedClosed
	case "reset":
		forced = payrouter.ForcedNone
	default:
		return writeProblem(c, newProblem(payrouter.ENotFound, "actions are force-open, force-close and reset"))
	}
	name := gateway + "/" + string(op)
	if s.Fleet != nil {
		if err := s.Fleet.Force(c.Request().Context(), b, forced); err != nil {
			s.Log.Warn("breaker.share_failed", "breaker", name, "action", c.Param("action"), "err", err.Error())
			c.Response().Header().Set("Warning", `199 payrouter "applied to this instance only until the state store answers"`)
		}
	} else if forced == payrouter.ForcedNone {
		b.Reset()
	} else {
		b.Force(forced)
	}
	s.Log.Info("breaker."+c.Param("action"), "breaker", name)
	return c.JSON(http.StatusOK, breakerViewOf(b.Snapshot()))
}

// gatewayView is one gateway in GET /admin/gateways.
type gatewayView struct {
	config.GatewaySummary
	Bulkhead struct {
		Capacity int `json:"capacity"`
		InFlight int `json:"in_flight"`
	} `json:"bulkhead"`
}

// listGateways is GET /admin/gateways: settings and live bulkhead use, never a credential.
func (s *server) listGateways(c *echo.Context) error {
	gateways := s.Gateways
	if s.Reloader != nil {
		gateways = s.Reloader.Summary()
	}
	out := make([]gatewayView, 0, len(gateways))
	for _, g := range gateways {
		v := gatewayView{GatewaySummary: g}
		if bh := s.Domains.Bulkhead(g.Name); bh != nil {
			v.Bulkhead.Capacity, v.Bulkhead.InFlight = bh.Capacity(), bh.InFlight()
		}
		out = append(out, v)
	}
	return c.JSON(http.StatusOK, map[string]any{"gateways": out})
}

// Limits of GET /admin/charges.
const (
	defaultChargesLimit = 100
	maxChargesLimit     = 1000
)

// chargeStatuses are the statuses GET /admin/charges can list.
var chargeStatuses = map[payrouter.ChargeStatus]bool{
	payrouter.StatusSucceeded: true, payrouter.StatusRequiresCapture: true, payrouter.StatusProcessing: true,
	payrouter.StatusDeclined: true, payrouter.StatusFailed: true, payrouter.StatusVoided: true,
	payrouter.StatusRefunded: true,
}

// listCharges is GET /admin/charges?status=processing&limit=N: up to limit (default 100, at most
// 1000) stored charges in that status, oldest first, as the storefront sees them. Ops use it to
// watch the charges the reconciler has not settled yet.
func (s *server) listCharges(c *echo.Context) error {
	status := payrouter.ChargeStatus(c.QueryParam("status"))
	if !chargeStatuses[status] {
		return writeProblem(c, invalid("the query is not valid; see errors", fieldError{Field: "status",
			Message: "is required: succeeded, requires_capture, processing, declined, failed, voided or refunded"}))
	}
	limit := defaultChargesLimit
	if q := c.QueryParam("limit"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 1 || n > maxChargesLimit {
			return writeProblem(c, invalid("the query is not valid; see errors",
				fieldError{Field: "limit", Message: "must be an integer from 1 to 1000"}))
		}
		limit = n
	}
	charges, err := s.Store.ChargesByStatus(c.Request().Context(), status, limit)
	if err != nil {
		return s.writeError(c, "admin.charges_failed",
			withDetail(fmt.Errorf("charges in status %s: %w", status, err), "the state store did not answer; try again"))
	}
	out := make([]chargeView, len(charges))
	for i, ch := range charges {
		out[i] = viewOf(ch)
	}
	return c.JSON(http.StatusOK, map[string]any{"charges": out})
}
