package config

import (
	"slices"
	"testing"
)

func TestDiff(t *testing.T) {
	running := mustParse(t, baseYAML)
	if ch := Diff(running, mustParse(t, baseYAML)); !ch.None() || !slices.Equal(ch.Gateways.Unchanged, []string{"paywell", "ding", "tranglo"}) {
		t.Errorf("the same file: %+v, want no change", ch)
	}

	next := edit(t, baseYAML, "    timeout: 3s\n", "    timeout: 4s\n")                                                                        // paywell changed
	next = edit(t, next, "  tranglo:\n    kind: tranglo\n", "  adyen:\n    kind: tranglo\n")                                                   // tranglo gone, adyen new
	next = edit(t, next, "gateways: [tranglo, paywell]", "gateways: [adyen, paywell]")                                                         // so the routes change
	next = edit(t, next, "gateways: [paywell, ding, tranglo]", "gateways: [paywell, ding, adyen]")                                             //
	next = edit(t, next, "api_keys: [sk_test_key_0123456789abcdef]", "api_keys: [sk_test_key_0123456789abcdef, sk_next_key_0123456789abcdef]") // applied in place
	next = edit(t, next, "request_timeout: 10s", "request_timeout: 12s")                                                                       // likewise
	ch := Diff(running, mustParse(t, next))
	g := ch.Gateways
	if !slices.Equal(g.Added, []string{"adyen"}) || !slices.Equal(g.Changed, []string{"paywell"}) ||
		!slices.Equal(g.Removed, []string{"tranglo"}) || !slices.Equal(g.Unchanged, []string{"ding"}) {
		t.Errorf("gateways: %+v", g)
	}
	if !ch.Routes || ch.Fallbacks || !ch.Auth {
		t.Errorf("routes changed %v, fallbacks changed %v, auth changed %v; want true, false, true", ch.Routes, ch.Fallbacks, ch.Auth)
	}
	if !slices.Equal(ch.RestartNeeded, []string{"request_timeout"}) {
		t.Errorf("restart needed: %v", ch.RestartNeeded)
	}

	applied := Reloadable(running, mustParse(t, next))
	if applied.RequestTimeout != running.RequestTimeout || !slices.Equal(keysOf(applied.Auth), []string{"sk_test_key_0123456789abcdef", "sk_next_key_0123456789abcdef"}) {
		t.Error("Reloadable took a setting that needs a restart, or left the API keys")
	}
	if applied.Gateways["paywell"].Timeout != mustParse(t, next).Gateways["paywell"].Timeout || applied.Gateways["adyen"].Kind != "tranglo" {
		t.Error("Reloadable did not take the gateways")
	}
}
