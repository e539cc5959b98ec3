package telemetry

import (
	"context"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// NewLogger is payrouter's logger: JSON lines, one object each, for log shippers. A line logged
// with a context that holds a span (logger.InfoContext(ctx, ...), LogAttrs(ctx, ...)) carries
// its trace_id and span_id, so that a request's log lines lead to its trace and back; lines
// logged without a context (breaker transitions) carry none.
func NewLogger(w io.Writer) *slog.Logger {
	return slog.New(traceHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})})
}

// traceHandler adds the trace and span ids of the context's span to each record.
type traceHandler struct {
	slog.Handler
}

// Handle implements slog.Handler.
func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler: the ids are still added.
func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler: the ids are still added (inside the group).
func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
