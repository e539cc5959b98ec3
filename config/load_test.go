package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/routing"
	"github.com/payrouter/payrouter/webhooks"
)

// testKinds stands in for gateways.Kinds(), which config must not import.
var testKinds = []string{"paywell", "ding", "tranglo"}

// baseYAML is a valid configuration that gives no warning in Check; tests edit one line of it.
const baseYAML = `request_timeout: 10s
auth:
  api_keys: [sk_test_key_0123456789abcdef]
  admin_token: adm_test_token_0123456789abc
gateways:
  paywell:
    kind: paywell
    base_url: http://127.0.0.1:9101
    credentials: {api_key: pw_secret_1}
    timeout: 3s
    max_concurrent: 20
    breaker:
      consecutive_failures: 5
      cooldown: 30s
  ding:
    kind: ding
    base_url: http://127.0.0.1:9102
    credentials: {api_key: dg_secret_2}
  tranglo:
    kind: tranglo
    base_url: http://127.0.0.1:9103
routes:
  - name: asia
    match: {currency: [MYR], country: [MY]}
    gateways: [tranglo, paywell]
  - name: big-tickets
    match: {min_amount: 100000}
    split: {paywell: 70, ding: 30}
  - name: default
    gateways: [paywell, ding, tranglo]
`

// edit replaces old, which must occur in text, by new.
func edit(t *testing.T, text, old, new string) string {
	t.Helper()
	if !strings.Contains(text, old) {
		t.Fatalf("test bug: %q is not in the configuration", old)
	}
	return strings.Replace(text, old, new, 1)
}

// keysOf lists the keys of a.APIKeys.
func keysOf(a Auth) []string {
	var out []string
	for _, k := range a.APIKeys {
		out = append(out, k.Key)
	}
	return out
}

func mustParse(t *testing.T, text string) *Config {
	t.Helper()
	c, err := Parse([]byte(text), nil, testKinds)
	if err != nil {
		t.Fatalf("Parse: unexpected error:\n%v", err)
	}
	return c
}

// problemsOf parses text and returns the problem lines; it fails the test when there are none
// or when the error is not a *ValidationError.
func problemsOf(t *testing.T, text string) []string {
	t.Helper()
	_, err := Parse([]byte(text), nil, testKinds)
	if err == nil {
		t.Fatalf("Parse: want an error, got none")
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Parse: want a *ValidationError, got %T: %v", err, err)
	}
	if len(ve.Problems) == 0 {
		t.Fatalf("Parse: *ValidationError without problems")
	}
	return ve.Problems
}

func TestParseBase(t *testing.T) {
	c := mustParse(t, baseYAML)
	if err := c.Validate(testKinds); err != nil {
		t.Errorf("Validate of a parsed configuration: %v", err)
	}
	if w := c.Check().Warnings; len(w) != 0 {
		t.Errorf("the base configuration should give no warning; got:\n%s", strings.Join(w, "\n"))
	}
}

func TestDefaults(t *testing.T) {
	c := mustParse(t, `
auth: {api_keys: [key_0123456789abcdef012345]}
gateways:
  b: {kind: ding, base_url: "http://127.0.0.1:1"}
  a: {kind: paywell, base_url: "https://pay.example"}
`)
	defBreaker := resilience.BreakerSettings{
		BreakerRules:     payrouter.BreakerRules{ConsecutiveFailures: 5, MinRequests: 20, Window: 30 * time.Second, Cooldown: 30 * time.Second},
		HalfOpenRequests: 1, Probe: resilience.ProbeInBand, ProbeInterval: 5 * time.Second, ProbeTimeout: 2 * time.Second,
	}
	timeout := resilience.TimeoutSettings{Timeout: 3 * time.Second}
	bulkhead := resilience.BulkheadSettings{MaxConcurrent: 20}
	want := &Config{
		Listen:         "127.0.0.1:8080",
		AdminListen:    "127.0.0.1:9090",
		RequestTimeout: 10 * time.Second,
		Auth:           Auth{APIKeys: []APIKey{{Key: "key_0123456789abcdef012345"}}},
		State: State{RedisTimeout: 100 * time.Millisecond, DatabaseTimeout: 800 * time.Millisecond, DatabaseMigrate: true,
			Retention: 395 * 24 * time.Hour, MaxMemory: 512 << 20},
		Idempotency: Idempotency{TTL: 24 * time.Hour},
		Gateways: map[string]Gateway{
			"b": {Kind: "ding", BaseURL: "http://127.0.0.1:1", TimeoutSettings: timeout, BulkheadSettings: bulkhead, Breaker: defBreaker, TLS: GatewayTLS{MinVersion: "1.2"}},
			"a": {Kind: "paywell", BaseURL: "https://pay.example", TimeoutSettings: timeout, BulkheadSettings: bulkhead, Breaker: defBreaker, TLS: GatewayTLS{MinVersion: "1.2"}},
		},
		GatewayNames: []string{"b", "a"},
		Routes:       []routing.Route{{Name: "default", Gateways: []string{"b", "a"}, Strategy: routing.Ordered}},
		Fallbacks:    Fallbacks{Charge: FallbackFail, Refund: FallbackQueue, Status: FallbackDegrade},

		MaxConnections: 4096, MaxConnectionsPerAddress: 1024, IdleTimeout: 75 * time.Second,
		AdminMaxConnections: 64, AdminMaxConnectionsPerAddress: 16, AdminIdleTimeout: 75 * time.Second,
		Limits:   Limits{RequestsPerSecond: 200, Burst: 400, KeyShare: 0.5, AuthFailuresPerMinute: 20},
		Webhooks: webhooks.Settings{PollInterval: time.Second},
	}
	c.literalSecrets = nil // the key written in the file: fileWarnings' business, tested there
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", *c, *want)
	}
}

// TestExplicitZeroVersusAbsent: a key the file gives keeps its value, even 0; only an absent key
// takes the default. An empty string counts as absent, so "${VAR:-}" falls back to the default.
func TestExplicitZeroVersusAbsent(t *testing.T) {
	const breakerLine = "      consecutive_failures: 5\n      cooldown: 30s\n"
	tests := []struct {
		name    string
		breaker string // replaces the paywell breaker's body
		check   func(b resilience.BreakerSettings) bool
		want    string
	}{
		{"no rule given: default consecutive_failures", "      cooldown: 30s\n",
			func(b resilience.BreakerSettings) bool {
				return b.ConsecutiveFailures == 5 && b.FailuresInWindow == 0 && b.FailureRate == 0
			}, "5/0/0"},
		{"explicit 0 alone is off", "      consecutive_failures: 0\n      cooldown: 30s\n",
			func(b resilience.BreakerSettings) bool { return b.ConsecutiveFailures == 0 }, "consecutive_failures 0"},
		{"failure_rate alone: no consecutive rule", "      failure_rate: 0.5\n      cooldown: 30s\n",
			func(b resilience.BreakerSettings) bool {
				return b.ConsecutiveFailures == 0 && b.FailureRate == 0.5 && b.MinRequests == 20
			}, "0/0/0.5, min 20"},
		{"failures_in_window alone", "      failures_in_window: 10\n      cooldown: 30s\n",
			func(b resilience.BreakerSettings) bool { return b.ConsecutiveFailures == 0 && b.FailuresInWindow == 10 }, "0/10/0"},
		{"min_requests 0 without a rate", "      min_requests: 0\n      cooldown: 30s\n",
			func(b resilience.BreakerSettings) bool { return b.MinRequests == 0 && b.ConsecutiveFailures == 5 }, "min_requests 0"},
		{"empty probe takes the default", "      probe: \"\"\n      cooldown: 30s\n",
			func(b resilience.BreakerSettings) bool { return b.Probe == resilience.ProbeInBand }, "in_band"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, edit(t, baseYAML, breakerLine, tc.breaker))
			if b := c.Gateways["paywell"].Breaker; !tc.check(b) {
				t.Errorf("breaker = %+v, want %s", b, tc.want)
			}
		})
	}

	t.Run("empty breaker block", func(t *testing.T) {
		c := mustParse(t, edit(t, baseYAML, "    breaker:\n"+breakerLine, "    breaker: {}\n"))
		if b := c.Gateways["paywell"].Breaker; b.ConsecutiveFailures != 5 || b.Cooldown != 30*time.Second {
			t.Errorf("breaker: {} = %+v, want the defaults", b)
		}
	})
	t.Run("explicit max_wait and empty listen", func(t *testing.T) {
		c := mustParse(t, edit(t, baseYAML, "request_timeout: 10s\n", "request_timeout: 10s\nlisten: \"\"\n"))
		if c.Listen != "127.0.0.1:8080" {
			t.Errorf("listen: \"\" = %q, want the default 127.0.0.1:8080", c.Listen)
		}
	})
	t.Run("explicit zero timeout is not defaulted", func(t *testing.T) {
		got := problemsOf(t, edit(t, baseYAML, "timeout: 3s", "timeout: 0s"))
		if !slices.Equal(got, []string{"gateways.paywell.timeout: must be > 0"}) {
			t.Errorf("problems = %q", got)
		}
	})
	t.Run("explicit zero max_concurrent is not defaulted", func(t *testing.T) {
		got := problemsOf(t, edit(t, baseYAML, "max_concurrent: 20", "max_concurrent: 0"))
		if !slices.Equal(got, []string{"gateways.paywell.max_concurrent: must be >= 1"}) {
			t.Errorf("problems = %q", got)
		}
	})
	t.Run("null is absent", func(t *testing.T) {
		c := mustParse(t, edit(t, baseYAML, "timeout: 3s", "timeout: ~"))
		if got := c.Gateways["paywell"].Timeout; got != 3*time.Second {
			t.Errorf("timeout: ~ = %v, want the default 3s", got)
		}
	})
}

func TestFileOrder(t *testing.T) {
	c := mustParse(t, `
auth: {api_keys: [key_0123456789abcdef012345]}
gateways:
  zeta: {kind: ding, base_url: "http://127.0.0.1:1"}
  alpha: {kind: paywell, base_url: "http://127.0.0.1:2"}
  mid: {kind: tranglo, base_url: "http://127.0.0.1:3"}
routes:
  - name: split
    split: {mid: 1, zeta: 5, alpha: 2}
  - name: rest
    split: {alpha: 1, mid: 1}
`)
	if want := []string{"zeta", "alpha", "mid"}; !slices.Equal(c.GatewayNames, want) || !slices.Equal(c.GatewayOrder(), want) {
		t.Errorf("GatewayNames = %q, GatewayOrder() = %q, want %q", c.GatewayNames, c.GatewayOrder(), want)
	}
	if want := []routing.Weight{{Gateway: "mid", Weight: 1}, {Gateway: "zeta", Weight: 5}, {Gateway: "alpha", Weight: 2}}; !slices.Equal(c.Routes[0].Split, want) {
		t.Errorf("routes[0].Split = %v, want %v", c.Routes[0].Split, want)
	}
	if want := []string{"mid", "zeta", "alpha"}; !slices.Equal(c.Routes[0].Members(), want) {
		t.Errorf("routes[0].Members() = %q, want %q", c.Routes[0].Members(), want)
	}
	if want := []string{"alpha", "mid"}; !slices.Equal(c.Routes[1].Members(), want) {
		t.Errorf("routes[1].Members() = %q, want %q", c.Routes[1].Members(), want)
	}

	t.Run("default route follows the file", func(t *testing.T) {
		c := mustParse(t, `
auth: {api_keys: [key_0123456789abcdef012345]}
gateways:
  zeta: {kind: ding, base_url: "http://127.0.0.1:1"}
  alpha: {kind: paywell, base_url: "http://127.0.0.1:2"}
routes: []
`)
		want := []routing.Route{{Name: "default", Gateways: []string{"zeta", "alpha"}, Strategy: routing.Ordered}}
		if !reflect.DeepEqual(c.Routes, want) {
			t.Errorf("routes = %+v, want %+v", c.Routes, want)
		}
	})
	t.Run("built in code, without GatewayNames", func(t *testing.T) {
		c := &Config{Gateways: map[string]Gateway{"b": {}, "a": {}}}
		if got := c.GatewayOrder(); !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("GatewayOrder() = %q, want sorted", got)
		}
	})
}

// TestDecodeProblems: reading problems name the line and the field path, all of them at once,
// and a value that could not be read gives one line, not a second one from validation.
func TestDecodeProblems(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		want     []string
	}{
		{"unknown top-level key", "request_timeout: 10s\n", "request_timeout: 10s\nnot_a_payrouter_setting: true\n",
			[]string{`line 2: unknown key "not_a_payrouter_setting"`}},
		{"misspelt top-level key", "request_timeout: 10s\n", "request_timeout: 10s\nadmin_listn: x\n",
			[]string{`line 2: unknown key "admin_listn" (did you mean "admin_listen"?)`}},
		{"unknown key in auth", "  admin_token: adm_test_token_0123456789abc\n", "  admin_token: adm_test_token_0123456789abc\n  token: x\n",
			[]string{`line 5: auth: unknown key "token"`}},
		{"unknown key in a gateway", "    timeout: 3s\n", "    timout: 3s\n",
			[]string{`line 10: gateways.paywell: unknown key "timout" (did you mean "timeout"?)`}},
		{"unknown key in a breaker", "      cooldown: 30s\n", "      cooldwn: 30s\n",
			[]string{`line 14: gateways.paywell.breaker: unknown key "cooldwn" (did you mean "cooldown"?)`}},
		{"unknown key in an operation override", "    max_concurrent: 20\n", "    max_concurrent: 20\n    operations: {refund: {timeout: 5s, retries: 3}}\n",
			[]string{`line 12: gateways.paywell.operations.refund: unknown key "retries"`}},
		{"unknown key in a route", "  - name: default\n", "  - name: default\n    weight: 3\n",
			[]string{`line 30: routes[2]: unknown key "weight"`}},
		{"unknown key in a match", "match: {min_amount: 100000}", "match: {min_amount: 100000, amount: 5}",
			[]string{`line 27: routes[1].match: unknown key "amount"`}},
		{"unknown key in a hedge", "split: {paywell: 70, ding: 30}", "split: {paywell: 70, ding: 30}\n    hedge: {after: 800ms, delay: 1s}",
			[]string{`line 29: routes[1].hedge: unknown key "delay"`}},
		{"unknown key in fallbacks", "request_timeout: 10s\n", "request_timeout: 10s\nfallbacks: {charge: fail, capture: fail}\n",
			[]string{`line 2: fallbacks: unknown key "capture"`}},
		{"unknown keys in state and idempotency", "request_timeout: 10s\n", "request_timeout: 10s\nstate: {redis: x}\nidempotency: {ttl: 1h, size: 5}\n",
			[]string{`line 2: state: unknown key "redis"`, `line 3: idempotency: unknown key "size"`}},
		{"bad duration names the path, once", "timeout: 3s", "timeout: 3x",
			[]string{`line 10: gateways.paywell.timeout: "3x" is not a duration (a number with a unit: "500ms", "3s", "24h")`}},
		{"duration without a unit", "request_timeout: 10s", "request_timeout: 10",
			[]string{`line 1: request_timeout: "10" is not a duration (a number with a unit: "500ms", "3s", "24h")`}},
		{"duration as a list", "cooldown: 30s", "cooldown: [30s]",
			[]string{`line 14: gateways.paywell.breaker.cooldown: want a duration like "500ms" or "24h", got a list`}},
		{"fraction for an integer", "max_concurrent: 20", "max_concurrent: 2.5",
			[]string{`line 11: gateways.paywell.max_concurrent: want a whole number, got "2.5"`}},
		{"word for an integer", "max_concurrent: 20", "max_concurrent: many",
			[]string{`line 11: gateways.paywell.max_concurrent: want a whole number, got "many"`}},
		{"word for a float", "consecutive_failures: 5", "failure_rate: half",
			[]string{`line 13: gateways.paywell.breaker.failure_rate: want a number, got "half"`}},
		{"scalar for a list", "gateways: [paywell, ding, tranglo]", "gateways: paywell",
			[]string{`line 30: routes[2].gateways: want a list, got "paywell"`}},
		{"scalar for a gateway", "  tranglo:\n    kind: tranglo\n    base_url: http://127.0.0.1:9103\n", "  tranglo: yes\n",
			[]string{`line 19: gateways.tranglo: want a mapping of keys, got "yes"`}},
		{"credentials are never echoed", "credentials: {api_key: pw_secret_1}", "credentials: pw_secret_1",
			[]string{`line 9: gateways.paywell.credentials: want a mapping of names, got a value (not shown: it may be a secret)`}},
		{"key given twice", "    max_concurrent: 20\n", "    max_concurrent: 20\n    timeout: 4s\n",
			[]string{`line 12: gateways.paywell.timeout: given twice (first at line 10)`}},
		{"several at once, in file order", "request_timeout: 10s\n", "request_timeout: 10s\nbogus: 1\nidempotency: {ttl: forever}\n",
			[]string{`line 2: unknown key "bogus"`, `line 3: idempotency.ttl: "forever" is not a duration (a number with a unit: "500ms", "3s", "24h")`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := problemsOf(t, edit(t, baseYAML, tc.old, tc.new))
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestReadProblems(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []string
	}{
		{"syntax error", "gateways:\n  paywell: {kind: [\n", []string{"line 2: did not find expected node content"}},
		{"two documents", baseYAML + "---\nlisten: :1\n", []string{"line 31: only one YAML document is allowed"}},
		{"not a mapping", "- a\n- b\n", []string{"line 1: want a mapping of keys, got a list"}},
		{"unterminated variable", "listen: ${PORT\n", []string{"line 1: unterminated ${ (a variable reference needs a closing })"}},
		{"a mapping merging itself", "auth: &a {api_keys: [key_0123456789abcdef012345], <<: *a}\n",
			[]string{"line 1: auth: << merges a mapping into itself", "gateways: at least one gateway is required"}},
		{"merge of a scalar", "auth: {<<: 5}\n",
			[]string{"line 1: auth: << must merge a mapping or a list of mappings", "gateways: at least one gateway is required"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := problemsOf(t, tc.text); !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestEnvironment(t *testing.T) {
	env := map[string]string{"API_KEY": "sk_live_key_0123456789abcdef", "PW_URL": "https://paywell.example", "SLOTS": "7"}
	text := edit(t, baseYAML, "api_keys: [sk_test_key_0123456789abcdef]", `api_keys: ["${API_KEY}", "${OTHER_KEY:-sk_other_key_0123456789abcde}"]`)
	text = edit(t, text, "base_url: http://127.0.0.1:9101", `base_url: "${PW_URL:-http://127.0.0.1:9101}"`)
	text = edit(t, text, "max_concurrent: 20", `max_concurrent: "${SLOTS:-20}"`)
	c, err := Parse([]byte(text), func(k string) string { return env[k] }, testKinds)
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(c.Auth); !slices.Equal(got, []string{"sk_live_key_0123456789abcdef", "sk_other_key_0123456789abcde"}) {
		t.Errorf("api_keys = %q", got)
	}
	if g := c.Gateways["paywell"]; g.BaseURL != "https://paywell.example" || g.MaxConcurrent != 7 {
		t.Errorf("paywell = base_url %q, max_concurrent %d; want the environment's", g.BaseURL, g.MaxConcurrent)
	}

	t.Run("unset key is refused", func(t *testing.T) {
		got := problemsOf(t, edit(t, baseYAML, "api_keys: [sk_test_key_0123456789abcdef]", `api_keys: ["${API_KEY}"]`))
		if !slices.Equal(got, []string{"auth.api_keys[0]: is empty because ${API_KEY} is not set in payrouter's environment (set it, or write ${API_KEY:-} to mean empty on purpose)"}) {
			t.Errorf("problems = %q", got)
		}
	})
}

// TestMergeKeys: YAML anchors and merge keys work, so gateways can share one breaker block.
func TestMergeKeys(t *testing.T) {
	text := edit(t, baseYAML, "    breaker:\n      consecutive_failures: 5\n      cooldown: 30s\n",
		"    breaker: &breaker\n      consecutive_failures: 4\n      cooldown: 40s\n")
	text = edit(t, text, "    base_url: http://127.0.0.1:9102\n", "    base_url: http://127.0.0.1:9102\n    breaker: *breaker\n")
	text = edit(t, text, "    base_url: http://127.0.0.1:9103\n", "    base_url: http://127.0.0.1:9103\n    breaker: {<<: *breaker, cooldown: 45s}\n")
	c := mustParse(t, text)
	for name, want := range map[string]time.Duration{"paywell": 40 * time.Second, "ding": 40 * time.Second, "tranglo": 45 * time.Second} {
		if b := c.Gateways[name].Breaker; b.ConsecutiveFailures != 4 || b.Cooldown != want {
			t.Errorf("%s breaker = %+v, want consecutive_failures 4, cooldown %v", name, b, want)
		}
	}
}

// demoEnv is the environment scripts/run-demo.sh gives `make run`: the demo secrets, passed
// explicitly (cmd/payrouter's TestRunDemoScript reads them from the script itself).
var demoEnv = map[string]string{
	"PAYROUTER_API_KEY": "sk_test_demo", "PAYROUTER_ADMIN_TOKEN": "admin_test_demo",
	"PAYWELL_API_KEY": "pw_test_demo", "DING_API_KEY": "dg_test_demo", "TRANGLO_API_KEY": "tg_test_demo",
}

// TestDemoConfigsCarryNoSecrets: the shipped configurations fail closed. With the environment
// unset, each refuses to load and names every variable to set, instead of falling back to a
// secret anyone can read.
func TestDemoConfigsCarryNoSecrets(t *testing.T) {
	for _, path := range []string{"../configs/payrouter.yaml", "../configs/payrouter-redis.yaml"} {
		t.Run(path, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range DemoSecrets {
				if strings.Contains(string(data), s) {
					t.Errorf("%s carries the demo secret %q", path, s)
				}
			}
			_, err = Load(path, func(string) string { return "" }, testKinds)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("with no environment: %v, want problems", err)
			}
			for _, want := range []string{
				"auth.api_keys[0]: is empty because ${PAYROUTER_API_KEY} is not set",
				"auth.admin_token: is empty because ${PAYROUTER_ADMIN_TOKEN} is not set",
				"gateways.paywell.credentials.api_key: is empty because ${PAYWELL_API_KEY} is not set",
				"gateways.ding.credentials.api_key: is empty because ${DING_API_KEY} is not set",
				"gateways.tranglo.credentials.api_key: is empty because ${TRANGLO_API_KEY} is not set",
			} {
				if !slices.ContainsFunc(ve.Problems, func(p string) bool { return strings.HasPrefix(p, want) }) {
					t.Errorf("problems lack %q:\n%s", want, ve)
				}
			}
		})
	}
}

func TestDemoConfig(t *testing.T) {
	c, err := Load("../configs/payrouter.yaml", func(k string) string { return demoEnv[k] }, testKinds)
	if err != nil {
		t.Fatalf("configs/payrouter.yaml:\n%v", err)
	}
	if got := c.GatewayNames; !slices.Equal(got, []string{"paywell", "ding", "tranglo"}) {
		t.Errorf("gateways = %q", got)
	}
	if got := keysOf(c.Auth); !slices.Equal(got, []string{"sk_test_demo"}) || c.Auth.AdminToken != "admin_test_demo" || c.State.RedisURL != "" {
		t.Errorf("auth and state not applied: %q %q %q", got, c.Auth.AdminToken, c.State.RedisURL)
	}
	var names []string
	for _, r := range c.Routes {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"asia", "big-tickets", "default"}) {
		t.Errorf("routes = %q", names)
	}
	if got := c.Routes[1].Members(); !slices.Equal(got, []string{"paywell", "ding"}) {
		t.Errorf("big-tickets split order = %q", got)
	}
	// On loopback the demo secrets are allowed, and check says so, one line for each.
	w := c.Check().Warnings
	for _, field := range []string{"auth.api_keys[0]", "auth.admin_token", "gateways.paywell.credentials.api_key",
		"gateways.ding.credentials.api_key", "gateways.tranglo.credentials.api_key"} {
		if !slices.Contains(w, field+": is a demo secret published with payrouter; use a random one of your own (openssl rand -hex 32) (allowed because both listeners are on loopback; serve refuses it on any other address)") {
			t.Errorf("no demo-secret warning for %s; got:\n%s", field, strings.Join(w, "\n"))
		}
	}
	if len(w) != 5 {
		t.Errorf("the demo should warn only about its secrets; got:\n%s", strings.Join(w, "\n"))
	}

	t.Run("environment overrides", func(t *testing.T) {
		env := map[string]string{"PAYWELL_URL": "https://pw.example", "PAYROUTER_REDIS_URL": "redis://127.0.0.1:6379/0",
			"PAYROUTER_DATABASE_URL": "postgres://payrouter@127.0.0.1:5432/payrouter", "DING_API_KEY": "dg_live"}
		c, err := Load("../configs/payrouter.yaml", func(k string) string {
			if v, ok := env[k]; ok {
				return v
			}
			return demoEnv[k]
		}, testKinds)
		if err != nil {
			t.Fatal(err)
		}
		if c.Gateways["paywell"].BaseURL != "https://pw.example" || c.State.RedisURL != env["PAYROUTER_REDIS_URL"] || c.Gateways["ding"].Credentials["api_key"] != "dg_live" {
			t.Errorf("environment not applied: %+v", c)
		}
	})

	t.Run("refused beyond loopback", func(t *testing.T) {
		data, err := os.ReadFile("../configs/payrouter.yaml")
		if err != nil {
			t.Fatal(err)
		}
		// As the container image runs it: PAYROUTER_LISTEN says where.
		_, err = Parse(data, func(k string) string {
			if k == "PAYROUTER_LISTEN" {
				return "0.0.0.0:8080"
			}
			return demoEnv[k]
		}, testKinds)
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("demo secrets on 0.0.0.0: %v, want problems", err)
		}
		got := ve.Problems
		for _, p := range got {
			if !strings.Contains(p, "is a demo secret published with payrouter") || !strings.Contains(p, "refused because listen accepts connections from other machines") {
				t.Errorf("unexpected problem %q", p)
			}
			for _, s := range DemoSecrets {
				if strings.Contains(p, s) {
					t.Errorf("the problem shows the secret: %q", p)
				}
			}
		}
		if len(got) != 5 {
			t.Errorf("want 5 problems, one per demo secret; got %q", got)
		}
	})
}

// TestContractConfig: the black-box suite's configuration loads, with the environment run.sh
// gives it. The suite lives outside this module, beside the checkout: `make test` passes its
// directory in PAYROUTER_CONTRACT_SUITE (the Makefile's CONTRACT_SUITE), and the test skips
// without it.
func TestContractConfig(t *testing.T) {
	dir := os.Getenv("PAYROUTER_CONTRACT_SUITE")
	if dir == "" {
		t.Skip("PAYROUTER_CONTRACT_SUITE is not set (make test sets it to the contract suite's directory)")
	}
	path := filepath.Join(dir, "contract.yaml")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s not here: %v", path, err)
	}
	env := map[string]string{"PAYROUTER_API_KEY": "sk_contract"}
	c, err := Load(path, func(k string) string { return env[k] }, testKinds)
	if err != nil {
		t.Fatalf("contract.yaml:\n%v", err)
	}
	if c.Gateways["tranglo"].MaxConcurrent != 2 || c.Gateways["paywell"].Breaker.ConsecutiveFailures != 3 {
		t.Errorf("contract.yaml read wrongly: %+v", c.Gateways)
	}
	if len(c.Check().Gateways) != 3 {
		t.Errorf("Check: want the capacity of 3 gateways")
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load("testdata/does-not-exist.yaml", nil, testKinds)
	var ve *ValidationError
	if !errors.Is(err, os.ErrNotExist) || errors.As(err, &ve) {
		t.Errorf("Load of a missing file = %v, want a not-exist error that is no ValidationError", err)
	}
}

// TestAliasBomb: aliases let a small file stand for millions of values; decoding stops at a
// budget with one clear line instead of running out of time or memory. (The schema has no
// recursive type, so lists of lists cannot nest deeper than routes[].gateways[].)
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("auth: {api_keys: [key_0123456789abcdef012345]}\ngateways: {a: {kind: ding, base_url: 'http://x'}}\nroutes:\n  - &r {name: r, gateways: [a")
	b.WriteString(strings.Repeat(", a", 3000))
	b.WriteString("]}\n")
	b.WriteString(strings.Repeat("  - *r\n", 3000)) // 9 million gateway names from 30 KB
	start := time.Now()
	got := problemsOf(t, b.String())
	if !slices.ContainsFunc(got, func(p string) bool {
		return strings.HasSuffix(p, ": the document is too large or repeats aliases too often")
	}) {
		t.Errorf("problems = %q, want the budget's line", got[:min(len(got), 5)])
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the alias bomb took %v", d)
	}
}
