package resilience

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/payrouter/payrouter"
)

func benchGuard(b *testing.B) *Guard {
	d := NewDomains([]GatewaySettings{{Name: "paywell", Breaker: BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 5}}}}, NopObserver{})
	return d.Guard("paywell", payrouter.OpCharge)
}

func succeed(context.Context) payrouter.Result {
	return payrouter.Result{Outcome: payrouter.OutcomeSucceeded}
}

// BenchmarkGuardDo is the admitted path: breaker, slot, the Guard's own deadline, a trivial call.
func BenchmarkGuardDo(b *testing.B) {
	g := benchGuard(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		g.Do(ctx, succeed)
	}
}

// BenchmarkGuardDoBudget is the admitted path when the caller's deadline is the shorter: no
// context of the Guard's own.
func BenchmarkGuardDoBudget(b *testing.B) {
	g := benchGuard(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		g.Do(ctx, succeed)
	}
}

// BenchmarkGuardDoOpen is the refused path of a tripped breaker.
func BenchmarkGuardDoOpen(b *testing.B) {
	g := benchGuard(b)
	for range 5 {
		g.Do(context.Background(), func(context.Context) payrouter.Result {
			return payrouter.Result{Outcome: payrouter.OutcomeUnavailable}
		})
	}
	if s := g.Breaker().State(); s != StateOpen {
		b.Fatalf("state %s, want open", s)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		g.Do(ctx, succeed)
	}
}

// BenchmarkGuardDoParallel is the admitted path from many goroutines at once, within the
// bulkhead's capacity.
func BenchmarkGuardDoParallel(b *testing.B) {
	g := benchGuard(b)
	b.ReportAllocs()
	b.SetParallelism(1)
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			g.Do(ctx, succeed)
		}
	})
}

// BenchmarkGuardDoTraced is BenchmarkGuardDo under a sampled request span, as serve runs with an
// exporter: an SDK TracerProvider, an attempt number. BenchmarkGuardDoUnsampled is serve without
// one: the request's span is not sampled, so the attempt makes no span. They come last in this
// file because setting the global TracerProvider cannot be undone for the benchmarks after them.
func BenchmarkGuardDoTraced(b *testing.B) { benchTraced(b, sdktrace.AlwaysSample()) }

func BenchmarkGuardDoUnsampled(b *testing.B) {
	benchTraced(b, sdktrace.ParentBased(sdktrace.NeverSample()))
}

func benchTraced(b *testing.B, sampler sdktrace.Sampler) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler))
	otel.SetTracerProvider(tp)
	g := benchGuard(b)
	ctx, span := tp.Tracer("bench").Start(context.Background(), "POST /charge")
	defer span.End()
	ctx = WithAttempt(ctx, 1, false)
	b.ReportAllocs()
	for b.Loop() {
		g.Do(ctx, succeed)
	}
}

// TestBenchGuardGoals runs the admitted and refused benchmarks once each and prints them beside
// their goals (make bench). Printed, never asserted: the time is the machine's as much as ours.
// It comes before the traced benchmarks in this file for the reason they give: it must run
// while no TracerProvider is set, as the goals are of the guard's own cost.
func TestBenchGuardGoals(t *testing.T) {
	if os.Getenv("PAYROUTER_BENCH") != "1" {
		t.Skip("PAYROUTER_BENCH=1 not set: the measurements run with `make bench`")
	}
	for _, g := range []struct {
		name     string
		bench    func(*testing.B)
		ns       float64
		allocs   int64
		baseline string
	}{
		{"Guard.Do admitted (BenchmarkGuardDo)", BenchmarkGuardDo, 400, 2, "1235 ns, 8 allocs"},
		{"Guard.Do refused, breaker open (BenchmarkGuardDoOpen)", BenchmarkGuardDoOpen, 100, 0, "353 ns, 3 allocs"},
	} {
		r := testing.Benchmark(g.bench)
		fmt.Fprintf(t.Output(), "goal: %s <= %.0f ns, <= %d allocs (was %s); measured %.0f ns, %d allocs, %d B per call\n",
			g.name, g.ns, g.allocs, g.baseline, float64(r.T.Nanoseconds())/float64(r.N), r.AllocsPerOp(), r.AllocedBytesPerOp())
	}
}
