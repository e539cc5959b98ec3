package httpapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/gateways/ding/dingsim"
	"github.com/payrouter/payrouter/gateways/sim"
)

const dingHookSecret = "ding_hook_secret_0123456789"

// dingEvent is Ding's callback for the transfer ref, Completed and settled.
func dingEvent(ref, transferRef string) string {
	return fmt.Sprintf(`{"EventType":"TransferStateChanged","EventId":"DEV-1","TransferRecord":{"TransferId":{"TransferRef":%q,"DistributorRef":%q},"ProcessingState":"Completed","SettlementState":"Settled"}}`, transferRef, ref)
}

// hookFrom posts body to /webhooks/{gateway} from addr, signed by Ding with secret.
func (st *stack) hookFrom(addr, gateway, body, secret string) reply {
	var headers []string
	for k, v := range dingsim.Sign([]byte(body), secret, time.Now()) {
		headers = append(headers, k, v[0])
	}
	return doFrom(st.api, addr, "POST", "/webhooks/"+gateway, body, headers...)
}

// metric returns the value of one series of the admin listener's /metrics, "" when absent.
func (st *stack) metric(t *testing.T, series string) string {
	t.Helper()
	m := do(st.admin, "GET", "/metrics", "")
	for _, line := range strings.Split(m.body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

func TestGatewayWebhookSettlesAPendingCharge(t *testing.T) {
	st := newStackHolding(t, "admin-token", time.Minute, func(d *Deps) { d.Limits = NewLimits(config.Limits{AuthFailuresPerMinute: 3}, nil) })
	st.payments.SetWebhookKeys(map[string]payrouter.WebhookKeys{"ding": {Secrets: []string{"old_secret_0123456789", dingHookSecret}, Tolerance: 5 * time.Minute}})
	st.sims["paywell"].SetBehavior(sim.Behavior{Mode: sim.ModeUnavailable})
	st.sims["ding"].SetBehavior(sim.Behavior{Pending: time.Hour}) // settled by the test below
	r := st.charge("pending-1", `{"amount":1700,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`)
	var ch struct{ ID, Status string }
	_ = json.Unmarshal([]byte(r.body), &ch)
	if r.status != 202 || ch.Status != "processing" {
		t.Fatalf("a charge ding answers pending: %d %s; want 202 processing", r.status, r.body)
	}
	ref := payrouter.AttemptReference(ch.ID, 2) // paywell's was the first
	tx, ok := st.sims["ding"].Ledger().Lookup(ref)
	if !ok || tx.Status != sim.StatusPending {
		t.Fatalf("ding's ledger: %+v, %v; want %s pending", tx, ok, ref)
	}

	// Still pending at Ding: a call claiming it Completed changes nothing (the look-up decides).
	if h := st.hookFrom("198.51.100.7:443", "ding", dingEvent(ref, tx.ID), dingHookSecret); h.status != 200 || !strings.Contains(h.body, `"unchanged"`) {
		t.Fatalf("webhook while ding still says pending: %d %s; want 200 unchanged", h.status, h.body)
	}
	if _, ok := st.sims["ding"].Ledger().Settle(tx.ID); !ok {
		t.Fatal("could not settle the transfer")
	}
	h := st.hookFrom("198.51.100.7:443", "ding", dingEvent(ref, tx.ID), dingHookSecret)
	if h.status != 200 || !strings.Contains(h.body, `"settled"`) {
		t.Fatalf("webhook once final: %d %s; want 200 settled", h.status, h.body)
	}
	g := do(st.api, "GET", "/charge/"+ch.ID, "", "Authorization", "Bearer key-1")
	if !strings.Contains(g.body, `"status":"succeeded"`) {
		t.Fatalf("the charge after its webhook: %s; want succeeded", g.body)
	}
	if !strings.Contains(st.log.String(), `"action":"gateway_webhook","actor":"gateway:ding"`) ||
		!strings.Contains(st.log.String(), `"charge_id":"`+ch.ID+`"`) {
		t.Errorf("no audit line of the settling call: %s", st.log.String())
	}
	// The same event again (Ding retries): 200, nothing changed.
	if h := st.hookFrom("198.51.100.7:443", "ding", dingEvent(ref, tx.ID), "old_secret_0123456789"); h.status != 200 || !strings.Contains(h.body, `"unchanged"`) {
		t.Errorf("duplicate with the other secret: %d %s; want 200 unchanged", h.status, h.body)
	}
	if got := st.metric(t, `payrouter_gateway_webhooks_total{gateway="ding",result="settled"}`); got != "1" {
		t.Errorf("settled counted %q; want 1", got)
	}
	if got := st.metric(t, `payrouter_gateway_webhooks_total{gateway="ding",result="unchanged"}`); got != "2" {
		t.Errorf("unchanged counted %q; want 2", got)
	}
}

func TestGatewayWebhookRefusals(t *testing.T) {
	st := newStackHolding(t, "admin-token", time.Minute, func(d *Deps) { d.Limits = NewLimits(config.Limits{AuthFailuresPerMinute: 3}, nil) })
	st.payments.SetWebhookKeys(map[string]payrouter.WebhookKeys{"ding": {Secrets: []string{dingHookSecret}, Tolerance: 5 * time.Minute}})
	good := dingEvent("ch_none-a1", "D-1")
	cases := []struct {
		name, addr, gateway, body, secret string
		age                               time.Duration
		status                            int
		series                            string
	}{
		{"a wrong secret", "203.0.113.1:1", "ding", good, "not_the_secret", 0, 400, `{gateway="ding",result="bad_signature"}`},
		{"no signature", "203.0.113.2:1", "ding", good, "", 0, 400, `{gateway="ding",result="bad_signature"}`},
		{"a stale timestamp", "203.0.113.3:1", "ding", good, dingHookSecret, 10 * time.Minute, 400, `{gateway="ding",result="bad_signature"}`},
		{"signed garbage", "203.0.113.4:1", "ding", "garbage", dingHookSecret, 0, 400, `{gateway="ding",result="bad_request"}`},
		{"over the size limit", "203.0.113.5:1", "ding", `{"x":"` + strings.Repeat("a", MaxGatewayWebhookBody) + `"}`, dingHookSecret, 0, 400, `{gateway="ding",result="bad_request"}`},
		{"a gateway without webhooks", "203.0.113.6:1", "paywell", good, dingHookSecret, 0, 404, `{gateway="none",result="not_configured"}`},
		{"no such gateway", "203.0.113.7:1", "nope", good, dingHookSecret, 0, 404, `{gateway="none",result="not_configured"}`},
		{"an unknown charge", "203.0.113.8:1", "ding", good, dingHookSecret, 0, 200, `{gateway="ding",result="unchanged"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			series := "payrouter_gateway_webhooks_total" + tc.series
			before := st.metric(t, series)
			var headers []string
			if tc.secret != "" {
				for k, v := range dingsim.Sign([]byte(tc.body), tc.secret, time.Now().Add(-tc.age)) {
					headers = append(headers, k, v[0])
				}
			}
			r := doFrom(st.api, tc.addr, "POST", "/webhooks/"+tc.gateway, tc.body, headers...)
			if r.status != tc.status {
				t.Fatalf("%d %s; want %d", r.status, r.body, tc.status)
			}
			if after := st.metric(t, series); after == before {
				t.Errorf("%s still %q; want it counted", series, after)
			}
		})
	}
	if n := st.sims["ding"].Stats().Requests; n != 0 {
		t.Errorf("ding was asked %d times; only the verified call naming a charge payrouter does not have was made, and it asks nothing", n)
	}
	if strings.Contains(st.log.String(), dingHookSecret) {
		t.Error("a secret in the log")
	}

	// An address whose calls keep failing verification is refused before its body is read,
	// a right call included, until its bucket refills; another address is not.
	for range 3 {
		st.hookFrom("192.0.2.50:1", "ding", good, "forged")
	}
	if r := st.hookFrom("192.0.2.50:1", "ding", good, dingHookSecret); r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Errorf("the 4th call of an address that failed 3 times: %d %v; want 429 with Retry-After", r.status, r.header)
	}
	if r := st.hookFrom("192.0.2.51:1", "ding", good, dingHookSecret); r.status != 200 {
		t.Errorf("another address: %d; want 200", r.status)
	}
	if got := st.metric(t, `payrouter_rate_limited_total{reason="webhook_failures"}`); got != "1" {
		t.Errorf("rate limited counted %q; want 1", got)
	}
}
