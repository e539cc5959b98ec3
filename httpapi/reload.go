package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/config"
)

// ErrConfigRefused wraps a reload's error when the file was refused and nothing changed.
var ErrConfigRefused = errors.New("the configuration was not reloaded")

// Reloader swaps the configuration while serving: SIGHUP does the same.
type Reloader interface {
	// Reload re-reads the configuration file and applies it in place. A file that does not load
	// is an error wrapping ErrConfigRefused and the *config.ValidationError (or the read error):
	// nothing changed.
	Reload(ctx context.Context) (config.Changes, error)
	// Summary lists the gateways configured now, without credentials.
	Summary() []config.GatewaySummary
}

// reloadConfig is POST /admin/reload: 200 with what changed, or 422 invalid-config listing every
// problem of the file, one per entry of errors, while the running configuration stays.
func (s *server) reloadConfig(c *echo.Context) error {
	if s.Reloader == nil {
		return writeProblem(c, newProblem(payrouter.ENotFound, "this process cannot reload its configuration"))
	}
	changes, err := s.Reloader.Reload(c.Request().Context())
	if err != nil && !errors.Is(err, ErrConfigRefused) {
		return s.writeError(c, "admin.reload_failed", withDetail(err, "the reload failed after it started; see the log"))
	}
	if err != nil {
		p := newProblem(codeInvalidConfig, "the file was not applied; fix the problems listed in errors and reload again")
		var verr *config.ValidationError
		if errors.As(err, &verr) {
			for _, line := range verr.Problems {
				p.Errors = append(p.Errors, configProblem(line))
			}
		} else {
			p.Errors = append(p.Errors, fieldError{Field: "", Message: err.Error()})
		}
		return writeProblem(c, p)
	}
	return c.JSON(http.StatusOK, map[string]any{"reloaded": true, "changes": changes})
}

// configProblem splits a config problem line ("gateways.paywell.timeout: must be ...", or "line 3:
// ...") into the field it names and its message.
func configProblem(line string) fieldError {
	if field, msg, ok := strings.Cut(line, ": "); ok && !strings.ContainsAny(field, " \t") {
		return fieldError{Field: field, Message: msg}
	}
	return fieldError{Message: line}
}
