package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/payrouter/payrouter/internal/buildinfo"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME is not set.
const DefaultServiceName = "payrouter"

// SetupTracing sets the global TracerProvider and propagator from the standard OTEL_* variables,
// read with getenv:
//
//   - Export: none by default. OTLP over HTTP when OTEL_TRACES_EXPORTER is "otlp", or when it is
//     unset and OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; spans
//     go out in batches. The exporter reads the rest of its OTEL_EXPORTER_OTLP_* settings
//     (headers, timeout, TLS, compression) from the process environment itself.
//     OTEL_TRACES_EXPORTER=none turns export off whatever else is set.
//   - Without an exporter, spans still get trace and span ids, so that log lines carry a
//     trace_id and the trace context goes on to the gateways; but unless the caller's
//     traceparent says it samples, they are not recorded (parentbased_always_off): a span nobody
//     exports would cost every request and every refused attempt about a microsecond for nothing.
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG choose the sampler; unset:
//     parentbased_always_on with an exporter, so a caller's sampling decision (its traceparent)
//     holds, and every request starting a trace is sampled.
//   - OTEL_SERVICE_NAME is service.name ("payrouter" when unset); version is service.version.
//   - The propagator is W3C: traceparent/tracestate and baggage.
//
// A setting it cannot honour is an error that names the variable: an exporter other than
// none/otlp, an OTLP protocol other than OTLP over HTTP (gRPC is not built in), an endpoint that
// is not an http(s) URL, an unknown sampler. shutdown flushes the spans not yet exported and
// stops the exporter; call it once, when serving is over.
func SetupTracing(ctx context.Context, getenv func(string) string, version string) (shutdown func(context.Context) error, err error) {
	opts, err := tracerOptions(ctx, getenv, version)
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(opts...)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return tp.Shutdown, nil
}

// CheckTracing refuses what SetupTracing refuses, with the same error, and sets nothing up:
// `payrouter check` runs it so that a setting serve would refuse is refused by check too. The
// exporter it builds is stopped unused (OTLP over HTTP dials nothing until the first export).
func CheckTracing(ctx context.Context, getenv func(string) string, version string) error {
	opts, err := tracerOptions(ctx, getenv, version)
	if err != nil {
		return err
	}
	return sdktrace.NewTracerProvider(opts...).Shutdown(ctx)
}

// tracerOptions reads the OTEL_* settings SetupTracing documents into a tracer provider's
// options, building the exporter when spans are exported.
func tracerOptions(ctx context.Context, getenv func(string) string, version string) ([]sdktrace.TracerProviderOption, error) {
	export, err := otlpWanted(getenv)
	if err != nil {
		return nil, err
	}
	sampler, err := samplerFrom(getenv)
	if err != nil {
		return nil, err
	}
	if !export && strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")) == "" {
		sampler = sdktrace.ParentBased(sdktrace.NeverSample())
	}
	name := strings.TrimSpace(getenv("OTEL_SERVICE_NAME"))
	if name == "" {
		name = DefaultServiceName
	}
	attrs := []resource.Option{
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_RESOURCE_ATTRIBUTES
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName(name)),
	}
	if version != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceVersion(version)))
	}
	res, err := resource.New(ctx, attrs...)
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}

	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(sampler)}
	if export {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP trace exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	return opts, nil
}

// LogTracingErrors sends what the OpenTelemetry SDK reports (an export that failed, a span
// dropped) to log as tracing.error JSON lines instead of plain text on stderr. A URL in the error
// is cut to its scheme and host: an endpoint's user info or query may hold a credential.
func LogTracingErrors(log *slog.Logger) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		msg := err.Error()
		var ue *url.Error
		if errors.As(err, &ue) {
			host := "(an endpoint)"
			if u, perr := url.Parse(ue.URL); perr == nil {
				host = u.Scheme + "://" + u.Host
			}
			msg = ue.Op + " " + host + ": " + ue.Err.Error()
		}
		log.Warn("tracing.error", "err", msg)
	}))
}

// otlpWanted reports whether spans are exported over OTLP/HTTP, after checking the settings
// that decide it.
func otlpWanted(getenv func(string) string) (bool, error) {
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	endpoint := false
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		s := strings.TrimSpace(getenv(v))
		if s == "" {
			continue
		}
		endpoint = true
		if exporter == "none" {
			continue // not used: no need to refuse it
		}
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return false, fmt.Errorf("%s=%q: want an http:// or https:// URL, such as http://localhost:4318", v, s)
		}
	}
	switch exporter {
	case "none":
		return false, nil
	case "":
		if !endpoint {
			return false, nil
		}
	case "otlp":
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: payrouter exports traces with otlp or none", exporter)
	}
	// The signal's own variable wins, as the exporter reads them.
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		switch p := strings.TrimSpace(getenv(v)); p {
		case "":
			continue
		case "http/protobuf", "http/json":
			return true, nil
		default:
			return false, fmt.Errorf("%s=%q: only OTLP over HTTP is built in; use http/protobuf (port 4318)", v, p)
		}
	}
	return true, nil
}

// Sampler names of OTEL_TRACES_SAMPLER.
const (
	samplerAlwaysOn                = "always_on"
	samplerAlwaysOff               = "always_off"
	samplerTraceIDRatio            = "traceidratio"
	samplerParentBasedAlwaysOn     = "parentbased_always_on"
	samplerParentBasedAlwaysOff    = "parentbased_always_off"
	samplerParentBasedTraceIDRatio = "parentbased_traceidratio"
)

// samplerFrom reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG as the SDK would, but from
// getenv, and refuses what the SDK would only complain about and replace by its default.
func samplerFrom(getenv func(string) string) (sdktrace.Sampler, error) {
	name := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")))
	ratio := func() (sdktrace.Sampler, error) {
		arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG"))
		if arg == "" {
			return sdktrace.TraceIDRatioBased(1), nil
		}
		v, err := strconv.ParseFloat(arg, 64)
		if err != nil || v < 0 || v > 1 {
			return nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1 for %s", arg, name)
		}
		return sdktrace.TraceIDRatioBased(v), nil
	}
	switch name {
	case "", samplerParentBasedAlwaysOn:
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case samplerAlwaysOn:
		return sdktrace.AlwaysSample(), nil
	case samplerAlwaysOff:
		return sdktrace.NeverSample(), nil
	case samplerParentBasedAlwaysOff:
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case samplerTraceIDRatio:
		return ratio()
	case samplerParentBasedTraceIDRatio:
		s, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.ParentBased(s), nil
	}
	return nil, errors.New("OTEL_TRACES_SAMPLER=" + strconv.Quote(name) + ": want one of " + strings.Join([]string{
		samplerParentBasedAlwaysOn, samplerParentBasedAlwaysOff, samplerParentBasedTraceIDRatio,
		samplerAlwaysOn, samplerAlwaysOff, samplerTraceIDRatio,
	}, ", "))
}

// BuildVersion is the version of the running binary for service.version: its module version,
// or the commit of a build whose module version is not known (internal/buildinfo: stamped by the
// Makefile, else recorded by the Go toolchain); "" when neither is known.
func BuildVersion() string {
	info := buildinfo.Read()
	if info.Version != buildinfo.Devel {
		return info.Version
	}
	return info.Commit
}
