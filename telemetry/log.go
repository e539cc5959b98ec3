package telemetry

import (
	"io"
	"log/slog"
)

// NewLogger is payrouter's logger: JSON lines, one object each, for log shippers.
func NewLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
