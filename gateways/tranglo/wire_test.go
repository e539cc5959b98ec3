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

// unavailableAnswer is Tranglo's own "not processed, try later" (with HTTP 503), as tranglosim
// answers it in ModeUnavailable.
const unavailableAnswer = `{"responseCode":"960","responseDesc":"Service temporarily unavailable; transaction not processed, try again later"}`

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
		{"000 captured", payrouter.OpCharge, 200, js, approved("CAPTURED"), want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "TG1", "", ""}},
		{"000 authorized", payrouter.OpCharge, 200, js, approved("AUTHORIZED"), want{payrouter.OutcomeSucceeded, payrouter.TxAuthorized, "TG1", "", ""}},
		{"000 pending", payrouter.OpCharge, 200, js, approved("PENDING"), want{payrouter.OutcomePending, payrouter.TxPending, "TG1", "", ""}},
		{"000 with a status never heard of", payrouter.OpCharge, 200, js, approved("ODD"), want{payrouter.OutcomeSucceeded, payrouter.TxUnknown, "TG1", "", ""}},
		{"000 declined", payrouter.OpCharge, 200, js, `{"responseCode":"000","gloRefNo":"TG1","transStatus":"DECLINED","transResponseCode":"101"}`,
			want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "TG1", "insufficient_funds", ""}},
		{"101", payrouter.OpCharge, 403, js, `{"responseCode":"101","responseDesc":"Insufficient funds","gloRefNo":"TG1","transStatus":"DECLINED"}`,
			want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "TG1", "insufficient_funds", "Insufficient funds"}},
		{"103", payrouter.OpCharge, 403, js, code("103", "Do not honour"), want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "", "do_not_honor", ""}},
		{"108", payrouter.OpCharge, 403, js, code("108", "Blocked"), want{payrouter.OutcomeDeclined, payrouter.TxDeclined, "", "blocked_card", ""}},
		{"103 to a refund", payrouter.OpRefund, 403, js, code("103", ""), want{payrouter.OutcomeError, "", "", "", "103"}},
		{"968 pending", payrouter.OpCharge, 202, js, code("968", "Pending"), want{payrouter.OutcomePending, payrouter.TxPending, "", "", ""}},
		{"967 suspected", payrouter.OpCharge, 200, js, code("967", "Suspected"), want{payrouter.OutcomeUnknown, "", "", "", "never retry"}},
		{"302 system error", payrouter.OpCharge, 500, js, code("302", "System error"), want{payrouter.OutcomeUnknown, "", "", "", "server error"}},
		{"999 unexpected", payrouter.OpCharge, 500, js, code("999", "Unexpected"), want{payrouter.OutcomeUnknown, "", "", "", "server error"}},
		{"960 not processed", payrouter.OpCharge, 503, js, code("960", "Try later"), want{payrouter.OutcomeUnavailable, "", "", "", "not processed"}},
		{"960, its own form, as tranglosim answers it", payrouter.OpCharge, 503, "application/json", unavailableAnswer, want{payrouter.OutcomeUnavailable, "", "", "", "960"}},
		{"960, its own form, charset given", payrouter.OpRefund, 503, "application/json; charset=UTF-8", unavailableAnswer, want{payrouter.OutcomeUnavailable, "", "", "", ""}},
		{"960 served as text/plain", payrouter.OpCharge, 503, text, unavailableAnswer, want{payrouter.OutcomeUnknown, "", "", "", "text/plain"}},
		{"960 with no Content-Type", payrouter.OpCharge, 503, "", unavailableAnswer, want{payrouter.OutcomeUnknown, "", "", "", "no Content-Type"}},
		{"960 cut short", payrouter.OpCharge, 503, js, unavailableAnswer[:30], want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"960 and trailing data", payrouter.OpCharge, 503, js, unavailableAnswer + `}`, want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"960 with HTTP 200", payrouter.OpCharge, 200, js, unavailableAnswer, want{payrouter.OutcomeUnknown, "", "", "", "not in Tranglo's own not-processed form"}},
		{"960 with HTTP 429", payrouter.OpCharge, 429, js, unavailableAnswer, want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"960 with HTTP 500", payrouter.OpCharge, 500, js, unavailableAnswer, want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"960 naming a transaction", payrouter.OpCharge, 503, js, `{"responseCode":"960","responseDesc":"Try later","gloRefNo":"TG1"}`, want{payrouter.OutcomeUnknown, "", "TG1", "", ""}},
		{"960 with a transaction status", payrouter.OpCharge, 503, js, `{"responseCode":"960","transStatus":"CAPTURED"}`, want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"201 invalid parameter", payrouter.OpCharge, 400, js, code("201", "Invalid parameter: amount"), want{payrouter.OutcomeError, "", "", "", "amount"}},
		{"204 transID reused", payrouter.OpCharge, 409, js, code("204", "Duplicate transID"), want{payrouter.OutcomeError, "", "", "", "204"}},
		{"210 authentication", payrouter.OpCharge, 401, js, code("210", "Authentication failed"), want{payrouter.OutcomeError, "", "", "", ""}},
		{"120 to a capture", payrouter.OpCapture, 404, js, code("120", "Transaction not found"), want{payrouter.OutcomeError, "", "", "", "120"}},
		{"unknown code, 503", payrouter.OpCharge, 503, js, code("555", ""), want{payrouter.OutcomeUnknown, "", "", "", "555"}},
		{"unknown code, 429", payrouter.OpCharge, 429, js, code("555", ""), want{payrouter.OutcomeUnknown, "", "", "", "unrecognised"}},
		{"unknown code, 400", payrouter.OpCharge, 400, js, code("555", ""), want{payrouter.OutcomeError, "", "", "", "555"}},
		{"unknown code, 200", payrouter.OpCharge, 200, js, code("555", ""), want{payrouter.OutcomeUnknown, "", "", "", "unrecognised"}},
		{"plain 500", payrouter.OpCharge, 500, text, `Internal Server Error`, want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"503 empty", payrouter.OpCharge, 503, "", ``, want{payrouter.OutcomeUnknown, "", "", "", "503"}},
		// The fault-injection run's answer: Envoy forwarded the payment, Tranglo made it, the
		// connection dropped before the answer, and Envoy answered its own 503.
		{"503 from envoy after the payment was forwarded", payrouter.OpCharge, 503, "text/plain",
			"upstream connect error or disconnect/reset before headers. reset reason: connection termination",
			want{payrouter.OutcomeUnknown, "", "", "", "may have been processed"}},
		{"503 JSON without a code", payrouter.OpCharge, 503, js, `{}`, want{payrouter.OutcomeUnknown, "", "", "", "no responseCode"}},
		{"502 HTML page", payrouter.OpCharge, 502, html, `<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>`, want{payrouter.OutcomeUnknown, "", "", "", "text/html"}},
		{"504 HTML page", payrouter.OpCharge, 504, html, `<html><head><title>504 Gateway Time-out</title></head><body>nginx</body></html>`, want{payrouter.OutcomeUnknown, "", "", "", "504"}},
		{"429 with no body", payrouter.OpCharge, 429, "", ``, want{payrouter.OutcomeUnknown, "", "", "", "429"}},
		{"429 without a code", payrouter.OpCharge, 429, js, `{}`, want{payrouter.OutcomeUnknown, "", "", "", "429"}},
		{"403 without a code", payrouter.OpCharge, 403, text, `Forbidden`, want{payrouter.OutcomeError, "", "", "", "403"}},
		{"a redirect", payrouter.OpCharge, 302, "", ``, want{payrouter.OutcomeUnknown, "", "", "", "redirect"}},
		{"a redirect carrying an approval", payrouter.OpCharge, 307, js, approved("CAPTURED"), want{payrouter.OutcomeUnknown, "", "", "", "not Tranglo's answer"}},
		{"a redirect carrying its own not-processed form", payrouter.OpCharge, 303, js, unavailableAnswer, want{payrouter.OutcomeUnknown, "", "", "", "303"}},
		{"a redirect carrying not found", payrouter.OpStatus, 301, js, code("120", "Transaction not found"), want{payrouter.OutcomeUnknown, "", "", "", "301"}},
		{"HTML with 200", payrouter.OpCharge, 200, html, `<html/>`, want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"{} with 200", payrouter.OpCharge, 200, js, `{}`, want{payrouter.OutcomeUnknown, "", "", "", "no responseCode"}},
		{"code as a number", payrouter.OpCharge, 200, js, `{"responseCode":0}`, want{payrouter.OutcomeUnknown, "", "", "", "unreadable"}},
		{"capture", payrouter.OpCapture, 200, js, approved("CAPTURED"), want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "TG1", "", ""}},
		{"void", payrouter.OpVoid, 200, js, approved("VOIDED"), want{payrouter.OutcomeSucceeded, payrouter.TxVoided, "TG1", "", ""}},
		{"partial refund", payrouter.OpRefund, 200, js, approved("PARTIALLY_REFUNDED"), want{payrouter.OutcomeSucceeded, payrouter.TxPartiallyRefunded, "TG1", "", ""}},
		{"full refund", payrouter.OpRefund, 200, js, approved("REFUNDED"), want{payrouter.OutcomeSucceeded, payrouter.TxRefunded, "TG1", "", ""}},
		{"refund of a settled-in-part state", payrouter.OpRefund, 409, js, code("202", "Invalid transaction state"), want{payrouter.OutcomeError, "", "", "", "202"}},
		{"status: captured", payrouter.OpStatus, 200, js, approved("CAPTURED"), want{payrouter.OutcomeSucceeded, payrouter.TxCaptured, "TG1", "", ""}},
		{"status: pending", payrouter.OpStatus, 200, js, approved("PENDING"), want{payrouter.OutcomeSucceeded, payrouter.TxPending, "TG1", "", ""}},
		{"status: declined", payrouter.OpStatus, 200, js, `{"responseCode":"000","gloRefNo":"TG1","transStatus":"DECLINED","transResponseCode":"103"}`,
			want{payrouter.OutcomeSucceeded, payrouter.TxDeclined, "TG1", "do_not_honor", ""}},
		{"status: declined, code not given", payrouter.OpStatus, 200, js, `{"responseCode":"000","gloRefNo":"TG1","transStatus":"DECLINED"}`,
			want{payrouter.OutcomeSucceeded, payrouter.TxDeclined, "TG1", "declined", ""}},
		{"status: failed", payrouter.OpStatus, 200, js, approved("FAILED"), want{payrouter.OutcomeSucceeded, payrouter.TxFailed, "TG1", "", ""}},
		{"status: not found", payrouter.OpStatus, 404, js, code("120", "Transaction not found"), want{payrouter.OutcomeSucceeded, payrouter.TxNotFound, "", "", ""}},
		{"status: status never heard of", payrouter.OpStatus, 200, js, approved("ODD"), want{payrouter.OutcomeUnknown, "", "TG1", "", "ODD"}},
		{"status: 960", payrouter.OpStatus, 503, js, code("960", ""), want{payrouter.OutcomeUnavailable, "", "", "", ""}},
		{"status: 503 from envoy", payrouter.OpStatus, 503, "text/plain", "upstream connect error or disconnect/reset before headers. reset reason: connection termination", want{payrouter.OutcomeUnknown, "", "", "", ""}},
		{"status: plain 500", payrouter.OpStatus, 500, "", ``, want{payrouter.OutcomeUnknown, "", "", "", ""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gatewaytest.CheckMapping(t, resultOf, c.op, c.status, c.ct, c.body, gatewaytest.Want(c.want))
		})
	}
}

// TestForeignAnswers: what a proxy or a redirect answers in Tranglo's place is unknown, whatever
// the operation.
func TestForeignAnswers(t *testing.T) { gatewaytest.CheckForeignAnswers(t, resultOf) }

// FuzzParseAnswer: whatever Tranglo (or anything in its place) answers, the parser neither panics
// nor gives a result that is not a valid one.
func FuzzParseAnswer(f *testing.F) {
	for _, s := range []struct {
		status int
		ct     string
		body   string
	}{
		{200, js, approved("CAPTURED")}, {200, js, approved("PENDING")}, {403, js, code("103", "")}, {202, js, code("968", "")},
		{200, js, code("967", "")}, {500, js, code("302", "")}, {503, js, unavailableAnswer}, {503, text, unavailableAnswer},
		{200, js, unavailableAnswer}, {404, js, code("120", "")}, {400, js, code("201", "")}, {500, "", ``}, {200, js, `null`},
		{200, js, `{"responseCode":"000"}`},
	} {
		gatewaytest.AddSeed(f, s.status, s.ct, s.body)
	}
	gatewaytest.FuzzMapping(f, resultOf)
}
