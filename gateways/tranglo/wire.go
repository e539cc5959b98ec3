package tranglo

import (
	"encoding/json"
	"net/http"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
)

// answer is the part of every Tranglo answer payrouter reads.
type answer struct {
	ResponseCode      string `json:"responseCode"`
	ResponseDesc      string `json:"responseDesc"`
	GloRefNo          string `json:"gloRefNo"`
	TransStatus       string `json:"transStatus"`
	TransResponseCode string `json:"transResponseCode"`
}

// declineCodes names Tranglo's decline codes, 101-108.
var declineCodes = map[string]string{
	"101": "insufficient_funds",
	"102": "invalid_card",
	"103": "do_not_honor",
	"104": "expired_card",
	"105": "restricted_card",
	"106": "exceeds_limit",
	"107": "suspected_fraud",
	"108": "blocked_card",
}

var transStatuses = map[string]payrouter.TxState{
	"AUTHORIZED":         payrouter.TxAuthorized,
	"CAPTURED":           payrouter.TxCaptured,
	"VOIDED":             payrouter.TxVoided,
	"REFUNDED":           payrouter.TxRefunded,
	"PARTIALLY_REFUNDED": payrouter.TxPartiallyRefunded,
	"DECLINED":           payrouter.TxDeclined,
	"PENDING":            payrouter.TxPending,
	"FAILED":             payrouter.TxFailed,
}

// resultOf maps one of Tranglo's answers to an operation to a Result: the one place where
// Tranglo's wire answers become outcomes (the table is in the package doc). The responseCode
// decides; the HTTP status only when there is no readable code, and a redirect before either.
func resultOf(op payrouter.Operation, status int, contentType string, body []byte) payrouter.Result {
	if status >= 300 && status <= 399 {
		// Tranglo never redirects: a 3xx is not its answer, whatever its body holds, and says
		// nothing of what became of the request.
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: detail("HTTP %d: a redirect, not Tranglo's answer: it may have been processed", status)}
	}
	var a answer
	if err := json.Unmarshal(body, &a); err != nil || a.ResponseCode == "" {
		why := "no responseCode"
		if err != nil {
			why = err.Error()
		}
		switch {
		case status >= 400 && status <= 499 && status != http.StatusTooManyRequests:
			return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: detail("HTTP %d: request refused (%s)", status, why)}
		default:
			// A 429 or 503 without a code is not Tranglo's "not processed" (that is 960): a
			// proxy in front of it answers so when Tranglo's connection drops after the request
			// was forwarded.
			return payrouter.Result{Outcome: payrouter.OutcomeUnknown,
				Detail: detail("HTTP %d with an unreadable %s answer (%s, %s): it may have been processed", status, op, gatewayhttp.MediaType(contentType), why)}
		}
	}
	code := a.ResponseCode
	d := detail("HTTP %d, code %s %q", status, code, a.ResponseDesc)
	if dc, ok := declineCodes[code]; ok {
		if op != payrouter.OpCharge {
			return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: d}
		}
		return payrouter.Result{Outcome: payrouter.OutcomeDeclined, GatewayReference: a.GloRefNo, State: payrouter.TxDeclined, DeclineCode: dc, Detail: d}
	}
	switch code {
	case "000":
		return approvedOf(op, a, d)
	case "968":
		return payrouter.Result{Outcome: payrouter.OutcomePending, GatewayReference: a.GloRefNo, State: payrouter.TxPending, Detail: d}
	case "967":
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, GatewayReference: a.GloRefNo, Detail: d + ": suspected transaction, outcome unknown; never retry it"}
	case "960":
		if !notProcessed(status, contentType, a) {
			return payrouter.Result{Outcome: payrouter.OutcomeUnknown, GatewayReference: a.GloRefNo,
				Detail: d + ": not in Tranglo's own not-processed form (HTTP 503, " + gatewayhttp.MediaType(contentType) + "): it may have been processed"}
		}
		return payrouter.Result{Outcome: payrouter.OutcomeUnavailable, Detail: d + ": not processed, try later"}
	case "302", "999":
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, GatewayReference: a.GloRefNo, Detail: d + ": server error, it may have been processed"}
	case "120":
		if op == payrouter.OpStatus {
			return payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxNotFound, Detail: d}
		}
		return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: d}
	}
	switch {
	case len(code) == 3 && code[0] == '2':
		return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: d}
	case status >= 400 && status <= 499 && status != http.StatusTooManyRequests:
		return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: d}
	default:
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, GatewayReference: a.GloRefNo, Detail: d + ": unrecognised code, it may have been processed"}
	}
}

// notProcessed reports whether a 960 answer is Tranglo's own "not processed, try later" form
// (tranglosim's ModeUnavailable), the only answer that lets a charge go to another gateway
// without a look-up: HTTP 503, served as JSON, and no transaction in it (a gloRefNo or a
// transStatus would say that Tranglo made one).
func notProcessed(status int, contentType string, a answer) bool {
	return status == http.StatusServiceUnavailable && gatewayhttp.IsJSON(contentType) && a.GloRefNo == "" && a.TransStatus == ""
}

// approvedOf maps a 000 answer by the transaction's status.
func approvedOf(op payrouter.Operation, a answer, d string) payrouter.Result {
	st, known := transStatuses[a.TransStatus]
	r := payrouter.Result{Outcome: payrouter.OutcomeSucceeded, GatewayReference: a.GloRefNo, State: st}
	switch {
	case !known && op == payrouter.OpStatus:
		// A look-up must say what the transaction is; without that it did not answer.
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, GatewayReference: a.GloRefNo, Detail: d + ": transStatus " + a.TransStatus}
	case op == payrouter.OpStatus && st == payrouter.TxDeclined:
		r.DeclineCode = declineCodes[a.TransResponseCode]
		if r.DeclineCode == "" {
			r.DeclineCode = "declined"
		}
	case op == payrouter.OpCharge && st == payrouter.TxDeclined:
		r.Outcome, r.Detail, r.DeclineCode = payrouter.OutcomeDeclined, d, declineCodes[a.TransResponseCode]
		if r.DeclineCode == "" {
			r.DeclineCode = "declined"
		}
	case st == payrouter.TxPending:
		if op != payrouter.OpStatus {
			r.Outcome, r.Detail = payrouter.OutcomePending, d
		}
	}
	return r
}
