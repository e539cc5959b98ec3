package config

import (
	"github.com/payrouter/payrouter/resilience"

	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// secretsYAML puts a secret everywhere a configuration can hold one.
var secretsYAML = strings.NewReplacer(
	"api_keys: [sk_test_key_0123456789abcdef]", "api_keys: [sk_secret_key_0123456789ab]",
	"admin_token: adm_test_token_0123456789abc", "admin_token: adm_secret_token_0123456789",
	"base_url: http://127.0.0.1:9102", "base_url: \"https://user:url_secret_pw@127.0.0.1:9102/v1\"",
	"request_timeout: 10s\n", "request_timeout: 10s\nstate: {redis_url: \"redis://:redis_secret_pw@127.0.0.1:6379/0\", database_url: \"postgres://payrouter:db_secret_pw@127.0.0.1:5432/payrouter\"}\n",
).Replace(baseYAML)

var secrets = []string{"pw_secret_1", "dg_secret_2", "sk_secret_key_0123456789ab", "adm_secret_token_0123456789", "url_secret_pw", "redis_secret_pw", "db_secret_pw"}

// TestSecretsNeverPrinted: credentials, keys and passwords in URLs do not come out of any way
// of printing a Config or its parts.
func TestSecretsNeverPrinted(t *testing.T) {
	c := mustParse(t, secretsYAML)
	if c.Gateways["paywell"].Credentials["api_key"] != "pw_secret_1" || c.Auth.AdminToken != "adm_secret_token_0123456789" {
		t.Fatal("test bug: the secrets were not read")
	}

	outputs := map[string]string{}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%d", "%x", "%q"} {
		outputs["fmt "+verb+" Config"] = fmt.Sprintf(verb, *c)
		outputs["fmt "+verb+" *Config"] = fmt.Sprintf(verb, c)
		outputs["fmt "+verb+" Gateway"] = fmt.Sprintf(verb, c.Gateways["ding"])
		outputs["fmt "+verb+" Auth"] = fmt.Sprintf(verb, c.Auth)
		outputs["fmt "+verb+" State"] = fmt.Sprintf(verb, c.State)
	}
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	outputs["json"] = string(js)
	ym, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	outputs["yaml"] = string(ym)
	for name, h := range map[string]func(*bytes.Buffer) slog.Handler{
		"slog json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		"slog text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var b bytes.Buffer
		slog.New(h(&b)).Info("config", "gateway", c.Gateways["paywell"], "auth", c.Auth, "state", c.State, "config", c)
		outputs[name] = b.String()
	}
	sum, err := json.Marshal(c.Summary())
	if err != nil {
		t.Fatal(err)
	}
	outputs["summary"] = string(sum)
	var report strings.Builder
	if _, err := c.Check().WriteTo(&report); err != nil {
		t.Fatal(err)
	}
	outputs["check"] = report.String()

	for name, out := range outputs {
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("%s shows the secret %q:\n%s", name, s, out)
			}
		}
	}
	// The masking keeps the shape: which credentials exist, and that an admin token is set.
	if !strings.Contains(outputs["fmt %+v Gateway"], "api_key:[redacted]") || !strings.Contains(outputs["json"], `"AdminToken":"[redacted]"`) {
		t.Errorf("masked output lost its shape:\n%s\n%s", outputs["fmt %+v Gateway"], outputs["json"])
	}
}

func TestSecretsNotInProblems(t *testing.T) {
	text := edit(t, secretsYAML, "kind: ding", "kind: nope")
	text = edit(t, text, "credentials: {api_key: pw_secret_1}", "credentials: [pw_secret_1]")
	text = edit(t, text, "api_keys: [sk_secret_key_0123456789ab]", "api_keys: {sk_secret_key_0123456789ab: 1}")
	text = edit(t, text, "redis://:redis_secret_pw@127.0.0.1:6379/0", "redis://:redis_secret_pw@%zz")
	_, err := Parse([]byte(text), nil, testKinds)
	if err == nil {
		t.Fatal("want problems")
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Errorf("the problems show the secret %q:\n%v", s, err)
		}
	}
}

func TestSummary(t *testing.T) {
	text := edit(t, secretsYAML, "max_concurrent: 20", "max_concurrent: 20\n    operations: {refund: {timeout: 5s}}")
	got := mustParse(t, text).Summary()
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"paywell", "ding", "tranglo"}) {
		t.Errorf("summary order = %q", names)
	}
	pw := got[0]
	if pw.Kind != "paywell" || pw.Timeout != "3s" || pw.MaxConcurrent != 20 || pw.MaxWait != "0s" ||
		pw.OperationTimeouts["refund"] != "5s" || pw.Breaker.ConsecutiveFailures != 5 || pw.Breaker.Cooldown != "30s" || pw.Breaker.Probe != string(resilience.ProbeInBand) {
		t.Errorf("paywell summary = %+v", pw)
	}
	if want := "https://redacted@127.0.0.1:9102/v1"; got[1].BaseURL != want {
		t.Errorf("ding base_url = %q, want %q", got[1].BaseURL, want)
	}
}
