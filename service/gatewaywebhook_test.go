package service_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/gateways"
	"github.com/payrouter/payrouter/service"
)

// TestWebhookOnAGatewayWithoutWebhooks: a webhook section on a paywell gateway, whose adapter
// has no webhooks, is refused by the check serve and `payrouter check` make, naming the key; on
// ding it is accepted.
func TestWebhookOnAGatewayWithoutWebhooks(t *testing.T) {
	for _, tc := range []struct {
		kind, want string
	}{
		{"paywell", "gateways.g.webhook: the paywell adapter has no webhooks"},
		{"ding", ""},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "payrouter.yaml")
			text := fmt.Sprintf(`
auth: {api_keys: [%q]}
gateways:
  g:
    kind: %s
    base_url: http://127.0.0.1:1
    credentials: {api_key: x_test}
    webhook: {secrets: [hook_secret_0123456789]}
`, apiKey, tc.kind)
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load(path, os.Getenv, gateways.Kinds())
			if err != nil {
				t.Fatal(err)
			}
			err = service.Validate(t.Context(), cfg, os.Getenv)
			var ce *service.ConfigError
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate: %v; want it accepted", err)
			case tc.want != "" && (!errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate: %v; want a ConfigError containing %q", err, tc.want)
			}
		})
	}
}

// TestReloadTurnsGatewayWebhooksOnAndOff: a reload that adds gateways.ding.webhook opens
// POST /webhooks/ding (a forged call is then 400, not 404), and one that removes it closes it.
func TestReloadTurnsGatewayWebhooksOnAndOff(t *testing.T) {
	urls := serveSims(t, gatewaySims(t))
	plain := configText(urls, "")
	hooked := strings.Replace(plain, "credentials: {api_key: ding_test}, timeout: 2s}", "credentials: {api_key: ding_test}, timeout: 2s, webhook: {secrets: [hook_secret_0123456789]}}", 1)
	if hooked == plain {
		t.Fatal("test bug: the ding line of configText changed")
	}
	svc, path, url := start(t, plain)
	forged := func() int {
		t.Helper()
		resp, err := http.Post(url+"/webhooks/ding", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := forged(); got != http.StatusNotFound {
		t.Fatalf("without a webhook section: %d, want 404", got)
	}
	for _, step := range []struct {
		text string
		want int
	}{{hooked, http.StatusBadRequest}, {plain, http.StatusNotFound}} {
		if err := os.WriteFile(path, []byte(step.text), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := forged(); got != step.want {
			t.Errorf("after the reload: %d, want %d", got, step.want)
		}
	}
}
