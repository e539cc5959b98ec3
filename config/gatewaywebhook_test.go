package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

const dingWebhook = "    credentials: {api_key: dg_secret_2}\n"

func TestGatewayWebhook(t *testing.T) {
	text := edit(t, baseYAML, dingWebhook, dingWebhook+"    webhook: {secrets: [\"${DING_HOOK_OLD}\", \"${DING_HOOK_NEW}\"]}\n")
	c := mustParseEnv(t, text, map[string]string{"DING_HOOK_OLD": "ding_hook_secret_old_0123", "DING_HOOK_NEW": "ding_hook_secret_new_0123"})
	w := c.Gateways["ding"].Webhook
	if w == nil || len(w.Secrets) != 2 || w.Secrets[1] != "ding_hook_secret_new_0123" || w.Tolerance != 5*time.Minute {
		t.Fatalf("ding's webhook = %+v, want both secrets and the default tolerance of 5m", w)
	}
	if c.Gateways["paywell"].Webhook != nil {
		t.Error("paywell has no webhook section, so no webhook")
	}
	for _, verb := range []string{"%v", "%+v", "%#v"} {
		if out := fmt.Sprintf(verb, c.Gateways["ding"]); strings.Contains(out, "ding_hook_secret") {
			t.Errorf("%s of the gateway shows a webhook secret: %s", verb, out)
		}
	}
	if len(c.Gateways["ding"].Webhook.Secrets) != 2 || c.Gateways["ding"].Webhook.Secrets[0] != "ding_hook_secret_old_0123" {
		t.Error("printing the gateway changed its secrets")
	}

	cases := []struct {
		name, section string
		env           map[string]string
		want          string
	}{
		{"no secrets", "{tolerance: 1m}", nil, "gateways.ding.webhook.secrets: at least one signing secret is required"},
		{"an unset variable", `{secrets: ["${NOPE}"]}`, nil, "gateways.ding.webhook.secrets[0]: is empty because ${NOPE} is not set"},
		{"the same twice", `{secrets: [a_secret_0123456789, a_secret_0123456789]}`, nil, "gateways.ding.webhook.secrets[1]: the same secret as gateways.ding.webhook.secrets[0]"},
		{"too many", `{secrets: [a1, a2, a3, a4, a5, a6]}`, nil, "gateways.ding.webhook.secrets: 6 secrets; at most 5"},
		{"no tolerance", `{secrets: [s], tolerance: 0s}`, nil, "gateways.ding.webhook.tolerance: must be > 0 and at most 1h"},
		{"too much tolerance", `{secrets: [s], tolerance: 2h}`, nil, "gateways.ding.webhook.tolerance: must be > 0 and at most 1h"},
		{"an unknown key", `{secrets: [s], secret: s}`, nil, `gateways.ding.webhook: unknown key "secret"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text := edit(t, baseYAML, dingWebhook, dingWebhook+"    webhook: "+tc.section+"\n")
			_, err := Parse([]byte(text), func(k string) string { return tc.env[k] }, testKinds)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v\nwant a problem containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "a_secret_0123456789") {
				t.Errorf("the error shows a secret: %v", err)
			}
		})
	}
}
