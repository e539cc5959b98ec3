// Package tranglosim is a fake Tranglo, a GloRemit-like API: JSON requests with an X-Api-Key
// header, a transID unique for 7 days on every request, and a three-digit responseCode in every
// answer, with an HTTP status to match.
//
//	POST /gloremit/v1/payments                 a charge; transID is payrouter's reference
//	POST /gloremit/v1/payments/capture         capture; origTransID or gloRefNo names the charge
//	POST /gloremit/v1/payments/void            void
//	POST /gloremit/v1/payments/refund          refund
//	POST /gloremit/v1/transaction-inquiry      look-up of the payment sent with transID
//
// Response codes:
//
//	000 approved (200)              101-108 declined (403)       120 no such transaction (404)
//	201 invalid parameter (400)     202 invalid state (409)      203 invalid amount (400)
//	204 transID reused for another transaction (409)             210 authentication failed (401)
//	302 system error (500)          999 unexpected error (500)   960 not processed, try later (503)
//	967 suspected transaction       968 pending
//
// This fake answers 000, 103 (every decline), 120, 2xx, 960 and, with the behavior pending, 968
// (HTTP 202) to a charge, whose look-up shows transStatus PENDING until it is final; 302, 967
// and 999 are what a real GloRemit may answer and the adapter maps them.
package tranglosim

import (
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/payrouter/payrouter/gateways/sim"
)

// DeclineCode is the response code of every decline: "Do not honour".
const DeclineCode = "103"

// New returns a fake Tranglo in normal mode with an empty ledger.
func New() *sim.Server {
	f := &fake{}
	s := sim.New(sim.Config{Name: "tranglo", TxPrefix: "TG", OpPrefix: "TGOP", Unavailable: unavailable, OnSettle: f.settled})
	f.s = s
	s.Handle("POST /gloremit/v1/payments", f.authenticated(f.pay))
	s.Handle("POST /gloremit/v1/payments/capture", f.authenticated(f.capture))
	s.Handle("POST /gloremit/v1/payments/void", f.authenticated(f.void))
	s.Handle("POST /gloremit/v1/payments/refund", f.authenticated(f.refund))
	s.Handle("POST /gloremit/v1/transaction-inquiry", f.authenticated(f.inquiry))
	return s
}

type fake struct{ s *sim.Server }

// answer is every Tranglo answer; the transaction fields are set when there is one.
type answer struct {
	ResponseCode      string `json:"responseCode"`
	ResponseDesc      string `json:"responseDesc"`
	TransID           string `json:"transID,omitempty"`
	OrigTransID       string `json:"origTransID,omitempty"`
	GloRefNo          string `json:"gloRefNo,omitempty"`
	TransStatus       string `json:"transStatus,omitempty"` // AUTHORIZED, CAPTURED, VOIDED, REFUNDED, PARTIALLY_REFUNDED, DECLINED, PENDING
	TransResponseCode string `json:"transResponseCode,omitempty"`
	Amount            int64  `json:"amount,omitempty"`
	Currency          string `json:"currency,omitempty"`
	RefundedAmount    int64  `json:"refundedAmount,omitempty"`
}

var descriptions = map[string]string{
	"000": "Approved",
	"103": "Do not honour",
	"120": "Transaction not found",
	"201": "Invalid parameter",
	"202": "Invalid transaction state",
	"203": "Invalid amount",
	"204": "Duplicate transID with different details",
	"210": "Authentication failed",
	"960": "Service temporarily unavailable; transaction not processed, try again later",
	"968": "Transaction pending",
}

func write(w http.ResponseWriter, status int, code string, a answer, detail string) {
	a.ResponseCode, a.ResponseDesc = code, descriptions[code]
	if detail != "" {
		a.ResponseDesc += ": " + detail
	}
	sim.WriteJSON(w, status, a)
}

// unavailable is Tranglo's "not processed, try later": HTTP 503, code 960.
func unavailable(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Retry-After", "1")
	write(w, http.StatusServiceUnavailable, "960", answer{}, "")
}

func (f *fake) authenticated(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if strings.TrimSpace(r.Header.Get("X-Api-Key")) == "" {
			write(w, http.StatusUnauthorized, "210", answer{}, "X-Api-Key header missing")
			return
		}
		h(w, r)
	}
}

var statuses = map[sim.TxStatus]string{
	sim.StatusAuthorized:        "AUTHORIZED",
	sim.StatusCaptured:          "CAPTURED",
	sim.StatusVoided:            "VOIDED",
	sim.StatusRefunded:          "REFUNDED",
	sim.StatusPartiallyRefunded: "PARTIALLY_REFUNDED",
	sim.StatusDeclined:          "DECLINED",
	sim.StatusPending:           "PENDING",
}

func view(transID string, t sim.Tx) answer {
	a := answer{TransID: transID, OrigTransID: t.Reference, GloRefNo: t.ID, TransStatus: statuses[t.Status],
		Amount: t.Amount, Currency: t.Currency, RefundedAmount: t.Refunded}
	switch t.Status {
	case sim.StatusDeclined:
		a.TransResponseCode = t.DeclineCode
	case sim.StatusPending:
		a.TransResponseCode = "968"
	default:
		a.TransResponseCode = "000"
	}
	return a
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		write(w, http.StatusBadRequest, "201", answer{}, err.Error())
		return false
	}
	return true
}

type payment struct {
	TransID     string `json:"transID"`
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	CardToken   string `json:"cardToken"`
	CaptureMode string `json:"captureMode"` // AUTO or MANUAL
	CustomerID  string `json:"customerID"`
	Country     string `json:"country"`
	Remarks     string `json:"remarks"`
}

func (f *fake) pay(w http.ResponseWriter, r *http.Request) {
	var in payment
	if !decode(w, r, &in) {
		return
	}
	var bad string
	switch {
	case in.TransID == "" || len(in.TransID) > 64:
		bad = "transID"
	case in.Amount <= 0 || in.Amount > 1e12:
		bad = "amount"
	case len(in.Currency) != 3:
		bad = "currency"
	case in.CardToken == "":
		bad = "cardToken"
	case in.CaptureMode != "AUTO" && in.CaptureMode != "MANUAL":
		bad = "captureMode"
	}
	if bad != "" {
		write(w, http.StatusBadRequest, "201", answer{TransID: in.TransID}, bad)
		return
	}
	n := sim.NewTx{
		Reference: in.TransID, Amount: in.Amount, Currency: strings.ToUpper(in.Currency), Capture: in.CaptureMode == "AUTO",
		Fingerprint: fmt.Sprint(in.Amount, strings.ToUpper(in.Currency), in.CaptureMode, in.CardToken),
	}
	if f.s.Declines(in.CardToken) {
		n.Decline = DeclineCode
	}
	t, created := f.s.Create(r, n)
	if !created && t.Fingerprint != n.Fingerprint {
		write(w, http.StatusConflict, "204", answer{TransID: in.TransID}, "")
		return
	}
	switch t.Status {
	case sim.StatusDeclined:
		write(w, http.StatusForbidden, t.DeclineCode, view(in.TransID, t), "")
	case sim.StatusPending:
		write(w, http.StatusAccepted, "968", view(in.TransID, t), "")
	default:
		write(w, http.StatusOK, "000", view(in.TransID, t), "")
	}
}

// operation is the body of capture, void and refund: transID is the operation's own.
type operation struct {
	TransID     string `json:"transID"`
	OrigTransID string `json:"origTransID"`
	GloRefNo    string `json:"gloRefNo"`
	Amount      int64  `json:"amount"`
}

func (o operation) payment() string {
	if o.GloRefNo != "" {
		return o.GloRefNo
	}
	return o.OrigTransID
}

func (f *fake) capture(w http.ResponseWriter, r *http.Request) {
	var in operation
	if decode(w, r, &in) {
		res, err := f.s.Ledger().Capture(in.TransID, in.payment(), in.Amount)
		opAnswer(w, in.TransID, res, err)
	}
}

func (f *fake) void(w http.ResponseWriter, r *http.Request) {
	var in operation
	if decode(w, r, &in) {
		res, err := f.s.Ledger().Void(in.TransID, in.payment())
		opAnswer(w, in.TransID, res, err)
	}
}

func (f *fake) refund(w http.ResponseWriter, r *http.Request) {
	var in operation
	if decode(w, r, &in) {
		res, err := f.s.Refund(r, in.TransID, in.payment(), in.Amount)
		opAnswer(w, in.TransID, res, err)
	}
}

func opAnswer(w http.ResponseWriter, transID string, res sim.OpResult, err error) {
	switch {
	case err == nil:
		write(w, http.StatusOK, "000", view(transID, res.Tx), "")
	case errors.Is(err, sim.ErrNotFound):
		write(w, http.StatusNotFound, "120", answer{TransID: transID}, "")
	case errors.Is(err, sim.ErrAmount):
		write(w, http.StatusBadRequest, "203", view(transID, res.Tx), err.Error())
	default:
		write(w, http.StatusConflict, "202", view(transID, res.Tx), err.Error())
	}
}

type inquiry struct {
	TransID string `json:"transID"`
}

func (f *fake) inquiry(w http.ResponseWriter, r *http.Request) {
	var in inquiry
	if !decode(w, r, &in) {
		return
	}
	t, ok := f.s.Ledger().Lookup(in.TransID)
	if !ok || in.TransID == "" || t.Reference != in.TransID {
		write(w, http.StatusNotFound, "120", answer{TransID: in.TransID}, "")
		return
	}
	write(w, http.StatusOK, "000", view(in.TransID, t), "")
}

// Tranglo's callback (docs/gateways.md, Gateway webhooks): once a pending payment is final,
// Tranglo POSTs {"notificationType": "PAYMENT_STATUS", "notificationID", ...} with the payment as
// transaction-inquiry shows it, signed in X-Tranglo-Signature: the lowercase hex of
// HMAC-SHA512(secret, body + X-Tranglo-Timestamp), the timestamp in Unix milliseconds.

// Tranglo's callback headers.
const (
	SignatureHeader = "X-Tranglo-Signature"
	TimestampHeader = "X-Tranglo-Timestamp"
)

// notification is Tranglo's callback body: the payment's inquiry answer, named.
type notification struct {
	NotificationType string `json:"notificationType"`
	NotificationID   string `json:"notificationID"`
	answer
}

// settled calls back for a pending payment made final.
func (f *fake) settled(t sim.Tx) {
	a := view(t.Reference, t)
	a.ResponseCode, a.ResponseDesc = "000", descriptions["000"]
	body, err := json.Marshal(notification{NotificationType: "PAYMENT_STATUS", NotificationID: "TGN" + t.ID, answer: a})
	if err != nil {
		return
	}
	f.s.Notify(body, Sign)
}

// Sign is Tranglo's signature of a callback body with secret at now: its two headers.
func Sign(body []byte, secret string, now time.Time) http.Header {
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	mac := hmac.New(sha512.New, []byte(secret))
	mac.Write(body)
	mac.Write([]byte(ts))
	h := http.Header{}
	h.Set(TimestampHeader, ts)
	h.Set(SignatureHeader, hex.EncodeToString(mac.Sum(nil)))
	return h
}
