package tranglo

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
)

// Tranglo's callback (docs/gateways.md, Gateway webhooks): once a pending payment is final,
// Tranglo POSTs {"notificationType": "PAYMENT_STATUS", "notificationID": "...", "transID": ...,
// "gloRefNo": ..., "transStatus": ..., ...} with X-Tranglo-Timestamp (Unix milliseconds) and
// X-Tranglo-Signature: the lowercase hex of HMAC-SHA512(secret, body + timestamp).

// Tranglo's callback headers.
const (
	SignatureHeader = "X-Tranglo-Signature"
	TimestampHeader = "X-Tranglo-Timestamp"
)

var _ payrouter.WebhookVerifier = (*Client)(nil)

type notification struct {
	NotificationType string `json:"notificationType"`
	NotificationID   string `json:"notificationID"`
	TransID          string `json:"transID"`
	GloRefNo         string `json:"gloRefNo"`
	TransStatus      string `json:"transStatus"`
}

// VerifyWebhook verifies a Tranglo callback and reads the payment it names
// (payrouter.WebhookVerifier).
func (c *Client) VerifyWebhook(header http.Header, body []byte, keys payrouter.WebhookKeys, now time.Time) (payrouter.GatewayEvent, error) {
	return verifyWebhook(header, body, keys, now)
}

func verifyWebhook(header http.Header, body []byte, keys payrouter.WebhookKeys, now time.Time) (payrouter.GatewayEvent, error) {
	ts, sig := header.Get(TimestampHeader), header.Get(SignatureHeader)
	if ts == "" || sig == "" {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: %s and %s are required", payrouter.ErrWebhookSignature, TimestampHeader, SignatureHeader)
	}
	ms, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: %s is not Unix milliseconds", payrouter.ErrWebhookSignature, TimestampHeader)
	}
	mac, err := hex.DecodeString(sig)
	if err != nil {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: %s is not hex", payrouter.ErrWebhookSignature, SignatureHeader)
	}
	if !gatewayhttp.AnyMAC(keys.Secrets, [][]byte{mac}, func(secret []byte) []byte {
		h := hmac.New(sha512.New, secret)
		h.Write(body)
		h.Write([]byte(ts))
		return h.Sum(nil)
	}) {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: %s matches no configured secret", payrouter.ErrWebhookSignature, SignatureHeader)
	}
	if err := gatewayhttp.Fresh(time.UnixMilli(ms), now, keys.Tolerance); err != nil {
		return payrouter.GatewayEvent{}, err
	}
	var n notification
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&n); err != nil || dec.More() {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: not a Tranglo notification object", payrouter.ErrWebhookForm)
	}
	if n.NotificationType == "" {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: no notificationType", payrouter.ErrWebhookForm)
	}
	ev := payrouter.GatewayEvent{ID: n.NotificationID, Type: n.NotificationType}
	if n.NotificationType != "PAYMENT_STATUS" {
		return ev, nil // not one payrouter acts on
	}
	if n.TransID == "" && n.GloRefNo == "" {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: a PAYMENT_STATUS notification naming no payment", payrouter.ErrWebhookForm)
	}
	ev.Reference, ev.GatewayReference = n.TransID, n.GloRefNo
	ev.Settles = n.TransStatus != "PENDING"
	return ev, nil
}
