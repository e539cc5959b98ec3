package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter"
)

// GET /events: every change of the key's charges and refunds, oldest first (docs/api.md).

// The page sizes of GET /events.
const (
	defaultEventsLimit = 10
	maxEventsLimit     = 100
)

// eventView is the event object of docs/api.md: data.object is the charge or refund as GET
// shows it, as it was right after the change.
type eventView struct {
	ID        string              `json:"id"`
	Type      payrouter.EventType `json:"type"`
	CreatedAt string              `json:"created_at"`
	Data      eventData           `json:"data"`
}

type eventData struct {
	Object any `json:"object"`
}

// eventList is GET /events' answer.
type eventList struct {
	Data    []eventView `json:"data"`
	HasMore bool        `json:"has_more"`
}

// EventJSON is the event as GET /events lists it, in JSON: the body of its webhook deliveries,
// so that a storefront reads one shape from both.
func EventJSON(ev payrouter.Event) ([]byte, error) { return json.Marshal(eventViewOf(ev)) }

func eventViewOf(ev payrouter.Event) eventView {
	v := eventView{ID: ev.ID, Type: ev.Type, CreatedAt: ev.CreatedAt.UTC().Format(time.RFC3339)}
	if ev.Refund != nil {
		v.Data.Object = refundViewOf(ev.Refund)
	} else {
		v.Data.Object = viewOf(ev.Charge)
	}
	return v
}

// eventsQuery reads GET /events' limit and starting_after, or the problem to answer.
func eventsQuery(c *echo.Context) (limit int, after string, p *problem) {
	limit = defaultEventsLimit
	q := c.QueryParams()
	var errs []fieldError
	if vs, ok := q["limit"]; ok {
		n, err := strconv.Atoi(vs[0])
		if len(vs) != 1 || err != nil || n < 1 || n > maxEventsLimit {
			errs = append(errs, fieldError{Field: "limit", Message: "must be one whole number from 1 to 100"})
		}
		limit = n
	}
	if vs, ok := q["starting_after"]; ok {
		after = vs[0]
		if len(vs) != 1 || !looksLikeID(after, "evt_") {
			errs = append(errs, fieldError{Field: "starting_after", Message: "must be the id of an event this API key listed (evt_...)"})
		}
	}
	if len(errs) > 0 {
		pr := invalid("the query is not valid; see errors", errs...)
		return 0, "", &pr
	}
	return limit, after, nil
}

// listEvents is GET /events.
func (s *server) listEvents(c *echo.Context) error {
	limit, after, p := eventsQuery(c)
	if p != nil {
		return writeProblem(c, *p)
	}
	events, more, err := s.Payments.Events(c.Request().Context(), scopeOf(c), after, limit)
	if errors.Is(err, payrouter.ErrNotFound) {
		// Another key's event is answered as one that does not exist: a key learns nothing of
		// another's ids.
		return writeProblem(c, invalid("the query is not valid; see errors",
			fieldError{Field: "starting_after", Message: "names no event of this API key"}))
	}
	if err != nil {
		return s.writeError(c, "events.list_failed", err)
	}
	out := eventList{Data: make([]eventView, len(events)), HasMore: more}
	for i, ev := range events {
		out.Data[i] = eventViewOf(ev)
	}
	return c.JSON(http.StatusOK, out)
}
