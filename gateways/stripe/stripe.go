// Package stripe is the adapter for Stripe's PaymentIntents API: form-encoded requests, JSON
// answers, `Authorization: Bearer <secret key>`, the API version pinned in every request's
// `Stripe-Version` header (Config.APIVersion, from configuration), and payrouter's reference sent
// as the `Idempotency-Key`, so a retry never charges twice. Its fake is stripesim; its requests
// are held to Stripe's OpenAPI specification by stripe-mock (stripemock_test.go).
//
//	charge   POST /v1/payment_intents  amount, currency, payment_method (the token), confirm=true,
//	         capture_method automatic (capture) or manual (authorize only), payment_method_types
//	         [card], error_on_requires_action=true, transfer_group and metadata[payrouter_reference]
//	         (the reference), expand latest_charge
//	capture  POST /v1/payment_intents/{id}/capture  amount_to_capture
//	void     POST /v1/payment_intents/{id}/cancel
//	refund   POST /v1/refunds  payment_intent, amount, expand charge
//	status   GET  /v1/charges?transfer_group={reference}&limit=1
//	health   GET  /v1/payment_intents?limit=1&created[gt]=4102444800 (matches nothing)
//
// Stripe's answers, and the outcomes they map to (resultOf):
//
//	2xx PaymentIntent succeeded             succeeded, captured
//	2xx PaymentIntent requires_capture      succeeded, authorized
//	2xx PaymentIntent canceled              succeeded, voided
//	2xx PaymentIntent processing            pending
//	2xx PaymentIntent requires_action       declined, authentication_required: payrouter runs no
//	                                        3-D Secure (and asks Stripe, with
//	                                        error_on_requires_action, to decline instead)
//	2xx requires_payment_method + error     declined, the error's decline_code or code
//	402 card_error                          declined, decline_code (else code)
//	402 anything else                       unknown
//	429 invalid_request_error rate_limit    unavailable: Stripe's rate limiters run before its API,
//	                                        so nothing was processed; only in Stripe's own form
//	                                        (JSON, that error, naming no PaymentIntent)
//	any other 429 (lock_timeout, a proxy)   unknown
//	409 (idempotency_key_in_use)            unknown: the first request with the key is in progress
//	other 4xx: invalid_request_error,       error: our request was refused
//	  idempotency_error, a refused key
//	500 api_error and every 5xx             unknown: Stripe's guidance, a 500 is indeterminate
//	3xx                                     unknown: Stripe never redirects
//	a 2xx that cannot be read               unknown: we cannot tell whether it charged
//	an answer cut at MaxBody                unknown (gatewayhttp.Account.Exchange)
//
// The look-up. After an ambiguous answer payrouter asks what became of a reference. Stripe names
// a PaymentIntent only by its own id, which a lost answer never told us, so the charge is found by
// the transfer_group it was created with: GET /v1/charges?transfer_group= lists the charge a
// confirmed PaymentIntent made, approved or declined, and a list is read-after-write consistent.
// Stripe's search (metadata) is not: its documentation keeps it out of read-after-write flows, as
// new objects reach it within a minute (an hour during an outage), so an immediate "not found"
// from it would send a charge Stripe just made to a second gateway. Replaying the create with its
// Idempotency-Key would answer with the original result, but it needs every parameter of the
// original, the card token among them, which payrouter never keeps. Finding no charge means no
// money was moved or held for the reference. Every Authorize answer carries its charge expanded:
// should one come back without the transfer_group it was sent with, look-ups that find nothing
// say unknown from then on, never not found. Capture, void and refund of a charge whose id
// payrouter never learned look it up the same way first.
package stripe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
)

// TestedAPIVersion is the Stripe API version this adapter is tested against: the version of the
// OpenAPI specification stripe-mock validates its requests with.
const TestedAPIVersion = "2026-08-26.dahlia"

// MinAPIVersion is the oldest API version the adapter can pin: the first where a PaymentIntent
// names its charge in latest_charge (older versions list them in charges instead).
const MinAPIVersion = "2022-11-15"

// apiVersionForm is a Stripe API version: a date, and since 2024 a release name after a dot.
var apiVersionForm = regexp.MustCompile(`^(\d{4}-\d{2}-\d{2})(\.[a-z]+)?$`)

// Config is how to reach one Stripe account.
type Config struct {
	// BaseURL is Stripe's API root: "https://api.stripe.com" (no default).
	BaseURL string
	// Credentials holds "api_key": a secret key (sk_...) or a restricted key (rk_...) with write
	// access to PaymentIntents and Refunds and read access to Charges.
	Credentials map[string]string
	// APIVersion is sent as Stripe-Version on every request (required): the account's default
	// version never applies, so a change of it in Stripe's dashboard cannot change what payrouter
	// reads. MinAPIVersion or later, such as TestedAPIVersion.
	APIVersion string
}

// Client is a Stripe account, reached through the *http.Client it was given. It implements
// payrouter.Gateway and is safe for concurrent use.
type Client struct {
	gatewayhttp.Account
	version string
	// groupLost names a charge Stripe answered without the transfer_group it was created with,
	// once one did: from then on a look-up finding nothing proves nothing.
	groupLost atomic.Pointer[string]
}

var _ payrouter.Gateway = (*Client)(nil)

// New validates cfg and returns a Client that sends its requests with client. The deadline comes
// with each call's context, so New sets no timeout.
func New(cfg Config, client *http.Client) (*Client, error) {
	acct, err := gatewayhttp.NewAccount("stripe", cfg.BaseURL, cfg.Credentials, client)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(acct.APIKey, "pk_") {
		return nil, errors.New("stripe: credentials.api_key is a publishable key (pk_...), which cannot create payments: use the secret key (sk_...) or a restricted key (rk_...)")
	}
	if err := CheckAPIVersion(cfg.APIVersion); err != nil {
		return nil, fmt.Errorf("stripe: %w", err)
	}
	return &Client{Account: acct, version: cfg.APIVersion}, nil
}

// CheckAPIVersion says what is wrong with v as the api_version of a Stripe gateway, or nil.
func CheckAPIVersion(v string) error {
	if v == "" {
		return fmt.Errorf("api_version is required: the Stripe API version sent as Stripe-Version on every request, such as %q (the version payrouter is tested against)", TestedAPIVersion)
	}
	m := apiVersionForm.FindStringSubmatch(v)
	if m == nil {
		return fmt.Errorf("api_version %q is not a Stripe API version, such as %q", v, TestedAPIVersion)
	}
	if m[1] < MinAPIVersion { // ISO dates sort as strings
		return fmt.Errorf("api_version %q is older than %s, the first version whose PaymentIntents name their charge (latest_charge), which the look-ups need", v, MinAPIVersion)
	}
	return nil
}

// Authorize creates and confirms a PaymentIntent (POST /v1/payment_intents): captured at once
// when req.Capture is set (capture_method automatic), else authorized only (manual).
func (c *Client) Authorize(ctx context.Context, req payrouter.ChargeRequest) payrouter.Result {
	captureMethod := "manual"
	if req.Capture {
		captureMethod = "automatic"
	}
	form := url.Values{
		"amount":                   {strconv.FormatInt(req.Amount, 10)},
		"currency":                 {strings.ToLower(req.Currency)},
		"payment_method":           {req.Token},
		"payment_method_types[0]":  {"card"},
		"confirm":                  {"true"},
		"capture_method":           {captureMethod},
		"error_on_requires_action": {"true"},
		// The look-up finds the charge by it (the package doc says why not by metadata).
		"transfer_group": {req.Reference},
		// For people reading the Dashboard: which charge of payrouter's this is.
		"metadata[payrouter_reference]": {req.Reference},
		// Its transfer_group is checked (checkGroup).
		"expand[0]": {"latest_charge"},
	}
	if req.Description != "" {
		form.Set("description", req.Description)
	}
	if req.CustomerID != "" {
		form.Set("metadata[customer_id]", req.CustomerID) // the storefront's id, not a Stripe customer
	}
	if req.Country != "" {
		form.Set("metadata[country]", req.Country)
	}
	var body []byte
	r := c.call(ctx, payrouter.OpCharge, http.MethodPost, "/v1/payment_intents", form, req.Reference, &body, req.Token)
	if r.Outcome == payrouter.OutcomeSucceeded || r.Outcome == payrouter.OutcomeDeclined || r.Outcome == payrouter.OutcomePending {
		c.checkGroup(req.Reference, body)
	}
	return r
}

// checkGroup notes a charge that came back without the transfer_group its PaymentIntent was
// created with (groupLost): look-ups by transfer_group could not find such a charge.
func (c *Client) checkGroup(reference string, body []byte) {
	if id, group, ok := latestChargeGroup(body); ok && group != reference {
		c.groupLost.CompareAndSwap(nil, &id)
	}
}

// Capture captures an authorized PaymentIntent (POST /v1/payment_intents/{id}/capture).
func (c *Client) Capture(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	id, r, ok := c.intent(ctx, payrouter.OpCapture, req)
	if !ok {
		return r
	}
	form := url.Values{}
	if req.Amount > 0 {
		form.Set("amount_to_capture", strconv.FormatInt(req.Amount, 10))
	}
	return c.call(ctx, payrouter.OpCapture, http.MethodPost, "/v1/payment_intents/"+url.PathEscape(id)+"/capture", form, req.Reference, nil)
}

// Void cancels an uncaptured PaymentIntent, releasing its authorization
// (POST /v1/payment_intents/{id}/cancel).
func (c *Client) Void(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	id, r, ok := c.intent(ctx, payrouter.OpVoid, req)
	if !ok {
		return r
	}
	return c.call(ctx, payrouter.OpVoid, http.MethodPost, "/v1/payment_intents/"+url.PathEscape(id)+"/cancel", url.Values{}, req.Reference, nil)
}

// Refund refunds req.Amount of a captured PaymentIntent, all that is left when 0
// (POST /v1/refunds). The charge is expanded in the answer so the result carries its new state.
func (c *Client) Refund(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	id, r, ok := c.intent(ctx, payrouter.OpRefund, req)
	if !ok {
		return r
	}
	form := url.Values{
		"payment_intent":                {id},
		"expand[0]":                     {"charge"},
		"metadata[payrouter_reference]": {req.Reference},
	}
	if req.Amount > 0 {
		form.Set("amount", strconv.FormatInt(req.Amount, 10))
	}
	return c.call(ctx, payrouter.OpRefund, http.MethodPost, "/v1/refunds", form, req.Reference, nil)
}

// Status looks up the charge made with the reference req.Reference (falling back to
// req.ChargeReference) by its transfer_group: none is TxNotFound, unless a charge was ever seen
// without its transfer_group (the package doc).
func (c *Client) Status(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	ref := req.Reference
	if ref == "" {
		ref = req.ChargeReference
	}
	q := url.Values{"transfer_group": {ref}, "limit": {"1"}}
	r := c.call(ctx, payrouter.OpStatus, http.MethodGet, "/v1/charges", q, "", nil)
	if r.Outcome == payrouter.OutcomeSucceeded && r.State == payrouter.TxNotFound {
		if lost := c.groupLost.Load(); lost != nil {
			return payrouter.Result{Outcome: payrouter.OutcomeUnknown,
				Detail: "stripe: no charge with transfer_group " + ref + ", which proves nothing: charge " + *lost +
					" came back without the transfer_group it was created with, so this account's charges cannot be found by it"}
		}
	}
	return r
}

// intent returns the id of the PaymentIntent an operation acts on: req.GatewayReference, or, when
// payrouter never learned it (the charge's answer was lost), what a look-up by
// req.ChargeReference finds. When it has none, r is the operation's result (nothing was sent for
// it): the look-up's failure, or an error when no charge has that reference.
func (c *Client) intent(ctx context.Context, op payrouter.Operation, req payrouter.TxRequest) (id string, r payrouter.Result, ok bool) {
	if req.GatewayReference != "" {
		return req.GatewayReference, payrouter.Result{}, true
	}
	look := c.Status(ctx, payrouter.TxRequest{Reference: req.ChargeReference})
	switch {
	case look.Outcome == payrouter.OutcomeSucceeded && look.State == payrouter.TxNotFound:
		return "", payrouter.Result{Outcome: payrouter.OutcomeError,
			Detail: fmt.Sprintf("stripe: no charge with transfer_group %s: no PaymentIntent to %s", req.ChargeReference, op)}, false
	case look.Outcome == payrouter.OutcomeSucceeded:
		return look.GatewayReference, payrouter.Result{}, true
	}
	return "", payrouter.Result{Outcome: look.Outcome,
		Detail: fmt.Sprintf("%s (looking up the PaymentIntent of %s; the %s was not sent)", look.Detail, req.ChargeReference, op)}, false
}

// healthCreatedAfter is 2100-01-01T00:00:00Z: the health call's list asks for PaymentIntents
// created after it, so that it returns none, and no customer's data comes back to a probe.
const healthCreatedAfter = "4102444800"

// Health makes the cheapest authenticated call of the API payrouter uses (Stripe has no health
// endpoint): a list of PaymentIntents matching nothing. Any 2xx is healthy.
func (c *Client) Health(ctx context.Context) error {
	req, err := c.newRequest(ctx, http.MethodGet, "/v1/payment_intents", url.Values{"limit": {"1"}, "created[gt]": {healthCreatedAfter}}, "")
	if err != nil {
		return err
	}
	a, err := gatewayhttp.Do(c.HTTP, req)
	if err != nil {
		return err
	}
	if a.Status/100 != 2 {
		return fmt.Errorf("stripe health: HTTP %d", a.Status)
	}
	return nil
}

// newRequest builds one request: a GET sends vals as its query, anything else as a form-encoded
// body; every one carries the key, the pinned version and, when given, the Idempotency-Key.
func (c *Client) newRequest(ctx context.Context, method, path string, vals url.Values, idempotencyKey string) (*http.Request, error) {
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
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.APIKey)
	req.Header.Set("Stripe-Version", c.version)
	req.Header.Set("Accept", "application/json")
	if idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", idempotencyKey)
	}
	return req, nil
}

// call makes one request and maps its answer; body, when not nil, receives the answer's body
// (masked) for the caller's own reading. gatewayhttp.Account.Exchange masks the API key and
// tokens (the card token the request carries) in the answer: Stripe quotes what it was sent in
// its messages.
func (c *Client) call(ctx context.Context, op payrouter.Operation, method, path string, vals url.Values, idempotencyKey string, body *[]byte, tokens ...string) payrouter.Result {
	req, err := c.newRequest(ctx, method, path, vals, idempotencyKey)
	if err != nil {
		// Nothing was sent: the request could not even be built.
		return c.Redact(payrouter.Result{Outcome: payrouter.OutcomeError, Detail: "stripe: building the request: " + err.Error()}, tokens...)
	}
	return c.Exchange("stripe", req, func(status int, contentType string, b []byte) payrouter.Result {
		if body != nil && status/100 == 2 {
			*body = b
		}
		return resultOf(op, status, contentType, b)
	}, tokens...)
}
