package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter/gateways/paywell/paywellsim"
	"github.com/payrouter/payrouter/gateways/sim"
	"github.com/payrouter/payrouter/gateways/stripe"
	"github.com/payrouter/payrouter/gateways/stripe/stripesim"
	"github.com/payrouter/payrouter/internal/testlog"
)

// stripeConfig writes a configuration of one Stripe gateway with that key, and extra keys of the
// gateway (indented as they are).
func stripeConfig(t *testing.T, key, extra string) string {
	t.Helper()
	text := "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nauth: {api_keys: [test-key]}\ngateways:\n  stripe:\n    kind: stripe\n" +
		"    base_url: https://api.stripe.com\n    credentials: {api_key: " + key + "}\n" + extra
	path := filepath.Join(t.TempDir(), "payrouter.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCheckStripeGateway: a stripe gateway needs api_version (what it pins as Stripe-Version),
// takes only a Stripe API version there, and refuses a publishable key; a paywell gateway refuses
// an api_version. Each is one line naming the gateway, exit code 2; the key is never shown.
func TestCheckStripeGateway(t *testing.T) {
	const secret, version = "sk_test_1234567890abcdef", "    api_version: 2026-08-26.dahlia\n"
	cases := []struct {
		name, path, want string
	}{
		{"no api_version", stripeConfig(t, secret, ""), "gateways.stripe: stripe: api_version is required"},
		{"an api_version before latest_charge", stripeConfig(t, secret, "    api_version: \"2020-08-27\"\n"), "older than 2022-11-15"},
		{"not a version", stripeConfig(t, secret, "    api_version: latest\n"), `api_version "latest" is not a Stripe API version`},
		{"a publishable key", stripeConfig(t, "pk_test_1234567890abcdef", version), "gateways.stripe: stripe: credentials.api_key is a publishable key"},
		{"api_version on paywell", gatewayConfig(t, "http://127.0.0.1:9101", version),
			"gateways.paywell: paywell: api_version: the paywell adapter speaks the one version of its API there is"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(t.Context(), []string{"check", "-config", c.path}, os.Getenv, &out, &errOut)
			if code := exitCode(err); code != 2 {
				t.Fatalf("check: exit code %d (%v), want 2", code, err)
			}
			msg := strings.TrimSpace(fmt.Sprint(err))
			if !strings.Contains(msg, c.want) {
				t.Errorf("check: %q, want it to say %q", msg, c.want)
			}
			if strings.Contains(msg+out.String()+errOut.String(), "1234567890abcdef") {
				t.Errorf("check showed the key: %q", msg)
			}
		})
	}
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"check", "-config", stripeConfig(t, secret, version)}, os.Getenv, &out, &errOut); err != nil {
		t.Fatalf("check of a stripe gateway with its api_version: %v\n%s", err, errOut.String())
	}
}

// TestServeThroughStripe: payrouter serve in front of the simulated Stripe (and Paywell behind
// it), over loopback sockets: an authorization, its capture and a refund; a decline, which never
// goes elsewhere; Stripe's rate limit, which does (nothing was processed); and a charge Stripe
// made behind a proxy that answered 503, which stays at Stripe (202 processing, Paywell never
// called) until a look-up by its reference finds it captured.
func TestServeThroughStripe(t *testing.T) {
	stripeSim, paywellSim := stripesim.New(), paywellsim.New()
	sims := map[string]*httptest.Server{}
	for name, s := range map[string]*sim.Server{"stripe": stripeSim, "paywell": paywellSim} {
		srv := httptest.NewServer(s)
		t.Cleanup(func() { s.Close(); srv.Close() })
		sims[name] = srv
	}
	text := fmt.Sprintf(`listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
request_timeout: 3s
auth: {api_keys: [test-key], admin_token: test-admin}
gateways:
  stripe:
    kind: stripe
    base_url: %s
    api_version: %s
    credentials: {api_key: sk_test_serve}
    timeout: 1s
  paywell:
    kind: paywell
    base_url: %s
    credentials: {api_key: secret-paywell}
    timeout: 1s
routes:
  - name: default
    gateways: [stripe, paywell]
`, sims["stripe"].URL, stripe.TestedAPIVersion, sims["paywell"].URL)
	path := filepath.Join(t.TempDir(), "payrouter.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var logs testlog.Buffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve", "-config", path}, os.Getenv, io.Discard, &logs) }()
	storefront, _ := listeners(t, &logs)

	do := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, storefront+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer test-key")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if method == http.MethodPost {
			req.Header.Set("Idempotency-Key", fmt.Sprintf("k-%d", time.Now().UnixNano()))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		var v map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	charge := func(token string, capture bool) (int, map[string]any) {
		return do(http.MethodPost, "/charge", fmt.Sprintf(`{"amount":2000,"currency":"USD","payment_method":{"type":"card","token":%q},"capture":%v}`, token, capture))
	}
	behave := func(mode string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, sims["stripe"].URL+"/_sim/behavior", strings.NewReader(`{"mode":"`+mode+`"}`))
		if r, err := http.DefaultClient.Do(req); err != nil || r.StatusCode != 200 {
			t.Fatalf("stripe mode %s: %v %v", mode, r, err)
		}
	}

	code, c := charge("pm_card_visa", false)
	if code != 201 || c["status"] != "requires_capture" || c["gateway"] != "stripe" || !strings.HasPrefix(fmt.Sprint(c["gateway_reference"]), "pi_") {
		t.Fatalf("authorization: %d %v", code, c)
	}
	id := c["id"].(string)
	if code, c := do(http.MethodPost, "/charge/"+id+"/capture", ""); code != 200 || c["status"] != "succeeded" {
		t.Fatalf("capture: %d %v", code, c)
	}
	if code, rf := do(http.MethodPost, "/charge/"+id+"/refund", `{"amount":500}`); code != 201 || rf["status"] != "succeeded" {
		t.Fatalf("refund: %d %v", code, rf)
	}
	if code, c := charge(sim.DeclineToken, true); code != 402 || c["decline_code"] != stripesim.DeclineCode || c["gateway"] != "stripe" {
		t.Fatalf("decline: %d %v", code, c)
	}
	if n := paywellSim.Stats().Requests; n != 0 {
		t.Fatalf("paywell called %d times before Stripe failed", n)
	}

	behave("unavailable") // Stripe's rate limit: nothing processed, so the next gateway takes it
	if code, c := charge("pm_card_visa", true); code != 201 || c["gateway"] != "paywell" {
		t.Fatalf("charge while Stripe rate-limits: %d %v", code, c)
	}

	behave("process_then_503") // Stripe charged the card; a proxy answered 503
	before := paywellSim.Stats().Requests
	code, c = charge("pm_card_visa", true)
	if code != 202 || c["status"] != "processing" {
		t.Fatalf("charge Stripe made behind a proxy's 503: %d %v", code, c)
	}
	if n := paywellSim.Stats().Requests; n != before {
		t.Fatalf("a charge Stripe may have made was sent to paywell (%d calls)", n-before)
	}
	behave("normal")
	if code, got := do(http.MethodGet, "/charge/"+c["id"].(string), ""); code != 200 || got["status"] != "succeeded" || got["gateway"] != "stripe" {
		t.Fatalf("the processing charge looked up once Stripe answers: %d %v", code, got)
	}

	var statuses []string
	for _, tx := range stripeSim.Ledger().Transactions() {
		statuses = append(statuses, fmt.Sprintf("%s %d/%d", tx.Status, tx.Amount, tx.Refunded))
	}
	if want := []string{"partially_refunded 2000/500", "captured 2000/0"}; !slices.Equal(statuses, want) {
		t.Errorf("Stripe's ledger: %v, want %v", statuses, want)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve: %v", err)
	}
	if strings.Contains(logs.String(), "sk_test_serve") {
		t.Error("the log holds the Stripe key")
	}
}
