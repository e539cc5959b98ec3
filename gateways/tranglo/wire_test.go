package tranglo

import (
	"testing"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewaytest"
)

func approved(status string) string {
	return `{"responseCode":"000","responseDesc":"Approved","transID":"ch_1-a1","gloRefNo":"TG1","transStatus":"` + status + `","transResponseCode":"000","amount":1999,"currency":"USD"}`
}

func code(c, desc string) string {
	return `{"responseCode":"` + c + `","responseDesc":"` + desc + `","transID":"ch_1-a1"}`
}

func TestResultOf(t *testing.T) {
	type want gatewaytest.Want
	cases := []struct {
		name   string
		op     payrouter.Operation
		status int
		body   string
		want   want
	}{
		{"000 captured", payrouter.OpCharge, 200, approved("CAPTURED"), want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "TG1", "", ""}},
		{"000 authorized", payrouter.OpCharge, 200, approved("AUTHORIZED"), want{payrouter.OutcomeSucceeded, payrouter.TxAuthorized, "TG1", "", ""}},
		{"000 pending", payrouter.OpCharge, 200, approved("PENDING"), want{payrouter.OutcomePending, payrouter.TxPending, "TG1", "", ""}},
		{"000 with a status never heard of", payrouter.OpCharge, 200, approved("ODD"), want{payrouter.OutcomeSucceeded, payrouter.TxUnknown, "TG1", "", ""}},
		{"000 declined", payrouter.OpCharge, 200, `{"responseCode":"000","gloRefNo":"TG1","transStatus":"DECLINED","transResponseCode":"101"}`,
			want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "TG1", "insufficient_funds", ""}},
		{"101", payrouter.OpCharge, 403, `{"responseCode":"101","responseDesc":"Insufficient funds","gloRefNo":"TG1","transStatus":"DECLINED"}`,
			want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "TG1", "insufficient_funds", "Insufficient funds"}},
		{"103", payrouter.OpCharge, 403, code("103", "Do not honour"), want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "", "do_not_honor", ""}},
		{"108", payrouter.OpCharge, 403, code("108", "Blocked"), want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "", "blocked_card", ""}},
		{"103 to a refund", payrouter.OpRefund, 403, code("103", ""), want{payrouter.OutcomeError, "", "", "", "103"}},
		{"968 pending", payrouter.OpCharge, 202, code("968", "Pending"), want{payrouter.OutcomePending, payrouter.TxPending, "", "", ""}},
		{"967 suspected", payrouter.OpCharge, 200, code("967", "Suspected"), want{payrouter.OutcomeUnknown, "", "", "", "never retry"}},
		{"302 system error", payrouter.OpCharge, 500, code("302", "System error"), want{payrouter.OutcomeUnknown, "", "", "", "server error"}},
		{"999 unexpected", payrouter.OpCharge, 500, code("999", "Unexpected"), want{payrouter.OutcomeUnknown, "", "", "", "server error"}},
		{"960 not processed", payrouter.OpCharge, 503, code("960", "Try later"), want{payrouter.OutcomeUnavailable, "", "", "", "not processed"}},
		{"201 invalid parameter", payrouter.OpCharge, 400, code("201", "Invalid parameter: amount"), want{payrouter.OutcomeError, "", "", "", "amount"}},
		{"204 transID reused", payrouter.OpCharge, 409, code("204", "Duplicate transID"), want{payrouter.OutcomeError, "", "", "", "204"}},
		{"210 authentication", payrouter.OpCharge, 401, code("210", "Authentication failed"), want{payrouter.OutcomeError, "", "", "", ""}},
		{"120 to a capture", payrouter.OpCapture, 404, code("120", "Transaction not found"), want{payrouter.OutcomeError, "", "", "", "120"}},
		{"unknown code, 503", payrouter.OpCharge, 503, code("555", ""), want{payrouter.OutcomeUnavailable, "", "", "", "555"}},
		{"unknown code, 400", payrouter.OpCharge, 400, code("555", ""), want{payrouter.OutcomeError, "", "", "", "555"}},
		{"unknown code, 200", payrouter.OpCharge, 200, code("555", ""), want{payrouter.OutcomeUnknown, "", "", "", "unrecognised"}},
		{"plain 500", payrouter.OpCharge, 500, `Internal Server Error`, want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"503 without a code", payrouter.OpCharge, 503, ``, want{payrouter.OutcomeUnavailable, "", "", "", "503"}},
		{"429 without a code", payrouter.OpCharge, 429, `{}`, want{payrouter.OutcomeUnavailable, "", "", "", "429"}},
		{"403 without a code", payrouter.OpCharge, 403, `Forbidden`, want{payrouter.OutcomeError, "", "", "", "403"}},
		{"HTML with 200", payrouter.OpCharge, 200, `<html/>`, want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"{} with 200", payrouter.OpCharge, 200, `{}`, want{payrouter.OutcomeUnknown, "", "", "", "no responseCode"}},
		{"code as a number", payrouter.OpCharge, 200, `{"responseCode":0}`, want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"capture", payrouter.OpCapture, 200, approved("CAPTURED"), want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "TG1", "", ""}},
		{"void", payrouter.OpVoid, 200, approved("VOIDED"), want{payrouter.OutcomeSucceeded, payrouter.TxVoided, "TG1", "", ""}},
		{"partial refund", payrouter.OpRefund, 200, approved("PARTIALLY_REFUNDED"), want{payrouter.OutcomeSucceeded, payrouter.TxPartiallyRefunded, "TG1", "", ""}},
		{"full refund", payrouter.OpRefund, 200, approved("REFUNDED"), want{payrouter.OutcomeSucceeded, payrouter.TxRefunded, "TG1", "", ""}},
		{"refund of a settled-in-part state", payrouter.OpRefund, 409, code("202", "Invalid transaction state"), want{payrouter.OutcomeError, "", "", "", "202"}},
		{"status: captured", payrouter.OpStatus, 200, approved("CAPTURED"), want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "TG1", "", ""}},
		{"status: pending", payrouter.OpStatus, 200, approved("PENDING"), want{payrouter.OutcomeSucceeded, payrouter.TxPending, "TG1", "", ""}},
		{"status: declined", payrouter.OpStatus, 200, `{"responseCode":"000","gloRefNo":"TG1","transStatus":"DECLINED","transResponseCode":"103"}`,
			want{payrouter.OutcomeSucceeded, payrouter.TxDeclined, "TG1", "do_not_honor", ""}},
		{"status: declined, code not given", payrouter.OpStatus, 200, `{"responseCode":"000","gloRefNo":"TG1","transStatus":"DECLINED"}`,
			want{payrouter.OutcomeSucceeded, payrouter.TxDeclined, "TG1", "declined", ""}},
		{"status: failed", payrouter.OpStatus, 200, approved("FAILED"), want{payrouter.OutcomeSucceeded, payrouter.TxFailed, "TG1", "", ""}},
		{"status: not found", payrouter.OpStatus, 404, code("120", "Transaction not found"), want{payrouter.OutcomeSucceeded, payrouter.TxNotFound, "", "", ""}},
		{"status: status never heard of", payrouter.OpStatus, 200, approved("ODD"), want{payrouter.OutcomeUnknown, "", "TG1", "", "ODD"}},
		{"status: 960", payrouter.OpStatus, 503, code("960", ""), want{payrouter.OutcomeUnavailable, "", "", "", ""}},
		{"status: plain 500", payrouter.OpStatus, 500, ``, want{payrouter.OutcomeUnknown, "", "", "", ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gatewaytest.CheckMapping(t, resultOf, c.op, c.status, c.body, gatewaytest.Want(c.want))
		})
	}
}

// FuzzParseAnswer: whatever Tranglo (or anything in its place) answers, the parser neither panics
// nor gives a result that is not a valid one.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []struct {
		status int
		body   string
	}{
		{200, approved("CAPTURED")}, {200, approved("PENDING")}, {403, code("103", "")}, {202, code("968", "")},
		{200, code("967", "")}, {500, code("302", "")}, {503, code("960", "")}, {404, code("120", "")},
		{400, code("201", "")}, {500, ``}, {200, `null`}, {200, `{"responseCode":"000"}`},
	} {
		gatewaytest.AddSeed(f, s.status, s.body)
	}
	gatewaytest.FuzzMapping(f, resultOf)
}
