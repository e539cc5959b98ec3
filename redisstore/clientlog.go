package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// clientLog is go-redis's own logger (a pool that cannot dial, a sentinel that switches masters)
// writing to payrouter's: left alone, go-redis writes plain text lines to stderr among
// payrouter's JSON ones, which log shippers then cannot read.
type clientLog struct {
	log *slog.Logger
	// password is the one state.redis_url holds, masked should a message ever quote it.
	password string
}

// Printf logs one of go-redis's messages as a redis.client line, at warning level: go-redis
// speaks only when something is wrong.
func (l clientLog) Printf(ctx context.Context, format string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	if l.password != "" {
		msg = strings.ReplaceAll(msg, l.password, "[redacted]")
	}
	l.log.WarnContext(ctx, "redis.client", "message", msg)
}

// newClientLog is go-redis's logger writing to log, for the Redis rawURL names.
func newClientLog(log *slog.Logger, rawURL string) clientLog {
	l := clientLog{log: log}
	if u, err := url.Parse(rawURL); err == nil && u.User != nil {
		l.password, _ = u.User.Password()
	}
	return l
}

// setClientLog makes log go-redis's logger, for the Redis rawURL names. go-redis has one logger
// per process: the last call wins.
func setClientLog(log *slog.Logger, rawURL string) { redis.SetLogger(newClientLog(log, rawURL)) }
