package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter/internal/testlog"
)

// TestVersion: `payrouter version` names the version, the commit and the Go toolchain, a field a
// line or as JSON; --version says the same in one line. What the Makefile stamps is checked on
// the binary it builds (deploy/image_test.go, `make package`).
func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if err := run(t.Context(), []string{"version"}, nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		k, v, _ := strings.Cut(line, " ")
		fields[k] = strings.TrimSpace(v)
	}
	platform := runtime.GOOS + "/" + runtime.GOARCH
	if fields["go"] != runtime.Version() || fields["platform"] != platform || fields["version"] == "" || fields["commit"] == "" {
		t.Errorf("payrouter version printed:\n%s\nwant version, commit, go %s and platform %s", out.String(), runtime.Version(), platform)
	}

	out.Reset()
	if err := run(t.Context(), []string{"version", "-json"}, nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(out.Bytes(), &raw); err != nil {
		t.Fatalf("version -json: %v\n%s", err, out.String())
	}
	for _, k := range []string{"version", "commit", "modified", "go_version", "platform"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("version -json lacks %q: %s", k, out.String())
		}
	}
	if raw["go_version"] != runtime.Version() || raw["version"] != fields["version"] {
		t.Errorf("version -json says %s; payrouter version said %v", out.String(), fields)
	}

	for _, flag := range []string{"--version", "-version"} {
		out.Reset()
		if err := run(t.Context(), []string{flag}, nil, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("payrouter %s (commit ", fields["version"]); !strings.HasPrefix(out.String(), want) || !strings.Contains(out.String(), runtime.Version()+" "+platform) {
			t.Errorf("payrouter %s printed %q, want %q... with %s %s", flag, out.String(), want, runtime.Version(), platform)
		}
	}

	err := run(t.Context(), []string{"version", "extra"}, nil, io.Discard, io.Discard)
	if code := exitCode(err); code != 2 || !strings.Contains(fmt.Sprint(err), `"extra"`) {
		t.Errorf("payrouter version extra: exit %d (%v), want 2 naming the argument", code, err)
	}
}

// freeAddr is a loopback address no one listens on now, for a serve whose listening line a
// log level hides.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestLogLevel: -log-level drops the lines below it. At info, the default, a request's
// http.request line and the configuration's warnings (config.warning, WARN: its secrets are short,
// allowed on loopback) are written; at warn only the warnings; at error neither. An admin's
// action's audit line (INFO) is written at every level: no level ends the audit trail.
func TestLogLevel(t *testing.T) {
	sims := startSims(t)
	for _, tc := range []struct {
		level              string
		requests, warnings bool
	}{
		{"", true, true},
		{"debug", true, true},
		{"INFO", true, true},
		{"warn", false, true},
		{"error", false, false},
	} {
		t.Run("level="+tc.level, func(t *testing.T) {
			storefront, admin := freeAddr(t), freeAddr(t)
			path := writeConfig(t, sims, "")
			cfg, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			cfg = bytes.Replace(cfg, []byte("listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\n"),
				[]byte("listen: "+storefront+"\nadmin_listen: "+admin+"\n"), 1)
			if err := os.WriteFile(path, cfg, 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"serve", "-config", path}
			if tc.level != "" {
				args = append(args, "-log-level", tc.level)
			}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var logs testlog.Buffer
			done := make(chan error, 1)
			go func() { done <- run(ctx, args, os.Getenv, io.Discard, &logs) }()
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if r, err := http.Get("http://" + storefront + "/healthz"); err == nil {
					r.Body.Close()
					if r.StatusCode == 200 {
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("serve did not answer on %s within 10s:\n%s", storefront, logs.String())
				}
			}
			if code := call(t, "GET", "http://"+storefront+"/charge/ch_nope", "test-key", ""); code != 404 {
				t.Errorf("GET of an unknown charge: %d, want 404", code)
			}
			if code := call(t, "POST", "http://"+admin+"/admin/breakers/paywell/charge/reset", "test-admin", ""); code != 200 {
				t.Errorf("POST /admin/breakers/paywell/charge/reset: %d, want 200", code)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("serve: %v\n%s", err, logs.String())
			}
			var requests, warnings, audits int
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				if l == "" {
					continue // nothing logged at all
				}
				var line struct{ Level, Msg string }
				if err := json.Unmarshal([]byte(l), &line); err != nil {
					t.Fatalf("log line is not JSON: %q", l)
				}
				switch line.Msg {
				case "audit":
					audits++
				case "http.request":
					requests++
				case "config.warning":
					warnings++
					if line.Level != "WARN" {
						t.Errorf("config.warning at level %s, want WARN", line.Level)
					}
				}
			}
			if (requests > 0) != tc.requests || (warnings > 0) != tc.warnings {
				t.Errorf("-log-level %q wrote %d http.request and %d config.warning lines; want http.request %v, config.warning %v:\n%s",
					tc.level, requests, warnings, tc.requests, tc.warnings, logs.String())
			}
			if audits != 1 {
				t.Errorf("-log-level %q wrote %d audit lines for one breaker reset, want 1:\n%s", tc.level, audits, logs.String())
			}
		})
	}
}
