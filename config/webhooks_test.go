package config

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter/webhooks"
)

var (
	hookSecret  = webhooks.SecretPrefix + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	hookSecret2 = webhooks.SecretPrefix + base64.StdEncoding.EncodeToString([]byte("fedcba9876543210fedcba9876543210"))
)

// hooksYAML is a file with a named API key and the webhooks section given.
func hooksYAML(section string) string {
	return `
auth:
  api_keys: [{name: shop-eu, key: sk_test_key_0123456789abcdef}, sk_test_key_plain_0123456789ab]
gateways: {g: {kind: paywell, base_url: "http://127.0.0.1:9101", credentials: {api_key: x}}}
webhooks:
` + section
}

// TestWebhookDefaults: an endpoint given its required keys only gets every type, the default
// timeout and bulkhead, and its owner is its key's scope.
func TestWebhookDefaults(t *testing.T) {
	c := mustParse(t, hooksYAML(fmt.Sprintf(`  allow_private: true
  endpoints:
    - {name: shop, url: "http://127.0.0.1:8000/hooks", key_name: shop-eu, secrets: ["%s"]}
`, hookSecret)))
	e := c.Webhooks.Endpoints[0]
	if !slices.Equal(e.Events, []string{"*"}) || e.Timeout != 10*time.Second || e.MaxConcurrent != 10 || e.Insecure {
		t.Errorf("endpoint defaults: %+v", e)
	}
	if c.Webhooks.PollInterval != time.Second {
		t.Errorf("poll_interval = %v, want 1s", c.Webhooks.PollInterval)
	}
	if got := WebhookOwner(e); got != "name:shop-eu" {
		t.Errorf("owner = %q, want the named key's scope", got)
	}
}

// TestWebhookValidation: each mistake in the webhooks section is one line naming its path, and
// no line ever quotes a secret.
func TestWebhookValidation(t *testing.T) {
	endpoint := func(extra string) string {
		return fmt.Sprintf("    - {name: shop, url: \"https://shop.example/hooks\", key_name: shop-eu, secrets: [\"%s\"]%s}\n", hookSecret, extra)
	}
	for _, tc := range []struct {
		name, section string
		want          []string
	}{
		{"name missing", fmt.Sprintf("  endpoints:\n    - {url: \"https://shop.example/h\", key_name: shop-eu, secrets: [\"%s\"]}\n", hookSecret),
			[]string{"webhooks.endpoints[0].name: required"}},
		{"name twice", "  endpoints:\n" + endpoint("") + endpoint(""),
			[]string{`webhooks.endpoints[1].name: "shop" is already the name of webhooks.endpoints[0]; names must be unique`}},
		{"bad name", strings.Replace("  endpoints:\n"+endpoint(""), "name: shop", "name: \"a b\"", 1),
			[]string{"webhooks.endpoints[0].name: must be letters, digits, '-' or '_'"}},
		{"url missing", fmt.Sprintf("  endpoints:\n    - {name: s, key_name: shop-eu, secrets: [\"%s\"]}\n", hookSecret),
			[]string{"webhooks.endpoints[0].url: required"}},
		{"url relative", strings.Replace("  endpoints:\n"+endpoint(""), "https://shop.example/hooks", "/hooks", 1),
			[]string{"webhooks.endpoints[0].url: must be an absolute https:// (or http://) URL"}},
		{"plain http beyond loopback", strings.Replace("  endpoints:\n"+endpoint(""), "https://", "http://", 1),
			[]string{"webhooks.endpoints[0].url: plain http:// to shop.example, which is not loopback"}},
		{"plain http with insecure", strings.Replace("  endpoints:\n"+endpoint(", insecure: true"), "https://", "http://", 1), nil},
		{"loopback without allow_private", strings.Replace("  endpoints:\n"+endpoint(""), "https://shop.example", "http://127.0.0.1:9000", 1),
			[]string{"webhooks.endpoints[0].url: 127.0.0.1 is not a public address", "set webhooks.allow_private: true"}},
		{"localhost without allow_private", strings.Replace("  endpoints:\n"+endpoint(""), "https://shop.example", "http://localhost:9000", 1),
			[]string{"webhooks.endpoints[0].url: localhost is not a public address"}},
		{"private address", strings.Replace("  endpoints:\n"+endpoint(""), "shop.example", "10.0.0.8", 1),
			[]string{"webhooks.endpoints[0].url: 10.0.0.8 is not a public address"}},
		{"metadata address", strings.Replace("  endpoints:\n"+endpoint(""), "shop.example", "169.254.169.254", 1),
			[]string{"webhooks.endpoints[0].url: 169.254.169.254 is not a public address"}},
		{"private address allowed", "  allow_private: true\n  endpoints:\n" + strings.Replace(endpoint(""), "shop.example", "10.0.0.8", 1), nil},
		{"key_name missing", strings.Replace("  endpoints:\n"+endpoint(""), "key_name: shop-eu, ", "", 1),
			[]string{"webhooks.endpoints[0].key_name: required"}},
		{"key_name unknown", strings.Replace("  endpoints:\n"+endpoint(""), "key_name: shop-eu", "key_name: shop-us", 1),
			[]string{`webhooks.endpoints[0].key_name: "shop-us" names no API key; it must be the name of an auth.api_keys entry (known names: shop-eu)`}},
		{"events empty", "  endpoints:\n" + endpoint(", events: []"),
			[]string{"webhooks.endpoints[0].events: is empty, so the endpoint would receive nothing"}},
		{"event unknown", "  endpoints:\n" + endpoint(", events: [charge.succeeded, charge.exploded]"),
			[]string{`webhooks.endpoints[0].events[1]: unknown event type "charge.exploded" (known: charge.succeeded,`}},
		{"star among others", "  endpoints:\n" + endpoint(`, events: ["*", charge.failed]`),
			[]string{`webhooks.endpoints[0].events[0]: "*" already means every type; list it alone`}},
		{"events listed", "  endpoints:\n" + endpoint(", events: [charge.succeeded, charge.failed, refund.succeeded]"), nil},
		{"no secret", "  endpoints:\n    - {name: shop, url: \"https://shop.example/h\", key_name: shop-eu}\n",
			[]string{"webhooks.endpoints[0].secrets: at least one signing secret is required"}},
		{"secret not whsec", "  endpoints:\n    - {name: shop, url: \"https://shop.example/h\", key_name: shop-eu, secrets: [hunter2-hunter2-hunter2]}\n",
			[]string{"webhooks.endpoints[0].secrets[0]: not a signing secret: must start with whsec_"}},
		{"secret short", "  endpoints:\n    - {name: shop, url: \"https://shop.example/h\", key_name: shop-eu, secrets: [whsec_aHVudGVyMg==]}\n",
			[]string{"webhooks.endpoints[0].secrets[0]: not a signing secret: holds 7 bytes; it must hold 24 to 64 random bytes"}},
		{"secret twice", fmt.Sprintf("  endpoints:\n    - {name: shop, url: \"https://shop.example/h\", key_name: shop-eu, secrets: [\"%s\", \"%s\"]}\n", hookSecret, hookSecret),
			[]string{"webhooks.endpoints[0].secrets[1]: the same secret as webhooks.endpoints[0].secrets[0]"}},
		{"two secrets", fmt.Sprintf("  endpoints:\n    - {name: shop, url: \"https://shop.example/h\", key_name: shop-eu, secrets: [\"%s\", \"%s\"]}\n", hookSecret, hookSecret2), nil},
		{"timeout zero", "  endpoints:\n" + endpoint(", timeout: 0s"),
			[]string{"webhooks.endpoints[0].timeout: must be > 0 and at most 1m"}},
		{"timeout long", "  endpoints:\n" + endpoint(", timeout: 5m"),
			[]string{"webhooks.endpoints[0].timeout: must be > 0 and at most 1m"}},
		{"max_concurrent zero", "  endpoints:\n" + endpoint(", max_concurrent: 0"),
			[]string{"webhooks.endpoints[0].max_concurrent: must be >= 1"}},
		{"poll_interval zero", "  poll_interval: 0s\n", []string{"webhooks.poll_interval: must be > 0 and at most 1m"}},
		{"unknown key", "  endpoints:\n" + endpoint(", secret: x"), []string{`unknown key "secret" (did you mean "secrets"?)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := hooksYAML(tc.section)
			if tc.want == nil {
				mustParse(t, text)
				return
			}
			problems := problemsOf(t, text)
			all := strings.Join(problems, "\n")
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("problems:\n%s\nwant a line containing %q", all, w)
				}
			}
			if strings.Contains(all, "hunter2") || strings.Contains(all, "aHVudGVyMg") || strings.Contains(all, hookSecret) {
				t.Errorf("a problem quotes a secret:\n%s", all)
			}
		})
	}
}

// TestWebhookSecretFromEnv: a secret left empty by an unset variable names the variable, and a
// secret from the environment is never quoted.
func TestWebhookSecretFromEnv(t *testing.T) {
	text := hooksYAML("  endpoints:\n    - {name: shop, url: \"https://shop.example/h\", key_name: shop-eu, secrets: [\"${SHOP_WEBHOOK_SECRET}\", \"${OTHER_SECRET}\"]}\n")
	_, err := Parse([]byte(text), func(k string) string {
		if k == "OTHER_SECRET" {
			return "whsec_bm90LWEtc2VjcmV0" // 12 bytes
		}
		return ""
	}, testKinds)
	if err == nil {
		t.Fatal("parsed with an unset secret")
	}
	msg := err.Error()
	if !strings.Contains(msg, "webhooks.endpoints[0].secrets[0]: is empty because ${SHOP_WEBHOOK_SECRET} is not set") {
		t.Errorf("problems:\n%s\nwant the unset variable named", msg)
	}
	if !strings.Contains(msg, "webhooks.endpoints[0].secrets[1]: not a signing secret") || strings.Contains(msg, "bm90LWEtc2VjcmV0") {
		t.Errorf("problems:\n%s\nwant the short secret refused without being quoted", msg)
	}
}

// TestWebhookReload: a change to the webhooks section is applied by a reload.
func TestWebhookReload(t *testing.T) {
	section := "  allow_private: true\n  endpoints:\n    - {name: shop, url: \"http://127.0.0.1:8000/h\", key_name: shop-eu, secrets: [\"%s\"]}\n"
	a := mustParse(t, hooksYAML(fmt.Sprintf(section, hookSecret)))
	b := mustParse(t, hooksYAML(fmt.Sprintf(section, hookSecret2)))
	ch := Diff(a, b)
	if !ch.Webhooks || len(ch.RestartNeeded) != 0 || ch.None() {
		t.Errorf("Diff after a secret rotation = %+v, want webhooks_changed alone", ch)
	}
	if Diff(a, a).Webhooks {
		t.Error("Diff of the same file says webhooks changed")
	}
}
