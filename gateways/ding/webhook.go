package ding

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
)

// Ding's callback (docs/gateways.md, Gateway webhooks): once a transfer that was Submitted or
// Processing is Completed or Failed, Ding POSTs
//
//	{"EventType": "TransferStateChanged", "EventId": "...", "TransferRecord": {...}}
//
// with X-Ding-Timestamp (RFC 3339) and X-Ding-Signature: "sha256=" and the standard base64 of
// HMAC-SHA256(secret, timestamp + "\n" + body).

// Ding's callback headers.
const (
	SignatureHeader = "X-Ding-Signature"
	TimestampHeader = "X-Ding-Timestamp"
)

var _ payrouter.WebhookVerifier = (*Client)(nil)

type event struct {
	EventType      string          `json:"EventType"`
	EventID        string          `json:"EventId"`
	TransferRecord *transferRecord `json:"TransferRecord"`
}

// VerifyWebhook verifies a Ding callback and reads the transfer it names
// (payrouter.WebhookVerifier).
func (c *Client) VerifyWebhook(header http.Header, body []byte, keys payrouter.WebhookKeys, now time.Time) (payrouter.GatewayEvent, error) {
	return verifyWebhook(header, body, keys, now)
}

func verifyWebhook(header http.Header, body []byte, keys payrouter.WebhookKeys, now time.Time) (payrouter.GatewayEvent, error) {
	ts, sig := header.Get(TimestampHeader), header.Get(SignatureHeader)
	if ts == "" || sig == "" {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: %s and %s are required", payrouter.ErrWebhookSignature, TimestampHeader, SignatureHeader)
	}
	signed, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: %s is not an RFC 3339 time", payrouter.ErrWebhookSignature, TimestampHeader)
	}
	raw, ok := strings.CutPrefix(sig, "sha256=")
	mac, err := base64.StdEncoding.DecodeString(raw)
	if !ok || err != nil {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: %s is not sha256=<base64>", payrouter.ErrWebhookSignature, SignatureHeader)
	}
	if !gatewayhttp.AnyMAC(keys.Secrets, [][]byte{mac}, func(secret []byte) []byte {
		h := hmac.New(sha256.New, secret)
		h.Write([]byte(ts + "\n"))
		h.Write(body)
		return h.Sum(nil)
	}) {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: %s matches no configured secret", payrouter.ErrWebhookSignature, SignatureHeader)
	}
	if err := gatewayhttp.Fresh(signed, now, keys.Tolerance); err != nil {
		return payrouter.GatewayEvent{}, err
	}
	var e event
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&e); err != nil || dec.More() {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: not a Ding event object", payrouter.ErrWebhookForm)
	}
	if e.EventType == "" {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: no EventType", payrouter.ErrWebhookForm)
	}
	ev := payrouter.GatewayEvent{ID: e.EventID, Type: e.EventType}
	if e.EventType != "TransferStateChanged" {
		return ev, nil // not one payrouter acts on
	}
	if e.TransferRecord == nil || e.TransferRecord.TransferID.DistributorRef == "" && e.TransferRecord.TransferID.TransferRef == "" {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: a TransferStateChanged event naming no transfer", payrouter.ErrWebhookForm)
	}
	ev.Reference, ev.GatewayReference = e.TransferRecord.TransferID.DistributorRef, e.TransferRecord.TransferID.TransferRef
	// Only a transfer no longer under way is worth a look-up.
	ev.Settles = e.TransferRecord.ProcessingState != "Submitted" && e.TransferRecord.ProcessingState != "Processing"
	return ev, nil
}
