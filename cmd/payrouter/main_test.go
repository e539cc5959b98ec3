package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter/gateways/ding/dingsim"
	"github.com/payrouter/payrouter/gateways/paywell/paywellsim"
	"github.com/payrouter/payrouter/gateways/sim"
	"github.com/payrouter/payrouter/gateways/tranglo/tranglosim"
	"github.com/payrouter/payrouter/internal/testlog"
)

// startSims runs the three simulated gateways in process, on loopback sockets.
func startSims(t *testing.T) map[string]*httptest.Server {
	t.Helper()
	out := map[string]*httptest.Server{}
	for name, s := range map[string]*sim.Server{"paywell": paywellsim.New(), "ding": dingsim.New(), "tranglo": tranglosim.New()} {
		srv := httptest.NewServer(s)
		t.Cleanup(func() { s.Close(); srv.Close() })
		out[name] = srv
	}
	return out
}

// writeConfig writes a configuration whose gateways are the given simulators.
func writeConfig(t *testing.T, sims map[string]*httptest.Server, extra string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nrequest_timeout: 3s\n")
	fmt.Fprintf(&b, "auth: {api_keys: [test-key], admin_token: test-admin}\ngateways:\n")
	for _, name := range []string{"paywell", "ding", "tranglo"} {
		fmt.Fprintf(&b, "  %s:\n    kind: %s\n    base_url: %s\n    credentials: {api_key: secret-%s}\n    timeout: 1s\n    breaker: {consecutive_failures: 3, cooldown: 10s}\n",
			name, name, sims[name].URL, name)
	}
	b.WriteString("routes:\n  - name: default\n    gateways: [paywell, ding, tranglo]\n")
	b.WriteString(extra)
	path := filepath.Join(t.TempDir(), "payrouter.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

func TestCheck(t *testing.T) {
	sims := startSims(t)
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"check", "-config", writeConfig(t, sims, "")}, os.Getenv, &out, &errOut)
	if err != nil {
		t.Fatalf("check of a valid configuration: %v\n%s", err, errOut.String())
	}
	for _, g := range []string{"paywell: 20 slots / 1s timeout", "ding", "tranglo"} {
		if !strings.Contains(out.String(), g) {
			t.Errorf("check output lacks %q:\n%s", g, out.String())
		}
	}
	if strings.Contains(out.String(), "secret-") {
		t.Errorf("check printed a credential:\n%s", out.String())
	}
}

func TestBadCommandLinesAndConfigsExit2(t *testing.T) {
	sims := startSims(t)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "no command"},
		{"unknown command", []string{"launch"}, `unknown command "launch"`},
		{"no -config", []string{"serve"}, "-config FILE is required"},
		{"unknown log level", []string{"serve", "-log-level", "verbose", "-config", writeConfig(t, sims, "")}, `invalid value "verbose" for flag -log-level: want one of debug, info, warn, error`},
		{"log level of the prober", []string{"probe", "-log-level", "warning", "-config", writeConfig(t, sims, "")}, `invalid value "warning" for flag -log-level: want one of debug, info, warn, error`},
		{"missing file", []string{"check", "-config", "/nonexistent/payrouter.yaml"}, "/nonexistent/payrouter.yaml"},
		{"unknown key", []string{"check", "-config", writeConfig(t, sims, "not_a_setting: 1\n")}, "not_a_setting"},
		{"redis url of another scheme", []string{"serve", "-config", writeConfig(t, sims, "state: {redis_url: \"http://127.0.0.1:6379/0\"}\n")}, "state.redis_url"},
		{"probe without redis", []string{"probe", "-config", writeConfig(t, sims, "")}, "state.redis_url"},
		{"redis without a database", []string{"serve", "-config", writeConfig(t, sims, "state: {redis_url: \"redis://127.0.0.1:6379/0\"}\n")}, "needs state.database_url"},
		{"database url of another scheme", []string{"serve", "-config", writeConfig(t, sims, "state: {database_url: \"mysql://127.0.0.1/p\"}\n")}, "state.database_url"},
		{"migrate without a database", []string{"migrate", "-config", writeConfig(t, sims, "")}, "state.database_url is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(t.Context(), tc.args, os.Getenv, &out, &errOut)
			if code := exitCode(err); code != 2 {
				t.Fatalf("exit code %d (%v), want 2", code, err)
			}
			if msg := fmt.Sprint(err) + errOut.String(); !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not name %q", msg, tc.want)
			}
		})
	}
}

// TestServeChargesAndDrains runs the whole service in process: a charge through the real
// adapters and simulators, then a shutdown that lets a slow charge under way finish.
func TestServeChargesAndDrains(t *testing.T) {
	sims := startSims(t)
	path := writeConfig(t, sims, "")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var logs testlog.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve", "-config", path}, os.Getenv, io.Discard, &logs) }()

	storefront, admin := listeners(t, &logs)

	charge := func(amount int) (*http.Response, []byte) {
		body := fmt.Sprintf(`{"amount":%d,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`, amount)
		req, _ := http.NewRequest("POST", storefront+"/charge", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer test-key")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("k-%d", amount))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("POST /charge: %v", err)
			return nil, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, body := charge(1999)
	if resp == nil || resp.StatusCode != 201 || !strings.Contains(string(body), `"gateway":"paywell"`) {
		t.Fatalf("charge: %v %s", resp, body)
	}
	r, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if !strings.Contains(string(metrics), `payrouter_charges_total{gateway="paywell",status="succeeded"} 1`) {
		t.Errorf("metrics do not count the charge:\n%s", metrics)
	}

	// A charge under way when the shutdown begins still gets its answer.
	put, _ := http.NewRequest("PUT", sims["paywell"].URL+"/_sim/behavior", strings.NewReader(`{"mode":"normal","latency":"500ms"}`))
	if r, err := http.DefaultClient.Do(put); err != nil || r.StatusCode != 200 {
		t.Fatalf("slowing paywell: %v %v", r, err)
	}
	slow := make(chan int, 1)
	go func() {
		resp, _ := charge(2999)
		if resp == nil {
			slow <- 0
			return
		}
		slow <- resp.StatusCode
	}()
	// The shutdown starts once the charge is at paywell.
	for deadline := time.Now().Add(5 * time.Second); ; {
		var st struct {
			InFlight int `json:"in_flight"`
		}
		if r, err := http.Get(sims["paywell"].URL + "/_sim/stats"); err == nil {
			_ = json.NewDecoder(r.Body).Decode(&st)
			r.Body.Close()
		}
		if st.InFlight > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow charge never reached paywell")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if code := <-slow; code != 201 {
		t.Errorf("a charge under way during shutdown answered %d, want 201", code)
	}
	if err := <-done; err != nil {
		t.Errorf("serve returned %v after a clean shutdown\n%s", err, logs.String())
	}
	for _, secret := range []string{"secret-paywell", "test-key", "test-admin", "tok_visa"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log contains %q", secret)
		}
	}
	var line map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Errorf("log line is not JSON: %q", l)
		}
	}
}
