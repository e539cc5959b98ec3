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

// chargeList is a list answer.
type chargeList struct {
	Object string   `json:"object"`
	Data   []charge `json:"data"`
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
func resultOf(op payrouter.Operation, status int, body []byte) payrouter.Result {
	switch {
	case status >= 200 && status <= 299:
		return successOf(op, status, body)
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
		return payrouter.Result{Outcome: payrouter.OutcomeUnavailable, Detail: describe(status, parseError(body)) + ": not processed, retry later"}
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
		if l.Object != "list" {
			return unreadable("not a list")
		}
		if len(l.Data) == 0 {
			return payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxNotFound,
				Detail: "paywell: no charge with that Idempotency-Key"}
		}
		c := l.Data[0]
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
