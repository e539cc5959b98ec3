package service_test

import (
	"context"
	"crypto/tls"
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

	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/gateways"
	"github.com/payrouter/payrouter/gateways/ding/dingsim"
	"github.com/payrouter/payrouter/gateways/paywell/paywellsim"
	"github.com/payrouter/payrouter/gateways/sim"
	"github.com/payrouter/payrouter/httpapi"
	"github.com/payrouter/payrouter/internal/testpki"
	"github.com/payrouter/payrouter/service"
)

const apiKey = "key-service-test-0123456789"

// gatewaySims starts a simulated Paywell and Ding on loopback.
func gatewaySims(t *testing.T) map[string]*sim.Server {
	t.Helper()
	sims := map[string]*sim.Server{"paywell": paywellsim.New(), "ding": dingsim.New()}
	for _, s := range sims {
		t.Cleanup(s.Close)
	}
	return sims
}

// configText is a payrouter configuration over sims whose routes section is routes.
func configText(urls map[string]string, routes string) string {
	return fmt.Sprintf(`
auth:
  api_keys: [%q]
limits: {requests_per_second: 0, key_share: 1, auth_failures_per_minute: 0}
gateways:
  paywell: {kind: paywell, base_url: %q, credentials: {api_key: pw_test}, timeout: 2s}
  ding: {kind: ding, base_url: %q, credentials: {api_key: ding_test}, timeout: 2s}
%s`, apiKey, urls["paywell"], urls["ding"], routes)
}

// serveSims serves each sim over HTTP and returns their URLs.
func serveSims(t *testing.T, sims map[string]*sim.Server) map[string]string {
	t.Helper()
	urls := map[string]string{}
	for name, s := range sims {
		ts := httptest.NewServer(s)
		t.Cleanup(ts.Close)
		urls[name] = ts.URL
	}
	return urls
}

// start writes text where the service reads it, builds the service as `payrouter serve` does
// and serves its storefront handler; it returns the service, the file and the storefront's URL.
func start(t *testing.T, text string) (*service.Service, string, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "payrouter.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := service.Load(t.Context(), path, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(t.Context(), cfg, service.Options{Path: path, Getenv: os.Getenv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	svc.Start()
	ts := httptest.NewServer(httpapi.NewServer(svc.Deps()))
	t.Cleanup(ts.Close)
	return svc, path, ts.URL
}

// charge sends POST /charge and returns the status and body.
func charge(t *testing.T, url, key, currency string) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"amount":1500,"currency":%q,"payment_method":{"type":"card","token":"tok_visa"}}`, currency)
	req, _ := http.NewRequest("POST", url+"/charge", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestCloseWaitsForLateWork: a hedged charge answers on the fast gateway's authorization (the
// hedge) while the slow one's sale is still on its way. Close, called as soon as the charge
// answered, returns only once the charge is settled from that sale, through connections and a
// store that are still open: the sale captured, so it keeps the charge and the hedge's
// authorization is voided. A service that closed at once would leave the card held twice.
func TestCloseWaitsForLateWork(t *testing.T) {
	sims := gatewaySims(t)
	sims["paywell"].SetBehavior(sim.Behavior{Latency: 600 * time.Millisecond})
	svc, _, url := start(t, configText(serveSims(t, sims), `
routes:
  - name: hedged
    gateways: [paywell, ding]
    hedge: {after: 50ms, budget: 1}
`))
	status, body := charge(t, url, "late-1", "USD")
	if status != 201 || !strings.Contains(body, `"gateway":"ding"`) || !strings.Contains(body, `"capture_queued":true`) {
		t.Fatalf("the hedged charge answered %d %s, want 201 on ding, its capture queued", status, body)
	}
	if txs := sims["ding"].Ledger().Transactions(); len(txs) != 1 || txs[0].Status != sim.StatusAuthorized {
		t.Fatalf("ding's ledger before Close: %+v, want the hedge's authorization", txs)
	}
	svc.Close()
	if txs := sims["paywell"].Ledger().Transactions(); len(txs) != 1 || txs[0].Status != sim.StatusCaptured {
		t.Errorf("paywell's ledger after Close: %+v, want its sale captured", txs)
	}
	if txs := sims["ding"].Ledger().Transactions(); len(txs) != 1 || txs[0].Status != sim.StatusVoided {
		t.Errorf("ding's ledger after Close: %+v, want the hedge's authorization voided", txs)
	}
	svc.Close() // a second Close does nothing
}

// TestReload: a reload that changes the routes sends the next charge the new way; a file that
// does not load is refused with its problem and changes nothing.
func TestReload(t *testing.T) {
	sims := gatewaySims(t)
	urls := serveSims(t, sims)
	svc, path, url := start(t, configText(urls, "routes: [{name: default, gateways: [paywell, ding]}]\n"))
	if status, body := charge(t, url, "r-1", "USD"); status != 201 || !strings.Contains(body, `"gateway":"paywell"`) {
		t.Fatalf("first charge: %d %s, want 201 on paywell", status, body)
	}
	write := func(text string) {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(configText(urls, "routes: [{name: default, gateways: [ding, paywell]}]\n"))
	changes, err := svc.Reload(context.Background())
	if err != nil || !changes.Routes {
		t.Fatalf("reload: %+v, %v; want the routes changed", changes, err)
	}
	if status, body := charge(t, url, "r-2", "USD"); status != 201 || !strings.Contains(body, `"gateway":"ding"`) {
		t.Fatalf("after the reload: %d %s, want 201 on ding", status, body)
	}
	write(configText(urls, "routes: [{name: default, gateways: [stripe]}]\n"))
	if _, err := svc.Reload(context.Background()); !errors.Is(err, httpapi.ErrConfigRefused) || !strings.Contains(err.Error(), "stripe") {
		t.Fatalf("a broken reload: %v, want ErrConfigRefused naming stripe", err)
	}
	if status, body := charge(t, url, "r-3", "USD"); status != 201 || !strings.Contains(body, `"gateway":"ding"`) {
		t.Errorf("after the refused reload: %d %s, want 201 on ding still", status, body)
	}
	if got := svc.Config().Routes[0].Gateways; got[0] != "ding" {
		t.Errorf("the configuration in use after a refused reload routes %v", got)
	}
}

// TestNewRefusesAConfigurationThatWentBad: a gateway's CA file that disappeared after the
// configuration loaded is a ConfigError (exit 2), named by its key, and nothing is left open.
func TestNewRefusesAConfigurationThatWentBad(t *testing.T) {
	ca := testpki.NewCA(t, "service-test")
	ding := httptest.NewUnstartedServer(dingsim.New())
	ding.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "ding", "127.0.0.1").TLS(t)}}
	ding.StartTLS()
	t.Cleanup(ding.Close)
	path := filepath.Join(t.TempDir(), "payrouter.yaml")
	text := fmt.Sprintf(`
auth: {api_keys: [%q]}
gateways:
  ding:
    kind: ding
    base_url: %q
    credentials: {api_key: ding_test}
    tls: {ca_file: %q}
`, apiKey, ding.URL, ca.CertFile)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, os.Getenv, gateways.Kinds())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(ca.CertFile); err != nil {
		t.Fatal(err)
	}
	_, err = service.New(t.Context(), cfg, service.Options{})
	var ce *service.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "gateways.ding.tls") {
		t.Fatalf("New with a CA file gone: %v, want a ConfigError naming gateways.ding.tls", err)
	}
	if err := service.Validate(t.Context(), cfg, os.Getenv); !errors.As(err, &ce) {
		t.Errorf("Validate with a CA file gone: %v, want the same ConfigError", err)
	}
}

// TestReloadSharesMaxMemoryAmongTheKeys: each API key's share of state.max_memory follows the
// keys a reload brings, so that a key added shares the same bound rather than adding to it.
func TestReloadSharesMaxMemoryAmongTheKeys(t *testing.T) {
	urls := serveSims(t, gatewaySims(t))
	text := configText(urls, "routes: [{name: default, gateways: [paywell]}]\n")
	svc, path, _ := start(t, text)
	share := func() float64 {
		t.Helper()
		families, err := svc.Deps().Metrics.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "payrouter_memstore_key_limit_bytes" {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("no payrouter_memstore_key_limit_bytes")
		return 0
	}
	if got := share(); got != 512<<20 {
		t.Fatalf("one key's share: %.0f, want all of the default 512MiB", got)
	}
	two := strings.Replace(text, fmt.Sprintf("api_keys: [%q]", apiKey), fmt.Sprintf("api_keys: [%q, %q]", apiKey, apiKey+"-two"), 1)
	if err := os.WriteFile(path, []byte(two), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := share(); got != 256<<20 {
		t.Errorf("after a reload adding a key, each one's share: %.0f, want 256MiB", got)
	}
}
