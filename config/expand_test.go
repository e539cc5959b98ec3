package config

import (
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// expandDoc parses in, expands it and returns the top-level mapping's scalar values by key.
func expandDoc(t *testing.T, in string, getenv func(string) string) (map[string]string, []string) {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(in), &root); err != nil {
		t.Fatalf("test bug: %q is not YAML: %v", in, err)
	}
	_, problems := expandTree(&root, getenv)
	got := map[string]string{}
	if len(root.Content) == 1 && root.Content[0].Kind == yaml.MappingNode {
		m := root.Content[0].Content
		for i := 0; i+1 < len(m); i += 2 {
			if v := follow(m[i+1]); v != nil && v.Kind == yaml.ScalarNode {
				got[m[i].Value] = v.Value
			}
		}
	}
	return got, problems
}

func TestExpand(t *testing.T) {
	env := map[string]string{"HOST": "db.internal", "PORT": "6379", "EMPTY": "", "DOLLAR": "${HOST}"}
	getenv := func(k string) string { return env[k] }

	tests := []struct {
		name     string
		in       string
		want     map[string]string
		problems []string
	}{
		{name: "set", in: "a: ${HOST}", want: map[string]string{"a": "db.internal"}},
		{name: "inside a value", in: "url: redis://${HOST}:${PORT}/0", want: map[string]string{"url": "redis://db.internal:6379/0"}},
		{name: "default used when unset", in: "a: ${NOPE:-fallback}", want: map[string]string{"a": "fallback"}},
		{name: "default used when empty", in: "a: ${EMPTY:-fallback}", want: map[string]string{"a": "fallback"}},
		{name: "default ignored when set", in: "a: ${HOST:-fallback}", want: map[string]string{"a": "db.internal"}},
		{name: "empty default", in: `a: "${NOPE:-}"`, want: map[string]string{"a": ""}},
		{name: "default with colon and slashes", in: "a: ${NOPE:-http://127.0.0.1:9101}", want: map[string]string{"a": "http://127.0.0.1:9101"}},
		{name: "missing variable is empty", in: "a: '${NOPE}'", want: map[string]string{"a": ""}},
		{name: "dollar alone untouched", in: "a: pa$$word$", want: map[string]string{"a": "pa$$word$"}},
		{name: "dollar before a name untouched", in: "a: $HOST and $(cmd) and ^x$", want: map[string]string{"a": "$HOST and $(cmd) and ^x$"}},
		{name: "value is not expanded again", in: "a: ${DOLLAR}", want: map[string]string{"a": "${HOST}"}},
		{name: "dollar at the end", in: "a: $", want: map[string]string{"a": "$"}},
		{name: "inside a list", in: "a: [x]\nb: [\"${HOST}\", y]", want: map[string]string{}},
		{name: "an alias gets the expanded value", in: "a: &h ${HOST}\nb: *h", want: map[string]string{"a": "db.internal", "b": "db.internal"}},
		{name: "block scalar", in: "a: |\n  ${HOST}\n  ${PORT}\n", want: map[string]string{"a": "db.internal\n6379\n"}},
		// Comments and keys are not values: nothing in them is expanded, or an error.
		{name: "comments are not expanded", in: "# ${HOST} and ${unterminated\na: 1", want: map[string]string{"a": "1"}},
		{name: "keys are not expanded", in: "${HOST}: 1", want: map[string]string{"${HOST}": "1"}},
		{
			name:     "unterminated names its line",
			in:       "a: 1\nb: ${HOST\nc: 2",
			problems: []string{"line 2: unterminated ${ (a variable reference needs a closing })"},
		},
		{
			name:     "unterminated at the end of a value",
			in:       "a: ${",
			problems: []string{"line 1: unterminated ${ (a variable reference needs a closing })"},
		},
		{
			name:     "unterminated in a block scalar names its own line",
			in:       "a: 1\nb: |\n  fine\n  ${HOST\n",
			problems: []string{"line 4: unterminated ${ (a variable reference needs a closing })"},
		},
		{
			name: "every problem is reported",
			in:   "a: ${X\nb: ${}\nc: ${1X}\nd: ${A B}",
			problems: []string{
				"line 1: unterminated ${ (a variable reference needs a closing })",
				"line 2: ${}: not a variable name (letters, digits and _, not starting with a digit)",
				"line 3: ${1X}: not a variable name (letters, digits and _, not starting with a digit)",
				"line 4: ${A B}: not a variable name (letters, digits and _, not starting with a digit)",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := expandDoc(t, tc.in, getenv)
			if !slices.Equal(problems, tc.problems) {
				t.Fatalf("problems = %q, want %q", problems, tc.problems)
			}
			if tc.problems != nil {
				return
			}
			for k, want := range tc.want {
				if got[k] != want {
					t.Errorf("%s = %q, want %q", k, got[k], want)
				}
			}
		})
	}
}

func TestExpandNilGetenv(t *testing.T) {
	got, problems := expandDoc(t, "a: ${X:-d} ${Y}.", nil)
	if problems != nil || got["a"] != "d ." {
		t.Errorf("expand with nil getenv = %q, %q; want %q and no problems", got["a"], problems, "d .")
	}
}

// TestExpandCannotChangeTheStructure: a variable's value stays inside its one scalar. Expanded
// as text, `a", "b` would have added an API key and a newline a key of its own.
func TestExpandCannotChangeTheStructure(t *testing.T) {
	const attacker = "attacker_key_0123456789abcdef"
	tests := []struct {
		name, value string
	}{
		{"a quote and a comma", `sk_live_key_0123456789abcdef", "` + attacker},
		{"a flow list", `sk_live_key_0123456789abcdef, ` + attacker + `]`},
		{"a newline and a key", "sk_live_key_0123456789abcdef\n  admin_token: " + attacker},
		{"a newline and a list item", "sk_live_key_0123456789abcdef\n  - " + attacker},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			text := edit(t, baseYAML, "api_keys: [sk_test_key_0123456789abcdef]", `api_keys: ["${KEY}"]`)
			c := mustParseEnv(t, text, map[string]string{"KEY": tc.value})
			if len(c.Auth.APIKeys) != 1 || c.Auth.APIKeys[0].Key != tc.value {
				t.Errorf("api_keys = %d keys %q, want the one value", len(c.Auth.APIKeys), keysOf(c.Auth))
			}
			if c.Auth.AdminToken != "adm_test_token_0123456789abc" {
				t.Errorf("admin_token changed to %q", c.Auth.AdminToken)
			}
		})
	}
	t.Run("in a list item unquoted", func(t *testing.T) {
		text := edit(t, baseYAML, "api_keys: [sk_test_key_0123456789abcdef]", "api_keys:\n    - ${KEY}")
		c := mustParseEnv(t, text, map[string]string{"KEY": "sk_live_key_0123456789abcdef\n    - " + attacker})
		if len(c.Auth.APIKeys) != 1 {
			t.Errorf("api_keys = %q, want one key", keysOf(c.Auth))
		}
	})
}

// TestExpandPlainScalarsTakeTheirType: an unquoted reference reads as what its value would be
// written there: a number for a number, and null (the default) when it is unset.
func TestExpandPlainScalarsTakeTheirType(t *testing.T) {
	text := edit(t, baseYAML, "max_concurrent: 20", "max_concurrent: ${SLOTS}")
	text = edit(t, text, "request_timeout: 10s", "request_timeout: ${BUDGET}")
	text = edit(t, text, "consecutive_failures: 5", "consecutive_failures: ${TRIPS:-4}")
	c := mustParseEnv(t, text, map[string]string{"SLOTS": "7"})
	if g := c.Gateways["paywell"]; g.MaxConcurrent != 7 || g.Breaker.ConsecutiveFailures != 4 {
		t.Errorf("paywell max_concurrent %d, consecutive_failures %d; want 7 and 4", g.MaxConcurrent, g.Breaker.ConsecutiveFailures)
	}
	if c.RequestTimeout != defaultRequestTimeout {
		t.Errorf("request_timeout from an unset variable = %v, want the default", c.RequestTimeout)
	}
}

// TestExpandedValuesNeverQuoted: a secret put by mistake in a field that quotes bad values is
// never shown; the message names the variable instead.
func TestExpandedValuesNeverQuoted(t *testing.T) {
	const secret = "sk_live_Secret_9f8e7d6c5b4a"
	tests := []struct {
		name, old, new, want string
	}{
		{"a duration", "timeout: 3s", "timeout: ${S}",
			"line 10: gateways.paywell.timeout: the value of ${S} (not shown) is not a duration"},
		{"a quoted duration", "timeout: 3s", `timeout: "x${S}"`, "gateways.paywell.timeout: the value of ${S} (not shown) is not a duration"},
		{"a whole number", "max_concurrent: 20", "max_concurrent: ${S}", "gateways.paywell.max_concurrent: want a whole number, got the value of ${S} (not shown)"},
		{"a number", "consecutive_failures: 5", "failure_rate: ${S}", "failure_rate: want a number, got the value of ${S} (not shown)"},
		{"a boolean", "request_timeout: 10s", "request_timeout: 10s\nstate: {database_migrate: \"${S}\"}", "state.database_migrate: want true or false, got the value of ${S} (not shown)"},
		{"a kind", "kind: ding", "kind: ${S}", "gateways.ding.kind: unknown kind the value of ${S} (not shown)"},
		{"a listener", "request_timeout: 10s", "request_timeout: 10s\nlisten: ${S}", "listen: the value of ${S} (not shown) is not host:port"},
		{"a currency", "currency: [MYR]", `currency: ["${S}"]`, "match.currency[0]: the value of ${S} (not shown) is not a currency code"},
		{"a route's gateway", "gateways: [tranglo, paywell]", `gateways: [tranglo, "${S}"]`, "gateway the value of ${S} (not shown) is not configured"},
		{"a route's name", "name: asia", "name: ${S}\n    strategy: nope", `routes[0].strategy: must be ordered or success_rate, got "nope"`},
		{"a strategy", "name: asia", "name: asia\n    strategy: ${S}", "routes[0] (asia): strategy: must be ordered or success_rate, got the value of ${S} (not shown)"},
		{"a fallback", "request_timeout: 10s", "request_timeout: 10s\nfallbacks: {refund: \"${S}\"}", "fallbacks.refund: must be queue or fail, got the value of ${S} (not shown)"},
		{"a right", "api_keys: [sk_test_key_0123456789abcdef]", "api_keys: [{key: sk_test_key_0123456789abcdef, rights: [\"${S}\"]}]", "auth.api_keys[0].rights[0]: unknown right the value of ${S} (not shown)"},
		{"a hedge", "split: {paywell: 70, ding: 30}", "split: {paywell: 70, ding: 30}\n    hedge: {after: \"${S}\"}", "hedge.after: must be a positive duration (\"800ms\") or \"p95\", got the value of ${S} (not shown)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(edit(t, baseYAML, tc.old, tc.new)), func(k string) string {
				if k == "S" {
					return secret
				}
				return ""
			}, testKinds)
			if err == nil {
				t.Fatal("want an error")
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "Secret_9f8e") {
				t.Errorf("the error shows the secret:\n%v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error:\n%v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// TestExpandFlowCollectionNeedsQuotes: an unquoted reference inside { } is cut by YAML at its
// "}" before expansion can see it; the syntax error says how to write it.
func TestExpandFlowCollectionNeedsQuotes(t *testing.T) {
	text := edit(t, baseYAML, "credentials: {api_key: pw_secret_1}", "credentials: {api_key: ${PW_KEY:-x}}")
	got := problemsOf(t, text)
	if len(got) != 1 || !strings.Contains(got[0], `a ${...} reference inside [ ] or { } must be quoted: "${NAME}"`) {
		t.Errorf("problems = %q, want the hint about quotes", got)
	}
	// A syntax error elsewhere gets no such hint.
	if got := problemsOf(t, "gateways:\n  paywell: {kind: [\n"); strings.Contains(got[0], "quoted") {
		t.Errorf("problems = %q, want no hint", got)
	}
}

func mustParseEnv(t *testing.T, text string, env map[string]string) *Config {
	t.Helper()
	c, err := Parse([]byte(text), func(k string) string { return env[k] }, testKinds)
	if err != nil {
		t.Fatalf("Parse: unexpected error:\n%v", err)
	}
	return c
}
