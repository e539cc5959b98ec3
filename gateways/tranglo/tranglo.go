// Package tranglo is the adapter for Tranglo, a GloRemit-like gateway: JSON requests with an
// X-Api-Key header, payrouter's reference sent as the `transID` (unique for 7 days), and a
// three-digit responseCode in every answer. Its fake is tranglosim.
//
// Tranglo's answers, and the outcomes they map to (resultOf):
//
//	000                       succeeded (State from transStatus)
//	101-108 (HTTP 403)        declined, the code named as decline code (103: do_not_honor)
//	968                       pending
//	967                       unknown: a suspected transaction, its outcome unknown; never retry it
//	302, 999 (HTTP 500)       unknown: a server error after the request arrived
//	960 (HTTP 503)            unavailable: not processed, try later; only in Tranglo's own form (below),
//	                          else unknown
//	120                       a status look-up: TxNotFound; anything else: error
//	2xx codes                 error: our request was refused (parameters, state, amount, transID reuse)
//	other codes               by HTTP status: a 4xx but 429 error, the rest (429, 503 included) unknown
//	no readable code          by HTTP status: a 4xx but 429 error, the rest unknown (429, 503, 5xx: a
//	                          proxy's page, a text/plain or empty body)
//	HTTP 3xx                  unknown, whatever the body: Tranglo never redirects
//	an answer cut at MaxBody  unknown (gatewayhttp.Account.Exchange)
//
// Tranglo's own "not processed, try later" form is HTTP 503, application/json, responseCode
// 960 and no transaction in it (no gloRefNo, no transStatus). Nothing else is unavailable: that
// outcome sends the charge to another gateway with no look-up, so it must never be given to
// what a proxy in front of Tranglo answers after forwarding a payment.
package tranglo

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
)

// Config is how to reach one Tranglo account.
type Config struct {
	// BaseURL is Tranglo's API root, e.g. "https://gloremit.tranglo.example" (no default).
	BaseURL string
	// Credentials holds "api_key", sent in the X-Api-Key header.
	Credentials map[string]string
}

// Client is a Tranglo account, reached through the *http.Client it was given. It implements
// payrouter.Gateway and is safe for concurrent use.
type Client struct {
	gatewayhttp.Account
}

var _ payrouter.Gateway = (*Client)(nil)

// New validates cfg and returns a Client that sends its requests with client. The deadline comes
// with each call's context, so New sets no timeout.
func New(cfg Config, client *http.Client) (*Client, error) {
	acct, err := gatewayhttp.NewAccount("tranglo", cfg.BaseURL, cfg.Credentials, client)
	if err != nil {
		return nil, err
	}
	return &Client{Account: acct}, nil
}

type paymentRequest struct {
	TransID     string `json:"transID"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	CardToken   string `json:"cardToken"`
	CaptureMode string `json:"captureMode"`
	CustomerID  string `json:"customerID,omitempty"`
	Country     string `json:"country,omitempty"`
	Remarks     string `json:"remarks,omitempty"`
}

type operationRequest struct {
	TransID     string `json:"transID"`
	OrigTransID string `json:"origTransID,omitempty"`
	GloRefNo    string `json:"gloRefNo,omitempty"`
	Amount      int64  `json:"amount,omitempty"`
}

type inquiryRequest struct {
	TransID string `json:"transID"`
}

// Authorize makes a payment (POST /gloremit/v1/payments), captureMode AUTO when req.Capture,
// else MANUAL.
func (c *Client) Authorize(ctx context.Context, req payrouter.ChargeRequest) payrouter.Result {
	mode := "MANUAL"
	if req.Capture {
		mode = "AUTO"
	}
	return c.call(ctx, payrouter.OpCharge, "/gloremit/v1/payments", paymentRequest{
		TransID: req.Reference, Amount: req.Amount, Currency: req.Currency, CardToken: req.Token, CaptureMode: mode,
		CustomerID: req.CustomerID, Country: req.Country, Remarks: req.Description,
	}, req.Token)
}

// Capture captures an authorized payment (POST /gloremit/v1/payments/capture).
func (c *Client) Capture(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	return c.call(ctx, payrouter.OpCapture, "/gloremit/v1/payments/capture", operationOf(req))
}

// Void cancels an authorized payment (POST /gloremit/v1/payments/void).
func (c *Client) Void(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	body := operationOf(req)
	body.Amount = 0
	return c.call(ctx, payrouter.OpVoid, "/gloremit/v1/payments/void", body)
}

// Refund refunds req.Amount of a captured payment, all that is left when 0
// (POST /gloremit/v1/payments/refund).
func (c *Client) Refund(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	return c.call(ctx, payrouter.OpRefund, "/gloremit/v1/payments/refund", operationOf(req))
}

// Status asks for the payment sent with transID req.Reference (falling back to
// req.ChargeReference) (POST /gloremit/v1/transaction-inquiry); code 120 is TxNotFound.
func (c *Client) Status(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	ref := req.Reference
	if ref == "" {
		ref = req.ChargeReference
	}
	return c.call(ctx, payrouter.OpStatus, "/gloremit/v1/transaction-inquiry", inquiryRequest{TransID: ref})
}

// operationOf names the payment by Tranglo's gloRefNo when we have it, else by the transID it was
// sent with; the operation's own transID is its reference.
func operationOf(req payrouter.TxRequest) operationRequest {
	return operationRequest{TransID: req.Reference, OrigTransID: req.ChargeReference, GloRefNo: req.GatewayReference, Amount: req.Amount}
}

// call makes one request and maps its answer (gatewayhttp.Account.Exchange masks the API key and
// tokens, the card token the request carries, in it: the gateway's error texts may quote what it
// was sent).
func (c *Client) call(ctx context.Context, op payrouter.Operation, path string, body any, tokens ...string) payrouter.Result {
	req, err := c.NewJSONRequest(ctx, path, body)
	if err != nil {
		return c.Redact(payrouter.Result{Outcome: payrouter.OutcomeError, Detail: "tranglo: " + err.Error()}, tokens...)
	}
	req.Header.Set("X-Api-Key", c.APIKey)
	return c.Exchange("tranglo", req, func(status int, contentType string, body []byte) payrouter.Result {
		return resultOf(op, status, contentType, body)
	}, tokens...)
}

// detail builds a Result.Detail, bounded and valid UTF-8 whatever the gateway sent.
func detail(format string, args ...any) string {
	s := "tranglo: " + fmt.Sprintf(format, args...)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}
