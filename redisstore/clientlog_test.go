package redisstore

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// TestClientLog: go-redis's own messages come out as payrouter's JSON lines, never holding the
// password of state.redis_url.
func TestClientLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	for _, c := range []struct{ url, password string }{
		{"redis://:s3cret-pass@127.0.0.1:6379/0", "s3cret-pass"},
		{"redis://user:s3cret-pass@127.0.0.1:6379/0?master_name=m", "s3cret-pass"},
		{"redis://127.0.0.1:6379/0", ""},
	} {
		buf.Reset()
		// Not setClientLog: go-redis's logger is the process's, and other tests' clients use it.
		l := newClientLog(log, c.url)
		l.Printf(t.Context(), "redis: connection pool: failed to dial %s with %q\n", "127.0.0.1:6379", "s3cret-pass")
		var line map[string]any
		if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
			t.Fatalf("%s: not one JSON line: %q", c.url, buf.String())
		}
		if line["msg"] != "redis.client" || line["level"] != "WARN" {
			t.Errorf("%s: line %v, want msg redis.client at WARN", c.url, line)
		}
		if c.password != "" && strings.Contains(buf.String(), c.password) {
			t.Errorf("%s: the line holds the password: %q", c.url, strings.ReplaceAll(buf.String(), c.password, "<password>"))
		}
	}
}
