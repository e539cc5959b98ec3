package stripe

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
)

// sent is one request the adapter made, as the server read it.
type sent struct {
	method, path string
	query, form  url.Values
	header       http.Header
}

// canned serves answers by "METHOD /path" and records every request.
type canned struct {
	mu      sync.Mutex
	reqs    []sent
	answers map[string]string // "POST /v1/payment_intents" -> JSON body, 200
}

func (c *canned) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	form, _ := url.ParseQuery(string(body))
	c.mu.Lock()
	c.reqs = append(c.reqs, sent{r.Method, r.URL.Path, r.URL.Query(), form, r.Header.Clone()})
	a, ok := c.answers[r.Method+" "+r.URL.Path]
	c.mu.Unlock()
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such thing"}}`)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, a)
}

func (c *canned) requests() []sent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]sent(nil), c.reqs...)
}

func newCanned(t *testing.T, answers map[string]string) (*canned, *Client) {
	t.Helper()
	c := &canned{answers: answers}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	cl, err := New(Config{BaseURL: srv.URL, Credentials: map[string]string{"api_key": "sk_test_unit"}, APIVersion: TestedAPIVersion},
		gatewayhttp.NewClient(srv.Client().Transport))
	if err != nil {
		t.Fatal(err)
	}
	return c, cl
}

func TestAuthorizeRequest(t *testing.T) {
	for _, capture := range []bool{true, false} {
		c, cl := newCanned(t, map[string]string{"POST /v1/payment_intents": requiresCapture})
		r := cl.Authorize(t.Context(), payrouter.ChargeRequest{Reference: "ch_u-a1", Amount: 1999, Currency: "EUR", Token: "pm_card_visa",
			Capture: capture, Country: "DE", CustomerID: "cus_shop_1", Description: "order 42"})
		if r.Outcome != payrouter.OutcomeSucceeded {
			t.Fatalf("Authorize: %+v", r)
		}
		reqs := c.requests()
		if len(reqs) != 1 {
			t.Fatalf("%d requests, want 1", len(reqs))
		}
		got := reqs[0]
		method := "manual"
		if capture {
			method = "automatic"
		}
		want := url.Values{
			"amount": {"1999"}, "currency": {"eur"}, "payment_method": {"pm_card_visa"}, "payment_method_types[0]": {"card"},
			"confirm": {"true"}, "capture_method": {method}, "error_on_requires_action": {"true"},
			"transfer_group": {"ch_u-a1"}, "metadata[payrouter_reference]": {"ch_u-a1"}, "expand[0]": {"latest_charge"},
			"description": {"order 42"}, "metadata[customer_id]": {"cus_shop_1"}, "metadata[country]": {"DE"},
		}
		if got.form.Encode() != want.Encode() {
			t.Errorf("capture %v: form\n %s\nwant\n %s", capture, got.form.Encode(), want.Encode())
		}
		for h, v := range map[string]string{
			"Authorization": "Bearer sk_test_unit", "Stripe-Version": TestedAPIVersion, "Idempotency-Key": "ch_u-a1",
			"Content-Type": "application/x-www-form-urlencoded",
		} {
			if got.header.Get(h) != v {
				t.Errorf("header %s: %q, want %q", h, got.header.Get(h), v)
			}
		}
	}
}

// TestOperationsByReference: capture, void and refund of a charge whose PaymentIntent id
// payrouter never learned look it up by transfer_group first, then act on what was found; with
// the id known, they go straight to it.
func TestOperationsByReference(t *testing.T) {
	c, cl := newCanned(t, map[string]string{
		"GET /v1/charges":                       list(authorizedCh),
		"POST /v1/payment_intents/pi_1/capture": succeeded,
		"POST /v1/payment_intents/pi_1/cancel":  canceled,
		"POST /v1/refunds":                      `{"id":"re_1","object":"refund","status":"succeeded","charge":` + partialCharge + `}`,
	})
	ctx := t.Context()
	byRef := payrouter.TxRequest{Reference: "ch_u-a1-capture", ChargeReference: "ch_u-a1", Amount: 700, Currency: "USD"}
	if r := cl.Capture(ctx, byRef); r.Outcome != payrouter.OutcomeSucceeded || r.State != payrouter.TxCaptured {
		t.Fatalf("capture by reference: %+v", r)
	}
	byRef.Reference = "ch_u-a1-void"
	if r := cl.Void(ctx, byRef); r.Outcome != payrouter.OutcomeSucceeded || r.State != payrouter.TxVoided {
		t.Fatalf("void by reference: %+v", r)
	}
	byRef.Reference = "re_u1"
	if r := cl.Refund(ctx, byRef); r.Outcome != payrouter.OutcomeSucceeded || r.State != payrouter.TxPartiallyRefunded {
		t.Fatalf("refund by reference: %+v", r)
	}
	withID := payrouter.TxRequest{Reference: "re_u2", ChargeReference: "ch_u-a1", GatewayReference: "pi_1", Currency: "USD"}
	if r := cl.Refund(ctx, withID); r.Outcome != payrouter.OutcomeSucceeded {
		t.Fatalf("refund by id: %+v", r)
	}
	var got []string
	for _, r := range c.requests() {
		line := r.method + " " + r.path
		switch {
		case r.method == http.MethodGet:
			line += "?" + r.query.Encode()
		case r.form.Get("payment_intent") != "":
			line += " payment_intent=" + r.form.Get("payment_intent") + " amount=" + r.form.Get("amount")
		case r.form.Get("amount_to_capture") != "":
			line += " amount_to_capture=" + r.form.Get("amount_to_capture")
		}
		got = append(got, line+" key="+r.header.Get("Idempotency-Key"))
	}
	want := []string{
		"GET /v1/charges?limit=1&transfer_group=ch_u-a1 key=",
		"POST /v1/payment_intents/pi_1/capture amount_to_capture=700 key=ch_u-a1-capture",
		"GET /v1/charges?limit=1&transfer_group=ch_u-a1 key=",
		"POST /v1/payment_intents/pi_1/cancel key=ch_u-a1-void",
		"GET /v1/charges?limit=1&transfer_group=ch_u-a1 key=",
		"POST /v1/refunds payment_intent=pi_1 amount=700 key=re_u1",
		"POST /v1/refunds payment_intent=pi_1 amount= key=re_u2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestOperationOnNothing: an operation on a reference Stripe has no charge for is refused
// without being sent; one whose look-up fails passes the look-up's outcome on, saying the
// operation was not sent.
func TestOperationOnNothing(t *testing.T) {
	c, cl := newCanned(t, map[string]string{"GET /v1/charges": list()})
	r := cl.Capture(t.Context(), payrouter.TxRequest{Reference: "x-capture", ChargeReference: "x"})
	if r.Outcome != payrouter.OutcomeError || !strings.Contains(r.Detail, "no PaymentIntent to capture") {
		t.Errorf("capture of nothing: %+v", r)
	}
	if n := len(c.requests()); n != 1 {
		t.Errorf("%d requests, want the look-up alone", n)
	}

	_, cl = newCanned(t, map[string]string{"GET /v1/charges": `<html>`})
	r = cl.Refund(t.Context(), payrouter.TxRequest{Reference: "re_x", ChargeReference: "x", Amount: 5})
	if r.Outcome != payrouter.OutcomeUnknown || !strings.Contains(r.Detail, "the refund was not sent") || r.State != "" {
		t.Errorf("refund after an unreadable look-up: %+v", r)
	}
}

// TestLookUpAfterAChargeWithoutItsGroup: once Stripe has answered a charge whose charge lacks the
// transfer_group it was created with, a look-up finding nothing is unknown, never not found:
// finding nothing would otherwise send a charge Stripe made to another gateway.
func TestLookUpAfterAChargeWithoutItsGroup(t *testing.T) {
	withGroup := `{"id":"pi_1","object":"payment_intent","status":"succeeded","latest_charge":{"id":"ch_1","object":"charge","transfer_group":"ch_g-a1"}}`
	without := `{"id":"pi_2","object":"payment_intent","status":"succeeded","latest_charge":{"id":"ch_2","object":"charge","transfer_group":null}}`
	c := &canned{answers: map[string]string{"POST /v1/payment_intents": withGroup, "GET /v1/charges": list()}}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	cl, err := New(Config{BaseURL: srv.URL, Credentials: map[string]string{"api_key": "sk_test_unit"}, APIVersion: TestedAPIVersion}, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	cl.Authorize(ctx, payrouter.ChargeRequest{Reference: "ch_g-a1", Amount: 100, Currency: "USD", Token: "pm_card_visa", Capture: true})
	if r := cl.Status(ctx, payrouter.TxRequest{Reference: "ch_other-a1"}); r.State != payrouter.TxNotFound {
		t.Fatalf("look-up after charges that kept their group: %+v, want not found", r)
	}
	c.mu.Lock()
	c.answers["POST /v1/payment_intents"] = without
	c.mu.Unlock()
	cl.Authorize(ctx, payrouter.ChargeRequest{Reference: "ch_g-a2", Amount: 100, Currency: "USD", Token: "pm_card_visa", Capture: true})
	r := cl.Status(ctx, payrouter.TxRequest{Reference: "ch_other-a1"})
	if r.Outcome != payrouter.OutcomeUnknown || !strings.Contains(r.Detail, "ch_2") {
		t.Fatalf("look-up after a charge without its group: %+v, want unknown naming ch_2", r)
	}
}

func TestHealthRequest(t *testing.T) {
	c, cl := newCanned(t, map[string]string{"GET /v1/payment_intents": `{"object":"list","data":[],"has_more":false}`})
	if err := cl.Health(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := c.requests()[0]
	if r.query.Encode() != "created%5Bgt%5D=4102444800&limit=1" || r.header.Get("Authorization") != "Bearer sk_test_unit" || r.header.Get("Stripe-Version") != TestedAPIVersion {
		t.Errorf("health request: %s %s %v", r.method, r.query.Encode(), r.header)
	}
	_, cl = newCanned(t, nil)
	if err := cl.Health(t.Context()); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("health answered 404: %v", err)
	}
}
