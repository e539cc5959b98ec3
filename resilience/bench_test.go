package resilience

import (
	"context"
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
