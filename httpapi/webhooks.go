package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/webhooks"
)

// The admin API of the storefront webhooks (docs/webhooks.md): GET
// /admin/webhooks, POST /admin/webhooks/{delivery}/redeliver, POST
// /admin/webhooks/endpoints/{endpoint}/enable.

// Webhooks is what the admin API shows and does of the storefront webhooks (webhooks.Service).
type Webhooks interface {
	Endpoints(ctx context.Context) ([]webhooks.EndpointState, error)
	DeadLetters(ctx context.Context, limit int) ([]payrouter.DeadLetter, error)
	Backlog(ctx context.Context) (queued, dead int64, err error)
	Redeliver(ctx context.Context, delivery string) (*payrouter.Task, error)
	EnableEndpoint(ctx context.Context, name string) (webhooks.EndpointState, error)
}

// Limits of GET /admin/webhooks' dead letters.
const (
	defaultDeadLettersLimit = 100
	maxDeadLettersLimit     = 1000
)

// webhookEndpointView is one endpoint: its settings without its secrets, and its state.
type webhookEndpointView struct {
	Name          string        `json:"name"`
	URL           string        `json:"url"` // password and query values masked
	KeyName       string        `json:"key_name"`
	Events        []string      `json:"events"`
	Timeout       string        `json:"timeout"`
	MaxConcurrent int           `json:"max_concurrent"`
	Secrets       int           `json:"secrets"` // how many; never a value
	State         string        `json:"state"`   // enabled, disabled
	Disabled      *disabledView `json:"disabled"`
	InFlight      int           `json:"in_flight"`
}

type disabledView struct {
	Reason string `json:"reason"`
	At     string `json:"at"`
}

func webhookEndpointViewOf(e webhooks.EndpointState) webhookEndpointView {
	v := webhookEndpointView{
		Name: e.Endpoint.Name, URL: webhooks.RedactURL(e.Endpoint.URL), KeyName: e.Endpoint.KeyName,
		Events: e.Endpoint.Events, Timeout: e.Endpoint.Timeout.String(), MaxConcurrent: e.Endpoint.MaxConcurrent,
		Secrets: len(e.Endpoint.Secrets), State: "enabled", InFlight: e.InFlight,
	}
	if v.Events == nil {
		v.Events = []string{}
	}
	if e.Disabled != nil {
		v.State = "disabled"
		v.Disabled = &disabledView{Reason: e.Disabled.Reason, At: e.Disabled.At.UTC().Format(time.RFC3339)}
	}
	return v
}

// deliveryView is a delivery: a dead letter, or one queued again.
type deliveryView struct {
	Delivery   string  `json:"delivery"`
	Endpoint   string  `json:"endpoint"`
	EventID    string  `json:"event_id"`
	EventType  string  `json:"event_type"`
	EventAt    string  `json:"event_at"`
	Attempt    int     `json:"attempt"`
	LastStatus *int    `json:"last_status"`
	LastError  *string `json:"last_error"`
	// Reason and DeadAt are a dead letter's; Status is "dead_letter" or "queued".
	Reason *string `json:"reason,omitempty"`
	DeadAt *string `json:"dead_at,omitempty"`
	Status string  `json:"status"`
}

func deliveryViewOf(t payrouter.Task, status string) deliveryView {
	w := t.Webhook
	v := deliveryView{
		Delivery: w.ID, Endpoint: w.Endpoint, EventID: w.EventID, EventType: string(w.EventType),
		EventAt: w.EventAt.UTC().Format(time.RFC3339), Attempt: w.Attempt, Status: status,
	}
	if w.LastStatus != 0 {
		v.LastStatus = &w.LastStatus
	}
	if w.LastError != "" {
		v.LastError = &w.LastError
	}
	return v
}

func deadLetterViewOf(d payrouter.DeadLetter) deliveryView {
	v := deliveryViewOf(d.Task, "dead_letter")
	at := d.At.UTC().Format(time.RFC3339)
	v.Reason, v.DeadAt = &d.Reason, &at
	return v
}

// listWebhooks is GET /admin/webhooks?limit=N: every configured endpoint and its state, up to
// limit dead letters (default 100, at most 1000), the newest first, and the backlog.
func (s *server) listWebhooks(c *echo.Context) error {
	limit := defaultDeadLettersLimit
	if q := c.QueryParam("limit"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 1 || n > maxDeadLettersLimit {
			return writeProblem(c, invalid("the query is not valid; see errors",
				fieldError{Field: "limit", Message: "must be an integer from 1 to 1000"}))
		}
		limit = n
	}
	ctx := c.Request().Context()
	out := struct {
		Endpoints   []webhookEndpointView `json:"endpoints"`
		DeadLetters []deliveryView        `json:"dead_letters"`
		Backlog     struct {
			Queued      int64 `json:"queued"`
			DeadLetters int64 `json:"dead_letters"`
		} `json:"backlog"`
	}{Endpoints: []webhookEndpointView{}, DeadLetters: []deliveryView{}}
	if s.Webhooks == nil {
		return c.JSON(http.StatusOK, out)
	}
	failed := func(err error) error {
		return s.writeError(c, "admin.webhooks_failed", withDetail(fmt.Errorf("webhooks: %w", err), "the state store did not answer; try again"))
	}
	endpoints, err := s.Webhooks.Endpoints(ctx)
	if err != nil {
		return failed(err)
	}
	dead, err := s.Webhooks.DeadLetters(ctx, limit)
	if err != nil {
		return failed(err)
	}
	out.Backlog.Queued, out.Backlog.DeadLetters, err = s.Webhooks.Backlog(ctx)
	if err != nil {
		return failed(err)
	}
	for _, e := range endpoints {
		out.Endpoints = append(out.Endpoints, webhookEndpointViewOf(e))
	}
	for _, d := range dead {
		out.DeadLetters = append(out.DeadLetters, deadLetterViewOf(d))
	}
	return c.JSON(http.StatusOK, out)
}

// redeliverWebhook is POST /admin/webhooks/{delivery}/redeliver: the dead letter is queued
// again, due now, with a whole schedule of attempts; 202 with the delivery as queued.
func (s *server) redeliverWebhook(c *echo.Context) error {
	delivery := c.Param("delivery")
	if s.Webhooks == nil || !looksLikeID(delivery, "whd_") {
		return writeProblem(c, newProblem(payrouter.ENotFound, "no dead letter "+echoable(delivery)))
	}
	t, err := s.Webhooks.Redeliver(c.Request().Context(), delivery)
	switch {
	case errors.Is(err, payrouter.ErrNotFound):
		return writeProblem(c, newProblem(payrouter.ENotFound, "no dead letter "+delivery+" (never given up, or redelivered already)"))
	case err != nil:
		return s.writeError(c, "admin.redeliver_failed", withDetail(fmt.Errorf("redeliver %s: %w", delivery, err), "the state store did not answer; try again"))
	}
	return c.JSON(http.StatusAccepted, deliveryViewOf(*t, "queued"))
}

// enableWebhookEndpoint is POST /admin/webhooks/endpoints/{endpoint}/enable: an endpoint a 410
// disabled gets deliveries again, first those of the events written meanwhile.
func (s *server) enableWebhookEndpoint(c *echo.Context) error {
	name := c.Param("endpoint")
	if s.Webhooks == nil {
		return writeProblem(c, newProblem(payrouter.ENotFound, "no webhook endpoint "+echoable(name)))
	}
	e, err := s.Webhooks.EnableEndpoint(c.Request().Context(), name)
	switch {
	case errors.Is(err, payrouter.ErrNotFound):
		return writeProblem(c, newProblem(payrouter.ENotFound, "no webhook endpoint "+echoable(name)+" is configured"))
	case err != nil:
		return s.writeError(c, "admin.enable_failed", withDetail(fmt.Errorf("enable %s: %w", name, err), "the state store did not answer; try again"))
	}
	return c.JSON(http.StatusOK, webhookEndpointViewOf(e))
}
