package gateways_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways"
)

// TestAdaptersNeverQuoteCredentials: a gateway that quotes back everything it was sent (every
// header, the API key among them, and the whole body, the card token among it) in its own error
// and decline forms must not get either into a Result's Detail or DeclineCode, which are logged
// and shown in API answers (docs/architecture.md, Observability: never a credential or a card token
// in full).
func TestAdaptersNeverQuoteCredentials(t *testing.T) {
	const (
		key   = "gw-Live-Key-7c1d9e5f3a0b"
		token = "tok_live_9f8e7d6c5b4a39281706f5e4d3c2b1a0"
	)
	for _, kind := range gateways.Kinds() {
		for _, form := range []string{"decline", "error", "garbage"} {
			t.Run(kind+"/"+form, func(t *testing.T) {
				srv := httptest.NewServer(reflector(kind, form))
				t.Cleanup(srv.Close)
				g, err := gateways.NewWith(kind, gateways.Settings{BaseURL: srv.URL, Credentials: map[string]string{"api_key": key}, APIVersion: apiVersion(kind)}, srv.Client())
				if err != nil {
					t.Fatal(err)
				}
				ctx := t.Context()
				tx := payrouter.TxRequest{Reference: "ch_1-a1-r1", ChargeReference: "ch_1-a1", GatewayReference: "gw_1", Amount: 100, Currency: "USD"}
				results := map[string]payrouter.Result{
					"Authorize": g.Authorize(ctx, payrouter.ChargeRequest{Reference: "ch_1-a1", Amount: 100, Currency: "USD", Token: token, Capture: true}),
					"Capture":   g.Capture(ctx, tx),
					"Void":      g.Void(ctx, tx),
					"Refund":    g.Refund(ctx, tx),
					"Status":    g.Status(ctx, tx),
				}
				// Failures name the secret, never show it: test output is a log too.
				secrets := map[string]string{
					"the API key": key, "the API key in lower case": strings.ToLower(key),
					"the card token": token, "the middle of the card token": token[9:25],
				}
				for op, r := range results {
					for what, s := range secrets {
						if strings.Contains(r.Detail, s) {
							t.Errorf("%s (outcome %s): Detail holds %s", op, r.Outcome, what)
						}
						if strings.Contains(r.DeclineCode, s) {
							t.Errorf("%s (outcome %s): DeclineCode holds %s", op, r.Outcome, what)
						}
					}
				}
				// The reflection did happen: the redaction, not a quiet gateway, kept them out.
				if d := results["Authorize"].Detail; form != "garbage" && !strings.Contains(d, "[redacted]") {
					t.Errorf("Authorize: Detail %q: want the reflected API key shown as [redacted]", d)
				}
			})
		}
	}
}

// reflector answers every API call of a gateway of that kind with its form ("decline", "error"
// or "garbage": a 200 that is not JSON) quoting every header and the whole body it got.
func reflector(kind, form string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var names []string
		for name := range r.Header {
			names = append(names, name)
		}
		sort.Strings(names)
		echo := string(body)
		for _, name := range names {
			echo += " " + name + ": " + strings.Join(r.Header[name], ",")
		}
		if kind == "stripe" {
			// Stripe quotes a refused key first ("Invalid API Key provided: sk_..."), and its
			// requests are long enough that a key quoted after the body would be cut from the
			// message before it could show.
			echo = "Invalid API Key provided: " + strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") + "; " + echo
		}
		answer := func(status int, v any) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(v)
		}
		if form == "garbage" {
			w.WriteHeader(http.StatusOK)
			fmt.Fprintf(w, "<html>%s</html>", echo)
			return
		}
		switch kind {
		case "paywell", "stripe":
			e := map[string]string{"type": "invalid_request_error", "code": "parameter_invalid", "message": echo}
			status := http.StatusBadRequest
			if form == "decline" {
				status = http.StatusPaymentRequired
				e = map[string]string{"type": "card_error", "code": "card_declined", "decline_code": echo, "message": echo}
			}
			answer(status, map[string]any{"error": e})
		case "ding":
			code := "InvalidParameter"
			if form == "decline" {
				code = "ProviderRefusedRequest"
			}
			answer(http.StatusOK, map[string]any{"ResultCode": 2, "ErrorCodes": []map[string]string{{"Code": code, "Context": echo}}})
		case "tranglo":
			code, status := "201", http.StatusBadRequest
			if form == "decline" {
				code, status = "103", http.StatusForbidden
			}
			answer(status, map[string]string{"responseCode": code, "responseDesc": echo})
		default:
			panic("reflector: no answer form for kind " + kind)
		}
	}
}
