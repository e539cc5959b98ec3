// Package paywell is the adapter for Paywell, a Stripe-like gateway: form-encoded requests,
// JSON answers, `Authorization: Bearer <api_key>`, and payrouter's reference sent as the
// `Idempotency-Key` header, so a retry never charges twice. Its fake is paywellsim.
//
// Paywell's answers, and the outcomes they map to (resultOf):
//
//	2xx with a charge, refund or list   succeeded (a charge with status failed: declined; pending: pending)
//	402 card_error                      declined, decline_code
//	503 api_error service_unavailable   unavailable: Paywell did not process it, retry later
//	429 rate_limit_error                unavailable: refused before processing, retry later
//	any other 429 or 503                unknown: a proxy's page, a text/plain or empty body, or JSON
//	                                    that is not one of the two forms above
//	409                                 unknown: a request with the same key is still being processed
//	other 4xx (invalid_request_error)   error: our request was malformed
//	500 and other 5xx                   unknown: Stripe's guidance, a 500 is indeterminate
//	3xx                                 unknown: Paywell never redirects; it is not its answer
//	a 2xx that cannot be read           unknown: we cannot tell whether it charged
//	an answer cut at MaxBody            unknown (gatewayhttp.Account.Exchange)
//
// The two unavailable forms are recognised exactly (served as application/json, the error
// object parses, the type and code match, no charge named): unavailable sends the charge to
// another gateway with no look-up, so it must never be given to what a proxy in front of
// Paywell answers after forwarding a charge that Paywell then processed.
package paywell

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
)

// Config is how to reach one Paywell account.
type Config struct {
	// BaseURL is Paywell's API root, e.g. "https://api.paywell.example" (no default).
	BaseURL string
	// Credentials holds "api_key", sent as the bearer token.
	Credentials map[string]string
}

// Client is a Paywell account, reached through the *http.Client it was given. It implements
// payrouter.Gateway and is safe for concurrent use.
type Client struct {
	gatewayhttp.Account
}

var _ payrouter.Gateway = (*Client)(nil)

// New validates cfg and returns a Client that sends its requests with client. The client's
// transport is the gateway's own (its bulkhead and pool); the deadline comes with each call's
// context, so New sets no timeout.
func New(cfg Config, client *http.Client) (*Client, error) {
	acct, err := gatewayhttp.NewAccount("paywell", cfg.BaseURL, cfg.Credentials, client)
	if err != nil {
		return nil, err
	}
	return &Client{Account: acct}, nil
}

// Authorize creates a charge (POST /v1/charges), captured at once when req.Capture is set.
func (c *Client) Authorize(ctx context.Context, req payrouter.ChargeRequest) payrouter.Result {
	form := url.Values{
		"amount":   {strconv.FormatInt(req.Amount, 10)},
		"currency": {strings.ToLower(req.Currency)},
		"source":   {req.Token},
		"capture":  {strconv.FormatBool(req.Capture)},
	}
	if req.Description != "" {
		form.Set("description", req.Description)
	}
	if req.CustomerID != "" {
		form.Set("metadata[customer_id]", req.CustomerID)
	}
	if req.Country != "" {
		form.Set("metadata[country]", req.Country)
	}
	return c.call(ctx, payrouter.OpCharge, http.MethodPost, "/v1/charges", form, req.Reference, req.Token)
}

// Capture captures an authorized charge (POST /v1/charges/{id}/capture).
func (c *Client) Capture(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	form := url.Values{}
	if req.Amount > 0 {
		form.Set("amount", strconv.FormatInt(req.Amount, 10))
	}
	return c.call(ctx, payrouter.OpCapture, http.MethodPost, "/v1/charges/"+url.PathEscape(chargeKey(req))+"/capture", form, req.Reference)
}

// Void cancels an uncaptured charge (POST /v1/charges/{id}/cancel).
func (c *Client) Void(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	return c.call(ctx, payrouter.OpVoid, http.MethodPost, "/v1/charges/"+url.PathEscape(chargeKey(req))+"/cancel", nil, req.Reference)
}

// Refund refunds req.Amount of a captured charge, all that is left when 0 (POST /v1/refunds).
// The charge is expanded in the answer so the result carries its new state.
func (c *Client) Refund(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	form := url.Values{"charge": {chargeKey(req)}, "expand[]": {"charge"}}
	if req.Amount > 0 {
		form.Set("amount", strconv.FormatInt(req.Amount, 10))
	}
	return c.call(ctx, payrouter.OpRefund, http.MethodPost, "/v1/refunds", form, req.Reference)
}

// Status looks up the charge created with the Idempotency-Key req.Reference (falling back to
// req.ChargeReference) with GET /v1/charges?idempotency_key=...: an empty list is TxNotFound.
func (c *Client) Status(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	ref := req.Reference
	if ref == "" {
		ref = req.ChargeReference
	}
	q := url.Values{"idempotency_key": {ref}}
	return c.call(ctx, payrouter.OpStatus, http.MethodGet, "/v1/charges", q, "")
}

// chargeKey names the charge: Paywell's id when we have it, else the Idempotency-Key it was
// created with (Paywell accepts either).
func chargeKey(req payrouter.TxRequest) string {
	if req.GatewayReference != "" {
		return req.GatewayReference
	}
	return req.ChargeReference
}

// call makes one request and maps its answer. A GET sends vals as its query, anything else as a
// form-encoded body. gatewayhttp.Account.Exchange masks the API key and tokens (the card token the
// request carries) in the answer: Paywell quotes its own messages, which may quote us.
func (c *Client) call(ctx context.Context, op payrouter.Operation, method, path string, vals url.Values, idempotencyKey string, tokens ...string) payrouter.Result {
	target := c.URL(path)
	var req *http.Request
	var err error
	if method == http.MethodGet {
		if len(vals) > 0 {
			target += "?" + vals.Encode()
		}
		req, err = http.NewRequestWithContext(ctx, method, target, nil)
	} else {
		req, err = http.NewRequestWithContext(ctx, method, target, strings.NewReader(vals.Encode()))
		if err == nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	}
	if err != nil {
		// Nothing was sent: the request could not even be built.
		return c.Redact(payrouter.Result{Outcome: payrouter.OutcomeError, Detail: "paywell: building the request: " + err.Error()}, tokens...)
	}
	req.Header.Set("Authorization", "Bearer "+c.APIKey)
	req.Header.Set("Accept", "application/json")
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	return c.Exchange("paywell", req, func(status int, contentType string, body []byte) payrouter.Result {
		return resultOf(op, status, contentType, body)
	}, tokens...)
}
