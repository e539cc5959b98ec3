package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// dialCounter is a TCP listener that counts the connections made to it: the state stores of the
// configurations below point at it, so a test can tell that serve refused before dialing.
type dialCounter struct {
	ln    net.Listener
	dials atomic.Int64
}

func newDialCounter(t *testing.T) *dialCounter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dialCounter{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d.dials.Add(1)
			c.Close()
		}
	}()
	return d
}

func (d *dialCounter) addr() string { return d.ln.Addr().String() }

// TestCheckRefusesWhatServeRefuses: every configuration serve refuses at start, check refuses
// too, with exit code 2 and the same message, and serve refuses it before dialing its state
// stores (which here point at a listener that counts connections).
func TestCheckRefusesWhatServeRefuses(t *testing.T) {
	sims := startSims(t)
	state := newDialCounter(t)
	db := fmt.Sprintf("postgres://payrouter@%s/payrouter", state.addr())
	redis := fmt.Sprintf("redis://%s/0", state.addr())
	withState := func(database, redisURL string) string {
		s := fmt.Sprintf("state: {database_url: %q", database)
		if redisURL != "" {
			s += fmt.Sprintf(", redis_url: %q", redisURL)
		}
		return s + "}\n"
	}
	noEnv := map[string]string{}
	cases := []struct {
		name string
		// config returns the file; env is the process environment serve and check see.
		config func(t *testing.T) string
		env    map[string]string
		want   string // in the message
	}{
		{"an api_key that expands to nothing", func(t *testing.T) string {
			return rewriteConfig(t, writeConfig(t, sims, withState(db, "")), "api_key: secret-ding", `api_key: "${PAYROUTER_TEST_DING_KEY:-}"`)
		}, noEnv, "gateways.ding: ding: credentials.api_key"},
		{"a database URL pgx does not parse", func(t *testing.T) string {
			return writeConfig(t, sims, withState(db+"?pool_max_conns=many", ""))
		}, noEnv, "state.database_url: pgstore: the database URL does not parse"},
		{"a redis URL go-redis does not parse", func(t *testing.T) string {
			return writeConfig(t, sims, withState(db, redis+"?no_such_option=1"))
		}, noEnv, "redisstore: state.redis_url"},
		{"a tracing exporter that is not built in", func(t *testing.T) string {
			return writeConfig(t, sims, withState(db, ""))
		}, map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"},
		{"an unknown sampler", func(t *testing.T) string {
			return writeConfig(t, sims, withState(db, ""))
		}, map[string]string{"OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.config(t)
			getenv := func(k string) string { return tc.env[k] }
			var out, errOut bytes.Buffer
			checkErr := run(t.Context(), []string{"check", "-config", path}, getenv, &out, &errOut)
			if code := exitCode(checkErr); code != 2 {
				t.Fatalf("check: exit code %d (%v), want 2; printed:\n%s", code, checkErr, out.String())
			}
			if !strings.Contains(checkErr.Error(), tc.want) || !strings.HasPrefix(checkErr.Error(), path+": ") {
				t.Errorf("check: %q, want %q under the file's name", checkErr, tc.want)
			}

			before := state.dials.Load()
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			start := time.Now()
			serveErr := run(ctx, []string{"serve", "-config", path}, getenv, &out, &errOut)
			if ctx.Err() != nil {
				t.Fatalf("serve started on a configuration check refuses (%v)", checkErr)
			}
			if code := exitCode(serveErr); code != 2 {
				t.Fatalf("serve: exit code %d (%v), want 2", code, serveErr)
			}
			if serveErr.Error() != checkErr.Error() {
				t.Errorf("serve says %q, check says %q: want the same line", serveErr, checkErr)
			}
			if n := state.dials.Load() - before; n != 0 {
				t.Errorf("serve dialed its state store %d times before refusing (after %v)", n, time.Since(start))
			}
		})
	}
}
