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

const declinedAnswer = `{"TransferRecord":{"TransferId":{"TransferRef":"D-2","DistributorRef":"ch_1-a1"},"ProcessingState":"Failed","DeclineReason":"DoNotHonour"},"ResultCode":2,"ErrorCodes":[{"Code":"ProviderRefusedRequest","Context":"DoNotHonour"}]}`

func TestResultOf(t *testing.T) {
	type want gatewaytest.Want
	cases := []struct {
		name   string
		op     payrouter.Operation
		status int
		body   string
		want   want
	}{
		{"settled", payrouter.OpCharge, 200, ok(record("Completed", "Settled")), want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "D-1", "", ""}},
		{"authorized only", payrouter.OpCharge, 200, ok(record("Completed", "Authorized")), want{payrouter.OutcomeSucceeded, payrouter.TxAuthorized, "D-1", "", ""}},
		{"completed in a settlement state never heard of", payrouter.OpCharge, 200, ok(record("Completed", "Odd")), want{payrouter.OutcomeSucceeded, payrouter.TxUnknown, "D-1", "", ""}},
		{"submitted", payrouter.OpCharge, 200, ok(record("Submitted", "")), want{payrouter.OutcomePending, payrouter.TxPending, "D-1", "", "Submitted"}},
		{"processing", payrouter.OpCharge, 200, ok(record("Processing", "")), want{payrouter.OutcomePending, payrouter.TxPending, "D-1", "", "Processing"}},
		{"failed with ResultCode 1", payrouter.OpCharge, 200, ok(`{"TransferId":{"TransferRef":"D-1"},"ProcessingState":"Failed","DeclineReason":"InsufficientFunds"}`),
			want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "D-1", "insufficient_funds", ""}},
		{"a processing state never heard of", payrouter.OpCharge, 200, ok(record("Teleported", "")), want{payrouter.OutcomeUnknown, "", "D-1", "", "Teleported"}},
		{"declined", payrouter.OpCharge, 200, declinedAnswer, want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "D-2", "do_not_honour", "ProviderRefusedRequest"}},
		{"declined without a record or a context", payrouter.OpCharge, 200, failed("ProviderRefusedRequest", ""), want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "", "provider_refused_request", ""}},
		{"declined answer to a capture", payrouter.OpCapture, 200, declinedAnswer, want{payrouter.OutcomeError, "", "", "", ""}},
		{"provider unavailable", payrouter.OpCharge, 200, failed("ProviderUnavailable", "Retry later"), want{payrouter.OutcomeUnavailable, "", "", "", "not submitted"}},
		{"rate limited", payrouter.OpRefund, 200, failed("RateLimited", ""), want{payrouter.OutcomeUnavailable, "", "", "", "RateLimited"}},
		{"provider timed out", payrouter.OpCharge, 200, failed("ProviderTimedOut", ""), want{payrouter.OutcomeUnknown, "", "", "", "may have been processed"}},
		{"provider error", payrouter.OpCharge, 200, failed("ProviderError", ""), want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"an error code never heard of", payrouter.OpCharge, 200, failed("SolarFlare", ""), want{payrouter.OutcomeUnknown, "", "", "", "SolarFlare"}},
		{"ResultCode 2 without codes", payrouter.OpCharge, 200, `{"ResultCode":2,"ErrorCodes":[]}`, want{payrouter.OutcomeUnknown, "", "", "", "without ErrorCodes"}},
		{"repeated DistributorRef with the record", payrouter.OpCharge, 200,
			`{"TransferRecord":` + record("Completed", "Settled") + `,"ResultCode":2,"ErrorCodes":[{"Code":"RepeatedDistributorRef","Context":"DistributorRef"}]}`,
			want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "D-1", "", ""}},
		{"repeated DistributorRef alone", payrouter.OpCharge, 200, failed("RepeatedDistributorRef", "DistributorRef"), want{payrouter.OutcomeUnknown, "", "", "", "status look-up"}},
		{"invalid parameter", payrouter.OpCharge, 200, failed("InvalidParameter", "SendValue"), want{payrouter.OutcomeError, "", "", "", "SendValue"}},
		{"bad account number", payrouter.OpCharge, 200, failed("AccountNumberInvalid", "AccountNumber"), want{payrouter.OutcomeError, "", "", "", ""}},
		{"transfer not found on capture", payrouter.OpCapture, 200, failed("TransferNotFound", ""), want{payrouter.OutcomeError, "", "", "", ""}},
		{"invalid state on void", payrouter.OpVoid, 200, failed("InvalidTransferState", "cannot void a captured transaction"), want{payrouter.OutcomeError, "", "", "", "cannot void"}},
		{"capture", payrouter.OpCapture, 200, ok(record("Completed", "Settled")), want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "D-1", "", ""}},
		{"void", payrouter.OpVoid, 200, ok(record("Completed", "Cancelled")), want{payrouter.OutcomeSucceeded, payrouter.TxVoided, "D-1", "", ""}},
		{"partial refund", payrouter.OpRefund, 200, ok(record("Completed", "PartiallyRefunded")), want{payrouter.OutcomeSucceeded, payrouter.TxPartiallyRefunded, "D-1", "", ""}},
		{"full refund", payrouter.OpRefund, 200, ok(record("Completed", "Refunded")), want{payrouter.OutcomeSucceeded, payrouter.TxRefunded, "D-1", "", ""}},
		{"a failed record answering a refund", payrouter.OpRefund, 200, ok(record("Failed", "")), want{payrouter.OutcomeError, payrouter.TxDeclined, "D-1", "", ""}},
		{"success without a record", payrouter.OpCharge, 200, `{"ResultCode":1,"ErrorCodes":[]}`, want{payrouter.OutcomeUnknown, "", "", "", "without a TransferRecord"}},
		{"HTML with 200", payrouter.OpCharge, 200, `<html>hello</html>`, want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"empty 200", payrouter.OpCharge, 200, ``, want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"plain 500", payrouter.OpCharge, 500, `Internal Server Error`, want{payrouter.OutcomeUnknown, "", "", "", "500"}},
		{"502", payrouter.OpCharge, 502, ``, want{payrouter.OutcomeUnknown, "", "", "", "502"}},
		{"503", payrouter.OpCharge, 503, ``, want{payrouter.OutcomeUnavailable, "", "", "", "retry later"}},
		{"429", payrouter.OpCharge, 429, ``, want{payrouter.OutcomeUnavailable, "", "", "", ""}},
		{"401", payrouter.OpCharge, 401, `missing api_key header`, want{payrouter.OutcomeError, "", "", "", "401"}},
		{"404", payrouter.OpStatus, 404, ``, want{payrouter.OutcomeError, "", "", "", "404"}},
		{"status: found, settled", payrouter.OpStatus, 200, `{"ResultCode":1,"ErrorCodes":[],"Items":[` + record("Completed", "Settled") + `]}`, want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "D-1", "", ""}},
		{"status: nothing", payrouter.OpStatus, 200, `{"ResultCode":1,"ErrorCodes":[],"Items":[]}`, want{payrouter.OutcomeSucceeded, payrouter.TxNotFound, "", "", ""}},
		{"status: no Items at all", payrouter.OpStatus, 200, `{"ResultCode":1,"ErrorCodes":[]}`, want{payrouter.OutcomeSucceeded, payrouter.TxNotFound, "", "", ""}},
		{"status: TransferNotFound", payrouter.OpStatus, 200, failed("TransferNotFound", ""), want{payrouter.OutcomeSucceeded, payrouter.TxNotFound, "", "", ""}},
		{"status: declined", payrouter.OpStatus, 200, `{"ResultCode":1,"Items":[{"TransferId":{"TransferRef":"D-2"},"ProcessingState":"Failed","DeclineReason":"DoNotHonour"}]}`,
			want{payrouter.OutcomeSucceeded, payrouter.TxDeclined, "D-2", "do_not_honour", ""}},
		{"status: failed, no reason", payrouter.OpStatus, 200, `{"ResultCode":1,"Items":[{"TransferId":{"TransferRef":"D-2"},"ProcessingState":"Failed"}]}`,
			want{payrouter.OutcomeSucceeded, payrouter.TxFailed, "D-2", "", ""}},
		{"status: processing", payrouter.OpStatus, 200, `{"ResultCode":1,"Items":[` + record("Processing", "") + `]}`, want{payrouter.OutcomeSucceeded, payrouter.TxPending, "D-1", "", ""}},
		{"status: completed, settlement never heard of", payrouter.OpStatus, 200, `{"ResultCode":1,"Items":[` + record("Completed", "Odd") + `]}`, want{payrouter.OutcomeUnknown, "", "D-1", "", "Odd"}},
		{"status: provider unavailable", payrouter.OpStatus, 200, failed("ProviderUnavailable", ""), want{payrouter.OutcomeUnavailable, "", "", "", ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gatewaytest.CheckMapping(t, resultOf, c.op, c.status, c.body, gatewaytest.Want(c.want))
		})
	}
}

// FuzzParseAnswer: whatever Ding (or anything in its place) answers, the parser neither panics
// nor gives a result that is not a valid one.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []struct {
		status int
		body   string
	}{
		{200, ok(record("Completed", "Settled"))}, {200, ok(record("Submitted", ""))}, {200, declinedAnswer},
		{200, failed("ProviderUnavailable", "")}, {200, failed("RepeatedDistributorRef", "")},
		{200, `{"ResultCode":1,"Items":[` + record("Completed", "Refunded") + `]}`}, {200, `{"ResultCode":1,"Items":[]}`},
		{200, `null`}, {200, `{"ErrorCodes":null}`}, {500, ``}, {503, ``}, {401, ``},
	} {
		gatewaytest.AddSeed(f, s.status, s.body)
	}
	gatewaytest.FuzzMapping(f, resultOf)
}
