package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/payrouter/payrouter"
)

// keepGlobals puts the global TracerProvider and propagator back when the test ends, if
// SetupTracing set them (it sets both or neither; setting one to its own value is logged).
func keepGlobals(t *testing.T) {
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		if otel.GetTracerProvider() != tp {
			otel.SetTracerProvider(tp)
			otel.SetTextMapPropagator(prop)
		}
	})
}

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// collector is an OTLP/HTTP trace receiver: it keeps every export request it gets.
type collector struct {
	mu       sync.Mutex
	paths    []string
	requests []*collectortrace.ExportTraceServiceRequest
}

func newCollector(t *testing.T) (*collector, *httptest.Server) {
	c := &collector{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &collectortrace.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(body, req); err != nil {
			t.Errorf("%s %s: not an OTLP protobuf export: %v", r.Method, r.URL.Path, err)
		}
		c.mu.Lock()
		c.paths = append(c.paths, r.Method+" "+r.URL.Path)
		c.requests = append(c.requests, req)
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return c, srv
}

// spans lists the exported spans as "service.name: span name".
func (c *collector) spans() (paths, spans []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, req := range c.requests {
		for _, rs := range req.ResourceSpans {
			service := ""
			for _, a := range rs.Resource.GetAttributes() {
				if a.Key == "service.name" {
					service = a.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					spans = append(spans, service+": "+s.Name)
				}
			}
		}
	}
	return append([]string(nil), c.paths...), spans
}

func TestSetupTracingWithoutExporterStillTraces(t *testing.T) {
	keepGlobals(t)
	col, srv := newCollector(t)
	// The exporter would read this from the process environment: getenv says nothing of it, so
	// nothing is exported.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	shutdown, err := SetupTracing(t.Context(), envOf(nil), "v1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	_, span := otel.Tracer("test").Start(t.Context(), "unexported")
	sc := span.SpanContext()
	span.End()
	if !sc.IsValid() || sc.IsSampled() || span.IsRecording() {
		t.Errorf("span context %+v (recording %v): want a valid trace id for the logs, not sampled nor recorded: nothing exports it",
			sc, span.IsRecording())
	}
	// A caller that samples its trace keeps it sampled through payrouter, to the gateways.
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	_, child := otel.Tracer("test").Start(trace.ContextWithRemoteSpanContext(t.Context(), parent), "child")
	if !child.SpanContext().IsSampled() || child.SpanContext().TraceID() != parent.TraceID() {
		t.Errorf("child of a sampled caller: %+v, want sampled in the caller's trace", child.SpanContext())
	}
	child.End()
	if err := shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if paths, spans := col.spans(); len(paths) != 0 {
		t.Errorf("exported %v %v with no OTEL_TRACES_EXPORTER nor endpoint", paths, spans)
	}
	fields := otel.GetTextMapPropagator().Fields()
	for _, want := range []string{"traceparent", "tracestate", "baggage"} {
		if !strings.Contains(strings.Join(fields, " "), want) {
			t.Errorf("propagator fields %v lack %s", fields, want)
		}
	}
}

func TestSetupTracingExportsOverOTLPHTTP(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
	}{
		{"exporter otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SERVICE_NAME": "payrouter-eu"}},
		{"endpoint alone", map[string]string{"OTEL_SERVICE_NAME": "payrouter-eu", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			keepGlobals(t)
			col, srv := newCollector(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL) // read by the exporter itself
			tc.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = srv.URL
			shutdown, err := SetupTracing(t.Context(), envOf(tc.env), "v1.2.3")
			if err != nil {
				t.Fatal(err)
			}
			_, span := otel.Tracer("test").Start(t.Context(), "POST /charge")
			span.End()
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if err := shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			paths, spans := col.spans()
			if len(paths) == 0 || paths[0] != "POST /v1/traces" {
				t.Errorf("collector got %v, want POST /v1/traces", paths)
			}
			if len(spans) != 1 || spans[0] != "payrouter-eu: POST /charge" {
				t.Errorf("exported spans %v, want [payrouter-eu: POST /charge]", spans)
			}
		})
	}
}

func TestSetupTracingRefusesWhatItCannotHonour(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		want string // in the error
	}{
		{"unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"},
		{"several exporters", map[string]string{"OTEL_TRACES_EXPORTER": "otlp,console"}, "OTEL_TRACES_EXPORTER"},
		{"grpc", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "only OTLP over HTTP"},
		{"grpc for traces", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{"endpoint without scheme", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"traces endpoint without host", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http:///v1/traces"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{"unknown sampler", map[string]string{"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"},
		{"ratio out of range", map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "OTEL_TRACES_SAMPLER_ARG"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			keepGlobals(t)
			before := otel.GetTracerProvider()
			shutdown, err := SetupTracing(t.Context(), envOf(tc.env), "")
			if err == nil {
				shutdown(t.Context())
				t.Fatalf("no error for %v", tc.env)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q: want one line naming %s", err, tc.want)
			}
			if otel.GetTracerProvider() != before {
				t.Error("the global TracerProvider changed although the settings were refused")
			}
		})
	}
}

func TestSetupTracingSampler(t *testing.T) {
	keepGlobals(t)
	// "none" wins over an endpoint, and the endpoint is not even checked then.
	env := map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "nonsense", "OTEL_TRACES_SAMPLER": "always_off"}
	shutdown, err := SetupTracing(t.Context(), envOf(env), "")
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(t.Context())
	_, span := otel.Tracer("test").Start(t.Context(), "dropped")
	defer span.End()
	if span.SpanContext().IsSampled() || span.IsRecording() {
		t.Error("always_off sampled a span")
	}
}

func spanContext(sampled bool) trace.SpanContext {
	flags := trace.TraceFlags(0)
	if sampled {
		flags = trace.FlagsSampled
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: flags,
	})
}

func TestLoggerAddsTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	log := NewLogger(&buf, slog.LevelInfo).With("component", "test")
	ctx := trace.ContextWithSpanContext(t.Context(), spanContext(true))
	log.InfoContext(ctx, "with.span")
	log.InfoContext(t.Context(), "without.span")
	log.Info("no.context")

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	want := []map[string]any{
		{"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"},
		{}, {},
	}
	for i, l := range lines {
		var line map[string]any
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, l)
		}
		if line["component"] != "test" {
			t.Errorf("line %d lost the logger's attributes: %s", i, l)
		}
		for _, k := range []string{"trace_id", "span_id"} {
			if got, ok := line[k]; got != want[i][k] || ok != (want[i][k] != nil) {
				t.Errorf("line %d (%s): %s = %v, want %v", i, line["msg"], k, got, want[i][k])
			}
		}
	}
}

// scrape gets the metrics as a scraper that accepts accept would.
func scrape(t *testing.T, h http.Handler, accept string) (contentType, body string) {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	return rec.Header().Get("Content-Type"), rec.Body.String()
}

func TestDurationExemplarsInOpenMetrics(t *testing.T) {
	m := NewMetrics()
	sampled := trace.ContextWithSpanContext(t.Context(), spanContext(true))
	unsampled := trace.ContextWithSpanContext(t.Context(), spanContext(false))
	m.CallDone(sampled, "paywell", payrouter.OpCharge, payrouter.OutcomeSucceeded, 300*time.Millisecond)
	m.CallDone(unsampled, "paywell", payrouter.OpCharge, payrouter.OutcomeDeclined, 300*time.Millisecond)
	m.CallDone(t.Context(), "ding", payrouter.OpCharge, payrouter.OutcomeSucceeded, 300*time.Millisecond)
	m.HTTPRequest(sampled, "POST /charge", 201, 400*time.Millisecond)

	ct, body := scrape(t, m.Handler(), "application/openmetrics-text; version=1.0.0; charset=utf-8")
	if !strings.HasPrefix(ct, "application/openmetrics-text") {
		t.Fatalf("Content-Type %q, want OpenMetrics", ct)
	}
	const exemplar = ` # {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} `
	for _, series := range []string{
		`payrouter_gateway_request_duration_seconds_bucket{gateway="paywell",operation="charge",outcome="succeeded",le="0.5"} 1`,
		`payrouter_http_request_duration_seconds_bucket{code="201",route="POST /charge",le="0.5"} 1`,
	} {
		if !strings.Contains(body, series+exemplar) {
			t.Errorf("no exemplar on %s:\n%s", series, grep(body, "_duration_seconds_bucket"))
		}
	}
	for _, series := range []string{
		`payrouter_gateway_request_duration_seconds_bucket{gateway="paywell",operation="charge",outcome="declined",le="0.5"} 1`,
		`payrouter_gateway_request_duration_seconds_bucket{gateway="ding",operation="charge",outcome="succeeded",le="0.5"} 1`,
	} {
		if !strings.Contains(body, series+"\n") {
			t.Errorf("want %s without an exemplar (no sampled span):\n%s", series, grep(body, "_duration_seconds_bucket"))
		}
	}

	// What Prometheus' text parsers and the contract tests read is unchanged.
	ct, body = scrape(t, m.Handler(), "")
	if !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q without Accept, want the text format", ct)
	}
	if strings.Contains(body, "# {") || strings.Contains(body, "# EOF") {
		t.Errorf("the text format shows OpenMetrics:\n%s", grep(body, "_duration_seconds_bucket"))
	}
	if want := `payrouter_gateway_request_duration_seconds_bucket{gateway="paywell",operation="charge",outcome="succeeded",le="0.5"} 1`; !strings.Contains(body, want+"\n") {
		t.Errorf("text format lacks %s", want)
	}
}

// grep returns the lines of s that match pattern, for failure messages.
func grep(s, pattern string) string {
	re := regexp.MustCompile(pattern)
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The SDK's own errors become JSON lines, and a URL in them loses its user info and query.
func TestTracingErrorsAreLoggedWithoutTheEndpointsSecrets(t *testing.T) {
	handler := otel.GetErrorHandler()
	t.Cleanup(func() { otel.SetErrorHandler(handler) })
	var out bytes.Buffer
	LogTracingErrors(slog.New(slog.NewJSONHandler(&out, nil)))
	otel.Handle(&url.Error{Op: "Post", URL: "https://user:pw@collector:4318/v1/traces?token=s3cret", Err: errors.New("connection refused")})
	line := out.String()
	if !strings.Contains(line, `"msg":"tracing.error"`) || !strings.Contains(line, "Post https://collector:4318: connection refused") {
		t.Errorf("logged %s", line)
	}
	for _, secret := range []string{"user", "pw@", "s3cret"} {
		if strings.Contains(line, secret) {
			t.Errorf("the line holds %q: %s", secret, line)
		}
	}
}
