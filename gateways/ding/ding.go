// Package ding is the adapter for Ding, a DingConnect-like gateway: JSON requests with an
// `api_key` header, payrouter's reference sent as the unique `DistributorRef`, and answers that
// are HTTP 200 whatever happened, with a ResultCode and ErrorCodes [{Code, Context}] in the body
// and a TransferRecord whose ProcessingState is Submitted, Processing, Completed or Failed. Its
// fake is dingsim.
//
// Ding's answers, and the outcomes they map to (resultOf):
//
//	ResultCode 1, ProcessingState Completed       succeeded (State from SettlementState)
//	ResultCode 1, Submitted or Processing         pending
//	ProviderRefusedRequest, or Failed             declined, the reason as decline code
//	ProviderUnavailable, RateLimited              unavailable: not submitted, retry later; only in
//	                                              Ding's own form (below), else unknown
//	ProviderTimedOut, ProviderError, ...Unknown   unknown: the provider may have acted
//	RepeatedDistributorRef                        the existing transfer's state if the answer has it, else unknown
//	InvalidParameter and other request codes      error
//	HTTP 429, 503, 500 and other 5xx              unknown: not Ding's answer (a proxy's page, an empty body)
//	HTTP 3xx                                      unknown: Ding never redirects
//	other HTTP 4xx                                error
//	an unreadable body                            unknown
//	an answer cut at MaxBody                      unknown (gatewayhttp.Account.Exchange)
//
// Ding's own "not submitted, retry later" form is HTTP 200, application/json, ResultCode 2 and
// only ProviderUnavailable or RateLimited codes, with no transfer in it. Nothing else is
// unavailable: that outcome sends the charge to another gateway with no look-up, so it must
// never be given to what a proxy in front of Ding answers after forwarding a transfer.
package ding

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
)

// Config is how to reach one Ding account.
type Config struct {
	// BaseURL is Ding's API root, e.g. "https://api.ding.example" (no default).
	BaseURL string
	// Credentials holds "api_key", sent in the api_key header.
	Credentials map[string]string
}

// Client is a Ding account, reached through the *http.Client it was given. It implements
// payrouter.Gateway and is safe for concurrent use.
type Client struct {
	gatewayhttp.Account
}

var _ payrouter.Gateway = (*Client)(nil)

// New validates cfg and returns a Client that sends its requests with client. The deadline comes
// with each call's context, so New sets no timeout.
func New(cfg Config, client *http.Client) (*Client, error) {
	acct, err := gatewayhttp.NewAccount("ding", cfg.BaseURL, cfg.Credentials, client)
	if err != nil {
		return nil, err
	}
	return &Client{Account: acct}, nil
}

// skuCode is the product payrouter buys from Ding: a card payment.
const skuCode = "CARD"

type setting struct {
	Name  string `json:"Name"`
	Value string `json:"Value"`
}

// sendTransferRequest is SendTransfer's body. SendValue is in minor units.
type sendTransferRequest struct {
	SkuCode         string    `json:"SkuCode"`
	SendValue       int64     `json:"SendValue"`
	SendCurrencyIso string    `json:"SendCurrencyIso"`
	AccountNumber   string    `json:"AccountNumber"`
	DistributorRef  string    `json:"DistributorRef"`
	ValidateOnly    bool      `json:"ValidateOnly"`
	AuthorizeOnly   bool      `json:"AuthorizeOnly"`
	Settings        []setting `json:"Settings,omitempty"`
}

// operationRequest is the body of SettleTransfer, CancelTransfer and RefundTransfer.
type operationRequest struct {
	DistributorRef         string `json:"DistributorRef"`
	TransferRef            string `json:"TransferRef,omitempty"`
	OriginalDistributorRef string `json:"OriginalDistributorRef,omitempty"`
	SendValue              int64  `json:"SendValue,omitempty"`
	RefundValue            int64  `json:"RefundValue,omitempty"`
}

type listRequest struct {
	DistributorRef string `json:"DistributorRef"`
	Take           int    `json:"Take"`
}

// Authorize sends a transfer (POST /api/V1/SendTransfer); AuthorizeOnly unless req.Capture.
func (c *Client) Authorize(ctx context.Context, req payrouter.ChargeRequest) payrouter.Result {
	body := sendTransferRequest{
		SkuCode: skuCode, SendValue: req.Amount, SendCurrencyIso: req.Currency, AccountNumber: req.Token,
		DistributorRef: req.Reference, AuthorizeOnly: !req.Capture,
	}
	for _, s := range []setting{{"Country", req.Country}, {"CustomerId", req.CustomerID}, {"Description", req.Description}} {
		if s.Value != "" {
			body.Settings = append(body.Settings, s)
		}
	}
	return c.call(ctx, payrouter.OpCharge, "/api/V1/SendTransfer", body, req.Token)
}

// Capture settles an authorized transfer (POST /api/V1/SettleTransfer).
func (c *Client) Capture(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	body := operationOf(req)
	body.SendValue = req.Amount
	return c.call(ctx, payrouter.OpCapture, "/api/V1/SettleTransfer", body)
}

// Void cancels an authorized transfer (POST /api/V1/CancelTransfer).
func (c *Client) Void(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	return c.call(ctx, payrouter.OpVoid, "/api/V1/CancelTransfer", operationOf(req))
}

// Refund refunds req.Amount of a settled transfer, all that is left when 0
// (POST /api/V1/RefundTransfer).
func (c *Client) Refund(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	body := operationOf(req)
	body.RefundValue = req.Amount
	return c.call(ctx, payrouter.OpRefund, "/api/V1/RefundTransfer", body)
}

// Status looks up the transfer sent with DistributorRef req.Reference (falling back to
// req.ChargeReference) with POST /api/V1/ListTransferRecords: no item is TxNotFound.
func (c *Client) Status(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	ref := req.Reference
	if ref == "" {
		ref = req.ChargeReference
	}
	return c.call(ctx, payrouter.OpStatus, "/api/V1/ListTransferRecords", listRequest{DistributorRef: ref, Take: 1})
}

// operationOf names the transfer by Ding's TransferRef when we have it, else by the
// DistributorRef it was sent with; the operation's own reference is its DistributorRef.
func operationOf(req payrouter.TxRequest) operationRequest {
	return operationRequest{DistributorRef: req.Reference, TransferRef: req.GatewayReference, OriginalDistributorRef: req.ChargeReference}
}

// call makes one request and maps its answer (gatewayhttp.Account.Exchange masks the API key and
// tokens, the card token the request carries, in it: the gateway's error texts may quote what it
// was sent).
func (c *Client) call(ctx context.Context, op payrouter.Operation, path string, body any, tokens ...string) payrouter.Result {
	req, err := c.NewJSONRequest(ctx, path, body)
	if err != nil {
		return c.Redact(payrouter.Result{Outcome: payrouter.OutcomeError, Detail: "ding: " + err.Error()}, tokens...)
	}
	// Ding spells its header in lower case with an underscore; set it as is rather than in
	// Go's canonical form.
	req.Header["api_key"] = []string{c.APIKey}
	return c.Exchange("ding", req, func(status int, contentType string, body []byte) payrouter.Result {
		return resultOf(op, status, contentType, body)
	}, tokens...)
}

// detail trims a gateway-provided text for Result.Detail.
func detail(format string, args ...any) string {
	s := "ding: " + fmt.Sprintf(format, args...)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}
