// Package paywellsim is a fake Paywell: a Stripe-like API (form-encoded requests, JSON answers,
// Idempotency-Key, HTTP 402 card_error for declines, 503 for "not processed, retry later") over
// the shared simulator in package sim.
//
//	POST /v1/charges                   amount, currency, source, capture, description, metadata[...]
//	GET  /v1/charges?idempotency_key=K a list of the charges created with that Idempotency-Key
//	GET  /v1/charges/{id}              one charge
//	POST /v1/charges/{id}/capture      amount (optional)
//	POST /v1/charges/{id}/cancel       void an uncaptured charge
//	POST /v1/refunds                   charge, amount (optional), expand[]=charge
//
// {id} and charge= accept Paywell's charge id or the Idempotency-Key the charge was created with:
// a caller whose charge answer was lost knows only the latter.
package paywellsim

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/payrouter/payrouter/gateways/sim"
)

// DeclineCode is the decline_code of every decline.
const DeclineCode = "generic_decline"

// New returns a fake Paywell in normal mode with an empty ledger.
func New() *sim.Server {
	s := sim.New(sim.Config{Name: "paywell", TxPrefix: "ch_", OpPrefix: "re_", Unavailable: unavailable})
	f := &fake{s: s}
	s.Handle("POST /v1/charges", f.authenticated(f.createCharge))
	s.Handle("GET /v1/charges", f.authenticated(f.listCharges))
	s.Handle("GET /v1/charges/{id}", f.authenticated(f.retrieveCharge))
	s.Handle("POST /v1/charges/{id}/capture", f.authenticated(f.captureCharge))
	s.Handle("POST /v1/charges/{id}/cancel", f.authenticated(f.cancelCharge))
	s.Handle("POST /v1/refunds", f.authenticated(f.createRefund))
	return s
}

type fake struct{ s *sim.Server }

// apiError is Stripe's error object.
type apiError struct {
	Type        string `json:"type"`
	Code        string `json:"code,omitempty"`
	DeclineCode string `json:"decline_code,omitempty"`
	Message     string `json:"message"`
	Param       string `json:"param,omitempty"`
	Charge      string `json:"charge,omitempty"`
}

func writeError(w http.ResponseWriter, status int, e apiError) {
	sim.WriteJSON(w, status, map[string]apiError{"error": e})
}

// unavailable is Paywell's "we did not process this, retry later": 503 with an api_error.
func unavailable(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, apiError{
		Type:    "api_error",
		Code:    "service_unavailable",
		Message: "Paywell is temporarily unavailable and did not process this request; retry later.",
	})
}

// authenticated refuses calls without a bearer key, as Stripe does (401 invalid_request_error).
func (f *fake) authenticated(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || strings.TrimSpace(key) == "" {
			writeError(w, http.StatusUnauthorized, apiError{Type: "invalid_request_error",
				Message: "You did not provide an API key. Provide it as Authorization: Bearer <key>."})
			return
		}
		h(w, r)
	}
}

// chargeObject is Stripe's charge. A voided charge is, as in Stripe, uncaptured and refunded.
type chargeObject struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountCaptured int64             `json:"amount_captured"`
	AmountRefunded int64             `json:"amount_refunded"`
	Currency       string            `json:"currency"`
	Captured       bool              `json:"captured"`
	Refunded       bool              `json:"refunded"`
	Paid           bool              `json:"paid"`
	Status         string            `json:"status"`
	FailureCode    *string           `json:"failure_code"`
	Outcome        outcomeObject     `json:"outcome"`
	Metadata       map[string]string `json:"metadata"`
}

type outcomeObject struct {
	Type          string  `json:"type"`
	NetworkStatus string  `json:"network_status"`
	Reason        *string `json:"reason"`
}

func toCharge(t sim.Tx) chargeObject {
	c := chargeObject{
		ID: t.ID, Object: "charge", Amount: t.Amount, Currency: strings.ToLower(t.Currency),
		Status: "succeeded", Paid: true, AmountRefunded: t.Refunded,
		Outcome:  outcomeObject{Type: "authorized", NetworkStatus: "approved_by_network"},
		Metadata: map[string]string{"idempotency_key": t.Reference},
	}
	switch t.Status {
	case sim.StatusDeclined:
		code, reason := "card_declined", t.DeclineCode
		c.Status, c.Paid, c.FailureCode = "failed", false, &code
		c.Outcome = outcomeObject{Type: "issuer_declined", NetworkStatus: "declined_by_network", Reason: &reason}
	case sim.StatusAuthorized:
	case sim.StatusVoided:
		c.Refunded, c.AmountRefunded = true, t.Amount
	default:
		c.Captured, c.AmountCaptured = true, t.Amount
		c.Refunded = t.Status == sim.StatusRefunded
	}
	return c
}

func declined(w http.ResponseWriter, t sim.Tx) {
	writeError(w, http.StatusPaymentRequired, apiError{
		Type: "card_error", Code: "card_declined", DeclineCode: t.DeclineCode,
		Message: "Your card was declined.", Charge: t.ID,
	})
}

func invalid(w http.ResponseWriter, param, code, msg string) {
	writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: code, Param: param, Message: msg})
}

// amountParam reads an amount in minor units; optional ones may be absent (0).
func amountParam(r *http.Request, required bool) (int64, bool) {
	v := r.PostFormValue("amount")
	if v == "" {
		return 0, !required
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil && n > 0 && n <= 1e12
}

func (f *fake) createCharge(w http.ResponseWriter, r *http.Request) {
	amount, ok := amountParam(r, true)
	if !ok {
		invalid(w, "amount", "parameter_invalid_integer", "amount must be a positive integer in the currency's minor unit.")
		return
	}
	currency := r.PostFormValue("currency")
	if len(currency) != 3 {
		invalid(w, "currency", "parameter_missing", "currency must be a three-letter ISO code.")
		return
	}
	source := r.PostFormValue("source")
	if source == "" {
		invalid(w, "source", "parameter_missing", "Missing required param: source.")
		return
	}
	capture := true
	if v := r.PostFormValue("capture"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			invalid(w, "capture", "parameter_invalid_boolean", "capture must be true or false.")
			return
		}
		capture = b
	}
	n := sim.NewTx{
		Reference: r.Header.Get("Idempotency-Key"), Amount: amount, Currency: strings.ToUpper(currency),
		Capture: capture, Fingerprint: fmt.Sprint(amount, strings.ToUpper(currency), capture, source),
	}
	if f.s.Declines(source) {
		n.Decline = DeclineCode
	}
	t, created := f.s.Ledger().Create(n)
	if !created && t.Fingerprint != n.Fingerprint {
		writeError(w, http.StatusBadRequest, apiError{Type: "idempotency_error",
			Message: "Keys for idempotent requests can only be used with the same parameters they were first used with."})
		return
	}
	if t.Status == sim.StatusDeclined {
		declined(w, t)
		return
	}
	sim.WriteJSON(w, http.StatusOK, toCharge(t))
}

func (f *fake) listCharges(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("idempotency_key")
	if key == "" {
		invalid(w, "idempotency_key", "parameter_missing", "Missing required param: idempotency_key.")
		return
	}
	data := []chargeObject{}
	if t, ok := f.s.Ledger().Lookup(key); ok && t.Reference == key {
		data = append(data, toCharge(t))
	}
	sim.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "url": "/v1/charges", "has_more": false, "data": data})
}

func (f *fake) retrieveCharge(w http.ResponseWriter, r *http.Request) {
	t, ok := f.s.Ledger().Lookup(r.PathValue("id"))
	if !ok {
		opError(w, fmt.Errorf("%w: %q", sim.ErrNotFound, r.PathValue("id")))
		return
	}
	sim.WriteJSON(w, http.StatusOK, toCharge(t))
}

func (f *fake) captureCharge(w http.ResponseWriter, r *http.Request) {
	amount, ok := amountParam(r, false)
	if !ok {
		invalid(w, "amount", "parameter_invalid_integer", "amount must be a positive integer in the currency's minor unit.")
		return
	}
	res, err := f.s.Ledger().Capture(r.Header.Get("Idempotency-Key"), r.PathValue("id"), amount)
	if err != nil {
		opError(w, err)
		return
	}
	sim.WriteJSON(w, http.StatusOK, toCharge(res.Tx))
}

func (f *fake) cancelCharge(w http.ResponseWriter, r *http.Request) {
	res, err := f.s.Ledger().Void(r.Header.Get("Idempotency-Key"), r.PathValue("id"))
	if err != nil {
		opError(w, err)
		return
	}
	sim.WriteJSON(w, http.StatusOK, toCharge(res.Tx))
}

func (f *fake) createRefund(w http.ResponseWriter, r *http.Request) {
	id := r.PostFormValue("charge")
	if id == "" {
		invalid(w, "charge", "parameter_missing", "Missing required param: charge.")
		return
	}
	amount, ok := amountParam(r, false)
	if !ok {
		invalid(w, "amount", "parameter_invalid_integer", "amount must be a positive integer in the currency's minor unit.")
		return
	}
	res, err := f.s.Refund(r, r.Header.Get("Idempotency-Key"), id, amount)
	if err != nil {
		opError(w, err)
		return
	}
	var charge any = res.Tx.ID
	for _, e := range r.PostForm["expand[]"] {
		if e == "charge" {
			charge = toCharge(res.Tx)
		}
	}
	sim.WriteJSON(w, http.StatusOK, map[string]any{
		"id": res.ID, "object": "refund", "amount": res.Amount, "currency": strings.ToLower(res.Tx.Currency),
		"charge": charge, "status": "succeeded",
	})
}

// opError answers a refused capture, cancel or refund as Stripe would.
func opError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, sim.ErrNotFound):
		writeError(w, http.StatusNotFound, apiError{Type: "invalid_request_error", Code: "resource_missing", Param: "id", Message: err.Error()})
	case errors.Is(err, sim.ErrAmount):
		invalid(w, "amount", "amount_too_large", err.Error())
	default:
		invalid(w, "", "charge_invalid_state", err.Error())
	}
}
