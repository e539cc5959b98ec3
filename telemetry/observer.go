package telemetry

import (
	"context"
	"log/slog"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/resilience"
)

// Observer is what the guards report to: the metrics, and the transition log line ops read at
// 3 a.m. (circuit.opened, circuit.half_opened, circuit.closed) with the counts that caused it and
// the breaker's cooldown.
type Observer struct {
	*Metrics
	log *slog.Logger
}

// NewObserver returns an Observer over m that logs transitions to log.
func NewObserver(m *Metrics, log *slog.Logger) *Observer {
	return &Observer{Metrics: m, log: log}
}

// transitionEvents names the log line of a transition by the state it enters.
var transitionEvents = map[resilience.State]string{
	resilience.StateOpen:     "circuit.opened",
	resilience.StateHalfOpen: "circuit.half_opened",
	resilience.StateClosed:   "circuit.closed",
}

// BreakerTransition counts the change and logs it: at warning level when a breaker opens.
func (o *Observer) BreakerTransition(gateway string, op payrouter.Operation, from, to resilience.State, counts resilience.Counts, cooldown time.Duration) {
	o.breakerLeftClosed(gateway, op, from, to, time.Now())
	o.Metrics.BreakerTransition(gateway, op, from, to, counts, cooldown)
	level := slog.LevelInfo
	if to == resilience.StateOpen {
		level = slog.LevelWarn
	}
	o.log.LogAttrs(context.Background(), level, transitionEvents[to],
		slog.String("breaker", gateway+"/"+string(op)),
		slog.String("gateway", gateway),
		slog.String("operation", string(op)),
		slog.String("from", string(from)),
		slog.String("to", string(to)),
		slog.Int64("requests", counts.Requests),
		slog.Int64("failures", counts.Failures),
		slog.Int64("consecutive_failures", counts.ConsecutiveFailures),
		slog.Int64("cooldown_ms", cooldown.Milliseconds()),
	)
}

var _ resilience.Observer = (*Observer)(nil)
