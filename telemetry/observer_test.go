package telemetry

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/resilience"
)

func TestObserverLogsAndCountsTransitions(t *testing.T) {
	var logs bytes.Buffer
	m := NewMetrics()
	o := NewObserver(m, NewLogger(&logs, slog.LevelInfo))
	b := resilience.NewBreaker("paywell", payrouter.OpCharge, resilience.BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 3, Cooldown: 4 * time.Second}}, o)
	for range 3 {
		done, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		done(payrouter.OutcomeUnavailable)
	}
	if got := testutil.ToFloat64(m.breakerState.WithLabelValues("paywell", "charge")); got != 1 {
		t.Errorf("circuit_breaker_state = %v, want 1 (open)", got)
	}
	if got := testutil.ToFloat64(m.breakerTransitions.WithLabelValues("paywell", "charge", "closed", "open")); got != 1 {
		t.Errorf("transitions closed->open = %v, want 1", got)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(logs.String())), &line); err != nil {
		t.Fatalf("one JSON line expected, got %q: %v", logs.String(), err)
	}
	want := map[string]any{
		"msg": "circuit.opened", "level": "WARN", "breaker": "paywell/charge", "from": "closed", "to": "open",
		"consecutive_failures": 3.0, "failures": 3.0, "cooldown_ms": 4000.0,
	}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("log line %s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
}

func TestMetricsFamiliesExist(t *testing.T) {
	m := NewMetrics()
	m.InitBreaker("ding", payrouter.OpRefund, resilience.StateClosed)
	m.InitBulkhead("ding", 7)
	m.CallDone(t.Context(), "ding", payrouter.OpCharge, payrouter.OutcomeTimeout, 2*time.Second)
	m.CallDone(t.Context(), "ding", payrouter.OpCharge, payrouter.OutcomeBreakerOpen, 0) // no call: no duration sample
	m.ChargeAnswered("", payrouter.StatusFailed)
	m.FallbackUsed(payrouter.OpCharge, "fail")
	m.HTTPRequest(t.Context(), "POST /charge", 503, time.Millisecond)
	if n := testutil.CollectAndCount(m.gatewayDuration); n != 1 {
		t.Errorf("duration series = %d, want 1 (breaker_open is not a call)", n)
	}
	if got := testutil.ToFloat64(m.breakerFailures.WithLabelValues("ding", "charge", "timeout")); got != 1 {
		t.Errorf("failures{timeout} = %v", got)
	}
	if got := testutil.ToFloat64(m.charges.WithLabelValues("none", "failed")); got != 1 {
		t.Errorf("charges{none,failed} = %v", got)
	}
	if got := testutil.ToFloat64(m.bulkheadCapacity.WithLabelValues("ding")); got != 7 {
		t.Errorf("bulkhead capacity = %v", got)
	}
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range []string{"circuit_breaker_state", "payrouter_fallbacks_total", "payrouter_http_request_duration_seconds", "go_goroutines", "process_cpu_seconds_total"} {
		if !names[want] {
			t.Errorf("registry lacks %s", want)
		}
	}
}

// TestForcedStateSet: circuit_breaker_forced shows what ops imposed, which circuit_breaker_state
// cannot: a breaker forced closed reads state 0 like a healthy one, and forced="closed" 1.
func TestForcedStateSet(t *testing.T) {
	m := NewMetrics()
	o := NewObserver(m, NewLogger(&bytes.Buffer{}, slog.LevelInfo))
	b := resilience.NewBreaker("paywell", payrouter.OpCharge, resilience.BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 3, Cooldown: 4 * time.Second}}, o)
	m.BreakerForced("paywell", payrouter.OpCharge, payrouter.ForcedNone) // as the service does at start-up
	for _, step := range []struct {
		force        payrouter.Forced
		state        float64
		open, closed float64
	}{
		{payrouter.ForcedNone, 0, 0, 0},
		{payrouter.ForcedClosed, 0, 0, 1},
		{payrouter.ForcedOpen, 1, 1, 0},
		{payrouter.ForcedNone, 0, 0, 0},
	} {
		b.Force(step.force)
		got := []float64{
			testutil.ToFloat64(m.breakerState.WithLabelValues("paywell", "charge")),
			testutil.ToFloat64(m.breakerInfo.forced.WithLabelValues("paywell", "charge", "open")),
			testutil.ToFloat64(m.breakerInfo.forced.WithLabelValues("paywell", "charge", "closed")),
		}
		if want := []float64{step.state, step.open, step.closed}; !slices.Equal(got, want) {
			t.Errorf("forced %q: circuit_breaker_state, forced open, forced closed = %v, want %v", step.force, got, want)
		}
	}
}
