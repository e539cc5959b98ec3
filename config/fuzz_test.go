package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics, every failure is a *ValidationError of single-line problems,
// and every configuration it accepts is consistent and survives Check and Summary.
func FuzzParse(f *testing.F) {
	f.Add([]byte(baseYAML))
	f.Add([]byte(secretsYAML))
	if demo, err := os.ReadFile("../configs/payrouter.yaml"); err == nil {
		f.Add(demo)
	}
	for _, seed := range []string{
		"",
		"auth: {api_keys: [key_0123456789abcdef012345]}\ngateways: {a: {kind: ding, base_url: 'http://x'}}\n",
		"a: &a [*a]\n",
		"auth: &a {<<: *a}\n",
		"gateways: {a: &g {kind: ding, base_url: 'http://x', breaker: {<<: [*g]}}}\n",
		"listen: ${X:-:1}\nadmin_listen: ${Y\n",
		"routes: [{name: r, split: {a: 1}, hedge: {after: p95}}]\n",
		"--- a\n--- b\n",
		"? [a]\n: b\n",
		"gateways:\n  \"a\\nb\": {kind: x}\n",
		"auth: {api_keys: [{name: s, key: key_0123456789abcdef012345}]}\ngateways: {a: {kind: ding, base_url: 'http://x'}}\n" +
			"webhooks: {allow_private: true, endpoints: [{name: s, url: 'http://127.0.0.1:1/h', key_name: s, events: [charge.failed], " +
			"secrets: [whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=], timeout: 1s, max_concurrent: 2}]}\n",
	} {
		f.Add([]byte(seed))
	}
	// S holds a secret: two of the same shape, so that a configuration reads the same with
	// either, and the problems must be the same, naming ${S} and never quoting its value.
	envWith := func(secret string) func(string) string {
		return func(k string) string {
			switch k {
			case "X":
				return "${Y}"
			case "S":
				return secret
			case "L":
				return "a\", \"b\n  c: d"
			}
			return ""
		}
	}
	getenv, other := envWith("SecretAlphaValueXYZ"), envWith("SecretBravoValueXYZ")
	for _, seed := range []string{
		"listen: ${S}\nrequest_timeout: ${S}\n",
		"auth: {api_keys: [\"${S}\", \"${L}\"], admin_token: \"${S}\"}\ngateways: {a: {kind: \"${S}\", base_url: 'http://x', timeout: \"${S}\"}}\n",
		"routes: [{name: \"${S}\", gateways: [\"${S}\"], match: {currency: [\"${S}\"]}}]\n",
		"webhooks: {endpoints: [{name: \"${S}\", url: \"${S}\", key_name: \"${S}\", events: [\"${S}\"], secrets: [\"${S}\", \"${L}\"]}]}\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, getenv, testKinds)
		_, errOther := Parse(data, other, testKinds)
		if fmt.Sprint(err) != fmt.Sprint(errOther) && !bytes.Contains(data, []byte("Alpha")) && !bytes.Contains(data, []byte("Bravo")) {
			t.Fatalf("the problems depend on the value of ${S}:\n%v\n---\n%v", err, errOther)
		}
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("Parse error is not a *ValidationError with problems: %T %v", err, err)
			}
			for _, p := range ve.Problems {
				if strings.ContainsAny(p, "\n\r") {
					t.Fatalf("problem spans lines: %q", p)
				}
				if strings.Contains(p, "SecretAlpha") && !bytes.Contains(data, []byte("SecretAlpha")) {
					t.Fatalf("a problem quotes the value of ${S}: %q", p)
				}
			}
			return
		}
		if !slices.Equal(c.GatewayOrder(), c.GatewayNames) || len(c.GatewayNames) == 0 {
			t.Fatalf("GatewayNames %q do not match the gateways %v", c.GatewayNames, c.GatewayOrder())
		}
		if len(c.Routes) == 0 {
			t.Fatal("an accepted configuration has no route")
		}
		if err := c.Validate(testKinds); err != nil {
			t.Fatalf("Validate of an accepted configuration: %v", err)
		}
		if _, err := c.Check().WriteTo(io.Discard); err != nil {
			t.Fatal(err)
		}
		if len(c.Summary()) != len(c.Gateways) {
			t.Fatal("Summary lost a gateway")
		}
	})
}
