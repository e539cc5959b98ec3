package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// NewLogger is payrouter's logger: JSON lines, one object each, for log shippers. A line logged
// with a context that holds a span (logger.InfoContext(ctx, ...), LogAttrs(ctx, ...)) carries
// its trace_id and span_id, so that a request's log lines lead to its trace and back; lines
// logged without a context (breaker transitions) carry none.
//
// Lines below level are not written, but for one kind: "audit" lines (docs/audit.md) are written
// at every level. They are the record of who moved money or changed the routing, which a level
// chosen to quieten the log must not silently end.
func NewLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	// The JSON handler itself filters nothing: levelHandler decides.
	inner := traceHandler{slog.NewJSONHandler(w, jsonOptions)}
	return slog.New(levelHandler{Handler: inner, audit: inner, level: level})
}

// NewSinkLogger is NewLogger writing through s, serve's logger: no request waits for a write,
// and audit lines go through s.Audit(), so that a full queue makes them wait for room rather than
// drop them at once (LogSink). Every line ends with "instance": instance, the process's name
// among its fleet (none when ""): last, after the trace ids, so that a line reads as it did
// before, its message followed by its own fields.
func NewSinkLogger(s *LogSink, level slog.Leveler, instance string) *slog.Logger {
	last := func(h slog.Handler) slog.Handler {
		if instance == "" {
			return h
		}
		return instanceHandler{h, slog.String("instance", instance)}
	}
	return slog.New(levelHandler{
		Handler: traceHandler{last(slog.NewJSONHandler(s, jsonOptions))},
		audit:   traceHandler{last(slog.NewJSONHandler(s.Audit(), jsonOptions))},
		level:   level,
	})
}

// instanceHandler adds the instance's name to each record, after its other fields.
type instanceHandler struct {
	slog.Handler
	instance slog.Attr
}

// Handle implements slog.Handler.
func (h instanceHandler) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(h.instance)
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler: the name is still added.
func (h instanceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return instanceHandler{h.Handler.WithAttrs(attrs), h.instance}
}

// WithGroup implements slog.Handler: the name is still added (inside the group).
func (h instanceHandler) WithGroup(name string) slog.Handler {
	return instanceHandler{h.Handler.WithGroup(name), h.instance}
}

// jsonOptions let every record through: levelHandler decides.
var jsonOptions = &slog.HandlerOptions{Level: slog.LevelDebug - 100}

// AuditMessage is the message of an audit line, which every level writes.
const AuditMessage = "audit"

// auditLevel is the level audit lines are logged at.
const auditLevel = slog.LevelInfo

// levelHandler drops the records below its level, audit lines excepted, and hands audit lines
// to audit (the same handler as the others', or one writing through LogSink.Audit).
type levelHandler struct {
	slog.Handler
	audit slog.Handler
	level slog.Leveler
}

// Enabled implements slog.Handler. It cannot see the message yet, so it lets the audit lines'
// level through and Handle drops what is not an audit line.
func (h levelHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level() || l == auditLevel
}

// Handle implements slog.Handler.
func (h levelHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == AuditMessage && r.Level == auditLevel {
		return h.audit.Handle(ctx, r)
	}
	if r.Level < h.level.Level() {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h levelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return levelHandler{h.Handler.WithAttrs(attrs), h.audit.WithAttrs(attrs), h.level}
}

// WithGroup implements slog.Handler.
func (h levelHandler) WithGroup(name string) slog.Handler {
	return levelHandler{h.Handler.WithGroup(name), h.audit.WithGroup(name), h.level}
}

// LogLevels are the names ParseLogLevel takes, lowest first.
var LogLevels = []string{"debug", "info", "warn", "error"}

// ParseLogLevel reads a level's name (debug, info, warn or error, in any case), as `payrouter
// serve -log-level` takes it. Only these four: slog's own "info+2" and the like would let a typo
// such as "inf0" or "warning" pass for something else, or fail with a message naming no choice.
func ParseLogLevel(name string) (slog.Level, error) {
	switch strings.ToLower(name) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%q is no log level: want one of %s", name, strings.Join(LogLevels, ", "))
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
