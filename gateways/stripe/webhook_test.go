package stripe

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/stripe/stripesim"
)

// The Stripe webhook verifier against what its simulator signs (stripesim.Sign): a separate
// implementation of the same documented scheme.

var webhookKeys = payrouter.WebhookKeys{Secrets: []string{"whsec_old_secret", "whsec_new_secret"}, Tolerance: 5 * time.Minute}

func TestVerifyWebhook(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	good := []byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_000001","object":"payment_intent","status":"succeeded","transfer_group":"ch_x-a1","metadata":{"payrouter_reference":"ch_x-a1"}}}}`)
	signed := func(body []byte, secret string, at time.Time) http.Header { return stripesim.Sign(body, secret, at) }
	cases := []struct {
		name    string
		header  http.Header
		body    []byte
		wantErr error
		want    payrouter.GatewayEvent
	}{
		{"good", signed(good, "whsec_old_secret", now), good, nil, payrouter.GatewayEvent{ID: "evt_1", Type: "payment_intent.succeeded", Reference: "ch_x-a1", GatewayReference: "pi_000001", Settles: true}},
		{"the rotated secret", signed(good, "whsec_new_secret", now.Add(-time.Minute)), good, nil, payrouter.GatewayEvent{ID: "evt_1", Type: "payment_intent.succeeded", Reference: "ch_x-a1", GatewayReference: "pi_000001", Settles: true}},
		{"another secret", signed(good, "whsec_not_ours", now), good, payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
		{"stale", signed(good, "whsec_old_secret", now.Add(-6*time.Minute)), good, payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
		{"from the future", signed(good, "whsec_old_secret", now.Add(6*time.Minute)), good, payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
		{"no headers", http.Header{}, good, payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
		{"body changed", signed(good, "whsec_old_secret", now), append([]byte(" "), good...), payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
		{"signed garbage", signed([]byte("not json"), "whsec_old_secret", now), []byte("not json"), payrouter.ErrWebhookForm, payrouter.GatewayEvent{}},
		{"signed, two objects", signed([]byte(`{} {}`), "whsec_old_secret", now), []byte(`{} {}`), payrouter.ErrWebhookForm, payrouter.GatewayEvent{}},
		{"signed, another type", signed([]byte(`{"id":"evt_2","object":"event","type":"customer.created","data":{"object":{"id":"cus_1","object":"customer"}}}`), "whsec_old_secret", now), []byte(`{"id":"evt_2","object":"event","type":"customer.created","data":{"object":{"id":"cus_1","object":"customer"}}}`), nil, payrouter.GatewayEvent{ID: "evt_2", Type: "customer.created"}},
		{"still pending", signed([]byte(`{"id":"evt_3","object":"event","type":"payment_intent.processing","data":{"object":{"id":"pi_2","object":"payment_intent","transfer_group":"ch_y-a2","metadata":{}}}}`), "whsec_old_secret", now), []byte(`{"id":"evt_3","object":"event","type":"payment_intent.processing","data":{"object":{"id":"pi_2","object":"payment_intent","transfer_group":"ch_y-a2","metadata":{}}}}`), nil, payrouter.GatewayEvent{ID: "evt_3", Type: "payment_intent.processing", Reference: "ch_y-a2", GatewayReference: "pi_2"}},
		{"a charge event", signed([]byte(`{"id":"evt_4","object":"event","type":"charge.refunded","data":{"object":{"id":"ch_1","object":"charge","payment_intent":"pi_1","transfer_group":"ch_z-a1"}}}`), "whsec_old_secret", now),
			[]byte(`{"id":"evt_4","object":"event","type":"charge.refunded","data":{"object":{"id":"ch_1","object":"charge","payment_intent":"pi_1","transfer_group":"ch_z-a1"}}}`), nil,
			payrouter.GatewayEvent{ID: "evt_4", Type: "charge.refunded", Reference: "ch_z-a1", GatewayReference: "pi_1"}},
		{"not an event", signed([]byte(`{"id":"pi_1","object":"payment_intent"}`), "whsec_old_secret", now), []byte(`{"id":"pi_1","object":"payment_intent"}`), payrouter.ErrWebhookForm, payrouter.GatewayEvent{}},
		{"both secrets' signatures, one ours", func() http.Header {
			h := signed(good, "whsec_not_ours", now)
			h.Set("Stripe-Signature", h.Get("Stripe-Signature")+","+strings.SplitN(signed(good, "whsec_new_secret", now).Get("Stripe-Signature"), ",", 2)[1])
			return h
		}(), good, nil, payrouter.GatewayEvent{ID: "evt_1", Type: "payment_intent.succeeded", Reference: "ch_x-a1", GatewayReference: "pi_000001", Settles: true}},
		{"no v1", http.Header{"Stripe-Signature": {"t=1800000000"}}, good, payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
		{"v0 only", http.Header{"Stripe-Signature": {"t=1800000000,v0=abcd"}}, good, payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := verifyWebhook(tc.header, tc.body, webhookKeys, now)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("event = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// FuzzVerifyWebhook: whatever the body and signature header, the verifier never panics, and
// accepts only a body signed with a configured secret; a body it signs itself is never refused
// for its signature.
func FuzzVerifyWebhook(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	f.Add([]byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_000001","object":"payment_intent","status":"succeeded","transfer_group":"ch_x-a1","metadata":{"payrouter_reference":"ch_x-a1"}}}}`), "", true)
	f.Add([]byte(`{"id":"evt_2","object":"event","type":"customer.created","data":{"object":{"id":"cus_1","object":"customer"}}}`), "", true)
	f.Add([]byte("not json"), "", false)
	f.Add([]byte(`{"x":1}`), "t=1,v1=00", false)
	f.Fuzz(func(t *testing.T, body []byte, sig string, sign bool) {
		h := http.Header{}
		if sign {
			h = stripesim.Sign(body, "whsec_old_secret", now)
		} else {
			for k, v := range stripesim.Sign(body, "whsec_not_ours", now) {
				h[k] = v
			}
			if sig != "" {
				h.Set("Stripe-Signature", sig)
			}
		}
		_, err := verifyWebhook(h, body, webhookKeys, now)
		switch {
		case sign && errors.Is(err, payrouter.ErrWebhookSignature):
			t.Fatalf("a body signed with a configured secret refused for its signature: %v", err)
		case !sign && !errors.Is(err, payrouter.ErrWebhookSignature):
			t.Fatalf("a body not signed with a configured secret got past the signature: %v", err)
		case err != nil && !errors.Is(err, payrouter.ErrWebhookSignature) && !errors.Is(err, payrouter.ErrWebhookForm):
			t.Fatalf("an error that is neither a signature's nor a form's: %v", err)
		}
	})
}
