package e2e

// Gateway webhooks in (docs/webhooks.md, Gateway webhooks in), end to end: gatewaysim's Ding
// answers charges pending and calls back, signed, once they are final; payrouter verifies the
// call, looks the charge up and settles it; the storefront hears of it through its own webhooks.
// The same charges without the call back (lost) are settled by the reconciler alone, and a call
// back signed with a secret payrouter does not have is refused 400 and counted, the reconciler
// settling its charge all the same.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	dingHookOld = "ding_e2e_hook_secret_old_0123456789"
	dingHookNew = "ding_e2e_hook_secret_new_0123456789"
)

// withDingWebhook adds gateways.ding.webhook, with the old and the new secret of a rotation.
func withDingWebhook(text string) string {
	cred := "    credentials: {api_key: \"ding_e2e_key\"}\n"
	return strings.Replace(text, cred, cred+fmt.Sprintf("    webhook: {secrets: [%q, %q]}\n", dingHookOld, dingHookNew), 1)
}

// callback is PUT /_sim/callback: where the simulator calls back and the secret it signs with;
// an empty url turns calling back off.
func (s *sim) callback(t *testing.T, url, secret string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"url": url, "secret": secret})
	s.control(t, "PUT", "/_sim/callback", body, nil)
}

// pending is PUT /_sim/behavior with charges answered pending and final d later.
func (s *sim) pending(t *testing.T, d time.Duration) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"mode": "normal", "pending": d.String()})
	s.control(t, "PUT", "/_sim/behavior", body, nil)
}

// settleTimes sends n charges that Ding answers pending (202 processing) and returns, for each,
// how long after its 202 the storefront's endpoint received its final event, which must be
// charge.succeeded.
func settleTimes(t *testing.T, pr *instance, shop *receiver, n int) []time.Duration {
	t.Helper()
	return settleTimesIn(t, pr, shop, n, "USD")
}

// settleTimesIn is settleTimes for charges in currency (its route's gateway answering pending).
func settleTimesIn(t *testing.T, pr *instance, shop *receiver, n int, currency string) []time.Duration {
	t.Helper()
	ids := make([]string, n)
	answered := make([]time.Time, n)
	for i := range n {
		r, err := pr.charge(int64(2000+i), currency, "tok_visa")
		if err != nil {
			t.Fatalf("charge %d: %v", i, err)
		}
		a, err := decodeAnswer(r)
		if err != nil || r.status != http.StatusAccepted || a.ChargeStatus != "processing" {
			t.Fatalf("charge %d in %s, its gateway answering pending: want 202 processing: %s", i, currency, r)
		}
		ids[i], answered[i] = a.ID, r.start.Add(r.elapsed)
	}
	took := make([]time.Duration, n)
	eventually(t, time.Minute, "every pending charge reaches the storefront as a final event", func() (bool, string) {
		missing := 0
		for i, id := range ids {
			at, typ, ok := shop.finalArrival(id)
			if !ok {
				missing++
				continue
			}
			if typ != "charge.succeeded" {
				t.Fatalf("charge %s ended %s; want charge.succeeded", id, typ)
			}
			took[i] = at.Sub(answered[i])
		}
		return missing == 0, fmt.Sprintf("%d of %d without a final event", missing, n)
	})
	return took
}

// median of ds (sorted in place).
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func hookCount(t *testing.T, pr *instance, result string) float64 {
	t.Helper()
	return hookCountOf(t, pr, "ding", result)
}

func hookCountOf(t *testing.T, pr *instance, gateway, result string) float64 {
	t.Helper()
	m, err := pr.metrics()
	if err != nil {
		t.Fatal(err)
	}
	v, _ := m.value("payrouter_gateway_webhooks_total", "gateway", gateway, "result", result)
	return v
}

func reconciledCount(t *testing.T, pr *instance) float64 {
	t.Helper()
	m, err := pr.metrics()
	if err != nil {
		t.Fatal(err)
	}
	v, _ := m.value("payrouter_reconcile_duration_seconds_count")
	return v
}

// TestGatewayWebhooksSettlePendingCharges measures, from Ding's pending answer (the storefront's
// 202) to the storefront's webhook with the final event, how long a charge takes with Ding's
// webhook and with the reconciler alone.
func TestGatewayWebhooksSettlePendingCharges(t *testing.T) {
	skipIfShort(t)
	const (
		pending = 2 * time.Second // Ding decides this long after its pending answer
		charges = 5
	)
	shop := newReceiver(t, "shop")
	s := startSims(t)
	pr := startPayrouterEdited(t, s, routerConfig{
		RequestTimeout: 5 * time.Second,
		Gateways: map[string]gatewayConfig{
			"ding": {Timeout: 2 * time.Second, MaxConcurrent: 20, ConsecutiveFailures: 1000, Cooldown: 30 * time.Second},
		},
		Routes: []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"ding"}}},
	}, func(text string) string {
		return withDingWebhook(withWebhooks(hookEndpoint{shop, 3 * time.Second, 10})(text))
	})
	s.ding.pending(t, pending)

	// Ding calls back, signed with the new secret of the rotation.
	s.ding.callback(t, pr.url+"/webhooks/ding", dingHookNew)
	withHooks := settleTimes(t, pr, shop, charges)
	if got := hookCount(t, pr, "settled"); got != charges {
		t.Errorf("payrouter_gateway_webhooks_total{result=settled} = %v; want %d: each charge settled by its webhook", got, charges)
	}
	if got := reconciledCount(t, pr); got != 0 {
		t.Errorf("the reconciler settled %v charges; want none: Ding's webhooks came first", got)
	}

	// The call back is lost (Ding is not told where to call): the reconciler settles them.
	s.ding.callback(t, "", "")
	alone := settleTimes(t, pr, shop, charges)
	if got := reconciledCount(t, pr); got != charges {
		t.Errorf("the reconciler settled %v charges; want %d", got, charges)
	}
	if got := hookCount(t, pr, "settled"); got != charges {
		t.Errorf("payrouter_gateway_webhooks_total{result=settled} = %v; want still %d", got, charges)
	}

	// Ding signs with a secret payrouter does not have: every try is 400 and counted, nothing is
	// changed by them, and the reconciler settles the charge.
	s.ding.callback(t, pr.url+"/webhooks/ding", "not_a_secret_payrouter_has_0123")
	settleTimes(t, pr, shop, 1)
	eventually(t, 30*time.Second, "Ding's four tries are refused and counted", func() (bool, string) {
		got := hookCount(t, pr, "bad_signature")
		return got == 4, fmt.Sprintf("%v bad signatures", got)
	})
	if got := reconciledCount(t, pr); got != charges+1 {
		t.Errorf("the reconciler settled %v charges; want %d", got, charges+1)
	}
	r, err := send(pr.client, "POST", pr.url+"/webhooks/ding", []byte(`{"EventType":"TransferStateChanged"}`),
		"Content-Type", "application/json", "X-Ding-Timestamp", time.Now().UTC().Format(time.RFC3339), "X-Ding-Signature", "sha256=AAAA")
	if err != nil || r.status != http.StatusBadRequest {
		t.Errorf("a forged call: %v %s; want 400", err, r)
	}

	t.Logf("from Ding's pending answer (Ding final %v later) to the storefront's webhook, %d charges each: "+
		"with Ding's webhooks median %v (max %v); the reconciler alone (request_timeout 5s) median %v (max %v)",
		pending, charges, median(withHooks).Round(time.Millisecond), withHooks[len(withHooks)-1].Round(time.Millisecond),
		median(alone).Round(time.Millisecond), alone[len(alone)-1].Round(time.Millisecond))
}

// TestTrangloWebhookSettlesPendingCharges: Tranglo answers 968 (pending) and calls back in its
// own form (X-Tranglo-Signature, HMAC-SHA512 over the body and a millisecond timestamp); each
// charge is settled by its call back, none by the reconciler.
func TestTrangloWebhookSettlesPendingCharges(t *testing.T) {
	skipIfShort(t)
	const secret = "tranglo_e2e_hook_secret_0123456789"
	shop := newReceiver(t, "shop")
	s := startSims(t)
	pr := startPayrouterEdited(t, s, routerConfig{
		RequestTimeout: 5 * time.Second,
		Gateways: map[string]gatewayConfig{
			"tranglo": {Timeout: 2 * time.Second, MaxConcurrent: 20, ConsecutiveFailures: 1000, Cooldown: 30 * time.Second},
		},
		Routes: []routeConfig{{Name: "myr", Currencies: []string{"MYR"}, Gateways: []string{"tranglo"}}},
	}, func(text string) string {
		text = withWebhooks(hookEndpoint{shop, 3 * time.Second, 10})(text)
		cred := "    credentials: {api_key: \"tranglo_e2e_key\"}\n"
		return strings.Replace(text, cred, cred+fmt.Sprintf("    webhook: {secrets: [%q]}\n", secret), 1)
	})
	s.tranglo.pending(t, time.Second)
	s.tranglo.callback(t, pr.url+"/webhooks/tranglo", secret)
	took := settleTimesIn(t, pr, shop, 3, "MYR")
	if got := hookCountOf(t, pr, "tranglo", "settled"); got != 3 {
		t.Errorf("payrouter_gateway_webhooks_total{gateway=tranglo,result=settled} = %v; want 3", got)
	}
	if got := reconciledCount(t, pr); got != 0 {
		t.Errorf("the reconciler settled %v charges; want none", got)
	}
	t.Logf("Tranglo final 1s after its 968: the storefront's webhook %v after the 202 (median of 3)", median(took).Round(time.Millisecond))
}
