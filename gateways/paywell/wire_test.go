package paywell

import (
	"testing"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewaytest"
)

const (
	capturedCharge = `{"id":"ch_1","object":"charge","amount":1999,"amount_refunded":0,"captured":true,"refunded":false,"status":"succeeded"}`
	authorized     = `{"id":"ch_1","object":"charge","amount":1999,"captured":false,"refunded":false,"status":"succeeded"}`
	voided         = `{"id":"ch_1","object":"charge","amount":1999,"amount_refunded":1999,"captured":false,"refunded":true,"status":"succeeded"}`
	failedCharge   = `{"id":"ch_1","object":"charge","status":"failed","failure_code":"card_declined","outcome":{"reason":"insufficient_funds"}}`
	declined402    = `{"error":{"type":"card_error","code":"card_declined","decline_code":"generic_decline","message":"Your card was declined.","charge":"ch_9"}}`
	invalid400     = `{"error":{"type":"invalid_request_error","code":"parameter_missing","param":"amount","message":"Missing required param: amount."}}`
	unavailable503 = `{"error":{"type":"api_error","code":"service_unavailable","message":"retry later"}}`
)

// Content types of the rows.
const (
	js   = gatewaytest.JSON
	text = gatewaytest.Text
	html = gatewaytest.HTML
)

func TestResultOf(t *testing.T) {
	type want gatewaytest.Want
	cases := []struct {
		name   string
		op     payrouter.Operation
		status int
		ct     string // Content-Type
		body   string
		want   want
	}{
		{"charge captured", payrouter.OpCharge, 200, js, capturedCharge, want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "ch_1", "", ""}},
		{"charge authorized only", payrouter.OpCharge, 200, js, authorized, want{payrouter.OutcomeSucceeded, payrouter.TxAuthorized, "ch_1", "", ""}},
		{"charge 200 but failed", payrouter.OpCharge, 200, js, failedCharge, want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "ch_1", "insufficient_funds", ""}},
		{"charge pending", payrouter.OpCharge, 200, js, `{"id":"ch_1","object":"charge","status":"pending"}`, want{payrouter.OutcomePending, payrouter.TxPending, "ch_1", "", ""}},
		{"charge in a status never heard of", payrouter.OpCharge, 200, js, `{"id":"ch_1","object":"charge","status":"mystery"}`, want{payrouter.OutcomeUnknown, "", "", "", "mystery"}},
		{"charge answered with HTML", payrouter.OpCharge, 200, html, `<html>proxy</html>`, want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"charge answered with {}", payrouter.OpCharge, 200, js, `{}`, want{payrouter.OutcomeUnknown, "", "", "", "not a charge"}},
		{"charge answered with null", payrouter.OpCharge, 200, js, `null`, want{payrouter.OutcomeUnknown, "", "", "", "not a charge"}},
		{"charge answered with nothing", payrouter.OpCharge, 200, "", ``, want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"charge answered with a refund", payrouter.OpCharge, 200, js, `{"id":"re_1","object":"refund"}`, want{payrouter.OutcomeUnknown, "", "", "", "not a charge"}},
		{"decline", payrouter.OpCharge, 402, js, declined402, want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "ch_9", "generic_decline", "card_error"}},
		{"decline without decline_code", payrouter.OpCharge, 402, js, `{"error":{"type":"card_error","code":"expired_card"}}`, want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "", "expired_card", ""}},
		{"402 with an unreadable body", payrouter.OpCharge, 402, text, `Payment Required`, want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "", "card_declined", ""}},
		{"402 to a refund", payrouter.OpRefund, 402, js, `{"error":{"type":"invalid_request_error","code":"balance_insufficient"}}`, want{payrouter.OutcomeError, "", "", "", "balance_insufficient"}},
		{"invalid request", payrouter.OpCharge, 400, js, invalid400, want{payrouter.OutcomeError, "", "", "", "Missing required param"}},
		{"idempotency_error", payrouter.OpCharge, 400, js, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests..."}}`, want{payrouter.OutcomeError, "", "", "", "idempotency_error"}},
		{"bad key", payrouter.OpCharge, 401, js, `{"error":{"type":"invalid_request_error","message":"Invalid API Key"}}`, want{payrouter.OutcomeError, "", "", "", "401"}},
		{"no such charge", payrouter.OpCapture, 404, js, `{"error":{"type":"invalid_request_error","code":"resource_missing"}}`, want{payrouter.OutcomeError, "", "", "", "resource_missing"}},
		{"concurrent request with the key", payrouter.OpCharge, 409, js, `{"error":{"type":"idempotency_error"}}`, want{payrouter.OutcomeUnknown, "", "", "", "in progress"}},
		{"rate limited", payrouter.OpCharge, 429, js, `{"error":{"type":"rate_limit_error"}}`, want{payrouter.OutcomeUnavailable, "", "", "", "not processed"}},
		{"503, its own form", payrouter.OpCharge, 503, js, unavailable503, want{payrouter.OutcomeUnavailable, "", "", "", "not processed"}},
		{"429 rate_limit_error served as text/plain", payrouter.OpCharge, 429, text, `{"error":{"type":"rate_limit_error"}}`, want{payrouter.OutcomeUnknown, "", "", "", "text/plain"}},
		{"429 with no body", payrouter.OpCharge, 429, "", ``, want{payrouter.OutcomeUnknown, "", "", "", "no Content-Type"}},
		{"429 with another error type", payrouter.OpCharge, 429, js, `{"error":{"type":"api_error","code":"service_unavailable"}}`, want{payrouter.OutcomeUnknown, "", "", "", "may have been processed"}},
		{"503, its own form, charset given", payrouter.OpCharge, 503, "application/json; charset=utf-8", unavailable503, want{payrouter.OutcomeUnavailable, "", "", "", "service_unavailable"}},
		{"503, its own form, upper-case media type", payrouter.OpCharge, 503, "Application/JSON", unavailable503, want{payrouter.OutcomeUnavailable, "", "", "", ""}},
		{"503, its own form served as text/plain", payrouter.OpCharge, 503, text, unavailable503, want{payrouter.OutcomeUnknown, "", "", "", "text/plain"}},
		{"503, its own form with no Content-Type", payrouter.OpCharge, 503, "", unavailable503, want{payrouter.OutcomeUnknown, "", "", "", "no Content-Type"}},
		{"503, its own form cut short", payrouter.OpCharge, 503, js, unavailable503[:40], want{payrouter.OutcomeUnknown, "", "", "", "may have been processed"}},
		{"503, its own form and trailing data", payrouter.OpCharge, 503, js, unavailable503 + `{}`, want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"503, its own form naming a charge", payrouter.OpCharge, 503, js, `{"error":{"type":"api_error","code":"service_unavailable","charge":"ch_1"}}`, want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"503 api_error without the code", payrouter.OpCharge, 503, js, `{"error":{"type":"api_error","message":"oops"}}`, want{payrouter.OutcomeUnknown, "", "", "", "api_error"}},
		{"503 service_unavailable with another type", payrouter.OpCharge, 503, js, `{"error":{"type":"invalid_request_error","code":"service_unavailable"}}`, want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"503 rate_limit_error", payrouter.OpCharge, 503, js, `{"error":{"type":"rate_limit_error"}}`, want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"503 error as a string", payrouter.OpCharge, 503, js, `{"error":"service_unavailable"}`, want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"503 JSON null", payrouter.OpCharge, 503, js, `null`, want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"503 empty", payrouter.OpCharge, 503, "", ``, want{payrouter.OutcomeUnknown, "", "", "", "may have been processed"}},
		{"503 HTML from a proxy", payrouter.OpCharge, 503, html, `<html>503</html>`, want{payrouter.OutcomeUnknown, "", "", "", "text/html"}},
		// The fault-injection run: Envoy forwarded the charge, Paywell captured it, the connection
		// dropped before the answer, and Envoy answered its own 503. Unavailable here charged twice.
		{"503 from envoy after the charge was forwarded", payrouter.OpCharge, 503, "text/plain",
			"upstream connect error or disconnect/reset before headers. reset reason: connection termination",
			want{payrouter.OutcomeUnknown, "", "", "", "not Paywell's own not-processed answer"}},
		{"502 HTML page", payrouter.OpCharge, 502, html, `<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>`, want{payrouter.OutcomeUnknown, "", "", "", "502"}},
		{"504 HTML page", payrouter.OpCharge, 504, html, `<html><head><title>504 Gateway Time-out</title></head><body>nginx</body></html>`, want{payrouter.OutcomeUnknown, "", "", "", "504"}},
		{"plain 500", payrouter.OpCharge, 500, text, `Internal Server Error`, want{payrouter.OutcomeUnknown, "", "", "", "may have been processed"}},
		{"500 with an api_error", payrouter.OpCharge, 500, js, `{"error":{"type":"api_error","message":"oops"}}`, want{payrouter.OutcomeUnknown, "", "", "", "api_error"}},
		{"502", payrouter.OpCharge, 502, "", ``, want{payrouter.OutcomeUnknown, "", "", "", "502"}},
		{"504", payrouter.OpRefund, 504, "", ``, want{payrouter.OutcomeUnknown, "", "", "", "504"}},
		{"a redirect", payrouter.OpCharge, 302, "", ``, want{payrouter.OutcomeUnknown, "", "", "", "302"}},
		{"a redirect to a refund", payrouter.OpRefund, 307, html, `<a href="/v1/refunds">Temporary Redirect</a>.`, want{payrouter.OutcomeUnknown, "", "", "", "redirect"}},
		{"a redirect carrying a charge", payrouter.OpCharge, 303, js, capturedCharge, want{payrouter.OutcomeUnknown, "", "", "", "not Paywell's answer"}},
		{"a redirect carrying its own not-processed form", payrouter.OpCharge, 301, js, unavailable503, want{payrouter.OutcomeUnknown, "", "", "", "redirect"}},
		{"capture", payrouter.OpCapture, 200, js, capturedCharge, want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "ch_1", "", ""}},
		{"void", payrouter.OpVoid, 200, js, voided, want{payrouter.OutcomeSucceeded, payrouter.TxVoided, "ch_1", "", ""}},
		{"void answered with garbage", payrouter.OpVoid, 200, js, `{"id":`, want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"partial refund, charge expanded", payrouter.OpRefund, 200, js,
			`{"id":"re_1","object":"refund","amount":500,"status":"succeeded","charge":{"id":"ch_1","object":"charge","amount":2000,"amount_refunded":500,"captured":true,"refunded":false,"status":"succeeded"}}`,
			want{payrouter.OutcomeSucceeded, payrouter.TxPartiallyRefunded, "ch_1", "", ""}},
		{"full refund, charge expanded", payrouter.OpRefund, 200, js,
			`{"id":"re_1","object":"refund","amount":2000,"status":"succeeded","charge":{"id":"ch_1","object":"charge","amount":2000,"amount_refunded":2000,"captured":true,"refunded":true,"status":"succeeded"}}`,
			want{payrouter.OutcomeSucceeded, payrouter.TxRefunded, "ch_1", "", ""}},
		{"refund, charge not expanded", payrouter.OpRefund, 200, js, `{"id":"re_1","object":"refund","status":"succeeded","charge":"ch_1"}`, want{payrouter.OutcomeSucceeded, payrouter.TxUnknown, "ch_1", "", ""}},
		{"refund pending", payrouter.OpRefund, 200, js, `{"id":"re_1","object":"refund","status":"pending","charge":"ch_1"}`, want{payrouter.OutcomePending, payrouter.TxUnknown, "ch_1", "", ""}},
		{"refund failed", payrouter.OpRefund, 200, js, `{"id":"re_1","object":"refund","status":"failed","charge":"ch_1"}`, want{payrouter.OutcomeError, "", "", "", "failed"}},
		{"refund answered with a charge", payrouter.OpRefund, 200, js, capturedCharge, want{payrouter.OutcomeUnknown, "", "", "", "not a refund"}},
		{"status: nothing found", payrouter.OpStatus, 200, js, `{"object":"list","data":[],"has_more":false}`, want{payrouter.OutcomeSucceeded, payrouter.TxNotFound, "", "", ""}},
		// A list without its data is not "nothing found": that would send the charge elsewhere.
		{"status: a list whose data is null", payrouter.OpStatus, 200, js, `{"object":"list","data":null}`, want{payrouter.OutcomeUnknown, "", "", "", "not a list"}},
		{"status: a list with no data", payrouter.OpStatus, 200, js, `{"object":"list"}`, want{payrouter.OutcomeUnknown, "", "", "", "not a list"}},
		{"status: captured", payrouter.OpStatus, 200, js, `{"object":"list","data":[` + capturedCharge + `]}`, want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "ch_1", "", ""}},
		{"status: voided", payrouter.OpStatus, 200, js, `{"object":"list","data":[` + voided + `]}`, want{payrouter.OutcomeSucceeded, payrouter.TxVoided, "ch_1", "", ""}},
		{"status: declined", payrouter.OpStatus, 200, js, `{"object":"list","data":[` + failedCharge + `]}`, want{payrouter.OutcomeSucceeded, payrouter.TxDeclined, "ch_1", "insufficient_funds", ""}},
		{"status: a charge in a status never heard of", payrouter.OpStatus, 200, js, `{"object":"list","data":[{"id":"ch_1","object":"charge","status":"odd"}]}`, want{payrouter.OutcomeUnknown, "", "", "", "odd"}},
		{"status: not a list", payrouter.OpStatus, 200, js, capturedCharge, want{payrouter.OutcomeUnknown, "", "", "", "not a list"}},
		{"status: unavailable", payrouter.OpStatus, 503, js, unavailable503, want{payrouter.OutcomeUnavailable, "", "", "", ""}},
		{"status: 503 from envoy", payrouter.OpStatus, 503, "text/plain", "upstream connect error or disconnect/reset before headers. reset reason: connection termination", want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"status: plain 500", payrouter.OpStatus, 500, "", ``, want{payrouter.OutcomeUnknown, "", "", "", ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gatewaytest.CheckMapping(t, resultOf, c.op, c.status, c.ct, c.body, gatewaytest.Want(c.want))
		})
	}
}

// TestForeignAnswers: what a proxy or a redirect answers in Paywell's place is unknown, whatever
// the operation.
func TestForeignAnswers(t *testing.T) { gatewaytest.CheckForeignAnswers(t, resultOf) }

// FuzzParseAnswer: whatever Paywell (or anything in its place) answers, the parser neither panics
// nor gives a result that is not a valid one.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []struct {
		status int
		ct     string
		body   string
	}{
		{200, js, capturedCharge}, {200, js, authorized}, {200, js, voided}, {200, js, failedCharge},
		{200, js, `{"object":"list","data":[` + capturedCharge + `]}`}, {200, js, `{"object":"list","data":[]}`},
		{200, js, `{"id":"re_1","object":"refund","status":"succeeded","charge":{"id":"ch_1","object":"charge","status":"succeeded","captured":true,"amount_refunded":5}}`},
		{402, js, declined402}, {400, js, invalid400}, {503, js, unavailable503}, {503, text, unavailable503},
		{429, js, `{"error":{"type":"rate_limit_error"}}`}, {500, "", ``}, {409, js, `{}`}, {200, js, `null`}, {200, js, `[]`},
	} {
		gatewaytest.AddSeed(f, s.status, s.ct, s.body)
	}
	gatewaytest.FuzzMapping(f, resultOf)
}
