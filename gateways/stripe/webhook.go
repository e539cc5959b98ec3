package stripe

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
)

// Stripe's webhooks (docs/gateways.md, Gateway webhooks): an Event object, signed in
// Stripe-Signature: "t=<Unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>", with one v1
// per secret of the endpoint while one is being rolled, keyed with the whole secret
// ("whsec_..."). Stripe's own libraries verify it this way, with 5 minutes' tolerance.

// SignatureHeader is the header Stripe signs its webhook events in.
const SignatureHeader = "Stripe-Signature"

var _ payrouter.WebhookVerifier = (*Client)(nil)

// settlingEvents are the events that say a PaymentIntent (or its charge) reached a state worth a
// look-up; every other, payment_intent.created and .processing among them, changes nothing.
var settlingEvents = map[string]bool{
	"payment_intent.succeeded":                 true,
	"payment_intent.amount_capturable_updated": true,
	"payment_intent.payment_failed":            true,
	"payment_intent.canceled":                  true,
	"charge.succeeded":                         true,
	"charge.failed":                            true,
	"charge.captured":                          true,
}

type webhookEvent struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Type   string `json:"type"`
	Data   struct {
		Object *struct {
			ID            string            `json:"id"`
			Object        string            `json:"object"`
			TransferGroup *string           `json:"transfer_group"`
			Metadata      map[string]string `json:"metadata"`
			PaymentIntent *string           `json:"payment_intent"`
		} `json:"object"`
	} `json:"data"`
}

// VerifyWebhook verifies a Stripe webhook and reads the PaymentIntent or charge it is about
// (payrouter.WebhookVerifier).
func (c *Client) VerifyWebhook(header http.Header, body []byte, keys payrouter.WebhookKeys, now time.Time) (payrouter.GatewayEvent, error) {
	return verifyWebhook(header, body, keys, now)
}

func verifyWebhook(header http.Header, body []byte, keys payrouter.WebhookKeys, now time.Time) (payrouter.GatewayEvent, error) {
	sig := header.Get(SignatureHeader)
	if sig == "" {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: no %s header", payrouter.ErrWebhookSignature, SignatureHeader)
	}
	var (
		ts   string
		macs [][]byte
	)
	for _, part := range strings.Split(sig, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			if mac, err := hex.DecodeString(v); err == nil {
				macs = append(macs, mac)
			}
		}
	}
	if ts == "" || len(macs) == 0 {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: %s has no t= or no v1= signature", payrouter.ErrWebhookSignature, SignatureHeader)
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: %s t= is not Unix seconds", payrouter.ErrWebhookSignature, SignatureHeader)
	}
	if !gatewayhttp.AnyMAC(keys.Secrets, macs, func(secret []byte) []byte {
		h := hmac.New(sha256.New, secret)
		h.Write([]byte(ts + "."))
		h.Write(body)
		return h.Sum(nil)
	}) {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: no v1 signature of %s matches a configured secret", payrouter.ErrWebhookSignature, SignatureHeader)
	}
	if err := gatewayhttp.Fresh(time.Unix(secs, 0), now, keys.Tolerance); err != nil {
		return payrouter.GatewayEvent{}, err
	}
	var e webhookEvent
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&e); err != nil || dec.More() || e.Object != "event" || e.Type == "" {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: not a Stripe Event object", payrouter.ErrWebhookForm)
	}
	ev := payrouter.GatewayEvent{ID: e.ID, Type: e.Type}
	o := e.Data.Object
	if o == nil {
		return payrouter.GatewayEvent{}, fmt.Errorf("%w: an Event without data.object", payrouter.ErrWebhookForm)
	}
	switch o.Object {
	case "payment_intent":
		ev.GatewayReference = o.ID
	case "charge":
		if o.PaymentIntent != nil {
			ev.GatewayReference = *o.PaymentIntent
		}
	default:
		return ev, nil // about something payrouter does not keep
	}
	// The reference payrouter sent: in metadata, and as the transfer group.
	ev.Reference = o.Metadata["payrouter_reference"]
	if ev.Reference == "" && o.TransferGroup != nil {
		ev.Reference = *o.TransferGroup
	}
	ev.Settles = settlingEvents[e.Type] && ev.Reference != ""
	return ev, nil
}
