package ding

import (
	"encoding/json"
	"net/http"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
)

type errorCode struct {
	Code    string `json:"Code"`
	Context string `json:"Context"`
}

type transferRecord struct {
	TransferID struct {
		TransferRef    string `json:"TransferRef"`
		DistributorRef string `json:"DistributorRef"`
	} `json:"TransferId"`
	ProcessingState string `json:"ProcessingState"`
	SettlementState string `json:"SettlementState"`
	RefundedValue   int64  `json:"RefundedValue"`
	DeclineReason   string `json:"DeclineReason"`
}

// envelope is every Ding answer: a TransferRecord (SendTransfer and the operations) or Items
// (ListTransferRecords), with ResultCode and ErrorCodes.
type envelope struct {
	TransferRecord *transferRecord `json:"TransferRecord"`
	// Items is a look-up's answer, [] when there is none. A pointer, so that an answer without
	// it is told from an empty one: only an empty list says "not found", and "not found" lets
	// a charge go on to another gateway.
	Items      *[]transferRecord `json:"Items"`
	ResultCode int               `json:"ResultCode"`
	ErrorCodes []errorCode       `json:"ErrorCodes"`
}

// What each of Ding's error codes means for the attempt.
type codeKind int

const (
	kindUnrecognized  codeKind = iota
	kindUnavailable            // not submitted, retry later
	kindDeclined               // the provider refused the payment
	kindIndeterminate          // submitted, the outcome not known
	kindRepeated               // the DistributorRef was used before
	kindNotFound               // no such transfer
	kindInvalid                // our request was wrong
)

var codeKinds = map[string]codeKind{
	"ProviderUnavailable":    kindUnavailable,
	"RateLimited":            kindUnavailable,
	"ProviderRefusedRequest": kindDeclined,
	"ProviderTimedOut":       kindIndeterminate,
	"ProviderError":          kindIndeterminate,
	"ProviderUnknownError":   kindIndeterminate,
	"RepeatedDistributorRef": kindRepeated,
	"TransferNotFound":       kindNotFound,
	"InvalidParameter":       kindInvalid,
	"InvalidValue":           kindInvalid,
	"InvalidTransferState":   kindInvalid,
	"AccountNumberInvalid":   kindInvalid,
	"AuthenticationFailed":   kindInvalid,
}

// settlementStates maps a completed transfer's SettlementState.
var settlementStates = map[string]payrouter.TxState{
	"Authorized":        payrouter.TxAuthorized,
	"Settled":           payrouter.TxCaptured,
	"Cancelled":         payrouter.TxVoided,
	"Refunded":          payrouter.TxRefunded,
	"PartiallyRefunded": payrouter.TxPartiallyRefunded,
}

// resultOf maps one of Ding's answers to an operation to a Result: the one place where Ding's
// wire answers become outcomes (the table is in the package doc).
func resultOf(op payrouter.Operation, status int, contentType string, body []byte) payrouter.Result {
	switch {
	case status == http.StatusOK:
	case status >= 300 && status <= 399:
		// Ding never redirects: a 3xx is not its answer, and says nothing of what became of the
		// request.
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: detail("HTTP %d: a redirect, not Ding's answer: it may have been processed", status)}
	case status >= 400 && status <= 499 && status != http.StatusTooManyRequests:
		return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: detail("HTTP %d: request refused", status)}
	default:
		// Ding answers 200 to everything it handled, its own "not submitted, retry later"
		// included: anything else came from something on the way (a proxy's 503 when Ding's
		// connection dropped, a rate limiter's 429), before or after the transfer was made.
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown,
			Detail: detail("HTTP %d (%s), not Ding's answer: it may have been processed", status, gatewayhttp.MediaType(contentType))}
	}
	var e envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: detail("HTTP %d with an unreadable %s answer (%v): it may have been processed", status, op, err)}
	}
	if len(e.ErrorCodes) > 0 || e.ResultCode != 1 {
		return failureOf(op, contentType, e)
	}
	if op == payrouter.OpStatus {
		if e.Items == nil {
			return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: detail("HTTP %d: a look-up answer without Items: it may have been processed", status)}
		}
		if len(*e.Items) == 0 {
			return payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxNotFound, Detail: detail("no transfer with that DistributorRef")}
		}
		return lookupOf((*e.Items)[0])
	}
	if e.TransferRecord == nil {
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: detail("%s answer without a TransferRecord: it may have been processed", op)}
	}
	return recordOf(op, *e.TransferRecord)
}

// failureOf maps an HTTP 200 answer with ErrorCodes (or a ResultCode other than 1) by its first
// code.
func failureOf(op payrouter.Operation, contentType string, e envelope) payrouter.Result {
	if len(e.ErrorCodes) == 0 {
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: detail("ResultCode %d without ErrorCodes: it may have been processed", e.ResultCode)}
	}
	ec := e.ErrorCodes[0]
	d := detail("ResultCode %d, %s (%s)", e.ResultCode, ec.Code, ec.Context)
	switch codeKinds[ec.Code] {
	case kindUnavailable:
		if !notSubmitted(contentType, e) {
			return payrouter.Result{Outcome: payrouter.OutcomeUnknown,
				Detail: d + ": not in Ding's own not-submitted form (" + gatewayhttp.MediaType(contentType) + "): it may have been processed"}
		}
		return payrouter.Result{Outcome: payrouter.OutcomeUnavailable, Detail: d + ": not submitted, retry later"}
	case kindDeclined:
		if op != payrouter.OpCharge {
			return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: d}
		}
		r := payrouter.Result{Outcome: payrouter.OutcomeDeclined, State: payrouter.TxDeclined, Detail: d,
			DeclineCode: declineCode(ec.Context, e.TransferRecord)}
		if e.TransferRecord != nil {
			r.GatewayReference = e.TransferRecord.TransferID.TransferRef
		}
		return r
	case kindRepeated:
		// The transfer exists: its record says what became of it; without one, only a look-up
		// can tell. Never "error": a retry of our own charge must not be mistaken for a bug.
		if e.TransferRecord != nil {
			return recordOf(op, *e.TransferRecord)
		}
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: d + ": the DistributorRef was used before; a status look-up tells what became of it"}
	case kindNotFound:
		if op == payrouter.OpStatus {
			return payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxNotFound, Detail: d}
		}
		return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: d}
	case kindInvalid:
		return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: d}
	default:
		// An indeterminate provider failure, or a code this adapter does not know: the
		// transfer may have been made.
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: d + ": it may have been processed"}
	}
}

// notSubmitted reports whether an answer whose first code is ProviderUnavailable or RateLimited
// is wholly Ding's own "not submitted, retry later" form (dingsim's ModeUnavailable), the only
// answer that lets a charge go to another gateway without a look-up: served as JSON, ResultCode
// 2 (failure), every error code one of those two, and no transfer in it. An answer that also
// carries a TransferRecord, an Item, a success ResultCode or another code contradicts itself:
// a transfer may exist.
func notSubmitted(contentType string, e envelope) bool {
	if !gatewayhttp.IsJSON(contentType) || e.ResultCode != 2 || e.TransferRecord != nil || (e.Items != nil && len(*e.Items) > 0) {
		return false
	}
	for _, ec := range e.ErrorCodes {
		if codeKinds[ec.Code] != kindUnavailable {
			return false
		}
	}
	return true
}

// recordOf maps the TransferRecord of a successful SendTransfer or operation.
func recordOf(op payrouter.Operation, rec transferRecord) payrouter.Result {
	r := payrouter.Result{Outcome: payrouter.OutcomeSucceeded, GatewayReference: rec.TransferID.TransferRef}
	switch rec.ProcessingState {
	case "Completed":
		r.State = settlementStates[rec.SettlementState]
	case "Submitted", "Processing":
		r.Outcome, r.State, r.Detail = payrouter.OutcomePending, payrouter.TxPending, detail("transfer %s", rec.ProcessingState)
	case "Failed":
		r.State, r.Detail = payrouter.TxDeclined, detail("transfer Failed (%s)", rec.DeclineReason)
		if op == payrouter.OpCharge {
			r.Outcome, r.DeclineCode = payrouter.OutcomeDeclined, declineCode(rec.DeclineReason, nil)
		} else {
			r.Outcome = payrouter.OutcomeError
		}
	default:
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, GatewayReference: r.GatewayReference,
			Detail: detail("transfer in ProcessingState %q: it may have been processed", rec.ProcessingState)}
	}
	return r
}

// lookupOf maps the record a status look-up found.
func lookupOf(rec transferRecord) payrouter.Result {
	r := payrouter.Result{Outcome: payrouter.OutcomeSucceeded, GatewayReference: rec.TransferID.TransferRef}
	switch rec.ProcessingState {
	case "Completed":
		st, ok := settlementStates[rec.SettlementState]
		if !ok {
			return payrouter.Result{Outcome: payrouter.OutcomeUnknown, GatewayReference: r.GatewayReference,
				Detail: detail("transfer Completed in SettlementState %q", rec.SettlementState)}
		}
		r.State = st
	case "Submitted", "Processing":
		r.State = payrouter.TxPending
	case "Failed":
		r.State = payrouter.TxFailed
		if rec.DeclineReason != "" {
			r.State, r.DeclineCode = payrouter.TxDeclined, declineCode(rec.DeclineReason, nil)
		}
	default:
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, GatewayReference: r.GatewayReference,
			Detail: detail("transfer in ProcessingState %q", rec.ProcessingState)}
	}
	return r
}

// declineCode is the provider's reason in lower snake case ("DoNotHonour" is "do_not_honour").
func declineCode(reason string, rec *transferRecord) string {
	if c := gatewayhttp.SnakeCase(reason); c != "" {
		return c
	}
	if rec != nil {
		if c := gatewayhttp.SnakeCase(rec.DeclineReason); c != "" {
			return c
		}
	}
	return "provider_refused_request"
}
