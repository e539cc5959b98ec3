package httpapi_test

// The OpenAPI check: api/openapi.yaml against the real handlers. TestOpenAPI drives the
// storefront and admin handlers, over the real router, guards, adapters and simulated gateways,
// through every documented operation and answer, and validates each response against the spec;
// then it checks the reverse, that every documented answer, header, problem type and field was
// produced. kin-openapi validates the spec and each exchange (openapi_spec_test.go).

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/gateways/ding/dingsim"
	"github.com/payrouter/payrouter/gateways/paywell/paywellsim"
	"github.com/payrouter/payrouter/gateways/sim"
	"github.com/payrouter/payrouter/httpapi"
	"github.com/payrouter/payrouter/internal/testpki"
	"github.com/payrouter/payrouter/memstore"
	"github.com/payrouter/payrouter/service"
	"github.com/payrouter/payrouter/telemetry"
)

const (
	specFile = "../api/openapi.yaml"
	// The spec's servers: which listener a path is served on.
	storefrontURL = "http://localhost:8080"
	adminURL      = "http://127.0.0.1:9090"
)

// specNotProduced lists the documented answers ("METHOD /path STATUS") this in-process test
// cannot produce, each with why: they need a real outage. It is empty: the state store outage
// behind readyz 503 and the 500s is a store that stops answering, the gateway outages are
// simulated gateways told to refuse or to hang. Add to it only what truly cannot be produced.
var specNotProduced = map[string]string{}

// specFieldsNotProduced is the same for documented fields ("Schema.field").
var specFieldsNotProduced = map[string]string{}

func TestOpenAPI(t *testing.T) {
	spec := loadSpec(t)
	cov := newCoverage()
	st := newSpecStack(t, spec, cov, fallback.Queue, fallback.Degrade)
	alt := newSpecStack(t, spec, cov, fallback.Fail, fallback.Fail)
	chargeBody := func(amount int, token string, extra string) string {
		return fmt.Sprintf(`{"amount":%d,"currency":"USD","payment_method":{"type":"card","token":%q}%s}`, amount, token, extra)
	}
	ops := []string{"capture", "void", "refund"}

	t.Run("health and metrics", func(t *testing.T) {
		st.expect(t, st.send(t, st.api, specCall{method: "GET", path: "/healthz"}), 200)
		st.expect(t, st.send(t, st.admin, specCall{method: "GET", path: "/healthz"}), 200)
		st.expect(t, st.send(t, st.api, specCall{method: "GET", path: "/readyz"}), 200)
		st.expect(t, st.send(t, st.admin, specCall{method: "GET", path: "/readyz"}), 200)
		st.expect(t, st.send(t, st.admin, specCall{method: "GET", path: "/metrics"}), 200)
	})

	t.Run("the state store stops answering", func(t *testing.T) {
		st.store.down.Store(true)
		defer st.store.down.Store(false)
		if a := st.expect(t, st.send(t, st.api, specCall{method: "GET", path: "/readyz"}), 503); a.str("reason") != "" {
			t.Errorf("the storefront's /readyz told a stranger %q; the reason is the admin listener's", a.str("reason"))
		}
		if a := st.expect(t, st.send(t, st.admin, specCall{method: "GET", path: "/readyz"}), 503); !strings.Contains(a.str("reason"), "money state store") {
			t.Errorf("the admin listener's /readyz reason %q, want it naming the money state store", a.str("reason"))
		}
		st.expect(t, st.charge(t, "down-1", chargeBody(1000, "tok_visa", "")), 503)
		st.expect(t, st.get(t, "/charge/ch_nothing"), 503)
		for _, op := range ops {
			st.expect(t, st.post(t, "/charge/ch_nothing/"+op, "down-"+op, ""), 503)
		}
		st.expect(t, st.get(t, "/refund/re_nothing"), 503)
		st.expect(t, st.get(t, "/events"), 503)
		st.expect(t, st.hook(t, st.api, "ding", specHookEvent, specHookSecret), 503)
		st.expect(t, st.adminGet(t, st.admin, "/admin/charges?status=succeeded"), 500)
		st.expect(t, st.adminGet(t, st.admin, "/admin/webhooks"), 500)
		st.expect(t, st.adminPost(t, st.admin, "/admin/webhooks/whd_NOTHING/redeliver"), 500)
		st.expect(t, st.adminPost(t, st.admin, "/admin/webhooks/endpoints/shop/enable"), 500)
		// The breakers are this instance's, not the money state's: the admin breaker API works.
		for _, action := range breakerActions {
			st.expect(t, st.adminPost(t, st.admin, "/admin/breakers/paywell/charge/"+action), 200)
		}
	})

	t.Run("the state store fails", func(t *testing.T) {
		st.store.broken.Store(true)
		defer st.store.broken.Store(false)
		st.expect(t, st.charge(t, "broken-1", chargeBody(1000, "tok_visa", "")), 500)
		st.expect(t, st.get(t, "/charge/ch_nothing"), 500)
		for _, op := range ops {
			st.expect(t, st.post(t, "/charge/ch_nothing/"+op, "broken-"+op, ""), 500)
		}
		st.expect(t, st.get(t, "/refund/re_nothing"), 500)
		st.expect(t, st.get(t, "/events"), 500)
		st.expect(t, st.hook(t, st.api, "ding", specHookEvent, specHookSecret), 500)
	})

	t.Run("gateway webhooks", func(t *testing.T) {
		if a := st.expect(t, st.hook(t, st.api, "ding", specHookEvent, specHookSecret), 200); a.str("result") != "unchanged" {
			t.Errorf("a verified event naming no charge: %s, want unchanged", a.str("result"))
		}
		st.expect(t, st.hook(t, st.api, "ding", specHookEvent, "not-the-secret"), 400)
		st.expect(t, st.hook(t, st.api, "paywell", specHookEvent, specHookSecret), 404)
		st.expect(t, st.hook(t, st.apiLimited, "ding", specHookEvent, "not-the-secret"), 400)
		st.expect(t, st.hook(t, st.apiLimited, "ding", specHookEvent, "not-the-secret"), 429)
	})

	t.Run("charges, captures, voids and refunds", func(t *testing.T) {
		full := chargeBody(1999, "tok_visa", `,"country":"MY","customer_id":"cus_123","description":"order 42","capture":true,"metadata":{"order":"42"}`)
		a := st.expect(t, st.charge(t, "full-1", full), 201)
		captured := a.str("id")
		st.expect(t, st.get(t, "/charge/"+captured), 200)
		st.expect(t, st.charge(t, "full-1", chargeBody(2000, "tok_visa", "")), 422)

		authorized := []string{}
		for i := range 4 {
			authorized = append(authorized, st.newCharge(t, fmt.Sprintf("auth-%d", i), false))
		}
		st.expect(t, st.post(t, "/charge/"+authorized[0]+"/capture", "cap-1", ""), 200)
		st.expect(t, st.post(t, "/charge/"+authorized[0]+"/capture", "cap-2", `{}`), 409)
		st.expect(t, st.post(t, "/charge/"+authorized[1]+"/capture", "cap-1", ""), 422)
		st.expect(t, st.post(t, "/charge/"+authorized[1]+"/void", "void-1", ""), 200)
		st.expect(t, st.post(t, "/charge/"+authorized[1]+"/void", "void-2", ""), 409)
		st.expect(t, st.post(t, "/charge/"+authorized[2]+"/void", "void-1", ""), 422)

		r := st.expect(t, st.post(t, "/charge/"+captured+"/refund", "ref-1", `{"amount":500}`), 201)
		st.expect(t, st.get(t, "/refund/"+r.str("id")), 200)
		st.expect(t, st.post(t, "/charge/"+captured+"/refund", "ref-1", `{"amount":600}`), 422)
		st.expect(t, st.post(t, "/charge/"+captured+"/refund", "ref-2", `{"amount":100000}`), 409)
		st.expect(t, st.post(t, "/charge/"+authorized[3]+"/refund", "ref-3", ""), 409)
		st.expect(t, st.get(t, "/charge/"+captured), 200) // amount_refunded

		// The changes above, as events: charges and refunds alike.
		page := st.expect(t, st.get(t, "/events?limit=100"), 200)
		if got, _ := page.obj["data"].([]any); len(got) < 8 {
			t.Fatalf("GET /events listed %d events after charges, captures, voids and refunds; want them all", len(got))
		}
		first := st.expect(t, st.get(t, "/events?limit=1"), 200)
		st.expect(t, st.get(t, "/events?limit=2&starting_after="+firstEventID(t, first)), 200)
		st.expect(t, st.get(t, "/events?limit=0"), 400)
		st.expect(t, st.get(t, "/events?limit=101"), 400)
		st.expect(t, st.get(t, "/events?starting_after=evt_NOTANEVENT"), 400)

		for _, op := range ops {
			st.expect(t, st.post(t, "/charge/ch_nope/"+op, "nope-"+op, ""), 404)
		}
		st.expect(t, st.get(t, "/charge/ch_nope"), 404)
		st.expect(t, st.get(t, "/refund/re_nope"), 404)
	})

	t.Run("requests refused before any gateway", func(t *testing.T) {
		id := st.newCharge(t, "refused-1", true)
		auths := []string{"none", "Bearer wrong-key", "Basic a2V5LXNwZWM6"}
		for _, auth := range auths {
			st.expect(t, st.send(t, st.api, specCall{method: "POST", path: "/charge", key: "k", body: chargeBody(100, "tok_visa", ""), auth: auth}), 401)
			st.expect(t, st.send(t, st.api, specCall{method: "GET", path: "/charge/" + id, auth: auth}), 401)
			st.expect(t, st.send(t, st.api, specCall{method: "GET", path: "/refund/re_x", auth: auth}), 401)
			st.expect(t, st.send(t, st.api, specCall{method: "GET", path: "/events", auth: auth}), 401)
			for _, op := range ops {
				st.expect(t, st.send(t, st.api, specCall{method: "POST", path: "/charge/" + id + "/" + op, key: "k", auth: auth}), 401)
			}
		}
		for _, body := range []string{
			chargeBody(100, "tok_visa", `,"extra":1`),
			`{"amount":"100","currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`,
			`{"amount":100,"currency":"USD","payment_method":{"type":"card","number":"4242424242424242"}}`,
			`{"amount":100}{}`,
			chargeBody(100, "tok_visa", `,"gateway":"stripe"`),
		} {
			st.expect(t, st.charge(t, "bad-body", body), 400)
		}
		st.expect(t, st.send(t, st.api, specCall{method: "POST", path: "/charge", body: chargeBody(100, "tok_visa", "")}), 400)
		huge := `{"description":"` + strings.Repeat("x", httpapi.MaxBodyBytes) + `"}`
		st.expect(t, st.charge(t, "big", huge), 413)
		st.expect(t, st.send(t, st.api, specCall{method: "POST", path: "/charge", key: "text", body: "{}", contentType: "text/plain"}), 415)
		for _, op := range ops {
			path := "/charge/" + id + "/" + op
			st.expect(t, st.send(t, st.api, specCall{method: "POST", path: path}), 400) // no Idempotency-Key
			st.expect(t, st.post(t, path, "bad-"+op, `{"surprise":true}`), 400)
			st.expect(t, st.post(t, path, "big-"+op, huge), 413)
			st.expect(t, st.send(t, st.api, specCall{method: "POST", path: path, key: "text-" + op, body: "{}", contentType: "text/plain"}), 415)
		}
		st.expect(t, st.post(t, "/charge/"+id+"/refund", "zero", `{"amount":0}`), 400)
		// Ids that name nothing payrouter makes: a card number, 8,000 characters.
		st.expect(t, st.get(t, "/charge/4111111111111111"), 400)
		st.expect(t, st.get(t, "/refund/re_"+strings.Repeat("x", 8000)), 400)
	})

	t.Run("a declined card", func(t *testing.T) {
		p := st.expect(t, st.charge(t, "decline-1", chargeBody(1300, sim.DeclineToken, "")), 402)
		st.expect(t, st.get(t, "/charge/"+p.str("charge_id")), 200) // decline_code
	})

	t.Run("an outcome not known yet, then a stale look-up", func(t *testing.T) {
		defer st.resetBreakers(t)
		h := st.hold(t, "paywell", func(*http.Request) bool { return true })
		a := st.expect(t, st.charge(t, "slow-1", chargeBody(1700, "tok_visa", "")), 202)
		st.expect(t, st.get(t, "/charge/"+a.str("id")), 200) // stale: paywell is asked and does not answer
		h.open()
		st.expect(t, st.get(t, "/charge/"+a.str("id")), 200)
	})

	t.Run("a timeout resolved as not processed, then failover", func(t *testing.T) {
		defer st.resetBreakers(t)
		st.hold(t, "paywell", paywellChargeCall) // never opened: paywell never sees the charge
		a := st.expect(t, st.charge(t, "resolved-1", chargeBody(1800, "tok_visa", "")), 201)
		if !strings.Contains(string(a.body), `"resolved":"not_found"`) {
			t.Errorf("want paywell's attempt resolved not_found: %s", a.body)
		}
	})

	t.Run("a hedge answers first, the slow sale captures and keeps the charge, the hedge is voided", func(t *testing.T) {
		defer st.resetBreakers(t)
		// ding, first on the hedged route, makes the sale and answers only after 700ms: paywell,
		// started as a hedge after 50ms, authorizes first and the charge is answered; ding's
		// sale then captures, so it keeps the charge and paywell's authorization is voided.
		st.doors["ding"].set(delay(dingChargeCall, 700*time.Millisecond))
		a := st.expect(t, st.charge(t, "hedge-1", `{"amount":2500,"currency":"EUR","payment_method":{"type":"card","token":"tok_visa"}}`), 201)
		deadline := time.Now().Add(5 * time.Second)
		for {
			g := st.expect(t, st.get(t, "/charge/"+a.str("id")), 200)
			if strings.Contains(string(g.body), `"voided":true`) && strings.Contains(string(g.body), `"hedge":true`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the hedge's loser was never shown voided: %s", g.body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("a request with the same key still in flight", func(t *testing.T) {
		authorized := []string{st.newCharge(t, "inflight-a", false), st.newCharge(t, "inflight-b", false)}
		captured := st.newCharge(t, "inflight-c", true)
		cases := []struct{ path, body, match string }{
			{"/charge", chargeBody(1100, "tok_visa", ""), "charge"},
			{"/charge/" + authorized[0] + "/capture", "", "post"},
			{"/charge/" + authorized[1] + "/void", "", "post"},
			{"/charge/" + captured + "/refund", `{"amount":100}`, "post"},
		}
		for i, tc := range cases {
			match := anyPost
			if tc.match == "charge" {
				match = paywellChargeCall
			}
			h := st.hold(t, "paywell", match)
			key := fmt.Sprintf("inflight-%d", i)
			first := make(chan specAnswer, 1)
			go func() { first <- st.post(t, tc.path, key, tc.body) }()
			select {
			case <-h.arrived:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: the first request never reached paywell", tc.path)
			}
			st.expect(t, st.post(t, tc.path, key, tc.body), 409)
			h.open()
			st.doors["paywell"].set(nil)
			if a := <-first; a.status >= 300 {
				t.Errorf("%s: the first request answered %d %s", tc.path, a.status, a.body)
			}
		}
	})

	t.Run("a key without the right", func(t *testing.T) {
		captured := st.newCharge(t, "rights-c", true)
		authorized := st.newCharge(t, "rights-a", false)
		refund := st.expect(t, st.post(t, "/charge/"+captured+"/refund", "rights-r", `{"amount":100}`), 201).str("id")
		readOnly, chargeOnly := "Bearer key-spec-read-only", "Bearer key-spec-charge-only"
		for _, c := range []specCall{
			{method: "POST", path: "/charge", key: "rights-1", body: chargeBody(1000, "tok_visa", ""), auth: readOnly},
			{method: "POST", path: "/charge/" + authorized + "/capture", key: "rights-2", auth: readOnly},
			{method: "POST", path: "/charge/" + authorized + "/void", key: "rights-3", auth: chargeOnly},
			{method: "POST", path: "/charge/" + captured + "/refund", key: "rights-4", auth: readOnly},
			{method: "GET", path: "/charge/" + captured, auth: chargeOnly},
			{method: "GET", path: "/refund/" + refund, auth: chargeOnly},
			{method: "GET", path: "/events", auth: chargeOnly},
		} {
			p := st.expect(t, st.send(t, st.api, c), 403)
			if p.str("type") != "/problems/forbidden" {
				t.Errorf("%s %s: type %q, want /problems/forbidden", c.method, c.path, p.str("type"))
			}
		}
	})

	t.Run("the gateway refuses our requests as malformed", func(t *testing.T) {
		defer st.doors["paywell"].set(nil)
		authorized := []string{st.newCharge(t, "malformed-a", false), st.newCharge(t, "malformed-b", false)}
		captured := st.newCharge(t, "malformed-c", true)
		st.doors["paywell"].set(refuse(anyPost))
		st.expect(t, st.charge(t, "malformed-1", chargeBody(1200, "tok_visa", "")), 502)
		st.expect(t, st.post(t, "/charge/"+authorized[0]+"/capture", "malformed-2", ""), 502)
		st.expect(t, st.post(t, "/charge/"+authorized[1]+"/void", "malformed-3", ""), 502)
		st.expect(t, st.post(t, "/charge/"+captured+"/refund", "malformed-4", ""), 502)
		refunds := st.store.refundsOf(captured)
		if len(refunds) != 1 {
			t.Fatalf("refunds of %s: %v, want the failed one", captured, refunds)
		}
		st.expect(t, st.get(t, "/refund/"+refunds[0]), 200) // failed, with failure_reason
	})

	t.Run("breakers forced open through the admin API", func(t *testing.T) {
		defer st.resetBreakers(t)
		for _, gw := range []string{"paywell", "ding"} {
			st.expect(t, st.adminPost(t, st.admin, "/admin/breakers/"+gw+"/charge/force-open"), 200)
		}
		p := st.expect(t, st.charge(t, "forced-1", chargeBody(1400, "tok_visa", "")), 503)
		if !strings.Contains(string(p.body), `{"gateway":"paywell","outcome":"breaker_open","duration_ms":0}`) {
			t.Errorf("want paywell passed as breaker_open: %s", p.body)
		}
		st.expect(t, st.adminGet(t, st.admin, "/admin/breakers"), 200)
		st.expect(t, st.adminPost(t, st.admin, "/admin/breakers/paywell/charge/force-close"), 200)
		st.expect(t, st.charge(t, "forced-2", chargeBody(1400, "tok_visa", "")), 201)
	})

	t.Run("a breaker tripped by an outage", func(t *testing.T) {
		defer st.resetBreakers(t)
		st.sims["paywell"].SetBehavior(sim.Behavior{Mode: sim.ModeUnavailable})
		defer st.sims["paywell"].SetBehavior(sim.Behavior{Mode: sim.ModeNormal})
		pinned := chargeBody(1500, "tok_visa", `,"gateway":"paywell"`)
		for i := range 3 {
			st.expect(t, st.charge(t, fmt.Sprintf("trip-%d", i), pinned), 503)
		}
		p := st.expect(t, st.charge(t, "trip-open", pinned), 503)
		if p.str("open_until") == "" {
			t.Errorf("a breaker open by a trip: want open_until: %s", p.body)
		}
		st.expect(t, st.adminGet(t, st.admin, "/admin/breakers"), 200)

		authorized := []string{st.newChargeAt(t, "trip-a", "ding", false), st.newChargeAt(t, "trip-b", "ding", false)}
		captured := st.newChargeAt(t, "trip-c", "ding", true)
		st.sims["ding"].SetBehavior(sim.Behavior{Mode: sim.ModeUnavailable})
		defer st.sims["ding"].SetBehavior(sim.Behavior{Mode: sim.ModeNormal})
		st.expect(t, st.post(t, "/charge/"+authorized[0]+"/capture", "trip-capture", ""), 503)
		st.expect(t, st.post(t, "/charge/"+authorized[1]+"/void", "trip-void", ""), 503)
		q := st.expect(t, st.post(t, "/charge/"+captured+"/refund", "trip-refund", ""), 202)
		st.expect(t, st.get(t, "/refund/"+q.str("id")), 200) // queued
	})

	t.Run("fallbacks that fail", func(t *testing.T) {
		defer alt.resetBreakers(t)
		captured := alt.newCharge(t, "alt-1", true)
		h := alt.hold(t, "paywell", func(*http.Request) bool { return true })
		a := alt.expect(t, alt.charge(t, "alt-slow", chargeBody(1600, "tok_visa", "")), 202)
		alt.expect(t, alt.get(t, "/charge/"+a.str("id")), 503)
		h.open()
		alt.doors["paywell"].set(nil)
		alt.sims["paywell"].SetBehavior(sim.Behavior{Mode: sim.ModeUnavailable})
		defer alt.sims["paywell"].SetBehavior(sim.Behavior{Mode: sim.ModeNormal})
		alt.expect(t, alt.post(t, "/charge/"+captured+"/refund", "alt-refund", ""), 503)
	})

	t.Run("admin", func(t *testing.T) {
		st.expect(t, st.adminGet(t, st.admin, "/admin/breakers"), 200)
		st.expect(t, st.adminGet(t, st.admin, "/admin/gateways"), 200)
		st.expect(t, st.adminGet(t, st.admin, "/admin/charges?status=succeeded&limit=5"), 200)
		st.expect(t, st.adminGet(t, st.admin, "/admin/charges?status=processing"), 200)
		for _, q := range []string{"", "?status=pending", "?status=succeeded&limit=0", "?status=succeeded&limit=ten"} {
			st.expect(t, st.adminGet(t, st.admin, "/admin/charges"+q), 400)
		}
		for _, action := range breakerActions {
			path := "/admin/breakers/paywell/capture/" + action
			st.expect(t, st.adminPost(t, st.admin, path), 200)
			st.expect(t, st.adminPost(t, st.admin, "/admin/breakers/stripe/charge/"+action), 404)
			st.expect(t, st.adminPost(t, st.admin, "/admin/breakers/paywell/settle/"+action), 404)
			// With a shared state store that does not answer, the change applies here, says so.
			w := st.expect(t, st.adminPost(t, st.adminFleet, path), 200)
			if w.header.Get("Warning") == "" {
				t.Errorf("%s with the shared store away: no Warning", path)
			}
		}
		// Webhooks: an endpoint a 410 disabled, two dead letters (one answered, one not).
		deliveries := st.deadLetters(t)
		st.expect(t, st.adminGet(t, st.admin, "/admin/webhooks"), 200)
		st.expect(t, st.adminGet(t, st.admin, "/admin/webhooks?limit=1"), 200)
		for _, q := range []string{"?limit=0", "?limit=1001", "?limit=all"} {
			st.expect(t, st.adminGet(t, st.admin, "/admin/webhooks"+q), 400)
		}
		for _, d := range deliveries {
			st.expect(t, st.adminPost(t, st.admin, "/admin/webhooks/"+d+"/redeliver"), 202)
			st.expect(t, st.adminPost(t, st.admin, "/admin/webhooks/"+d+"/redeliver"), 404)
		}
		st.expect(t, st.adminPost(t, st.admin, "/admin/webhooks/not-a-delivery/redeliver"), 404)
		st.expect(t, st.adminPost(t, st.admin, "/admin/webhooks/endpoints/shop/enable"), 200)
		st.expect(t, st.adminPost(t, st.admin, "/admin/webhooks/endpoints/nope/enable"), 404)
		// Reloads: the same file, a changed one, a broken one, one that fails half-way.
		same := st.reloader.file
		st.expect(t, st.adminPost(t, st.admin, "/admin/reload"), 200)
		changed := strings.Replace(same, "consecutive_failures: 3, cooldown: 1m}\n  ding:", "consecutive_failures: 5, cooldown: 1m}\n  ding:", 1)
		changed = strings.Replace(changed, "request_timeout: 3s", "request_timeout: 4s", 1)
		st.reloader.set(changed, nil)
		if a := st.expect(t, st.adminPost(t, st.admin, "/admin/reload"), 200); !strings.Contains(string(a.body), `"renewed":{"paywell":["breakers"]}`) {
			t.Errorf("a reload changing paywell: %s", a.body)
		}
		st.reloader.set(same+"routez: []\n", nil)
		st.expect(t, st.adminPost(t, st.admin, "/admin/reload"), 422)
		st.reloader.set(same, errors.New("the router refused the routes"))
		st.expect(t, st.adminPost(t, st.admin, "/admin/reload"), 500)
		st.reloader.set(same, nil)
		st.expect(t, st.adminPost(t, st.admin, "/admin/reload"), 200) // back to the stack's own settings
		// A stripe gateway (in no route, never called) shows the api_version it pins.
		withStripe := strings.Replace(same, "routes:\n", "  stripe:\n    kind: stripe\n    base_url: https://api.stripe.example\n"+
			"    api_version: \"2026-08-26.dahlia\"\n    credentials: {api_key: sk_test_spec}\nroutes:\n", 1)
		st.reloader.set(withStripe, nil)
		st.expect(t, st.adminPost(t, st.admin, "/admin/reload"), 200)
		if a := st.expect(t, st.adminGet(t, st.admin, "/admin/gateways"), 200); !strings.Contains(string(a.body), `"api_version":"2026-08-26.dahlia"`) {
			t.Errorf("/admin/gateways with a stripe gateway: %s", a.body)
		}
		st.reloader.set(same, nil)
		st.expect(t, st.adminPost(t, st.admin, "/admin/reload"), 200)
		// The status page and its script need no token, even with the admin API disabled.
		for _, path := range []string{"/admin/", "/admin/statuspage.js"} {
			for _, srv := range []*specServer{st.admin, st.adminOff} {
				st.expect(t, st.send(t, srv, specCall{method: "GET", path: path, auth: "none"}), 200)
			}
		}
		reads := []string{"/admin/breakers", "/admin/gateways", "/admin/charges?status=succeeded", "/admin/webhooks"}
		for _, auth := range []string{"none", "Bearer key-spec", "Bearer wrong"} {
			for _, path := range reads {
				st.expect(t, st.send(t, st.admin, specCall{method: "GET", path: path, auth: auth}), 401)
				st.expect(t, st.send(t, st.adminOff, specCall{method: "GET", path: path, auth: auth}), 403)
			}
			for _, action := range breakerActions {
				path := "/admin/breakers/paywell/charge/" + action
				st.expect(t, st.send(t, st.admin, specCall{method: "POST", path: path, auth: auth}), 401)
				st.expect(t, st.send(t, st.adminOff, specCall{method: "POST", path: path, auth: auth}), 403)
			}
			for _, path := range []string{"/admin/reload", "/admin/webhooks/whd_X/redeliver", "/admin/webhooks/endpoints/shop/enable"} {
				st.expect(t, st.send(t, st.admin, specCall{method: "POST", path: path, auth: auth}), 401)
				st.expect(t, st.send(t, st.adminOff, specCall{method: "POST", path: path, auth: auth}), 403)
			}
		}
	})

	t.Run("limits", func(t *testing.T) {
		// The key's one request, then every storefront operation over its rate.
		id := st.newCharge(t, "limits-1", true)
		st.expect(t, st.send(t, st.apiLimited, specCall{method: "GET", path: "/charge/" + id}), 200)
		st.expect(t, st.send(t, st.apiLimited, specCall{method: "POST", path: "/charge", key: "k", body: chargeBody(100, "tok_visa", "")}), 429)
		st.expect(t, st.send(t, st.apiLimited, specCall{method: "GET", path: "/charge/" + id}), 429)
		st.expect(t, st.send(t, st.apiLimited, specCall{method: "GET", path: "/refund/re_x"}), 429)
		st.expect(t, st.send(t, st.apiLimited, specCall{method: "GET", path: "/events"}), 429)
		for _, op := range ops {
			st.expect(t, st.send(t, st.apiLimited, specCall{method: "POST", path: "/charge/" + id + "/" + op, key: "k"}), 429)
		}
		// One wrong admin token, then every admin operation with a wrong one (the right token is
		// not refused for the address's failures: TestAuthFailureThrottle).
		wrong := "Bearer wrong"
		st.expect(t, st.send(t, st.adminLimited, specCall{method: "GET", path: "/admin/breakers", auth: wrong}), 401)
		for _, path := range []string{"/admin/breakers", "/admin/gateways", "/admin/charges?status=succeeded", "/admin/webhooks"} {
			st.expect(t, st.send(t, st.adminLimited, specCall{method: "GET", path: path, auth: wrong}), 429)
		}
		for _, path := range []string{"/admin/webhooks/whd_X/redeliver", "/admin/webhooks/endpoints/shop/enable"} {
			st.expect(t, st.send(t, st.adminLimited, specCall{method: "POST", path: path, auth: wrong}), 429)
		}
		for _, action := range breakerActions {
			st.expect(t, st.send(t, st.adminLimited, specCall{method: "POST", path: "/admin/breakers/paywell/charge/" + action, auth: wrong}), 429)
		}
		st.expect(t, st.send(t, st.adminLimited, specCall{method: "POST", path: "/admin/reload", auth: wrong}), 429)
	})

	t.Run("every documented answer, header, problem type and field is produced", func(t *testing.T) {
		cov.verify(t, spec)
	})
}

// TestOpenAPIValidator proves the check catches what it is for, on the real spec: a response
// that strays from it in any way, an accepted request the spec would refuse, and a spec with a
// typo.
func TestOpenAPIValidator(t *testing.T) {
	data, err := os.ReadFile(specFile)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := parseOpenAPI(data)
	if err != nil {
		t.Fatalf("%s: %v", specFile, err)
	}
	const charge = `{"id":"ch_ABC","status":"succeeded","amount":1999,"currency":"USD","gateway":"paywell",` +
		`"gateway_reference":"ch_x","attempts":[{"gateway":"paywell","outcome":"succeeded","duration_ms":3}],"created_at":"2026-11-30T12:00:00Z"}`
	getCharge := func(status int, body string, header ...string) exchange {
		h := http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"req_1"}}
		for i := 0; i+1 < len(header); i += 2 {
			if header[i+1] == "" {
				h.Del(header[i])
			} else {
				h.Set(header[i], header[i+1])
			}
		}
		return exchange{server: storefrontURL, method: "GET", path: "/charge/ch_ABC", reqHeader: http.Header{"Authorization": {"Bearer k"}},
			status: status, header: h, body: []byte(body)}
	}
	// createCharge is POST /charge answered 201 with the charge above.
	createCharge := func(reqBody, auth string) exchange {
		h := http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {"k-1"}}
		if auth != "" {
			h.Set("Authorization", auth)
		}
		return exchange{server: storefrontURL, method: "POST", path: "/charge", reqHeader: h, reqBody: []byte(reqBody), status: 201,
			header: http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"req_1"}}, body: []byte(charge)}
	}
	if errs := spec.check(getCharge(200, charge), nil); len(errs) > 0 {
		t.Fatalf("a valid charge is refused: %v", errs)
	}
	if errs := spec.check(createCharge(`{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`, "Bearer k"), nil); len(errs) > 0 {
		t.Fatalf("a valid charge request is refused: %v", errs)
	}
	cases := []struct {
		name string
		ex   exchange
		want string
	}{
		{"an undocumented field", getCharge(200, strings.Replace(charge, `"id"`, `"surprise":1,"id"`, 1)), "surprise"},
		{"an undocumented field in a nested object", getCharge(200, strings.Replace(charge, `"duration_ms":3`, `"duration_ms":3,"retries":2`, 1)), "retries"},
		{"a required field missing", getCharge(200, strings.Replace(charge, `,"created_at":"2026-11-30T12:00:00Z"`, "", 1)), "created_at"},
		{"a wrong type", getCharge(200, strings.Replace(charge, `"amount":1999`, `"amount":"1999"`, 1)), "amount"},
		{"a fraction for an integer", getCharge(200, strings.Replace(charge, `"amount":1999`, `"amount":19.99`, 1)), "amount"},
		{"a value outside its enum", getCharge(200, strings.Replace(charge, `"succeeded","amount"`, `"done","amount"`, 1)), "status"},
		{"null where no null is documented", getCharge(200, strings.Replace(charge, `"currency":"USD"`, `"currency":null`, 1)), "currency"},
		{"a malformed date-time", getCharge(200, strings.Replace(charge, "2026-11-30T12:00:00Z", "yesterday", 1)), "created_at"},
		{"an undocumented status", getCharge(418, `{}`), "418"},
		{"an undocumented header", getCharge(200, charge, "X-Debug", "1"), "X-Debug"},
		{"a required header missing", getCharge(200, charge, "X-Request-Id", ""), "X-Request-Id"},
		{"an undocumented content type", getCharge(200, charge, "Content-Type", "text/html"), "text/html"},
		{"a problem type not documented for the status", getCharge(404,
			`{"type":"/problems/unauthorized","title":"t","status":404,"detail":"d"}`, "Content-Type", "application/problem+json"), "unauthorized"},
		{"a problem whose status is not the answer's", getCharge(404,
			`{"type":"/problems/not-found","title":"t","status":400,"detail":"d"}`, "Content-Type", "application/problem+json"), "status"},
		{"an undocumented path", exchange{server: storefrontURL, method: "GET", path: "/charges", status: 200,
			header: http.Header{"X-Request-Id": {"r"}}}, "/charges"},
		{"an admin path on the storefront", exchange{server: storefrontURL, method: "GET", path: "/admin/breakers", status: 200,
			header: http.Header{"X-Request-Id": {"r"}}}, "/admin/breakers"},
		{"an accepted request the spec refuses", createCharge(`{"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`, "Bearer k"), "amount"},
		{"an accepted request without the credential the spec asks for", createCharge(
			`{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`, ""), "Bearer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := spec.check(tc.ex, nil)
			if !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, tc.want) }) {
				t.Errorf("want an error naming %q, got %q", tc.want, errs)
			}
		})
	}

	// A typo in the spec fails the test: in a field's name (the real field becomes undocumented),
	// in a keyword (the subset does not know it), in a required list, in a $ref.
	typos := []struct{ name, from, to, want string }{
		{"a field's name", "        gateway_reference: {type: string", "        gateway_referense: {type: string", "gateway_reference"},
		{"a keyword", "      required: [id, status, amount, currency, attempts, created_at]", "      requried: [id, status, amount, currency, attempts, created_at]", "requried"},
		{"a required list", "      required: [id, status, amount, currency, attempts, created_at]", "      required: [id, status, amount, currency, attempts, created]", "created"},
		{"a $ref", "schema: {$ref: '#/components/schemas/Charge'}", "schema: {$ref: '#/components/schemas/Charges'}", "Charges"},
		{"additionalProperties", "    Charge:\n      type: object\n      required: [id, status, amount, currency, attempts, created_at]\n      additionalProperties: false\n",
			"    Charge:\n      type: object\n      required: [id, status, amount, currency, attempts, created_at]\n      additionalProperties: flase\n", "additionalProperties"},
	}
	for _, tc := range typos {
		t.Run("a typo in "+tc.name, func(t *testing.T) {
			if !bytes.Contains(data, []byte(tc.from)) {
				t.Fatalf("the spec no longer holds %q; update this test", tc.from)
			}
			bad, err := parseOpenAPI(bytes.Replace(data, []byte(tc.from), []byte(tc.to), 1))
			var errs []string
			if err != nil {
				errs = []string{err.Error()}
			} else {
				errs = bad.check(getCharge(200, charge), nil)
			}
			if !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, tc.want) }) {
				t.Errorf("want the typo caught (naming %q), got %q", tc.want, errs)
			}
		})
	}
}

// TestOpenAPIDocumentsEveryRoute checks routes.go against the spec both ways: every route of
// either listener is documented, on the right server, and every documented operation is a route.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	spec := loadSpec(t)
	deps := httpapi.Deps{Metrics: telemetry.NewMetrics()}
	listeners := []struct {
		url string
		h   http.Handler
	}{{storefrontURL, httpapi.NewServer(deps)}, {adminURL, httpapi.NewAdminServer(deps)}}
	for _, l := range listeners {
		var routes []echo.RouteInfo
		for _, r := range l.h.(*echo.Echo).Router().Routes() {
			if slices.Contains([]string{"GET", "POST", "PUT", "PATCH", "DELETE"}, r.Method) && !strings.Contains(r.Path, "*") {
				routes = append(routes, r)
			}
		}
		for _, r := range routes {
			documented := false
			for _, p := range spec.paths() {
				if p.item.GetOperation(r.Method) != nil && slices.Contains(p.servers, l.url) && routeMatches(r.Path, p.segs) {
					documented = true
				}
			}
			if !documented {
				t.Errorf("%s: route %s %s is not in %s", l.url, r.Method, r.Path, specFile)
			}
		}
		for _, p := range spec.paths() {
			if !slices.Contains(p.servers, l.url) {
				continue
			}
			for _, m := range httpMethods {
				if p.item.GetOperation(m) != nil && !slices.ContainsFunc(routes, func(r echo.RouteInfo) bool {
					return r.Method == m && routeMatches(r.Path, p.segs)
				}) {
					t.Errorf("%s: %s %s is documented but no route serves it", l.url, m, p.template)
				}
			}
		}
	}
}

// routeMatches reports whether an echo route path (":name" parameters) serves a spec template's
// segments ("{name}" parameters or literals).
func routeMatches(route string, segs []string) bool {
	rs := strings.Split(strings.Trim(route, "/"), "/")
	if len(rs) != len(segs) {
		return false
	}
	for i, s := range rs {
		if !strings.HasPrefix(s, ":") && s != segs[i] {
			return false
		}
	}
	return true
}

// ---- the stack under test ----------------------------------------------------------------

var breakerActions = []string{"force-open", "force-close", "reset"}

// specStack is payrouter wired as `payrouter serve` wires it, from a configuration file, over
// simulated gateways (paywell, then ding) each behind a front door the test can make hold,
// delay or refuse calls, and a state store the test can make stop answering.
type specStack struct {
	spec   *openAPI
	cov    *coverage
	sims   map[string]*sim.Server
	doors  map[string]*frontDoor
	store  *flakyStore
	client *http.Client
	// The listeners: the storefront; the admin API with a token; the admin API with none
	// configured; the admin API of an instance whose shared state store does not answer.
	api, admin, adminOff, adminFleet *specServer
	requests                         atomic.Int64
	mu                               sync.Mutex
	holds                            []*hold
	reloader                         *specReloader

	// Both listeners of an instance with limits: the storefront's key may send one request (a
	// bucket that barely refills), the admin listener's address may fail once a minute.
	apiLimited, adminLimited *specServer
}

// specReloader is the service's own POST /admin/reload over the file at path, which set
// rewrites; broken makes the next reloads fail after they started, as none can otherwise.
type specReloader struct {
	svc    *service.Service
	path   string
	mu     sync.Mutex
	file   string
	broken error
}

func (r *specReloader) set(file string, broken error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.file, r.broken = file, broken
	if err := os.WriteFile(r.path, []byte(file), 0o600); err != nil {
		panic(err)
	}
}

func (r *specReloader) Reload(ctx context.Context) (config.Changes, error) {
	r.mu.Lock()
	broken := r.broken
	r.mu.Unlock()
	if broken != nil {
		return config.Changes{}, broken
	}
	return r.svc.Reload(ctx)
}

func (r *specReloader) Summary() []config.GatewaySummary { return r.svc.Summary() }

type specServer struct {
	ts    *httptest.Server
	url   string // the spec's server this listener is
	token string // the credential sent unless a call says otherwise
}

func newSpecStack(t *testing.T, spec *openAPI, cov *coverage, refundFallback, statusFallback fallback.Policy) *specStack {
	t.Helper()
	st := &specStack{
		spec: spec, cov: cov,
		sims:   map[string]*sim.Server{"paywell": paywellsim.New(), "ding": dingsim.New()},
		doors:  map[string]*frontDoor{},
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableCompression: true}},
	}
	urls := map[string]string{}
	// Ding is reached over HTTPS with its own CA (gateways.ding.tls), so /admin/gateways shows a
	// tls section.
	ca := testpki.NewCA(t, "spec-gateways")
	for _, name := range []string{"paywell", "ding"} {
		st.doors[name] = &frontDoor{next: st.sims[name]}
		srv := httptest.NewUnstartedServer(st.doors[name])
		if name == "ding" {
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "ding", "127.0.0.1").TLS(t)}}
			srv.StartTLS()
		} else {
			srv.Start()
		}
		t.Cleanup(func() {
			st.openHolds()
			srv.CloseClientConnections()
			srv.Close()
			st.sims[name].Close()
		})
		urls[name] = srv.URL
	}
	cfgText := fmt.Sprintf(`
listen: 127.0.0.1:8080
request_timeout: 3s
auth:
  api_keys:
    - "key-spec"
    - {name: reader, key: "key-spec-read-only", rights: [read]}
    - {name: charger, key: "key-spec-charge-only", rights: [charge]}
  admin_token: "admin-spec"
gateways:
  paywell:
    kind: paywell
    base_url: %q
    credentials: {api_key: pw_test}
    timeout: 500ms
    max_concurrent: 8
    operations:
      status: {timeout: 400ms}
    breaker: {consecutive_failures: 3, cooldown: 1m}
  ding:
    kind: ding
    base_url: %q
    credentials: {api_key: ding_test}
    timeout: 2s
    max_concurrent: 8
    breaker: {consecutive_failures: 3, cooldown: 1m}
    tls: {ca_file: %q}
    webhook: {secrets: [`+specHookSecret+`]}
routes:
  - name: hedged
    match: {currency: [EUR]}
    gateways: [ding, paywell]
    hedge: {after: 50ms, budget: 1}
  - name: default
    gateways: [paywell, ding]
fallbacks:
  charge: fail
  refund: %s
  status: %s
# Off: the limits have instances of their own below, built on one stack's parts.
limits: {requests_per_second: 0, key_share: 1, auth_failures_per_minute: 0}
webhooks:
  allow_private: true
  endpoints:
    - {name: shop, url: "http://127.0.0.1:1/hooks?token=t0ken", key_name: reader, secrets: ["whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="]}
`, urls["paywell"], urls["ding"], ca.CertFile, refundFallback, statusFallback)
	st.store = &flakyStore{Store: memstore.New(), refunds: map[string][]string{}}
	svc, path := newSpecService(t, cfgText, st.store)
	st.reloader = &specReloader{svc: svc, path: path, file: cfgText}
	deps := svc.Deps()
	deps.Reloader = st.reloader
	serve := func(h http.Handler, url, token string) *specServer {
		ts := httptest.NewServer(h)
		t.Cleanup(ts.Close)
		return &specServer{ts: ts, url: url, token: token}
	}
	st.api = serve(httpapi.NewServer(deps), storefrontURL, "Bearer key-spec")
	st.admin = serve(httpapi.NewAdminServer(deps), adminURL, "Bearer admin-spec")
	off := deps
	off.Credentials = httpapi.NewAuthCredentials(config.Auth{APIKeys: svc.Config().Auth.APIKeys})
	st.adminOff = serve(httpapi.NewAdminServer(off), adminURL, "")
	limited := deps
	limited.Limits = httpapi.NewLimits(config.Limits{RequestsPerSecond: 0.001, Burst: 1, KeyShare: 1, AuthFailuresPerMinute: 1}, svc.Config().Auth.APIKeys)
	st.apiLimited = serve(httpapi.NewServer(limited), storefrontURL, "Bearer key-spec")
	st.adminLimited = serve(httpapi.NewAdminServer(limited), adminURL, "Bearer admin-spec")

	// Another instance, sharing breakers through a Redis that does not answer (a closed port).
	fleetText := cfgText + "state:\n  redis_url: redis://127.0.0.1:1\n  redis_timeout: 50ms\n  database_url: postgres://127.0.0.1:1/unused\n"
	fleetSvc, _ := newSpecService(t, fleetText, &flakyStore{Store: memstore.New(), refunds: map[string][]string{}})
	st.adminFleet = serve(httpapi.NewAdminServer(fleetSvc.Deps()), adminURL, "Bearer admin-spec")
	return st
}

// newSpecService builds a payrouter from a configuration's text, as `payrouter serve` does
// (package service), on store instead of the one the text names: the file is written where a
// reload reads it. Nothing runs in the background: the answers are what is under test.
func newSpecService(t *testing.T, text string, store payrouter.Store) (*service.Service, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "payrouter.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := service.Load(t.Context(), path, os.Getenv)
	if err != nil {
		t.Fatalf("configuration: %v", err)
	}
	svc, err := service.New(t.Context(), cfg, service.Options{Path: path, Getenv: os.Getenv, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc, path
}

// specCall is one request. auth "" sends the listener's credential, "none" no Authorization.
type specCall struct {
	method, path, body string
	contentType        string // "" is application/json when there is a body
	auth               string
	key                string // Idempotency-Key, "" none
	header             map[string]string
}

type specAnswer struct {
	status int
	header http.Header
	body   []byte
	obj    map[string]any
}

// firstEventID is the id of the first event of a GET /events answer.
func firstEventID(t *testing.T, a specAnswer) string {
	t.Helper()
	data, _ := a.obj["data"].([]any)
	if len(data) == 0 {
		t.Fatal("GET /events listed no event")
	}
	ev, _ := data[0].(map[string]any)
	id, _ := ev["id"].(string)
	return id
}

// str is a top-level string member of the answer's JSON object, "" when there is none.
func (a specAnswer) str(name string) string {
	s, _ := a.obj[name].(string)
	return s
}

// send makes one call, validates the answer against the spec and records what it covered. A
// stored answer (an idempotent POST the server keeps for its key) is sent again and must come
// back the same, replayed. It only reports with t.Errorf, so it may run on any goroutine.
func (st *specStack) send(t *testing.T, srv *specServer, c specCall) specAnswer {
	t.Helper()
	a, ok := st.roundTrip(t, srv, c)
	if !ok {
		return a
	}
	stored := map[int]bool{200: true, 201: true, 202: true, 402: true, 502: true}
	if srv.url == storefrontURL && c.method == "POST" && c.key != "" && stored[a.status] {
		again, ok := st.roundTrip(t, srv, c)
		switch {
		case !ok:
		case again.status != a.status || !bytes.Equal(again.body, a.body) || again.header.Get("Idempotent-Replayed") != "true" ||
			again.header.Get("Location") != a.header.Get("Location"):
			t.Errorf("%s %s again with Idempotency-Key %q: %d %v %s; want the stored %d replayed", c.method, c.path, c.key,
				again.status, again.header, again.body, a.status)
		}
	}
	return a
}

func (st *specStack) roundTrip(t *testing.T, srv *specServer, c specCall) (specAnswer, bool) {
	t.Helper()
	req, err := http.NewRequest(c.method, srv.ts.URL+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Errorf("%s %s: %v", c.method, c.path, err)
		return specAnswer{}, false
	}
	switch {
	case c.auth == "" && srv.token != "":
		req.Header.Set("Authorization", srv.token)
	case c.auth != "" && c.auth != "none":
		req.Header.Set("Authorization", c.auth)
	}
	switch {
	case c.contentType != "":
		req.Header.Set("Content-Type", c.contentType)
	case c.body != "":
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("Idempotency-Key", c.key)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	// Every other request names itself, to check it is echoed; the others get an id made up.
	n := st.requests.Add(1)
	rid := ""
	if n%2 == 1 {
		rid = fmt.Sprintf("spec-%d", n)
		req.Header.Set("X-Request-Id", rid)
	}
	resp, err := st.client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", c.method, c.path, err)
		return specAnswer{}, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("%s %s: reading the answer: %v", c.method, c.path, err)
		return specAnswer{}, false
	}
	a := specAnswer{status: resp.StatusCode, header: resp.Header, body: body}
	_ = json.Unmarshal(body, &a.obj)
	if got := resp.Header.Get("X-Request-Id"); rid != "" && got != rid {
		t.Errorf("%s %s: X-Request-Id %q, want the request's %q echoed", c.method, c.path, got, rid)
	}
	ex := exchange{server: srv.url, method: c.method, path: c.path, reqHeader: req.Header, reqBody: []byte(c.body), status: a.status, header: a.header, body: body}
	for _, e := range st.spec.check(ex, st.cov) {
		t.Errorf("%s %s -> %d: %s\n\tbody: %s", c.method, c.path, a.status, e, clip(body))
	}
	return a, true
}

// expect fails the test unless the answer has that status.
func (st *specStack) expect(t *testing.T, a specAnswer, status int) specAnswer {
	t.Helper()
	if a.status != status {
		t.Fatalf("got %d, want %d: %s", a.status, status, clip(a.body))
	}
	return a
}

func (st *specStack) charge(t *testing.T, key, body string) specAnswer {
	t.Helper()
	return st.send(t, st.api, specCall{method: "POST", path: "/charge", key: key, body: body})
}

func (st *specStack) post(t *testing.T, path, key, body string) specAnswer {
	t.Helper()
	return st.send(t, st.api, specCall{method: "POST", path: path, key: key, body: body})
}

func (st *specStack) get(t *testing.T, path string) specAnswer {
	t.Helper()
	return st.send(t, st.api, specCall{method: "GET", path: path})
}

func (st *specStack) adminGet(t *testing.T, srv *specServer, path string) specAnswer {
	t.Helper()
	return st.send(t, srv, specCall{method: "GET", path: path})
}

func (st *specStack) adminPost(t *testing.T, srv *specServer, path string) specAnswer {
	t.Helper()
	return st.send(t, srv, specCall{method: "POST", path: path})
}

// newCharge makes a charge through the route (paywell first) and returns its id: captured, or
// authorized only.
func (st *specStack) newCharge(t *testing.T, key string, capture bool) string {
	t.Helper()
	return st.newChargeAt(t, key, "", capture)
}

// newChargeAt is newCharge pinned to a gateway ("" for the route).
func (st *specStack) newChargeAt(t *testing.T, key, gateway string, capture bool) string {
	t.Helper()
	pin := ""
	if gateway != "" {
		pin = `,"gateway":"` + gateway + `"`
	}
	body := fmt.Sprintf(`{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"},"capture":%t%s}`, capture, pin)
	a := st.expect(t, st.charge(t, key, body), 201)
	if a.str("id") == "" {
		t.Fatalf("a charge without an id: %s", a.body)
	}
	return a.str("id")
}

// resetBreakers resets every breaker of both gateways through the admin API, after a scenario
// that counted failures.
func (st *specStack) resetBreakers(t *testing.T) {
	t.Helper()
	for _, g := range []string{"paywell", "ding"} {
		st.doors[g].set(nil)
		for _, op := range payrouter.Operations {
			st.expect(t, st.adminPost(t, st.admin, "/admin/breakers/"+g+"/"+string(op)+"/reset"), 200)
		}
	}
	st.openHolds()
}

// hold makes the gateway's front door hold the calls that match until the hold is opened.
func (st *specStack) hold(t *testing.T, gateway string, match func(*http.Request) bool) *hold {
	t.Helper()
	h := &hold{match: match, arrived: make(chan struct{}, 64), release: make(chan struct{})}
	st.mu.Lock()
	st.holds = append(st.holds, h)
	st.mu.Unlock()
	st.doors[gateway].set(h.hook)
	return h
}

func (st *specStack) openHolds() {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, h := range st.holds {
		h.open()
	}
}

// frontDoor stands in front of a simulated gateway; a hook may take a call of the gateway's own
// API over (the control and health endpoints always go through).
type frontDoor struct {
	next http.Handler
	mu   sync.Mutex
	hook func(w http.ResponseWriter, r *http.Request) (handled bool)
}

func (d *frontDoor) set(hook func(w http.ResponseWriter, r *http.Request) bool) {
	d.mu.Lock()
	d.hook = hook
	d.mu.Unlock()
}

func (d *frontDoor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	hook := d.hook
	d.mu.Unlock()
	if hook != nil && !strings.HasPrefix(r.URL.Path, "/_sim/") && r.URL.Path != "/health" && hook(w, r) {
		return
	}
	d.next.ServeHTTP(w, r)
}

// hold keeps matching calls from the gateway until opened (then they go through) or until the
// caller gives up (then the gateway never saw them).
type hold struct {
	match   func(*http.Request) bool
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *hold) hook(_ http.ResponseWriter, r *http.Request) bool {
	if !h.match(r) {
		return false
	}
	select {
	case h.arrived <- struct{}{}:
	default:
	}
	select {
	case <-h.release:
		return false
	case <-r.Context().Done():
		return true
	}
}

func (h *hold) open() { h.once.Do(func() { close(h.release) }) }

// delay holds matching calls for d, then lets them through.
func delay(match func(*http.Request) bool, d time.Duration) func(http.ResponseWriter, *http.Request) bool {
	return func(_ http.ResponseWriter, r *http.Request) bool {
		if !match(r) {
			return false
		}
		select {
		case <-time.After(d):
			return false
		case <-r.Context().Done():
			return true
		}
	}
}

// refuse answers matching calls as Paywell answers a malformed request (a 400
// invalid_request_error): the gateway rejected our request, which is neither a decline nor an
// outage.
func refuse(match func(*http.Request) bool) func(http.ResponseWriter, *http.Request) bool {
	return func(w http.ResponseWriter, r *http.Request) bool {
		if !match(r) {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","code":"parameter_invalid","message":"Refused by the test."}}`)
		return true
	}
}

// paywellChargeCall matches Paywell's create-charge call; anyPost every call but status look-ups.
func paywellChargeCall(r *http.Request) bool {
	return r.Method == "POST" && r.URL.Path == "/v1/charges"
}
func anyPost(r *http.Request) bool { return r.Method == "POST" }

// dingChargeCall matches Ding's create-transfer call.
func dingChargeCall(r *http.Request) bool {
	return r.Method == "POST" && r.URL.Path == "/api/V1/SendTransfer"
}

// deadLetters disables the webhook endpoint shop (as a 410 does) and makes two dead letters of
// it, one whose last attempt got an answer and one whose did not, and returns their deliveries.
func (st *specStack) deadLetters(t *testing.T) []string {
	t.Helper()
	ctx := t.Context()
	url := st.reloader.svc.Config().Webhooks.Endpoints[0].URL
	if err := st.store.SetWebhookDisabled(ctx, "shop", &payrouter.WebhookDisabled{URL: url, Reason: "answered 410 Gone", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, status := range []int{500, 0} {
		w := &payrouter.WebhookDelivery{
			ID: payrouter.WebhookDeliveryID("shop", fmt.Sprintf("evt_SPEC%d", i)), Endpoint: "shop", EventID: fmt.Sprintf("evt_SPEC%d", i),
			EventType: payrouter.EventChargeSucceeded, EventAt: time.Now(), Body: []byte(`{}`), Attempt: 8, LastStatus: status,
		}
		if status != 0 {
			w.LastError = "answered 500 Internal Server Error"
		}
		id, err := st.store.Enqueue(ctx, payrouter.Task{Kind: payrouter.TaskWebhook, Webhook: w, CreatedAt: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		task := payrouter.Task{ID: id, Kind: payrouter.TaskWebhook, Webhook: w}
		if err := st.store.DeadLetterTask(ctx, id, payrouter.DeadLetter{Task: task, Reason: "the last of 8 attempts failed", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		out = append(out, w.ID)
	}
	return out
}

func (s *flakyStore) WebhooksDisabled(ctx context.Context) (map[string]payrouter.WebhookDisabled, error) {
	if err := s.fail(); err != nil {
		return nil, err
	}
	return s.Store.WebhooksDisabled(ctx)
}

func (s *flakyStore) SetWebhookDisabled(ctx context.Context, endpoint string, d *payrouter.WebhookDisabled) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.SetWebhookDisabled(ctx, endpoint, d)
}

func (s *flakyStore) DeadLetterOf(ctx context.Context, delivery string) (*payrouter.DeadLetter, error) {
	if err := s.fail(); err != nil {
		return nil, err
	}
	return s.Store.DeadLetterOf(ctx, delivery)
}

// flakyStore is memstore that stops answering while down is set, and remembers the refunds saved
// for each charge (a refund the gateway refused is answered 502 without its id).
type flakyStore struct {
	*memstore.Store
	// broken makes every call fail with an error that is not an outage (a bug, a refused
	// statement): answered 500.
	broken  atomic.Bool
	down    atomic.Bool
	mu      sync.Mutex
	refunds map[string][]string
}

var (
	errStoreDown   = fmt.Errorf("state store: connection refused (test): %w", payrouter.ErrStateUnavailable)
	errStoreBroken = errors.New("state store: refused the statement (test)")
)

// fail is the error a call answers now: errStoreDown while down, errStoreBroken while broken.
func (s *flakyStore) fail() error {
	switch {
	case s.down.Load():
		return errStoreDown
	case s.broken.Load():
		return errStoreBroken
	}
	return nil
}

func (s *flakyStore) Ping(ctx context.Context) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.Ping(ctx)
}

func (s *flakyStore) Claim(ctx context.Context, owner, key, fp string, ttl time.Duration) (*payrouter.IdempotencyRecord, payrouter.Hold, error) {
	if err := s.fail(); err != nil {
		return nil, payrouter.Hold{}, err
	}
	return s.Store.Claim(ctx, owner, key, fp, ttl)
}

func (s *flakyStore) ClaimCharge(ctx context.Context, owner, key, fp string, ttl time.Duration, c *payrouter.Charge) (payrouter.Claimed, error) {
	if err := s.fail(); err != nil {
		return payrouter.Claimed{}, err
	}
	return s.Store.ClaimCharge(ctx, owner, key, fp, ttl, c)
}

func (s *flakyStore) Peek(ctx context.Context, key, fp string) (*payrouter.IdempotencyRecord, error) {
	if err := s.fail(); err != nil {
		return nil, err
	}
	return s.Store.Peek(ctx, key, fp)
}

func (s *flakyStore) Charge(ctx context.Context, id string) (*payrouter.Charge, error) {
	if err := s.fail(); err != nil {
		return nil, err
	}
	return s.Store.Charge(ctx, id)
}

func (s *flakyStore) ChargesByStatus(ctx context.Context, status payrouter.ChargeStatus, limit int) ([]*payrouter.Charge, error) {
	if err := s.fail(); err != nil {
		return nil, err
	}
	return s.Store.ChargesByStatus(ctx, status, limit)
}

func (s *flakyStore) Refund(ctx context.Context, id string) (*payrouter.Refund, error) {
	if err := s.fail(); err != nil {
		return nil, err
	}
	return s.Store.Refund(ctx, id)
}

func (s *flakyStore) Events(ctx context.Context, owner, after string, limit int) ([]payrouter.Event, bool, error) {
	if err := s.fail(); err != nil {
		return nil, false, err
	}
	return s.Store.Events(ctx, owner, after, limit)
}

func (s *flakyStore) ChangeRefund(ctx context.Context, ch payrouter.RefundChange) error {
	if err := s.fail(); err != nil {
		return err
	}
	r := ch.Refund
	s.mu.Lock()
	if !slices.Contains(s.refunds[r.ChargeID], r.ID) {
		s.refunds[r.ChargeID] = append(s.refunds[r.ChargeID], r.ID)
	}
	s.mu.Unlock()
	return s.Store.ChangeRefund(ctx, ch)
}

func (s *flakyStore) refundsOf(chargeID string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.refunds[chargeID])
}

// unreachableFleet is a shared breaker store that never answers.
type unreachableFleet struct{}

var (
	_            payrouter.FleetBreakers = unreachableFleet{}
	errFleetDown                         = errors.New("shared state store: connection refused (test)")
)

func (unreachableFleet) ReportOutcomes(context.Context, string, payrouter.BreakerRules, payrouter.BreakerReport, string) (bool, payrouter.BreakerCounts, error) {
	return false, payrouter.BreakerCounts{}, errFleetDown
}
func (unreachableFleet) OpenBreaker(context.Context, string, time.Duration, payrouter.BreakerCounts, payrouter.TrialGen, string) (bool, error) {
	return false, errFleetDown
}
func (unreachableFleet) TakeTrial(context.Context, string, int, time.Duration) (payrouter.TrialGen, error) {
	return 0, errFleetDown
}
func (unreachableFleet) ReturnTrial(context.Context, string, payrouter.TrialGen) error {
	return errFleetDown
}
func (unreachableFleet) TrialSucceeded(context.Context, string, payrouter.TrialGen, int, string) (bool, error) {
	return false, errFleetDown
}
func (unreachableFleet) CloseBreaker(context.Context, string, string) (bool, error) {
	return false, errFleetDown
}
func (unreachableFleet) ForceBreaker(context.Context, string, payrouter.Forced, string) error {
	return errFleetDown
}
func (unreachableFleet) ResetBreaker(context.Context, string, string) error { return errFleetDown }
func (unreachableFleet) BreakerStates(context.Context, []string) (map[string]payrouter.SharedBreaker, error) {
	return nil, errFleetDown
}
func (unreachableFleet) WatchBreakers(context.Context, func(), func(payrouter.BreakerEvent)) error {
	return errFleetDown
}

func clip(b []byte) string {
	if len(b) > 400 {
		return string(b[:400]) + "..."
	}
	return string(b)
}

// The spec stack's gateway webhook: ding's, with this secret.
const (
	specHookSecret = "ding_hook_spec_secret_0123456789"
	specHookEvent  = `{"EventType":"TransferStateChanged","EventId":"DEV-1","TransferRecord":{"TransferId":{"TransferRef":"D-1","DistributorRef":"ch_nothing-a1"},"ProcessingState":"Completed","SettlementState":"Settled"}}`
)

// hook sends body to POST /webhooks/{gateway} of srv, signed as Ding signs with secret, no API key.
func (st *specStack) hook(t *testing.T, srv *specServer, gateway, body, secret string) specAnswer {
	t.Helper()
	h := map[string]string{}
	for k, v := range dingsim.Sign([]byte(body), secret, time.Now()) {
		h[k] = v[0]
	}
	return st.send(t, srv, specCall{method: "POST", path: "/webhooks/" + gateway, body: body, auth: "none", header: h})
}
