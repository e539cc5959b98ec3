package config

import (
	"errors"
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
		"auth: {api_keys: [k]}\ngateways: {a: {kind: ding, base_url: 'http://x'}}\n",
		"a: &a [*a]\n",
		"auth: &a {<<: *a}\n",
		"gateways: {a: &g {kind: ding, base_url: 'http://x', breaker: {<<: [*g]}}}\n",
		"listen: ${X:-:1}\nadmin_listen: ${Y\n",
		"routes: [{name: r, split: {a: 1}, hedge: {after: p95}}]\n",
		"--- a\n--- b\n",
		"? [a]\n: b\n",
		"gateways:\n  \"a\\nb\": {kind: x}\n",
	} {
		f.Add([]byte(seed))
	}
	getenv := func(k string) string {
		if k == "X" {
			return "${Y}"
		}
		return ""
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, getenv, testKinds)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("Parse error is not a *ValidationError with problems: %T %v", err, err)
			}
			for _, p := range ve.Problems {
				if strings.ContainsAny(p, "\n\r") {
					t.Fatalf("problem spans lines: %q", p)
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
