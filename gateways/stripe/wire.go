package stripe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
)

// paymentIntent is the part of Stripe's PaymentIntent object payrouter reads.
type paymentIntent struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	// Status is requires_payment_method, requires_confirmation, requires_action, processing,
	// requires_capture, canceled or succeeded.
	Status           string `json:"status"`
	LastPaymentError *struct {
		Type        string `json:"type"`
		Code        string `json:"code"`
		DeclineCode string `json:"decline_code"`
	} `json:"last_payment_error"`
	NextAction *struct {
		Type string `json:"type"`
	} `json:"next_action"`
	// LatestCharge is the charge's id, or the charge when expanded (Authorize expands it).
	LatestCharge json.RawMessage `json:"latest_charge"`
}

// charge is the part of Stripe's Charge object payrouter reads. A PaymentIntent makes one when
// it is confirmed, approved or not; the look-up finds it by its transfer_group.
type charge struct {
	ID             string  `json:"id"`
	Object         string  `json:"object"`
	Amount         int64   `json:"amount"`
	AmountRefunded int64   `json:"amount_refunded"`
	Captured       bool    `json:"captured"`
	Refunded       bool    `json:"refunded"`
	Status         string  `json:"status"` // succeeded, pending, failed
	FailureCode    string  `json:"failure_code"`
	PaymentIntent  string  `json:"payment_intent"`
	TransferGroup  *string `json:"transfer_group"`
	Outcome        struct {
		Reason string `json:"reason"`
	} `json:"outcome"`
}

// refund is Stripe's Refund object; charge is an id, or the charge when expanded.
type refund struct {
	ID     string          `json:"id"`
	Object string          `json:"object"`
	Status string          `json:"status"`
	Charge json.RawMessage `json:"charge"`
}

// chargeList is a list answer (GET /v1/charges). Data is a pointer so that a list without one
// (absent or null) is told from an empty one: only an empty list says nothing was found.
type chargeList struct {
	Object string    `json:"object"`
	Data   *[]charge `json:"data"`
}

// errorObject is Stripe's error object, the value of an error answer's "error".
type errorObject struct {
	Type        string `json:"type"`
	Code        string `json:"code"`
	DeclineCode string `json:"decline_code"`
	Message     string `json:"message"`
	Param       string `json:"param"`
	Charge      string `json:"charge"`
	// PaymentIntent is the PaymentIntent the error is about (a declined charge's).
	PaymentIntent *struct {
		ID string `json:"id"`
	} `json:"payment_intent"`
}

// apiError is Stripe's error answer.
type apiError struct {
	Error *errorObject `json:"error"`
}

// maxMessage bounds how much of Stripe's own message goes into a Detail.
const maxMessage = 200

// state is what a charge says of the transaction. As with every Stripe charge, a released
// authorization (a canceled PaymentIntent) is an uncaptured charge that is refunded.
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
	return firstCode(c.Outcome.Reason, c.FailureCode)
}

// firstCode is the first of codes that normalises to something, else card_declined.
func firstCode(codes ...string) string {
	for _, s := range codes {
		if code := gatewayhttp.SnakeCase(s); code != "" {
			return code
		}
	}
	return "card_declined"
}

// authenticationRequired is the decline code of a payment that needs the customer to
// authenticate (3-D Secure): Stripe's own code for it, as its card_error gives it.
const authenticationRequired = "authentication_required"

// resultOf maps one of Stripe's answers to an operation to a Result: the one place where Stripe's
// wire answers become outcomes (the table is in the package doc).
func resultOf(op payrouter.Operation, status int, contentType string, body []byte) payrouter.Result {
	switch {
	case status >= 200 && status <= 299:
		return successOf(op, status, body)
	case status >= 300 && status <= 399:
		// Stripe never redirects: a 3xx is not its answer, and says nothing of the request.
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: describe(status, nil) + ": a redirect, not Stripe's answer: it may have been processed"}
	case status == http.StatusPaymentRequired:
		e := parseError(body)
		switch {
		case op != payrouter.OpCharge:
			// Only creating and confirming a PaymentIntent can be declined; a 402 to anything
			// else refused our request.
			return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: describe(status, e)}
		case e == nil || e.Type != "card_error":
			// A 402 that is not Stripe's card error says nothing of what became of the charge.
			return payrouter.Result{Outcome: payrouter.OutcomeUnknown,
				Detail: describe(status, e) + " (" + gatewayhttp.MediaType(contentType) + "), not Stripe's card_error: it may have been processed"}
		}
		r := payrouter.Result{Outcome: payrouter.OutcomeDeclined, State: payrouter.TxDeclined,
			DeclineCode: firstCode(e.DeclineCode, e.Code), Detail: describe(status, e)}
		if e.PaymentIntent != nil {
			r.GatewayReference = e.PaymentIntent.ID
		}
		return r
	case status == http.StatusTooManyRequests:
		if e, ok := notProcessed(contentType, body); ok {
			return payrouter.Result{Outcome: payrouter.OutcomeUnavailable, Detail: describe(status, e) + ": rate limited before processing, retry later"}
		}
		// A lock_timeout is refused while the object is busy, which Stripe does not document as
		// unprocessed; and a rate limiter in front of Stripe may answer after relaying the call.
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown,
			Detail: describe(status, parseError(body)) + " (" + gatewayhttp.MediaType(contentType) + "), not Stripe's own rate_limit answer: it may have been processed"}
	case status == http.StatusConflict:
		// idempotency_key_in_use: the first request with this key is still being processed.
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: describe(status, parseError(body)) + ": another request with this Idempotency-Key is in progress"}
	case status >= 400 && status <= 499:
		// invalid_request_error, idempotency_error (the key reused with other parameters), a
		// refused key: our request, not Stripe's health.
		return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: describe(status, parseError(body))}
	default:
		// Stripe's guidance: the result of a 500 (api_error) is indeterminate.
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: describe(status, parseError(body)) + ": may have been processed"}
	}
}

// successOf reads a 2xx answer. One that cannot be read is unknown: it may have charged.
func successOf(op payrouter.Operation, status int, body []byte) payrouter.Result {
	unreadable := func(why string) payrouter.Result {
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown,
			Detail: fmt.Sprintf("stripe: HTTP %d with an unreadable %s answer (%s): it may have been processed", status, op, why)}
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
				Detail: "stripe: no charge with that transfer_group"}
		}
		c := (*l.Data)[0] // the newest
		st := c.state()
		if c.Object != "charge" || c.ID == "" || c.PaymentIntent == "" || st == payrouter.TxUnknown {
			return unreadable(fmt.Sprintf("charge %q of PaymentIntent %q in status %q", c.ID, c.PaymentIntent, c.Status))
		}
		r := payrouter.Result{Outcome: payrouter.OutcomeSucceeded, GatewayReference: c.PaymentIntent, State: st}
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
		r := payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxUnknown, Detail: "stripe: refund " + rf.ID}
		switch rf.Status {
		case "succeeded":
		case "pending", "requires_action":
			r.Outcome = payrouter.OutcomePending
		case "failed", "canceled":
			return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: "stripe: refund " + rf.ID + " is " + rf.Status}
		default:
			return unreadable(fmt.Sprintf("refund %q in status %q", rf.ID, rf.Status))
		}
		if raw := bytes.TrimSpace(rf.Charge); len(raw) > 0 && raw[0] == '{' {
			var c charge
			if json.Unmarshal(raw, &c) == nil {
				// Only a captured charge can be refunded: any other state is not the charge's
				// after this refund, and is not reported.
				switch st := c.state(); st {
				case payrouter.TxCaptured, payrouter.TxPartiallyRefunded, payrouter.TxRefunded:
					r.State = st
				}
			}
		}
		return r
	default:
		var pi paymentIntent
		if err := json.Unmarshal(body, &pi); err != nil {
			return unreadable(err.Error())
		}
		if pi.Object != "payment_intent" || pi.ID == "" {
			return unreadable("not a PaymentIntent")
		}
		return intentResult(op, pi, unreadable)
	}
}

// intentResult reads the PaymentIntent a create, capture or cancel answered with. A capture must
// leave it succeeded (or processing) and a cancel canceled; anything else is unknown, as what
// the call did cannot be told from it.
func intentResult(op payrouter.Operation, pi paymentIntent, unreadable func(string) payrouter.Result) payrouter.Result {
	ok := func(st payrouter.TxState) payrouter.Result {
		return payrouter.Result{Outcome: payrouter.OutcomeSucceeded, GatewayReference: pi.ID, State: st}
	}
	pending := payrouter.Result{Outcome: payrouter.OutcomePending, GatewayReference: pi.ID, State: payrouter.TxPending,
		Detail: "stripe: PaymentIntent " + pi.ID + " is processing"}
	odd := unreadable(fmt.Sprintf("PaymentIntent %q in status %q", pi.ID, pi.Status))
	switch op {
	case payrouter.OpCapture:
		switch pi.Status {
		case "succeeded":
			return ok(payrouter.TxCaptured)
		case "processing":
			return pending
		}
		return odd
	case payrouter.OpVoid:
		if pi.Status == "canceled" {
			return ok(payrouter.TxVoided)
		}
		return odd
	}
	switch pi.Status {
	case "succeeded":
		return ok(payrouter.TxCaptured)
	case "requires_capture":
		return ok(payrouter.TxAuthorized)
	case "canceled":
		return ok(payrouter.TxVoided)
	case "processing":
		return pending
	case "requires_action":
		// The customer would have to authenticate (3-D Secure), which payrouter cannot ask for:
		// to the storefront it is a decline, with Stripe's code for it. Nothing is held.
		next := "none"
		if pi.NextAction != nil && pi.NextAction.Type != "" {
			next = gatewayhttp.SnakeCase(pi.NextAction.Type)
		}
		return payrouter.Result{Outcome: payrouter.OutcomeDeclined, GatewayReference: pi.ID, State: payrouter.TxDeclined,
			DeclineCode: authenticationRequired,
			Detail:      "stripe: PaymentIntent " + pi.ID + " requires_action (next_action " + next + "); payrouter runs no 3-D Secure"}
	case "requires_payment_method":
		// Confirmed and refused: the attempt's error says why.
		if e := pi.LastPaymentError; e != nil {
			return payrouter.Result{Outcome: payrouter.OutcomeDeclined, GatewayReference: pi.ID, State: payrouter.TxDeclined,
				DeclineCode: firstCode(e.DeclineCode, e.Code),
				Detail:      "stripe: PaymentIntent " + pi.ID + " requires_payment_method after " + gatewayhttp.SnakeCase(e.Type)}
		}
	}
	// requires_confirmation, requires_payment_method with no attempt, or a status never heard
	// of: not what a confirmed create answers.
	return odd
}

// latestChargeGroup returns the transfer_group of the charge an Authorize answer (2xx) carries
// expanded in latest_charge, and whether it carries one to compare: the look-up relies on
// Stripe giving the charge the PaymentIntent's transfer_group.
func latestChargeGroup(body []byte) (id, group string, ok bool) {
	var pi paymentIntent
	if json.Unmarshal(body, &pi) != nil {
		return "", "", false
	}
	raw := bytes.TrimSpace(pi.LatestCharge)
	if len(raw) == 0 || raw[0] != '{' {
		return "", "", false
	}
	var c charge
	if json.Unmarshal(raw, &c) != nil || c.Object != "charge" || c.ID == "" {
		return "", "", false
	}
	if c.TransferGroup != nil {
		group = *c.TransferGroup
	}
	return c.ID, group, true
}

// notProcessed reports whether an answer is Stripe's own rate-limit answer, the one form Stripe
// documents as unprocessed (its rate limiters run before its API, idempotency included): HTTP
// 429 (checked by the caller), served as JSON, one error object of type invalid_request_error
// and code rate_limit, naming no PaymentIntent or charge. Anything else with 429 may come from
// something in front of Stripe after it processed the request.
func notProcessed(contentType string, body []byte) (*errorObject, bool) {
	if !gatewayhttp.IsJSON(contentType) {
		return nil, false
	}
	var e apiError
	if err := json.Unmarshal(body, &e); err != nil || e.Error == nil {
		return nil, false
	}
	ok := e.Error.Type == "invalid_request_error" && e.Error.Code == "rate_limit" && e.Error.Charge == "" && e.Error.PaymentIntent == nil
	return e.Error, ok
}

// parseError reads an error answer as far as it can; nil when the body holds no error object.
func parseError(body []byte) *errorObject {
	var e apiError
	_ = json.Unmarshal(body, &e)
	return e.Error
}

// describe says what Stripe answered, for Result.Detail.
func describe(status int, e *errorObject) string {
	s := fmt.Sprintf("stripe: HTTP %d", status)
	if e == nil {
		return s
	}
	for _, part := range []string{e.Type, e.Code, e.DeclineCode} {
		if part != "" {
			s += " " + gatewayhttp.SnakeCase(part)
		}
	}
	if m := e.Message; m != "" {
		if len(m) > maxMessage {
			m = m[:maxMessage] + "..."
		}
		s += fmt.Sprintf(": %q", m)
	}
	return s
}
