// Package dingsim is a fake Ding, a DingConnect-like API: JSON requests with an `api_key` header,
// and, whatever happened, HTTP 200 with a ResultCode (1 success, 2 failure) and ErrorCodes
// [{Code, Context}] in the body. Every request carries a DistributorRef that must be unique.
//
//	POST /api/V1/SendTransfer          a charge; DistributorRef is payrouter's reference
//	POST /api/V1/ListTransferRecords   look-up by DistributorRef: Items is empty when there is none
//	POST /api/V1/SettleTransfer        capture
//	POST /api/V1/CancelTransfer        void
//	POST /api/V1/RefundTransfer        refund
//
// A transfer is named by TransferRef (Ding's id) or, failing that, OriginalDistributorRef. A
// repeated DistributorRef with the same details answers the existing transfer again; with other
// details it is refused with RepeatedDistributorRef. Declines are ProviderRefusedRequest; "not
// processed, retry later" is ProviderUnavailable.
package dingsim

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/payrouter/payrouter/gateways/sim"
)

// DeclineReason is the reason given for every decline.
const DeclineReason = "DoNotHonour"

// New returns a fake Ding in normal mode with an empty ledger.
func New() *sim.Server {
	f := &fake{}
	s := sim.New(sim.Config{Name: "ding", TxPrefix: "D-", OpPrefix: "DOP-", Unavailable: unavailable, OnSettle: f.settled})
	f.s = s
	s.Handle("POST /api/V1/SendTransfer", f.authenticated(f.sendTransfer))
	s.Handle("POST /api/V1/ListTransferRecords", f.authenticated(f.listTransferRecords))
	s.Handle("POST /api/V1/SettleTransfer", f.authenticated(f.settleTransfer))
	s.Handle("POST /api/V1/CancelTransfer", f.authenticated(f.cancelTransfer))
	s.Handle("POST /api/V1/RefundTransfer", f.authenticated(f.refundTransfer))
	return s
}

type fake struct{ s *sim.Server }

type errorCode struct {
	Code    string `json:"Code"`
	Context string `json:"Context"`
}

type transferID struct {
	TransferRef    string `json:"TransferRef"`
	DistributorRef string `json:"DistributorRef"`
}

type price struct {
	SendValue       int64  `json:"SendValue"`
	SendCurrencyIso string `json:"SendCurrencyIso"`
}

// transferRecord is Ding's view of a transfer. SendValue is in minor units.
type transferRecord struct {
	TransferID      transferID `json:"TransferId"`
	SkuCode         string     `json:"SkuCode"`
	Price           price      `json:"Price"`
	ProcessingState string     `json:"ProcessingState"` // Submitted, Processing, Completed, Failed
	SettlementState string     `json:"SettlementState"` // Authorized, Settled, Cancelled, Refunded, PartiallyRefunded
	RefundedValue   int64      `json:"RefundedValue"`
	DeclineReason   string     `json:"DeclineReason,omitempty"`
	CompletedUtc    string     `json:"CompletedUtc"`
}

type envelope struct {
	TransferRecord *transferRecord   `json:"TransferRecord,omitempty"`
	Items          *[]transferRecord `json:"Items,omitempty"` // a look-up's, [] when none
	ResultCode     int               `json:"ResultCode"`
	ErrorCodes     []errorCode       `json:"ErrorCodes"`
}

func ok(w http.ResponseWriter, e envelope) {
	e.ResultCode = 1
	if e.ErrorCodes == nil {
		e.ErrorCodes = []errorCode{}
	}
	sim.WriteJSON(w, http.StatusOK, e)
}

// failed is Ding's way to refuse anything: still HTTP 200, with ResultCode 2 and the codes.
func failed(w http.ResponseWriter, rec *transferRecord, codes ...errorCode) {
	sim.WriteJSON(w, http.StatusOK, envelope{TransferRecord: rec, ResultCode: 2, ErrorCodes: codes})
}

// unavailable is Ding's "the provider is unavailable, the transfer was not submitted".
func unavailable(w http.ResponseWriter, _ *http.Request) {
	failed(w, nil, errorCode{Code: "ProviderUnavailable", Context: "Retry later; the transfer was not submitted"})
}

// authenticated refuses calls without an api_key header with a bare 401, as Ding's front door
// does before any ResultCode is involved.
func (f *fake) authenticated(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if strings.TrimSpace(r.Header.Get("api_key")) == "" {
			http.Error(w, "missing api_key header", http.StatusUnauthorized)
			return
		}
		h(w, r)
	}
}

func record(t sim.Tx) *transferRecord {
	rec := &transferRecord{
		TransferID:      transferID{TransferRef: t.ID, DistributorRef: t.Reference},
		SkuCode:         "CARD",
		Price:           price{SendValue: t.Amount, SendCurrencyIso: t.Currency},
		ProcessingState: "Completed",
		RefundedValue:   t.Refunded,
		CompletedUtc:    time.Now().UTC().Format(time.RFC3339),
	}
	switch t.Status {
	case sim.StatusPending:
		rec.ProcessingState, rec.CompletedUtc = "Processing", ""
	case sim.StatusDeclined:
		rec.ProcessingState, rec.DeclineReason = "Failed", t.DeclineCode
	case sim.StatusAuthorized:
		rec.SettlementState = "Authorized"
	case sim.StatusCaptured:
		rec.SettlementState = "Settled"
	case sim.StatusVoided:
		rec.SettlementState = "Cancelled"
	case sim.StatusRefunded:
		rec.SettlementState = "Refunded"
	case sim.StatusPartiallyRefunded:
		rec.SettlementState = "PartiallyRefunded"
	}
	return rec
}

// decode reads a JSON request strictly; it answers InvalidParameter itself when it cannot.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		failed(w, nil, errorCode{Code: "InvalidParameter", Context: "body: " + err.Error()})
		return false
	}
	return true
}

type setting struct {
	Name  string `json:"Name"`
	Value string `json:"Value"`
}

type sendTransfer struct {
	SkuCode         string    `json:"SkuCode"`
	SendValue       int64     `json:"SendValue"`
	SendCurrencyIso string    `json:"SendCurrencyIso"`
	AccountNumber   string    `json:"AccountNumber"`
	DistributorRef  string    `json:"DistributorRef"`
	ValidateOnly    bool      `json:"ValidateOnly"`
	AuthorizeOnly   bool      `json:"AuthorizeOnly"`
	Settings        []setting `json:"Settings"`
}

func (f *fake) sendTransfer(w http.ResponseWriter, r *http.Request) {
	var in sendTransfer
	if !decode(w, r, &in) {
		return
	}
	switch {
	case in.DistributorRef == "":
		failed(w, nil, errorCode{Code: "InvalidParameter", Context: "DistributorRef"})
		return
	case in.SendValue <= 0 || in.SendValue > 1e12:
		failed(w, nil, errorCode{Code: "InvalidParameter", Context: "SendValue"})
		return
	case len(in.SendCurrencyIso) != 3:
		failed(w, nil, errorCode{Code: "InvalidParameter", Context: "SendCurrencyIso"})
		return
	case in.AccountNumber == "":
		failed(w, nil, errorCode{Code: "AccountNumberInvalid", Context: "AccountNumber"})
		return
	}
	n := sim.NewTx{
		Reference: in.DistributorRef, Amount: in.SendValue, Currency: strings.ToUpper(in.SendCurrencyIso),
		Capture:     !in.AuthorizeOnly,
		Fingerprint: fmt.Sprint(in.SendValue, strings.ToUpper(in.SendCurrencyIso), in.AuthorizeOnly, in.AccountNumber),
	}
	if in.ValidateOnly {
		ok(w, envelope{})
		return
	}
	if f.s.Declines(in.AccountNumber) {
		n.Decline = DeclineReason
	}
	t, created := f.s.Create(r, n)
	if !created && t.Fingerprint != n.Fingerprint {
		failed(w, nil, errorCode{Code: "RepeatedDistributorRef", Context: "DistributorRef"})
		return
	}
	if t.Status == sim.StatusDeclined {
		failed(w, record(t), errorCode{Code: "ProviderRefusedRequest", Context: t.DeclineCode})
		return
	}
	ok(w, envelope{TransferRecord: record(t)})
}

type listTransferRecords struct {
	DistributorRef string `json:"DistributorRef"`
	TransferRef    string `json:"TransferRef"`
	Take           int    `json:"Take"`
}

func (f *fake) listTransferRecords(w http.ResponseWriter, r *http.Request) {
	var in listTransferRecords
	if !decode(w, r, &in) {
		return
	}
	items := []transferRecord{}
	if t, found := f.s.Ledger().Lookup(in.DistributorRef); found && in.DistributorRef != "" && t.Reference == in.DistributorRef {
		items = append(items, *record(t))
	} else if t, found := f.s.Ledger().Lookup(in.TransferRef); found && in.TransferRef != "" && t.ID == in.TransferRef {
		items = append(items, *record(t))
	}
	ok(w, envelope{Items: &items})
}

// operation is the body of SettleTransfer, CancelTransfer and RefundTransfer.
type operation struct {
	DistributorRef         string `json:"DistributorRef"`
	TransferRef            string `json:"TransferRef"`
	OriginalDistributorRef string `json:"OriginalDistributorRef"`
	SendValue              int64  `json:"SendValue"`
	RefundValue            int64  `json:"RefundValue"`
}

func (o operation) transfer() string {
	if o.TransferRef != "" {
		return o.TransferRef
	}
	return o.OriginalDistributorRef
}

func (f *fake) settleTransfer(w http.ResponseWriter, r *http.Request) {
	var in operation
	if decode(w, r, &in) {
		res, err := f.s.Ledger().Capture(in.DistributorRef, in.transfer(), in.SendValue)
		answer(w, res, err)
	}
}

func (f *fake) cancelTransfer(w http.ResponseWriter, r *http.Request) {
	var in operation
	if decode(w, r, &in) {
		res, err := f.s.Ledger().Void(in.DistributorRef, in.transfer())
		answer(w, res, err)
	}
}

func (f *fake) refundTransfer(w http.ResponseWriter, r *http.Request) {
	var in operation
	if decode(w, r, &in) {
		res, err := f.s.Refund(r, in.DistributorRef, in.transfer(), in.RefundValue)
		answer(w, res, err)
	}
}

func answer(w http.ResponseWriter, res sim.OpResult, err error) {
	switch {
	case err == nil:
		ok(w, envelope{TransferRecord: record(res.Tx)})
	case errors.Is(err, sim.ErrNotFound):
		failed(w, nil, errorCode{Code: "TransferNotFound", Context: err.Error()})
	case errors.Is(err, sim.ErrAmount):
		failed(w, record(res.Tx), errorCode{Code: "InvalidValue", Context: err.Error()})
	default:
		failed(w, record(res.Tx), errorCode{Code: "InvalidTransferState", Context: err.Error()})
	}
}

// Ding's callback (docs/gateways.md, Gateway webhooks): once a pending transfer is Completed or
// Failed, Ding POSTs {"EventType": "TransferStateChanged", "EventId", "TransferRecord"} with the
// transfer's record as ListTransferRecords shows it, signed in X-Ding-Signature: "sha256=" and
// the standard base64 of HMAC-SHA256(secret, X-Ding-Timestamp + "\n" + body), the timestamp in
// RFC 3339, UTC.

// Ding's callback headers.
const (
	SignatureHeader = "X-Ding-Signature"
	TimestampHeader = "X-Ding-Timestamp"
)

// Event is Ding's callback body.
type Event struct {
	EventType      string          `json:"EventType"`
	EventID        string          `json:"EventId"`
	TransferRecord *transferRecord `json:"TransferRecord"`
}

// settled calls back for a pending transfer made final.
func (f *fake) settled(t sim.Tx) {
	body, err := json.Marshal(Event{EventType: "TransferStateChanged", EventID: "DEV-" + t.ID, TransferRecord: record(t)})
	if err != nil {
		return
	}
	f.s.Notify(body, Sign)
}

// Sign is Ding's signature of a callback body with secret at now: its two headers.
func Sign(body []byte, secret string, now time.Time) http.Header {
	ts := now.UTC().Format(time.RFC3339)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "\n"))
	mac.Write(body)
	h := http.Header{}
	h.Set(TimestampHeader, ts)
	h.Set(SignatureHeader, "sha256="+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	return h
}
