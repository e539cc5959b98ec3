package config

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

const (
	longKey   = "sk_test_key_0123456789abcdef"
	longAdmin = "adm_test_token_0123456789abc"
)

// TestNamedKeysAndAdminTokens: api_keys takes plain strings and {name, key, rights} mappings in
// one list; admin_tokens adds named admin tokens to admin_token's "admin".
func TestNamedKeysAndAdminTokens(t *testing.T) {
	text := edit(t, baseYAML, "  api_keys: [sk_test_key_0123456789abcdef]\n", `  api_keys:
    - sk_test_key_0123456789abcdef
    - {name: shop-eu, key: shop_eu_key_0123456789abcdef, rights: [charge, read]}
    - {name: shop-eu, key: shop_eu_key_next_0123456789ab}
  admin_tokens:
    - {name: alice, token: alice_token_0123456789abcdef}
    - {name: deploy-bot, token: "${BOT_TOKEN}"}
`)
	c := mustParseEnv(t, text, map[string]string{"BOT_TOKEN": "bot_token_0123456789abcdef01"})
	want := []APIKey{
		{Key: longKey},
		{Name: "shop-eu", Key: "shop_eu_key_0123456789abcdef", Rights: []string{"charge", "read"}},
		{Name: "shop-eu", Key: "shop_eu_key_next_0123456789ab"},
	}
	if len(c.Auth.APIKeys) != len(want) {
		t.Fatalf("api_keys: %d, want %d", len(c.Auth.APIKeys), len(want))
	}
	for i, k := range c.Auth.APIKeys {
		if k.Name != want[i].Name || k.Key != want[i].Key || !slices.Equal(k.Rights, want[i].Rights) {
			t.Errorf("api_keys[%d] = %q %q %q, want %q %q %q", i, k.Name, k.Key, k.Rights, want[i].Name, want[i].Key, want[i].Rights)
		}
	}
	if !c.Auth.APIKeys[0].Allows(RightRefund) || c.Auth.APIKeys[1].Allows(RightRefund) || !c.Auth.APIKeys[1].Allows(RightRead) {
		t.Error("Allows: a key without rights has them all; one with rights only those")
	}
	admins := c.Auth.Admins()
	var names, tokens []string
	for _, a := range admins {
		names, tokens = append(names, a.Name), append(tokens, a.Token)
	}
	if !slices.Equal(names, []string{"admin", "alice", "deploy-bot"}) ||
		!slices.Equal(tokens, []string{longAdmin, "alice_token_0123456789abcdef", "bot_token_0123456789abcdef01"}) {
		t.Errorf("Admins() = %q %q", names, tokens)
	}
	if (Auth{}).Admins() != nil {
		t.Error("no admin token: Admins() should be empty")
	}

	// Every way of printing Auth masks the keys and tokens but keeps names and rights.
	var out []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		out = append(out, fmt.Sprintf(verb, c.Auth), fmt.Sprintf(verb, c.Auth.APIKeys[1]), fmt.Sprintf(verb, c.Auth.AdminTokens[0]))
	}
	js, _ := json.Marshal(c.Auth)
	out = append(out, string(js))
	var b strings.Builder
	slog.New(slog.NewJSONHandler(&b, nil)).Info("x", "auth", c.Auth, "key", c.Auth.APIKeys[1], "admin", c.Auth.AdminTokens[1])
	out = append(out, b.String())
	for _, o := range out {
		for _, secret := range append(tokens, keysOf(c.Auth)...) {
			if strings.Contains(o, secret) {
				t.Errorf("printed Auth shows %q:\n%s", secret, o)
			}
		}
	}
	if !strings.Contains(string(js), `"Name":"shop-eu"`) || !strings.Contains(string(js), `"Name":"alice"`) {
		t.Errorf("the masked Auth lost its names: %s", js)
	}
}

// TestAuthRules: the rules that hold on every listener, loopback included.
func TestAuthRules(t *testing.T) {
	const keyLine = "  api_keys: [sk_test_key_0123456789abcdef]\n"
	loopback := func(s string) string { return "listen: 127.0.0.1:8080\n" + s }
	tests := []struct {
		name     string
		old, new string
		env      map[string]string
		want     []string
	}{
		{"a key listed twice", keyLine, "  api_keys: [sk_test_key_0123456789abcdef, {name: a, key: sk_test_key_0123456789abcdef}]\n", nil,
			[]string{"auth.api_keys[1]: the same key as auth.api_keys[0]; list each key once (a rotation lists the old and the new key)"}},
		{"a bad name", keyLine, "  api_keys: [{name: \"shop eu\", key: sk_test_key_0123456789abcdef}]\n", nil,
			[]string{"auth.api_keys[0].name: must be letters, digits, '-' or '_' (it names the key's scope)"}},
		{"no rights at all", keyLine, "  api_keys: [{name: ro, key: sk_test_key_0123456789abcdef, rights: []}]\n", nil,
			[]string{"auth.api_keys[0].rights: is empty, so the key could do nothing; leave rights out for every right (charge, capture, void, refund, read)"}},
		{"an unknown right", keyLine, "  api_keys: [{name: ro, key: sk_test_key_0123456789abcdef, rights: [read, settle]}]\n", nil,
			[]string{`auth.api_keys[0].rights[1]: unknown right "settle" (known: charge, capture, void, refund, read)`}},
		{"a named key without its key", keyLine, "  api_keys: [{name: shop-eu, key: \"${SHOP_EU_KEY}\"}]\n", nil,
			[]string{"auth.api_keys[0]: is empty because ${SHOP_EU_KEY} is not set in payrouter's environment (set it, or write ${SHOP_EU_KEY:-} to mean empty on purpose)"}},
		{"an unset admin token", "admin_token: adm_test_token_0123456789abc", `admin_token: "${ADMIN}"`, nil,
			[]string{"auth.admin_token: is empty because ${ADMIN} is not set in payrouter's environment (set it, or write ${ADMIN:-} to mean empty on purpose)"}},
		{"an admin token empty on purpose", "admin_token: adm_test_token_0123456789abc", `admin_token: "${ADMIN:-}"`, nil, nil},
		{"an unset gateway credential", "credentials: {api_key: pw_secret_1}", `credentials: {api_key: "${PW_KEY}"}`, nil,
			[]string{"gateways.paywell.credentials.api_key: is empty because ${PW_KEY} is not set in payrouter's environment (set it, or write ${PW_KEY:-} to mean empty on purpose)"}},
		{"admin tokens: names and tokens", "admin_token: adm_test_token_0123456789abc", `admin_token: adm_test_token_0123456789abc
  admin_tokens:
    - {token: t1_0123456789abcdef0123456}
    - {name: admin, token: t2_0123456789abcdef0123456}
    - {name: alice, token: t3_0123456789abcdef0123456}
    - {name: alice, token: t4_0123456789abcdef0123456}
    - {name: "bob smith", token: t5_0123456789abcdef0123456}
    - {name: carol, token: t3_0123456789abcdef0123456}
    - {name: dave, token: "${DAVE_TOKEN}"}
    - {name: erin}`, nil,
			[]string{
				"auth.admin_tokens[0].name: required (it names the actor in audit and failed-auth lines)",
				`auth.admin_tokens[1].name: "admin" is the name of auth.admin_token; choose another`,
				"auth.admin_tokens[3].name: already used by auth.admin_tokens[2]; names must be unique",
				"auth.admin_tokens[4].name: must be letters, digits, '-' or '_'",
				"auth.admin_tokens[5].token: the same token as auth.admin_tokens[2]; each admin needs a token of their own",
				"auth.admin_tokens[6].token: is empty because ${DAVE_TOKEN} is not set in payrouter's environment (set it, or write ${DAVE_TOKEN:-} to mean empty on purpose)",
				"auth.admin_tokens[7].token: required",
			}},
		{"admin_tokens may name admin without admin_token", "  admin_token: adm_test_token_0123456789abc\n",
			"  admin_tokens: [{name: admin, token: adm_test_token_0123456789abc}]\n", nil, nil},
	}
	for _, tc := range tests {
		for _, where := range []string{"loopback", "every interface"} {
			t.Run(tc.name+" on "+where, func(t *testing.T) {
				text := edit(t, baseYAML, tc.old, tc.new)
				if where == "loopback" {
					text = loopback(text)
				}
				_, err := Parse([]byte(text), func(k string) string { return tc.env[k] }, testKinds)
				var got []string
				if err != nil {
					got = strings.Split(err.Error(), "\n")
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("problems:\n got %q\nwant %q", got, tc.want)
				}
			})
		}
	}
}

// TestWeakSecrets: demo secrets, short keys and tokens, and an admin token that is also an API
// key are refused beyond loopback, naming the field and never the value, and are warnings that
// check prints on loopback.
func TestWeakSecrets(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		field    string
		why      string
	}{
		{"a demo API key", longKey, "sk_test_demo", "auth.api_keys[0]", "is a demo secret published with payrouter; use a random one of your own (openssl rand -hex 32)"},
		{"a demo admin token", longAdmin, "admin_test_demo", "auth.admin_token", "is a demo secret published with payrouter; use a random one of your own (openssl rand -hex 32)"},
		{"a demo credential", "pw_secret_1", "pw_test_demo", "gateways.paywell.credentials.api_key", "is a demo secret published with payrouter; use a random one of your own (openssl rand -hex 32)"},
		{"a demo credential of another gateway", "dg_secret_2", "tg_test_demo", "gateways.ding.credentials.api_key", "is a demo secret published with payrouter; use a random one of your own (openssl rand -hex 32)"},
		{"a short API key", "api_keys: [" + longKey, "api_keys: [a, " + longKey, "auth.api_keys[0]", "is shorter than 24 characters; use a random one (openssl rand -hex 32)"},
		{"a 23-character named key", "api_keys: [" + longKey + "]", "api_keys: [{name: b, key: k_0123456789abcdef01234}]", "auth.api_keys[0]", "is shorter than 24 characters; use a random one (openssl rand -hex 32)"},
		{"a short admin token", longAdmin, "adm", "auth.admin_token", "is shorter than 24 characters; use a random one (openssl rand -hex 32)"},
		{"a short named admin token", "admin_token: " + longAdmin, "admin_token: " + longAdmin + "\n  admin_tokens: [{name: alice, token: alice}]", "auth.admin_tokens[0]", "is shorter than 24 characters; use a random one (openssl rand -hex 32)"},
		{"the admin token is an API key", longAdmin, longKey, "auth.admin_token", "the same as auth.api_keys[0]; every storefront client holding that key could use /admin/"},
		{"a named admin token is an API key", "admin_token: " + longAdmin, "admin_token: " + longAdmin + "\n  admin_tokens: [{name: alice, token: " + longKey + "}]", "auth.admin_tokens[0]", "the same as auth.api_keys[0]; every storefront client holding that key could use /admin/"},
	}
	listeners := []struct {
		name, yaml, open string
	}{
		{"an empty host", "listen: \":8080\"\n", "listen"},
		{"0.0.0.0", "listen: 0.0.0.0:8080\n", "listen"},
		{"a host name", "listen: shop.internal:8080\n", "listen"},
		{"a public admin listener", "listen: 127.0.0.1:8080\nadmin_listen: 10.0.0.5:9090\n", "admin_listen"},
		{"both", "listen: \"[::]:8080\"\nadmin_listen: \":9090\"\n", "listen and admin_listen"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			text := edit(t, baseYAML, tc.old, tc.new)
			secret := tc.new
			for _, l := range listeners {
				got := problemsOf(t, l.yaml+text)
				want := tc.field + ": " + tc.why + "; refused because " + l.open + " accepts connections from other machines (with both listeners on loopback it is only a warning)"
				if !slices.Equal(got, []string{want}) {
					t.Errorf("on %s:\n got %q\nwant %q", l.name, got, want)
				}
				if strings.Contains(strings.Join(got, "\n"), secret) && len(secret) > 3 {
					t.Errorf("on %s the problem shows the secret: %q", l.name, got)
				}
			}
			for _, l := range []string{"", "127.0.0.1:8080", "127.8.9.10:8080", "localhost:8080", "LOCALHOST:0", "[::1]:8080"} {
				listen := "" // the defaults: both on loopback
				if l != "" {
					listen = "listen: \"" + l + "\"\nadmin_listen: 127.0.0.1:9091\n"
				}
				c, err := Parse([]byte(listen+text), nil, testKinds)
				if err != nil {
					t.Errorf("on %s: %v", l, err)
					continue
				}
				want := tc.field + ": " + tc.why + " (allowed because both listeners are on loopback; serve refuses it on any other address)"
				if w := c.Check().Warnings; !slices.Equal(w, []string{want}) {
					t.Errorf("on %s: warnings\n got %q\nwant %q", l, w, want)
				}
			}
		})
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.255.0.1:1": true, "[::1]:8080": true, "localhost:8080": true, "Localhost:0": true,
		"[::ffff:127.0.0.1]:80": true,
		":8080":                 false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.1:80": false, "example.com:80": false,
		"localhost.example.com:80": false, "127.0.0.1": false, "": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
