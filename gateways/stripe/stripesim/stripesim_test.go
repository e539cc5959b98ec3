package stripesim

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/payrouter/payrouter/gateways/sim"
)

// call sends one API call to the fake and returns the status, the answer's headers and its JSON.
func call(t *testing.T, s *sim.Server, method, path string, form url.Values, key string) (int, http.Header, map[string]any) {
	t.Helper()
	var body *strings.Reader
	if method == http.MethodGet {
		if len(form) > 0 {
			path += "?" + form.Encode()
		}
		body = strings.NewReader("")
	} else {
		body = strings.NewReader(form.Encode())
	}
	req := httptest.NewRequest(method, path, body)
	req.Header.Set("Authorization", "Bearer sk_test_sim")
	if method != http.MethodGet {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	var v map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("%s %s: answer %d is not JSON: %q", method, path, rec.Code, rec.Body.String())
	}
	return rec.Code, rec.Header(), v
}

func create(token, ref string, capture bool) url.Values {
	method := "manual"
	if capture {
		method = "automatic"
	}
	return url.Values{"amount": {"1500"}, "currency": {"usd"}, "payment_method": {token}, "payment_method_types[0]": {"card"},
		"confirm": {"true"}, "capture_method": {method}, "error_on_requires_action": {"true"}, "transfer_group": {ref},
		"metadata[payrouter_reference]": {ref}}
}

func errorOf(v map[string]any) map[string]any {
	e, _ := v["error"].(map[string]any)
	return e
}

// TestIdempotencyKeys: Stripe's rules for an Idempotency-Key. The first answer (a decline
// included) is replayed to a repeat with the same parameters, marked Idempotent-Replayed; the
// key with other parameters, or on another endpoint, is an idempotency_error; a request refused
// for its parameters saves nothing, so the key stays free.
func TestIdempotencyKeys(t *testing.T) {
	s := New()
	status, _, first := call(t, s, http.MethodPost, "/v1/payment_intents", create("pm_card_visa", "ref-1", true), "ref-1")
	if status != 200 || first["status"] != "succeeded" {
		t.Fatalf("create: %d %v", status, first)
	}
	status, h, again := call(t, s, http.MethodPost, "/v1/payment_intents", create("pm_card_visa", "ref-1", true), "ref-1")
	if status != 200 || h.Get("Idempotent-Replayed") != "true" || again["id"] != first["id"] {
		t.Errorf("the same create again: %d %v replayed=%q", status, again, h.Get("Idempotent-Replayed"))
	}
	other := create("pm_card_visa", "ref-1", true)
	other.Set("amount", "1600")
	if status, _, v := call(t, s, http.MethodPost, "/v1/payment_intents", other, "ref-1"); status != 400 || errorOf(v)["type"] != "idempotency_error" {
		t.Errorf("the key with another amount: %d %v", status, v)
	}
	if status, _, v := call(t, s, http.MethodPost, "/v1/refunds", url.Values{"payment_intent": {first["id"].(string)}}, "ref-1"); status != 400 || errorOf(v)["type"] != "idempotency_error" {
		t.Errorf("the key on another endpoint: %d %v", status, v)
	}
	if got := len(s.Ledger().Transactions()); got != 1 {
		t.Errorf("%d transactions, want 1", got)
	}

	status, _, declined := call(t, s, http.MethodPost, "/v1/payment_intents", create(sim.DeclineToken, "ref-2", true), "ref-2")
	if status != 402 || errorOf(declined)["decline_code"] != DeclineCode {
		t.Fatalf("decline: %d %v", status, declined)
	}
	if status, h, v := call(t, s, http.MethodPost, "/v1/payment_intents", create(sim.DeclineToken, "ref-2", true), "ref-2"); status != 402 || h.Get("Idempotent-Replayed") != "true" || errorOf(v)["charge"] != errorOf(declined)["charge"] {
		t.Errorf("the decline again: %d %v", status, v)
	}

	bad := create("pm_card_visa", "ref-3", true)
	bad.Set("capture_method", "sometimes")
	if status, _, v := call(t, s, http.MethodPost, "/v1/payment_intents", bad, "ref-3"); status != 400 || errorOf(v)["param"] != "capture_method" {
		t.Errorf("a bad capture_method: %d %v", status, v)
	}
	if status, _, v := call(t, s, http.MethodPost, "/v1/payment_intents", create("pm_card_visa", "ref-3", true), "ref-3"); status != 200 {
		t.Errorf("the key of a refused request, used again: %d %v", status, v)
	}
}

// TestKeyInProgress: a key whose first request is still being processed is answered 409.
func TestKeyInProgress(t *testing.T) {
	f := &fake{}
	f.reset()
	if a := f.begin("k", "POST /v1/payment_intents\namount=1"); a.status != 0 {
		t.Fatalf("first begin: %+v", a)
	}
	a := f.begin("k", "POST /v1/payment_intents\namount=1")
	if a.status != http.StatusConflict || a.body.(map[string]apiError)["error"].Code != "idempotency_key_in_use" {
		t.Fatalf("begin while in progress: %+v", a)
	}
	f.end("k", ok(map[string]string{"id": "pi_1"}))
	if a := f.begin("k", "POST /v1/payment_intents\namount=1"); a.status != 200 {
		t.Fatalf("begin after the first ended: %+v", a)
	}
}

func TestUnknownParameter(t *testing.T) {
	s := New()
	form := create("pm_card_visa", "ref-1", true)
	form.Set("source", "tok_visa")
	status, _, v := call(t, s, http.MethodPost, "/v1/payment_intents", form, "ref-1")
	if status != 400 || errorOf(v)["message"] != "Received unknown parameter: source" {
		t.Errorf("an unknown parameter: %d %v", status, v)
	}
	if status, _, v := call(t, s, http.MethodGet, "/v1/charges", url.Values{"transfer_group": {"x"}, "starting_after": {"ch_1"}}, ""); status != 400 {
		t.Errorf("an unknown list parameter: %d %v", status, v)
	}
	if len(s.Ledger().Transactions()) != 0 {
		t.Error("a refused request was recorded")
	}
}

// TestNamedByIDOnly: as at Stripe, a PaymentIntent is named by its id, never by the
// Idempotency-Key it was created with.
func TestNamedByIDOnly(t *testing.T) {
	s := New()
	_, _, pi := call(t, s, http.MethodPost, "/v1/payment_intents", create("pm_card_visa", "ref-1", false), "ref-1")
	if status, _, v := call(t, s, http.MethodPost, "/v1/payment_intents/ref-1/capture", nil, "ref-1-capture"); status != 404 || errorOf(v)["code"] != "resource_missing" {
		t.Errorf("capture by the Idempotency-Key: %d %v", status, v)
	}
	if status, _, v := call(t, s, http.MethodPost, "/v1/payment_intents/"+pi["id"].(string)+"/capture", nil, "ref-1-capture-2"); status != 200 || v["status"] != "succeeded" {
		t.Errorf("capture by id: %d %v", status, v)
	}
}

// TestChargesByTransferGroup: the look-up's list, newest first, declines included, a
// PaymentIntent waiting for authentication (no charge) left out.
func TestChargesByTransferGroup(t *testing.T) {
	s := New()
	call(t, s, http.MethodPost, "/v1/payment_intents", create(sim.DeclineToken, "group", true), "k1")
	call(t, s, http.MethodPost, "/v1/payment_intents", create("pm_card_visa", "group", false), "k2")
	call(t, s, http.MethodPost, "/v1/payment_intents", create("pm_card_visa", "other", true), "k3")
	waiting := create(AuthenticationRequired, "group", true)
	waiting.Set("error_on_requires_action", "false")
	status, _, pi := call(t, s, http.MethodPost, "/v1/payment_intents", waiting, "k4")
	if status != 200 || pi["status"] != "requires_action" || pi["latest_charge"] != nil {
		t.Fatalf("a payment needing authentication: %d %v", status, pi)
	}
	status, _, l := call(t, s, http.MethodGet, "/v1/charges", url.Values{"transfer_group": {"group"}}, "")
	data, _ := l["data"].([]any)
	if status != 200 || len(data) != 2 {
		t.Fatalf("charges of the group: %d %v", status, l)
	}
	if newest := data[0].(map[string]any); newest["status"] != "succeeded" || newest["captured"] != false {
		t.Errorf("newest: %v", newest)
	}
	if oldest := data[1].(map[string]any); oldest["status"] != "failed" || oldest["outcome"].(map[string]any)["reason"] != DeclineCode {
		t.Errorf("oldest: %v", oldest)
	}
	_, _, l = call(t, s, http.MethodGet, "/v1/charges", url.Values{"transfer_group": {"group"}, "limit": {"1"}}, "")
	if data, _ := l["data"].([]any); len(data) != 1 {
		t.Errorf("limit 1: %v", l)
	}
	_, _, l = call(t, s, http.MethodGet, "/v1/charges", url.Values{"transfer_group": {"nobody"}}, "")
	if data, _ := l["data"].([]any); data == nil || len(data) != 0 {
		t.Errorf("no charge: %v", l)
	}
	status, _, v := call(t, s, http.MethodPost, "/v1/payment_intents", create(AuthenticationRequired, "group", true), "k5")
	if status != 402 || errorOf(v)["code"] != "authentication_required" {
		t.Errorf("a payment needing authentication, error_on_requires_action: %d %v", status, v)
	}
}

// TestUnavailableIsTheRateLimit: the fake's "not processed, retry later" is Stripe's rate limit.
func TestUnavailableIsTheRateLimit(t *testing.T) {
	s := New()
	s.SetBehavior(sim.Behavior{Mode: sim.ModeUnavailable})
	status, _, v := call(t, s, http.MethodPost, "/v1/payment_intents", create("pm_card_visa", "r", true), "r")
	if e := errorOf(v); status != 429 || e["type"] != "invalid_request_error" || e["code"] != "rate_limit" {
		t.Errorf("unavailable: %d %v", status, v)
	}
	s.SetBehavior(sim.Behavior{})
	if status, _, _ := call(t, s, http.MethodPost, "/v1/payment_intents", create("pm_card_visa", "r", true), "r"); status != 200 {
		t.Errorf("the rate-limited key used again: %d (a rate-limited request saves nothing)", status)
	}
}

// TestResetForgetsKeys: after POST /_sim/reset a key is new again.
func TestResetForgetsKeys(t *testing.T) {
	s := New()
	call(t, s, http.MethodPost, "/v1/payment_intents", create("pm_card_visa", "r", true), "r")
	s.Reset()
	status, h, _ := call(t, s, http.MethodPost, "/v1/payment_intents", create("pm_card_visa", "r", true), "r")
	if status != 200 || h.Get("Idempotent-Replayed") != "" || len(s.Ledger().Transactions()) != 1 {
		t.Errorf("after a reset: %d replayed=%q ledger=%v", status, h.Get("Idempotent-Replayed"), s.Ledger().Transactions())
	}
}

// TestHealthCall: the adapter's health call is answered as GET /health is: not counted, failing
// with the gateway.
func TestHealthCall(t *testing.T) {
	s := New()
	if status, _, v := call(t, s, http.MethodGet, "/v1/payment_intents", url.Values{"limit": {"1"}, "created[gt]": {"4102444800"}}, ""); status != 200 || v["object"] != "list" {
		t.Errorf("health call: %d %v", status, v)
	}
	s.SetBehavior(sim.Behavior{Mode: sim.ModeError500})
	if status, _, _ := call(t, s, http.MethodGet, "/v1/payment_intents", nil, ""); status != 503 {
		t.Errorf("health call while failing: %d", status)
	}
	if got := s.Stats().Requests; got != 0 {
		t.Errorf("%d API calls counted for health calls", got)
	}
}
