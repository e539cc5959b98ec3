package telemetry

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/resilience"
)

// Observer is what the guards report to: the metrics, and the transition log line ops read at
// 3 a.m. (circuit.opened, circuit.half_opened, circuit.closed) with the counts that caused it and
// the cooldown.
type Observer struct {
	*Metrics
	log       *slog.Logger
	cooldowns atomic.Pointer[map[string]time.Duration] // by gateway
}

// NewObserver returns an Observer over m that logs transitions to log. cooldowns gives each
// gateway's breaker cooldown, for the log line.
func NewObserver(m *Metrics, log *slog.Logger, cooldowns map[string]time.Duration) *Observer {
	o := &Observer{Metrics: m, log: log}
	o.SetCooldowns(cooldowns)
	return o
}

// SetCooldowns gives the gateways' cooldowns after a reload.
func (o *Observer) SetCooldowns(cooldowns map[string]time.Duration) { o.cooldowns.Store(&cooldowns) }

// transitionEvents names the log line of a transition by the state it enters.
var transitionEvents = map[resilience.State]string{
	resilience.StateOpen:     "circuit.opened",
	resilience.StateHalfOpen: "circuit.half_opened",
	resilience.StateClosed:   "circuit.closed",
}

// BreakerTransition counts the change and logs it: at warning level when a breaker opens.
func (o *Observer) BreakerTransition(gateway string, op payrouter.Operation, from, to resilience.State, counts resilience.Counts) {
	o.breakerLeftClosed(gateway, op, from, to, time.Now())
	o.Metrics.BreakerTransition(gateway, op, from, to, counts)
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
		slog.Int64("cooldown_ms", (*o.cooldowns.Load())[gateway].Milliseconds()),
	)
}

var _ resilience.Observer = (*Observer)(nil)
