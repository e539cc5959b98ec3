package paywell

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
)

// charge is the part of Paywell's charge object payrouter reads.
type charge struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	Amount         int64  `json:"amount"`
	AmountRefunded int64  `json:"amount_refunded"`
	Captured       bool   `json:"captured"`
	Refunded       bool   `json:"refunded"`
	Status         string `json:"status"` // succeeded, pending, failed
	FailureCode    string `json:"failure_code"`
	Outcome        struct {
		Reason string `json:"reason"`
	} `json:"outcome"`
}

// refund is Paywell's refund object; charge is an id, or the charge object when expanded.
type refund struct {
	ID     string          `json:"id"`
	Object string          `json:"object"`
	Status string          `json:"status"`
	Charge json.RawMessage `json:"charge"`
}

// chargeList is a list answer. Data is a pointer so that a list without its data ("data":
// null, or none) is told from an empty one: only an empty list says "not found", and "not
// found" lets a charge go on to another gateway.
type chargeList struct {
	Object string    `json:"object"`
	Data   *[]charge `json:"data"`
}

// apiError is Paywell's error answer.
type apiError struct {
	Error struct {
		Type        string `json:"type"`
		Code        string `json:"code"`
		DeclineCode string `json:"decline_code"`
		Message     string `json:"message"`
		Charge      string `json:"charge"`
	} `json:"error"`
}

// maxMessage bounds how much of a gateway's own message goes into a Detail.
const maxMessage = 200

// state is what a charge object says of the transaction. Like Stripe, a voided charge is an
// uncaptured one that was refunded.
func (c charge) state() payrouter.TxState {
	switch {
	case c.Status == "failed":
		return payrouter.TxDeclined
	case c.Status == "pending":
		return payrouter.TxPending
	case c.Status != "succeeded":
		return payrouter.TxUnknown
	case !c.Captured && c.Refunded:
		return payrouter.TxVoided
	case !c.Captured:
		return payrouter.TxAuthorized
	case c.Refunded:
		return payrouter.TxRefunded
	case c.AmountRefunded > 0:
		return payrouter.TxPartiallyRefunded
	default:
		return payrouter.TxCaptured
	}
}

func (c charge) declineCode() string {
	for _, s := range []string{c.Outcome.Reason, c.FailureCode} {
		if code := gatewayhttp.SnakeCase(s); code != "" {
			return code
		}
	}
	return "card_declined"
}

// resultOf maps one of Paywell's answers to an operation to a Result: the one place where
// Paywell's wire answers become outcomes (the table is in the package doc).
func resultOf(op payrouter.Operation, status int, contentType string, body []byte) payrouter.Result {
	switch {
	case status >= 200 && status <= 299:
		return successOf(op, status, body)
	case status >= 300 && status <= 399:
		// Paywell never redirects: a 3xx is not its answer, and says nothing of what became of
		// the request.
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: describe(status, apiError{}) + ": a redirect, not Paywell's answer: it may have been processed"}
	case status == http.StatusPaymentRequired:
		e := parseError(body)
		if op != payrouter.OpCharge {
			// Only a charge can be declined; a 402 on anything else refused our request.
			return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: describe(status, e)}
		}
		code := gatewayhttp.SnakeCase(e.Error.DeclineCode)
		if code == "" {
			code = gatewayhttp.SnakeCase(e.Error.Code)
		}
		if code == "" {
			code = "card_declined"
		}
		return payrouter.Result{Outcome: payrouter.OutcomeDeclined, GatewayReference: e.Error.Charge,
			State: payrouter.TxDeclined, DeclineCode: code, Detail: describe(status, e)}
	case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
		if e, ok := notProcessed(status, contentType, body); ok {
			return payrouter.Result{Outcome: payrouter.OutcomeUnavailable, Detail: describe(status, e) + ": not processed, retry later"}
		}
		// A proxy in front of Paywell answers 503 when Paywell's connection drops after the
		// request was forwarded (Envoy's "upstream connect error or disconnect/reset before
		// headers"), and a rate limiter may sit behind the point where a request is relayed:
		// only Paywell's own form says that Paywell did not process it.
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown,
			Detail: describe(status, parseError(body)) + " (" + gatewayhttp.MediaType(contentType) + "), not Paywell's own not-processed answer: it may have been processed"}
	case status == http.StatusConflict:
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: describe(status, parseError(body)) + ": another request with this Idempotency-Key is in progress"}
	case status >= 400 && status <= 499:
		return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: describe(status, parseError(body))}
	default:
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: describe(status, parseError(body)) + ": may have been processed"}
	}
}

// successOf reads a 2xx answer. One that cannot be read is unknown: it may have charged.
func successOf(op payrouter.Operation, status int, body []byte) payrouter.Result {
	unreadable := func(why string) payrouter.Result {
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown,
			Detail: fmt.Sprintf("paywell: HTTP %d with an unreadable %s answer (%s): it may have been processed", status, op, why)}
	}
	switch op {
	case payrouter.OpStatus:
		var l chargeList
		if err := json.Unmarshal(body, &l); err != nil {
			return unreadable(err.Error())
		}
		if l.Object != "list" || l.Data == nil {
			return unreadable("not a list")
		}
		if len(*l.Data) == 0 {
			return payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxNotFound,
				Detail: "paywell: no charge with that Idempotency-Key"}
		}
		c := (*l.Data)[0]
		st := c.state()
		if c.ID == "" || st == payrouter.TxUnknown {
			return unreadable(fmt.Sprintf("charge %q in status %q", c.ID, c.Status))
		}
		r := payrouter.Result{Outcome: payrouter.OutcomeSucceeded, GatewayReference: c.ID, State: st}
		if st == payrouter.TxDeclined {
			r.DeclineCode = c.declineCode()
		}
		return r
	case payrouter.OpRefund:
		var rf refund
		if err := json.Unmarshal(body, &rf); err != nil {
			return unreadable(err.Error())
		}
		if rf.Object != "refund" || rf.ID == "" {
			return unreadable("not a refund")
		}
		if rf.Status != "" && rf.Status != "succeeded" && rf.Status != "pending" {
			return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: "paywell: refund " + rf.ID + " is " + rf.Status}
		}
		r := payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxUnknown,
			Detail: "paywell: refund " + rf.ID}
		if rf.Status == "pending" {
			r.Outcome = payrouter.OutcomePending
		}
		if raw := bytes.TrimSpace(rf.Charge); len(raw) > 0 && raw[0] == '{' {
			var c charge
			if json.Unmarshal(raw, &c) == nil {
				r.GatewayReference = c.ID
				if st := c.state(); st != payrouter.TxUnknown {
					r.State = st
				}
			}
		} else {
			_ = json.Unmarshal(raw, &r.GatewayReference)
		}
		return r
	default:
		var c charge
		if err := json.Unmarshal(body, &c); err != nil {
			return unreadable(err.Error())
		}
		if c.Object != "charge" || c.ID == "" {
			return unreadable("not a charge")
		}
		st := c.state()
		r := payrouter.Result{Outcome: payrouter.OutcomeSucceeded, GatewayReference: c.ID, State: st}
		switch st {
		case payrouter.TxUnknown:
			return unreadable(fmt.Sprintf("charge status %q", c.Status))
		case payrouter.TxDeclined:
			r.Outcome, r.DeclineCode = payrouter.OutcomeDeclined, c.declineCode()
		case payrouter.TxPending:
			r.Outcome = payrouter.OutcomePending
		}
		return r
	}
}

// notProcessed reports whether an answer is one of Paywell's own "not processed, retry later"
// forms, the only answers that let a charge go to another gateway without a look-up: served as
// JSON, one error object, and either 503 with type api_error and code service_unavailable (what
// Paywell answers while it cannot take requests; paywellsim's ModeUnavailable) or 429 with type
// rate_limit_error (Stripe's rate limit, refused before processing). An error naming a charge
// is not one: the charge exists. Anything else with 429 or 503 may come from something in
// front of Paywell after it processed the request.
func notProcessed(status int, contentType string, body []byte) (apiError, bool) {
	if !gatewayhttp.IsJSON(contentType) {
		return apiError{}, false
	}
	var e apiError
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Charge != "" {
		return apiError{}, false
	}
	switch status {
	case http.StatusServiceUnavailable:
		return e, e.Error.Type == "api_error" && e.Error.Code == "service_unavailable"
	case http.StatusTooManyRequests:
		return e, e.Error.Type == "rate_limit_error"
	}
	return apiError{}, false
}

// parseError reads an error answer as far as it can; a body that is not an error object leaves
// it empty.
func parseError(body []byte) apiError {
	var e apiError
	_ = json.Unmarshal(body, &e)
	return e
}

// describe says what Paywell answered, for Result.Detail.
func describe(status int, e apiError) string {
	s := fmt.Sprintf("paywell: HTTP %d", status)
	for _, part := range []string{e.Error.Type, e.Error.Code, e.Error.DeclineCode} {
		if part != "" {
			s += " " + gatewayhttp.SnakeCase(part)
		}
	}
	if m := e.Error.Message; m != "" {
		if len(m) > maxMessage {
			m = m[:maxMessage] + "..."
		}
		s += fmt.Sprintf(": %q", m)
	}
	return s
}
