package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/telemetry"
)

// observer sends what the guards do to the metrics, and writes the transition log line ops read
// at 3 a.m.: circuit.opened, circuit.half_opened, circuit.closed.
type observer struct {
	*telemetry.Metrics
	log       *slog.Logger
	cooldowns map[string]time.Duration // by gateway
}

// BreakerTransition logs the change, then counts it.
func (o observer) BreakerTransition(gateway string, op payrouter.Operation, from, to resilience.State, counts resilience.Counts) {
	o.Metrics.BreakerTransition(gateway, op, from, to, counts)
	event := map[resilience.State]string{
		resilience.StateOpen: "circuit.opened", resilience.StateHalfOpen: "circuit.half_opened", resilience.StateClosed: "circuit.closed",
	}[to]
	o.log.LogAttrs(context.Background(), levelOf(to), event,
		slog.String("breaker", gateway+"/"+string(op)), slog.String("gateway", gateway), slog.String("operation", string(op)),
		slog.String("from", string(from)), slog.String("to", string(to)),
		slog.Int64("requests", counts.Requests), slog.Int64("failures", counts.Failures),
		slog.Int64("consecutive_failures", counts.ConsecutiveFailures),
		slog.Int64("cooldown_ms", o.cooldowns[gateway].Milliseconds()),
	)
}

func levelOf(to resilience.State) slog.Level {
	if to == resilience.StateOpen {
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

var _ resilience.Observer = observer{}
