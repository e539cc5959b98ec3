package ding

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/ding/dingsim"
)

// The Ding webhook verifier against what its simulator signs (dingsim.Sign): a separate
// implementation of the same documented scheme.

var webhookKeys = payrouter.WebhookKeys{Secrets: []string{"ding_old_secret", "ding_new_secret"}, Tolerance: 5 * time.Minute}

func TestVerifyWebhook(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	good := []byte(`{"EventType":"TransferStateChanged","EventId":"DEV-D-1","TransferRecord":{"TransferId":{"TransferRef":"D-000001","DistributorRef":"ch_x-a1"},"ProcessingState":"Completed","SettlementState":"Settled"}}`)
	signed := func(body []byte, secret string, at time.Time) http.Header { return dingsim.Sign(body, secret, at) }
	cases := []struct {
		name    string
		header  http.Header
		body    []byte
		wantErr error
		want    payrouter.GatewayEvent
	}{
		{"good", signed(good, "ding_old_secret", now), good, nil, payrouter.GatewayEvent{ID: "DEV-D-1", Type: "TransferStateChanged", Reference: "ch_x-a1", GatewayReference: "D-000001", Settles: true}},
		{"the rotated secret", signed(good, "ding_new_secret", now.Add(-time.Minute)), good, nil, payrouter.GatewayEvent{ID: "DEV-D-1", Type: "TransferStateChanged", Reference: "ch_x-a1", GatewayReference: "D-000001", Settles: true}},
		{"another secret", signed(good, "not_ours", now), good, payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
		{"stale", signed(good, "ding_old_secret", now.Add(-6*time.Minute)), good, payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
		{"from the future", signed(good, "ding_old_secret", now.Add(6*time.Minute)), good, payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
		{"no headers", http.Header{}, good, payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
		{"body changed", signed(good, "ding_old_secret", now), append([]byte(" "), good...), payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
		{"signed garbage", signed([]byte("not json"), "ding_old_secret", now), []byte("not json"), payrouter.ErrWebhookForm, payrouter.GatewayEvent{}},
		{"signed, two objects", signed([]byte(`{} {}`), "ding_old_secret", now), []byte(`{} {}`), payrouter.ErrWebhookForm, payrouter.GatewayEvent{}},
		{"signed, another type", signed([]byte(`{"EventType":"BalanceLow","EventId":"E2"}`), "ding_old_secret", now), []byte(`{"EventType":"BalanceLow","EventId":"E2"}`), nil, payrouter.GatewayEvent{ID: "E2", Type: "BalanceLow"}},
		{"still pending", signed([]byte(`{"EventType":"TransferStateChanged","EventId":"E3","TransferRecord":{"TransferId":{"TransferRef":"D-2","DistributorRef":"ch_y-a2"},"ProcessingState":"Processing"}}`), "ding_old_secret", now), []byte(`{"EventType":"TransferStateChanged","EventId":"E3","TransferRecord":{"TransferId":{"TransferRef":"D-2","DistributorRef":"ch_y-a2"},"ProcessingState":"Processing"}}`), nil, payrouter.GatewayEvent{ID: "E3", Type: "TransferStateChanged", Reference: "ch_y-a2", GatewayReference: "D-2"}},
		{"no transfer", signed([]byte(`{"EventType":"TransferStateChanged"}`), "ding_old_secret", now), []byte(`{"EventType":"TransferStateChanged"}`), payrouter.ErrWebhookForm, payrouter.GatewayEvent{}},
		{"signature not base64", http.Header{"X-Ding-Timestamp": {now.Format(time.RFC3339)}, "X-Ding-Signature": {"sha256=%%%"}}, good, payrouter.ErrWebhookSignature, payrouter.GatewayEvent{}},
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
	f.Add([]byte(`{"EventType":"TransferStateChanged","EventId":"DEV-D-1","TransferRecord":{"TransferId":{"TransferRef":"D-000001","DistributorRef":"ch_x-a1"},"ProcessingState":"Completed","SettlementState":"Settled"}}`), "", true)
	f.Add([]byte(`{"EventType":"BalanceLow","EventId":"E2"}`), "", true)
	f.Add([]byte("not json"), "", false)
	f.Add([]byte(`{"x":1}`), "sha256=AAAA", false)
	f.Fuzz(func(t *testing.T, body []byte, sig string, sign bool) {
		h := http.Header{}
		if sign {
			h = dingsim.Sign(body, "ding_old_secret", now)
		} else {
			for k, v := range dingsim.Sign(body, "not_ours", now) {
				h[k] = v
			}
			if sig != "" {
				h.Set("X-Ding-Signature", sig)
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
