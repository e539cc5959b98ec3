package config

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestCheckArithmetic(t *testing.T) {
	text := edit(t, baseYAML, "max_concurrent: 20", "max_concurrent: 20\n    operations: {refund: {timeout: 8s}, status: {timeout: 0s}}")
	text = edit(t, text, "    base_url: http://127.0.0.1:9103\n", "    base_url: http://127.0.0.1:9103\n    max_concurrent: 2\n    timeout: 500ms\n    max_wait: 100ms\n")
	r := mustParse(t, text).Check()

	if len(r.Gateways) != 3 {
		t.Fatalf("gateways = %+v, want 3", r.Gateways)
	}
	want := []struct {
		name    string
		slots   int
		timeout time.Duration
		rate    float64
	}{
		{"paywell", 20, 3 * time.Second, 20.0 / 3},
		{"ding", 20, 3 * time.Second, 20.0 / 3},
		{"tranglo", 2, 500 * time.Millisecond, 4},
	}
	for i, w := range want {
		g := r.Gateways[i]
		if g.Gateway != w.name || g.Slots != w.slots || g.Timeout != w.timeout || math.Abs(g.Rate-w.rate) > 1e-9 {
			t.Errorf("gateways[%d] = %+v, want %s %d slots / %v = %v", i, g, w.name, w.slots, w.timeout, w.rate)
		}
	}
	// An override of 0 means "the gateway's timeout", so only refund differs.
	if ops := r.Gateways[0].Operations; len(ops) != 1 || ops[0].Operation != "refund" || ops[0].Timeout != 8*time.Second || ops[0].Rate != 2.5 {
		t.Errorf("paywell operations = %+v, want refund 8s 2.5/s", ops)
	}

	var out strings.Builder
	n, err := r.WriteTo(&out)
	if err != nil || n != int64(out.Len()) {
		t.Errorf("WriteTo = %d, %v; wrote %d bytes", n, err, out.Len())
	}
	for _, line := range []string{
		"  paywell: 20 slots / 3s timeout = 6.7 req/s while paywell is at its timeout; max_wait 0s\n",
		"    paywell/refund: 20 slots / 8s timeout = 2.5 req/s\n",
		"  ding: 20 slots / 3s timeout = 6.7 req/s while ding is at its timeout; max_wait 0s\n",
		"  tranglo: 2 slots / 500ms timeout = 4.0 req/s while tranglo is at its timeout; max_wait 100ms\n",
		"no warnings\n",
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("report lacks %q:\n%s", line, out.String())
		}
	}
}

func TestCheckWarnings(t *testing.T) {
	const pwBreaker = "      consecutive_failures: 5\n      cooldown: 30s\n"
	tests := []struct {
		name     string
		old, new string
		want     []string
	}{
		{"timeout above request_timeout", "timeout: 3s", "timeout: 12s",
			[]string{"gateways.paywell.timeout: 12s is longer than request_timeout 10s; a call is cut off at 10s at the latest, so it never uses its full timeout"}},
		{"a timeout and its look-up past request_timeout", "timeout: 3s", "timeout: 6s",
			[]string{"gateways.paywell: a charge that times out (6s) is looked up before it is answered (status, up to 6s): 12s in all, longer than request_timeout 10s; such a charge may be answered 202 processing, its outcome left to the reconciler (raise request_timeout to 12s, or lower operations.status.timeout)"}},
		{"operation timeout above request_timeout", "max_concurrent: 20", "max_concurrent: 20\n    operations: {refund: {timeout: 1m}}",
			[]string{"gateways.paywell.operations.refund.timeout: 1m is longer than request_timeout 10s; the call is cut off at 10s at the latest"}},
		{"max_wait past the budget", "max_concurrent: 20", "max_concurrent: 20\n    max_wait: 8s",
			[]string{"gateways.paywell.max_wait: 8s waiting for a slot plus the 3s timeout is 11s, longer than request_timeout 10s; a call that waits may be cut off before paywell answers"}},
		{"breaker without a trip rule", pwBreaker, "      consecutive_failures: 0\n      failures_in_window: 0\n      failure_rate: 0\n      cooldown: 30s\n",
			[]string{"gateways.paywell.breaker: no trip rule (consecutive_failures, failures_in_window and failure_rate are all 0); it never opens, so a failing paywell keeps taking calls and holding slots until its timeout"}},
		{"consecutive_failures of 2", "consecutive_failures: 5", "consecutive_failures: 2",
			[]string{"gateways.paywell.breaker.consecutive_failures: 2 failure(s) in a row happen in normal traffic; the breaker would open on noise (5 is a common choice)"}},
		{"failures_in_window of 1", "consecutive_failures: 5", "failures_in_window: 1",
			[]string{"gateways.paywell.breaker.failures_in_window: 1 failure(s) within 30s happen in normal traffic; the breaker would open on noise"}},
		{"failure_rate at the typical error rate", "consecutive_failures: 5", "failure_rate: 0.01",
			[]string{"gateways.paywell.breaker.failure_rate: 0.01 is at or below a typical 1% error rate; normal traffic would open the breaker"}},
		{"failure_rate one failure reaches", "consecutive_failures: 5", "failure_rate: 0.1\n      min_requests: 10",
			[]string{"gateways.paywell.breaker.failure_rate: with min_requests 10, a single failure among the first 10 calls of a window reaches 0.1; normal traffic would open the breaker (raise min_requests or the rate)"}},
		{"cooldown shorter than request_timeout", "cooldown: 30s", "cooldown: 5s",
			[]string{"gateways.paywell.breaker.cooldown: 5s is shorter than request_timeout 10s; the breaker may go half-open while the charges that opened it are still in flight"}},
		{"gateway in no route",
			"split: {paywell: 70, ding: 30}\n  - name: default\n    gateways: [paywell, ding, tranglo]",
			"split: {paywell: 70, tranglo: 30}\n  - name: default\n    gateways: [paywell, tranglo]",
			[]string{`gateways.ding: in no route; only charges that pin it with "gateway": "ding" reach it`}},
		{"catch-all before other routes", "  - name: big-tickets\n    match: {min_amount: 100000}\n", "  - name: big-tickets\n",
			[]string{"routes[1] (big-tickets): matches every charge but is not the last route; the routes after it are never used: default"}},
		{"hedge with one gateway", "gateways: [tranglo, paywell]", "gateways: [tranglo]\n    hedge: {after: 800ms}",
			[]string{"routes[0] (asia): hedge needs a second gateway to hedge to; this route has one"}},
		{"hedge after the timeout", "gateways: [tranglo, paywell]", "gateways: [tranglo, paywell]\n    hedge: {after: 3s}",
			[]string{"routes[0] (asia): hedge.after 3s is not shorter than tranglo's charge timeout 3s; a charge there ends before a hedge could start",
				"routes[0] (asia): hedge.after 3s is not shorter than paywell's charge timeout 3s; a charge there ends before a hedge could start"}},
		{"success_rate with one gateway", "gateways: [tranglo, paywell]", "gateways: [tranglo]\n    strategy: success_rate",
			[]string{"routes[0] (asia): strategy success_rate needs a second gateway to put first; this route has one"}},
		{"admin token is an API key, on loopback", "admin_token: adm_test_token_0123456789abc", "admin_token: sk_test_key_0123456789abcdef\nlisten: 127.0.0.1:8080",
			[]string{"auth.admin_token: the same as auth.api_keys[0]; every storefront client holding that key could use /admin/ (allowed because both listeners are on loopback; serve refuses it on any other address)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := mustParse(t, edit(t, baseYAML, tc.old, tc.new)).Check()
			if !slices.Equal(r.Warnings, tc.want) {
				t.Errorf("warnings:\n got %q\nwant %q", r.Warnings, tc.want)
			}
			var out strings.Builder
			if _, err := r.WriteTo(&out); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "warnings:\n  "+tc.want[0]+"\n") {
				t.Errorf("WriteTo does not print the warning:\n%s", out.String())
			}
		})
	}
}

func TestFormatHelpers(t *testing.T) {
	durations := map[time.Duration]string{
		24 * time.Hour: "24h", 90 * time.Minute: "1h30m", 2 * time.Minute: "2m", 90 * time.Second: "1m30s",
		500 * time.Millisecond: "500ms", 0: "0s", 3 * time.Second: "3s", time.Hour + time.Second: "1h0m1s",
	}
	for d, want := range durations {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%v) = %q, want %q", d, got, want)
		}
	}
	rates := map[float64]string{20.0 / 3: "6.7", 250: "250", 2.0 / 3: "0.67", 1.0 / 60: "0.017", 40: "40.0"}
	for r, want := range rates {
		if got := fmtRate(r); got != want {
			t.Errorf("fmtRate(%v) = %q, want %q", r, got, want)
		}
	}
}
