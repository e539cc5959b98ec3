package gatewayhttp

import (
	"crypto/hmac"
	"fmt"
	"time"

	"github.com/payrouter/payrouter"
)

// What every adapter's webhook verifier (payrouter.WebhookVerifier) shares: the timestamp's
// tolerance and the constant-time comparison against each secret.

// Fresh checks that a call signed at signed is within tolerance of now, either way; the error
// wraps payrouter.ErrWebhookSignature.
func Fresh(signed, now time.Time, tolerance time.Duration) error {
	d := now.Sub(signed)
	if d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed at %s, %s from now, beyond the tolerance of %s", payrouter.ErrWebhookSignature,
			signed.UTC().Format(time.RFC3339), d.Round(time.Second), tolerance)
	}
	return nil
}

// AnyMAC reports whether one of sigs is mac(secret) for one of secrets. Every pair is compared,
// each with hmac.Equal, so how long it takes says nothing of which secret or how much of a
// signature matched.
func AnyMAC(secrets []string, sigs [][]byte, mac func(secret []byte) []byte) bool {
	found := false
	for _, s := range secrets {
		want := mac([]byte(s))
		for _, sig := range sigs {
			if hmac.Equal(want, sig) {
				found = true
			}
		}
	}
	return found
}
