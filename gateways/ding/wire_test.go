package ding

import (
	"testing"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewaytest"
)

func record(processing, settlement string) string {
	return `{"TransferId":{"TransferRef":"D-1","DistributorRef":"ch_1-a1"},"ProcessingState":"` + processing + `","SettlementState":"` + settlement + `","RefundedValue":0}`
}

func ok(rec string) string { return `{"TransferRecord":` + rec + `,"ResultCode":1,"ErrorCodes":[]}` }

func failed(code, context string) string {
	return `{"ResultCode":2,"ErrorCodes":[{"Code":"` + code + `","Context":"` + context + `"}]}`
}

// unavailableAnswer is Ding's own "not submitted, retry later", as dingsim answers it in
// ModeUnavailable.
const unavailableAnswer = `{"ResultCode":2,"ErrorCodes":[{"Code":"ProviderUnavailable","Context":"Retry later; the transfer was not submitted"}]}`

// Content types of the rows.
const (
	js   = gatewaytest.JSON
	text = gatewaytest.Text
	html = gatewaytest.HTML
)

const declinedAnswer = `{"TransferRecord":{"TransferId":{"TransferRef":"D-2","DistributorRef":"ch_1-a1"},"ProcessingState":"Failed","DeclineReason":"DoNotHonour"},"ResultCode":2,"ErrorCodes":[{"Code":"ProviderRefusedRequest","Context":"DoNotHonour"}]}`

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
		{"settled", payrouter.OpCharge, 200, js, ok(record("Completed", "Settled")), want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "D-1", "", ""}},
		{"authorized only", payrouter.OpCharge, 200, js, ok(record("Completed", "Authorized")), want{payrouter.OutcomeSucceeded, payrouter.TxAuthorized, "D-1", "", ""}},
		{"completed in a settlement state never heard of", payrouter.OpCharge, 200, js, ok(record("Completed", "Odd")), want{payrouter.OutcomeSucceeded, payrouter.TxUnknown, "D-1", "", ""}},
		{"submitted", payrouter.OpCharge, 200, js, ok(record("Submitted", "")), want{payrouter.OutcomePending, payrouter.TxPending, "D-1", "", "Submitted"}},
		{"processing", payrouter.OpCharge, 200, js, ok(record("Processing", "")), want{payrouter.OutcomePending, payrouter.TxPending, "D-1", "", "Processing"}},
		{"failed with ResultCode 1", payrouter.OpCharge, 200, js, ok(`{"TransferId":{"TransferRef":"D-1"},"ProcessingState":"Failed","DeclineReason":"InsufficientFunds"}`),
			want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "D-1", "insufficient_funds", ""}},
		{"a processing state never heard of", payrouter.OpCharge, 200, js, ok(record("Teleported", "")), want{payrouter.OutcomeUnknown, "", "D-1", "", "Teleported"}},
		{"declined", payrouter.OpCharge, 200, js, declinedAnswer, want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "D-2", "do_not_honour", "ProviderRefusedRequest"}},
		{"declined without a record or a context", payrouter.OpCharge, 200, js, failed("ProviderRefusedRequest", ""), want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "", "provider_refused_request", ""}},
		{"declined answer to a capture", payrouter.OpCapture, 200, js, declinedAnswer, want{payrouter.OutcomeError, "", "", "", ""}},
		{"provider unavailable", payrouter.OpCharge, 200, js, failed("ProviderUnavailable", "Retry later"), want{payrouter.OutcomeUnavailable, "", "", "", "not submitted"}},
		{"rate limited", payrouter.OpRefund, 200, js, failed("RateLimited", ""), want{payrouter.OutcomeUnavailable, "", "", "", "RateLimited"}},
		{"its own form, as dingsim answers it", payrouter.OpCharge, 200, "application/json", unavailableAnswer, want{payrouter.OutcomeUnavailable, "", "", "", "not submitted"}},
		{"its own form, charset given", payrouter.OpCharge, 200, "application/json; charset=utf-8", unavailableAnswer, want{payrouter.OutcomeUnavailable, "", "", "", ""}},
		{"its own form, both not-submitted codes", payrouter.OpCharge, 200, js,
			`{"ResultCode":2,"ErrorCodes":[{"Code":"ProviderUnavailable","Context":""},{"Code":"RateLimited","Context":""}]}`, want{payrouter.OutcomeUnavailable, "", "", "", ""}},
		{"its own form served as text/plain", payrouter.OpCharge, 200, text, unavailableAnswer, want{payrouter.OutcomeUnknown, "", "", "", "text/plain"}},
		{"its own form with no Content-Type", payrouter.OpCharge, 200, "", unavailableAnswer, want{payrouter.OutcomeUnknown, "", "", "", "no Content-Type"}},
		{"its own form cut short", payrouter.OpCharge, 200, js, unavailableAnswer[:50], want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"its own form and trailing data", payrouter.OpCharge, 200, js, unavailableAnswer + `]`, want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"ProviderUnavailable with ResultCode 1", payrouter.OpCharge, 200, js,
			`{"ResultCode":1,"ErrorCodes":[{"Code":"ProviderUnavailable","Context":""}]}`, want{payrouter.OutcomeUnknown, "", "", "", "not in Ding's own not-submitted form"}},
		{"ProviderUnavailable without a ResultCode", payrouter.OpCharge, 200, js,
			`{"ErrorCodes":[{"Code":"ProviderUnavailable","Context":""}]}`, want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"ProviderUnavailable with a transfer", payrouter.OpCharge, 200, js,
			`{"TransferRecord":` + record("Completed", "Settled") + `,"ResultCode":2,"ErrorCodes":[{"Code":"ProviderUnavailable","Context":""}]}`, want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"ProviderUnavailable and ProviderError", payrouter.OpCharge, 200, js,
			`{"ResultCode":2,"ErrorCodes":[{"Code":"ProviderUnavailable","Context":""},{"Code":"ProviderError","Context":""}]}`, want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"its own form with HTTP 503", payrouter.OpCharge, 503, js, unavailableAnswer, want{payrouter.OutcomeUnknown, "", "", "", "not Ding's answer"}},
		{"its own form with HTTP 429", payrouter.OpCharge, 429, js, unavailableAnswer, want{payrouter.OutcomeUnknown, "", "", "", "429"}},
		{"provider timed out", payrouter.OpCharge, 200, js, failed("ProviderTimedOut", ""), want{payrouter.OutcomeUnknown, "", "", "", "may have been processed"}},
		{"provider error", payrouter.OpCharge, 200, js, failed("ProviderError", ""), want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"an error code never heard of", payrouter.OpCharge, 200, js, failed("SolarFlare", ""), want{payrouter.OutcomeUnknown, "", "", "", "SolarFlare"}},
		{"ResultCode 2 without codes", payrouter.OpCharge, 200, js, `{"ResultCode":2,"ErrorCodes":[]}`, want{payrouter.OutcomeUnknown, "", "", "", "without ErrorCodes"}},
		{"repeated DistributorRef with the record", payrouter.OpCharge, 200, js,
			`{"TransferRecord":` + record("Completed", "Settled") + `,"ResultCode":2,"ErrorCodes":[{"Code":"RepeatedDistributorRef","Context":"DistributorRef"}]}`,
			want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "D-1", "", ""}},
		{"repeated DistributorRef alone", payrouter.OpCharge, 200, js, failed("RepeatedDistributorRef", "DistributorRef"), want{payrouter.OutcomeUnknown, "", "", "", "status look-up"}},
		{"invalid parameter", payrouter.OpCharge, 200, js, failed("InvalidParameter", "SendValue"), want{payrouter.OutcomeError, "", "", "", "SendValue"}},
		{"bad account number", payrouter.OpCharge, 200, js, failed("AccountNumberInvalid", "AccountNumber"), want{payrouter.OutcomeError, "", "", "", ""}},
		{"transfer not found on capture", payrouter.OpCapture, 200, js, failed("TransferNotFound", ""), want{payrouter.OutcomeError, "", "", "", ""}},
		{"invalid state on void", payrouter.OpVoid, 200, js, failed("InvalidTransferState", "cannot void a captured transaction"), want{payrouter.OutcomeError, "", "", "", "cannot void"}},
		{"capture", payrouter.OpCapture, 200, js, ok(record("Completed", "Settled")), want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "D-1", "", ""}},
		{"void", payrouter.OpVoid, 200, js, ok(record("Completed", "Cancelled")), want{payrouter.OutcomeSucceeded, payrouter.TxVoided, "D-1", "", ""}},
		{"partial refund", payrouter.OpRefund, 200, js, ok(record("Completed", "PartiallyRefunded")), want{payrouter.OutcomeSucceeded, payrouter.TxPartiallyRefunded, "D-1", "", ""}},
		{"full refund", payrouter.OpRefund, 200, js, ok(record("Completed", "Refunded")), want{payrouter.OutcomeSucceeded, payrouter.TxRefunded, "D-1", "", ""}},
		{"a failed record answering a refund", payrouter.OpRefund, 200, js, ok(record("Failed", "")), want{payrouter.OutcomeError, payrouter.TxDeclined, "D-1", "", ""}},
		{"success without a record", payrouter.OpCharge, 200, js, `{"ResultCode":1,"ErrorCodes":[]}`, want{payrouter.OutcomeUnknown, "", "", "", "without a TransferRecord"}},
		{"HTML with 200", payrouter.OpCharge, 200, html, `<html>hello</html>`, want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"empty 200", payrouter.OpCharge, 200, "", ``, want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"plain 500", payrouter.OpCharge, 500, text, `Internal Server Error`, want{payrouter.OutcomeUnknown, "", "", "", "500"}},
		{"502", payrouter.OpCharge, 502, "", ``, want{payrouter.OutcomeUnknown, "", "", "", "502"}},
		{"502 HTML page", payrouter.OpCharge, 502, html, `<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>`, want{payrouter.OutcomeUnknown, "", "", "", "text/html"}},
		{"504 HTML page", payrouter.OpCharge, 504, html, `<html><head><title>504 Gateway Time-out</title></head><body>nginx</body></html>`, want{payrouter.OutcomeUnknown, "", "", "", "504"}},
		{"503 empty", payrouter.OpCharge, 503, "", ``, want{payrouter.OutcomeUnknown, "", "", "", "may have been processed"}},
		// The fault-injection run's answer: Envoy forwarded the transfer, Ding made it, the
		// connection dropped before the answer, and Envoy answered its own 503.
		{"503 from envoy after the transfer was forwarded", payrouter.OpCharge, 503, "text/plain",
			"upstream connect error or disconnect/reset before headers. reset reason: connection termination",
			want{payrouter.OutcomeUnknown, "", "", "", "not Ding's answer"}},
		{"429 with no body", payrouter.OpCharge, 429, "", ``, want{payrouter.OutcomeUnknown, "", "", "", "429"}},
		{"a redirect", payrouter.OpCharge, 302, "", ``, want{payrouter.OutcomeUnknown, "", "", "", "redirect"}},
		{"a redirect carrying a settled transfer", payrouter.OpCharge, 307, js, ok(record("Completed", "Settled")), want{payrouter.OutcomeUnknown, "", "", "", "not Ding's answer"}},
		{"a redirect carrying its own not-submitted form", payrouter.OpStatus, 308, js, unavailableAnswer, want{payrouter.OutcomeUnknown, "", "", "", "308"}},
		{"401", payrouter.OpCharge, 401, text, `missing api_key header`, want{payrouter.OutcomeError, "", "", "", "401"}},
		{"404", payrouter.OpStatus, 404, "", ``, want{payrouter.OutcomeError, "", "", "", "404"}},
		{"status: found, settled", payrouter.OpStatus, 200, js, `{"ResultCode":1,"ErrorCodes":[],"Items":[` + record("Completed", "Settled") + `]}`, want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "D-1", "", ""}},
		{"status: nothing", payrouter.OpStatus, 200, js, `{"ResultCode":1,"ErrorCodes":[],"Items":[]}`, want{payrouter.OutcomeSucceeded, payrouter.TxNotFound, "", "", ""}},
		// A look-up answer without its list is not "nothing found": that would send the charge
		// to another gateway while this one may hold it.
		{"status: no Items at all", payrouter.OpStatus, 200, js, `{"ResultCode":1,"ErrorCodes":[]}`, want{payrouter.OutcomeUnknown, "", "", "", "without Items"}},
		{"status: Items null", payrouter.OpStatus, 200, js, `{"ResultCode":1,"ErrorCodes":[],"Items":null}`, want{payrouter.OutcomeUnknown, "", "", "", "without Items"}},
		{"status: TransferNotFound", payrouter.OpStatus, 200, js, failed("TransferNotFound", ""), want{payrouter.OutcomeSucceeded, payrouter.TxNotFound, "", "", ""}},
		{"status: declined", payrouter.OpStatus, 200, js, `{"ResultCode":1,"Items":[{"TransferId":{"TransferRef":"D-2"},"ProcessingState":"Failed","DeclineReason":"DoNotHonour"}]}`,
			want{payrouter.OutcomeSucceeded, payrouter.TxDeclined, "D-2", "do_not_honour", ""}},
		{"status: failed, no reason", payrouter.OpStatus, 200, js, `{"ResultCode":1,"Items":[{"TransferId":{"TransferRef":"D-2"},"ProcessingState":"Failed"}]}`,
			want{payrouter.OutcomeSucceeded, payrouter.TxFailed, "D-2", "", ""}},
		{"status: processing", payrouter.OpStatus, 200, js, `{"ResultCode":1,"Items":[` + record("Processing", "") + `]}`, want{payrouter.OutcomeSucceeded, payrouter.TxPending, "D-1", "", ""}},
		{"status: completed, settlement never heard of", payrouter.OpStatus, 200, js, `{"ResultCode":1,"Items":[` + record("Completed", "Odd") + `]}`, want{payrouter.OutcomeUnknown, "", "D-1", "", "Odd"}},
		{"status: provider unavailable", payrouter.OpStatus, 200, js, failed("ProviderUnavailable", ""), want{payrouter.OutcomeUnavailable, "", "", "", ""}},
		{"status: provider unavailable with an item", payrouter.OpStatus, 200, js,
			`{"ResultCode":2,"ErrorCodes":[{"Code":"ProviderUnavailable","Context":""}],"Items":[` + record("Completed", "Settled") + `]}`, want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"status: 503 from envoy", payrouter.OpStatus, 503, "text/plain", "upstream connect error or disconnect/reset before headers. reset reason: connection termination", want{payrouter.OutcomeUnknown, "", "", "", ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gatewaytest.CheckMapping(t, resultOf, c.op, c.status, c.ct, c.body, gatewaytest.Want(c.want))
		})
	}
}

// TestForeignAnswers: what a proxy or a redirect answers in Ding's place is unknown, whatever the
// operation.
func TestForeignAnswers(t *testing.T) { gatewaytest.CheckForeignAnswers(t, resultOf) }

// FuzzParseAnswer: whatever Ding (or anything in its place) answers, the parser neither panics
// nor gives a result that is not a valid one.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []struct {
		status int
		ct     string
		body   string
	}{
		{200, js, ok(record("Completed", "Settled"))}, {200, js, ok(record("Submitted", ""))}, {200, js, declinedAnswer},
		{200, js, unavailableAnswer}, {200, text, unavailableAnswer}, {503, js, unavailableAnswer}, {200, js, failed("RepeatedDistributorRef", "")},
		{200, js, `{"ResultCode":1,"Items":[` + record("Completed", "Refunded") + `]}`}, {200, js, `{"ResultCode":1,"Items":[]}`},
		{200, js, `null`}, {200, js, `{"ErrorCodes":null}`}, {500, "", ``}, {503, "", ``}, {401, text, ``},
	} {
		gatewaytest.AddSeed(f, s.status, s.ct, s.body)
	}
	gatewaytest.FuzzMapping(f, resultOf)
}
