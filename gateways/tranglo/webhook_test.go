package tranglo

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/tranglo/tranglosim"
)

// The Tranglo webhook verifier against what its simulator signs (tranglosim.Sign): a separate
// implementation of the same documented scheme.

var webhookKeys = payrouter.WebhookKeys{Secrets: []string{"tg_old_secret", "tg_new_secret"}, Tolerance: 5 * time.Minute}

func TestVerifyWebhook(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	good := []byte(`{"notificationType":"PAYMENT_STATUS","notificationID":"TGNTG1","responseCode":"000","transID":"ch_x-a1","gloRefNo":"TG000001","transStatus":"CAPTURED"}`)
	signed := func(body []byte, secret string, at time.Time) http.Header { return tranglosim.Sign(body, secret, at) }
	cases := []struct {
		name    string
		header  http.Header
		body    []byte
		wantErr error
		want    payrouter.GatewayEvent
	}{
		{"good", signed(good, "tg_old_secret", now), good, nil, payrouter.GatewayEvent{ID: "TGNTG1", Type: "PAYMENT_STATUS", Reference: "ch_x-a1", GatewayReference: "TG000001", Settles: true}},
		{"the rotated secret", signed(good, "tg_new_secret", now.Add(-time.Minute)), good, nil, payrouter.GatewayEvent{ID: "TGNTG1", Type: "PAYMENT_STATUS", Reference: "ch_x-a1", GatewayReference: "TG000001", Settles: true}},
		{"another secret", signed(good, "not_ours", now), good, payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
		{"stale", signed(good, "tg_old_secret", now.Add(-6*time.Minute)), good, payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
		{"from the future", signed(good, "tg_old_secret", now.Add(6*time.Minute)), good, payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
		{"no headers", http.Header{}, good, payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
		{"body changed", signed(good, "tg_old_secret", now), append([]byte(" "), good...), payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
		{"signed garbage", signed([]byte("not json"), "tg_old_secret", now), []byte("not json"), payrouter.ErrWebhookForm, payrouter.GatewayEvent{}},
		{"signed, two objects", signed([]byte(`{} {}`), "tg_old_secret", now), []byte(`{} {}`), payrouter.ErrWebhookForm, payrouter.GatewayEvent{}},
		{"signed, another type", signed([]byte(`{"notificationType":"SETTLEMENT_REPORT","notificationID":"N2"}`), "tg_old_secret", now), []byte(`{"notificationType":"SETTLEMENT_REPORT","notificationID":"N2"}`), nil, payrouter.GatewayEvent{ID: "N2", Type: "SETTLEMENT_REPORT"}},
		{"still pending", signed([]byte(`{"notificationType":"PAYMENT_STATUS","notificationID":"N3","transID":"ch_y-a2","gloRefNo":"TG2","transStatus":"PENDING"}`), "tg_old_secret", now), []byte(`{"notificationType":"PAYMENT_STATUS","notificationID":"N3","transID":"ch_y-a2","gloRefNo":"TG2","transStatus":"PENDING"}`), nil, payrouter.GatewayEvent{ID: "N3", Type: "PAYMENT_STATUS", Reference: "ch_y-a2", GatewayReference: "TG2"}},
		{"no payment", signed([]byte(`{"notificationType":"PAYMENT_STATUS"}`), "tg_old_secret", now), []byte(`{"notificationType":"PAYMENT_STATUS"}`), payrouter.ErrWebhookForm, payrouter.GatewayEvent{}},
		{"signature not hex", http.Header{"X-Tranglo-Timestamp": {"1"}, "X-Tranglo-Signature": {"zz"}}, good, payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
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
	f.Add([]byte(`{"notificationType":"PAYMENT_STATUS","notificationID":"TGNTG1","responseCode":"000","transID":"ch_x-a1","gloRefNo":"TG000001","transStatus":"CAPTURED"}`), "", true)
	f.Add([]byte(`{"notificationType":"SETTLEMENT_REPORT","notificationID":"N2"}`), "", true)
	f.Add([]byte("not json"), "", false)
	f.Add([]byte(`{"x":1}`), "00ff", false)
	f.Fuzz(func(t *testing.T, body []byte, sig string, sign bool) {
		h := http.Header{}
		if sign {
			h = tranglosim.Sign(body, "tg_old_secret", now)
		} else {
			for k, v := range tranglosim.Sign(body, "not_ours", now) {
				h[k] = v
			}
			if sig != "" {
				h.Set("X-Tranglo-Signature", sig)
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
