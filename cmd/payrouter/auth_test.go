package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter/internal/testlog"
)

// TestCheckAndServeRefuseWeakSecretsBeyondLoopback: check and serve refuse the same demo
// secret once a listener is beyond loopback, naming the field and never the value; on loopback
// check accepts it and warns.
func TestCheckAndServeRefuseWeakSecretsBeyondLoopback(t *testing.T) {
	sims := startSims(t)
	loopback := rewriteConfig(t, writeConfig(t, sims, ""), "api_keys: [test-key]", "api_keys: [sk_test_demo]")
	public := rewriteConfig(t, loopback, "listen: 127.0.0.1:0", "listen: 0.0.0.0:0")

	for _, cmd := range []string{"check", "serve"} {
		t.Run(cmd+" beyond loopback", func(t *testing.T) {
			var out, errOut testlog.Buffer
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err := run(ctx, []string{cmd, "-config", public}, os.Getenv, &out, &errOut)
			if code := exitCode(err); code != 2 {
				t.Fatalf("%s: exit code %d (%v), want 2\n%s", cmd, code, err, errOut.String())
			}
			msg := fmt.Sprint(err) + out.String() + errOut.String()
			if !strings.Contains(msg, "auth.api_keys[0]: is a demo secret published with payrouter") ||
				!strings.Contains(msg, "refused because listen accepts connections from other machines") {
				t.Errorf("%s: the error does not name the field and why:\n%s", cmd, msg)
			}
			if strings.Contains(msg, "sk_test_demo") {
				t.Errorf("%s: the error shows the secret:\n%s", cmd, msg)
			}
			if strings.Contains(errOut.String(), "payrouter.serving") {
				t.Errorf("%s served:\n%s", cmd, errOut.String())
			}
		})
	}

	t.Run("check on loopback", func(t *testing.T) {
		var out, errOut bytes.Buffer
		if err := run(t.Context(), []string{"check", "-config", loopback}, os.Getenv, &out, &errOut); err != nil {
			t.Fatalf("check: %v\n%s", err, errOut.String())
		}
		for _, want := range []string{
			"auth.api_keys[0]: is a demo secret published with payrouter",
			"auth.admin_token: is shorter than 24 characters",
			"(allowed because both listeners are on loopback; serve refuses it on any other address)",
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("check does not warn %q:\n%s", want, out.String())
			}
		}
		if strings.Contains(out.String(), "sk_test_demo") {
			t.Errorf("check shows the secret:\n%s", out.String())
		}
	})

	t.Run("an unset variable", func(t *testing.T) {
		path := rewriteConfig(t, loopback, "api_keys: [sk_test_demo]", `api_keys: ["${PAYROUTER_TEST_UNSET_KEY}"]`)
		var out, errOut bytes.Buffer
		err := run(t.Context(), []string{"serve", "-config", path}, func(string) string { return "" }, &out, &errOut)
		if code := exitCode(err); code != 2 || !strings.Contains(fmt.Sprint(err), "auth.api_keys[0]: is empty because ${PAYROUTER_TEST_UNSET_KEY} is not set") {
			t.Errorf("serve with the key's variable unset: exit %d, %v", code, err)
		}
	})
}

// rewriteConfig writes a copy of the configuration at path with old replaced by new.
func rewriteConfig(t *testing.T, path, old, new string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("test bug: %q is not in %s", old, path)
	}
	out := strings.TrimSuffix(path, ".yaml") + fmt.Sprintf("-%d.yaml", time.Now().UnixNano())
	if err := os.WriteFile(out, []byte(strings.Replace(string(data), old, new, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRunDemoScript: `make run` keeps working with one command. Its script is valid bash, and
// the environment it exports (the demo's secrets, which the configuration no longer defaults
// to) makes the configuration it serves pass check, on loopback, with a warning for each demo
// secret. The README's tour uses the same key and token.
func TestRunDemoScript(t *testing.T) {
	for _, script := range []string{"../../scripts/run-demo.sh", "../../scripts/run-fleet.sh"} {
		if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", script, err, out)
		}
	}
	script, err := os.ReadFile("../../scripts/run-demo.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), "bin/payrouter serve -config configs/payrouter.yaml") {
		t.Fatal("scripts/run-demo.sh no longer serves configs/payrouter.yaml: update this test")
	}
	// The script's exports, evaluated by bash in an environment without them.
	cmd := exec.Command("bash", "-c", `set -euo pipefail; eval "$(grep -E '^export [A-Z_]+=' scripts/run-demo.sh)"; env -0`)
	cmd.Dir = "../.."
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("evaluating the script's exports: %v", err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(out), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for _, name := range []string{"PAYROUTER_API_KEY", "PAYROUTER_ADMIN_TOKEN", "PAYWELL_API_KEY", "DING_API_KEY", "TRANGLO_API_KEY"} {
		if env[name] == "" {
			t.Errorf("scripts/run-demo.sh does not export %s", name)
		}
	}
	getenv := func(k string) string { return env[k] }
	for _, path := range []string{"../../configs/payrouter.yaml", "../../configs/payrouter-redis.yaml"} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), []string{"check", "-config", path}, getenv, &stdout, &stderr); err != nil {
			t.Errorf("check %s with the demo's environment: %v\n%s", path, err, stderr.String())
			continue
		}
		if n := strings.Count(stdout.String(), "is a demo secret published with payrouter"); n != 5 {
			t.Errorf("check %s: %d demo-secret warnings, want 5:\n%s", path, n, stdout.String())
		}
		// Without the environment the configuration refuses to start rather than fail open.
		err := run(t.Context(), []string{"check", "-config", path}, func(string) string { return "" }, io.Discard, io.Discard)
		if exitCode(err) != 2 || !strings.Contains(fmt.Sprint(err), "${PAYROUTER_API_KEY} is not set") {
			t.Errorf("check %s without the environment: %v, want it refused naming PAYROUTER_API_KEY", path, err)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if tour := fmt.Sprintf("export KEY=%s ADMIN=%s", env["PAYROUTER_API_KEY"], env["PAYROUTER_ADMIN_TOKEN"]); !strings.Contains(string(readme), tour) {
		t.Errorf("the README's tour does not use the demo's key and token (%q)", tour)
	}
}

// servePath runs serve on the configuration at path until the test ends and returns the
// storefront and admin base URLs and the log.
func servePath(t *testing.T, path string) (storefront, admin string, logs *testlog.Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs = &testlog.Buffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve", "-config", path}, os.Getenv, io.Discard, logs) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	storefront, admin = listeners(t, logs)
	return storefront, admin, logs
}

// listenAddrs finds the listeners in serve's log line that names them.
var listenAddrs = regexp.MustCompile(`"listen":"([^"]+)","admin_listen":"([^"]+)"`)

// listeners waits for serve to log its listeners and returns their base URLs.
func listeners(t *testing.T, logs *testlog.Buffer) (storefront, admin string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var m []string
	if !logs.Await(ctx, func(text string) bool { m = listenAddrs.FindStringSubmatch(text); return m != nil }) {
		t.Fatalf("payrouter did not log its listeners within 10s:\n%s", logs.String())
	}
	return "http://" + m[1], "http://" + m[2]
}

func call(t *testing.T, method, url, token, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("k-%d", time.Now().UnixNano()))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestReloadSwapsCredentials: a reload replaces the API keys and admin tokens of both listeners
// in place: named keys with rights, named admin tokens, and the old ones refused from then on.
func TestReloadSwapsCredentials(t *testing.T) {
	sims := startSims(t)
	path := writeConfig(t, sims, "")
	storefront, admin, logs := servePath(t, path)
	const chargeBody = `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`
	if s := call(t, "POST", storefront+"/charge", "test-key", chargeBody); s != 201 {
		t.Fatalf("a charge before the reload: %d", s)
	}

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	next := strings.Replace(string(data), "auth: {api_keys: [test-key], admin_token: test-admin}\n", `auth:
  api_keys:
    - {name: shop, key: shop-key-new}
    - {name: reader, key: reader-key, rights: [read]}
  admin_tokens:
    - {name: alice, token: alice-token}
`, 1)
	if next == string(data) {
		t.Fatal("test bug: the auth line is not where the test looks")
	}
	if err := os.WriteFile(path, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", admin+"/admin/reload", nil)
	req.Header.Set("Authorization", "Bearer test-admin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Changes struct {
			AuthChanged bool `json:"auth_changed"`
		} `json:"changes"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if resp.StatusCode != 200 || !answer.Changes.AuthChanged {
		t.Fatalf("reload: %d, auth_changed %v", resp.StatusCode, answer.Changes.AuthChanged)
	}

	for _, tc := range []struct {
		what, method, url, token, body string
		want                           int
	}{
		{"the removed key", "POST", storefront + "/charge", "test-key", chargeBody, 401},
		{"the new named key", "POST", storefront + "/charge", "shop-key-new", chargeBody, 201},
		{"a read-only key charging", "POST", storefront + "/charge", "reader-key", chargeBody, 403},
		{"a read-only key reading", "GET", storefront + "/charge/ch_nothing", "reader-key", "", 404},
		{"the removed admin token", "GET", admin + "/admin/breakers", "test-admin", "", 401},
		{"alice's admin token", "GET", admin + "/admin/breakers", "alice-token", "", 200},
	} {
		if got := call(t, tc.method, tc.url, tc.token, tc.body); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.what, got, tc.want)
		}
	}
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"auth.failed"`) && !(strings.Contains(l, `"client_address":"127.0.0.1"`) && strings.Contains(l, `"reason":"wrong"`)) {
			t.Errorf("auth.failed line without the client address or reason: %s", l)
		}
	}
	if n := strings.Count(logs.String(), `"msg":"auth.failed"`); n != 2 {
		t.Errorf("%d auth.failed lines, want 2 (the removed key and admin token)", n)
	}
	for _, secret := range []string{"test-key", "test-admin", "shop-key-new", "reader-key", "alice-token"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log contains %q", secret)
		}
	}
}
