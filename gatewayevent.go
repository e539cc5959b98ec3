package payrouter

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Gateway webhooks (docs/webhooks.md, Gateway webhooks in): a gateway calls back when one of its
// transactions changes. The call's signature is its only credential, and what it says is a hint,
// never a verdict: payrouter looks the transaction up, as its reconciler would, and the look-up
// decides.

// GatewayEvent is what a gateway's webhook says, once its signature is verified.
type GatewayEvent struct {
	// ID is the gateway's own id of the event, for logs: a duplicate is harmless either way.
	ID string
	// Type is the gateway's name for the event ("payment_intent.succeeded", "TransferStateChanged").
	Type string
	// Reference is payrouter's reference of the attempt the event names (AttemptReference),
	// "" when it names none that payrouter sent.
	Reference string
	// GatewayReference is the gateway's own id of the transaction, when the event gives it.
	GatewayReference string
	// Settles is true when the event says the transaction may have reached a final state (an
	// approval, a decline, a cancellation): only then is it worth a look-up. Created, processing
	// and other events change nothing.
	Settles bool
}

// WebhookKeys are what verifies one gateway's webhooks: gateways.<name>.webhook.
type WebhookKeys struct {
	// Secrets are the signing secrets, any one of which verifies a call (several while one is
	// rotated).
	Secrets []string
	// Tolerance is how far a call's signed timestamp may be from the receiver's clock, either
	// way, so a captured call cannot be replayed later.
	Tolerance time.Duration
}

// WebhookVerifier is implemented by a Gateway whose gateway calls back. VerifyWebhook checks the
// call's signature (in constant time, against each of keys.Secrets, its timestamp within
// keys.Tolerance of now) before it reads anything of the body, then parses the body. It returns
// an error wrapping ErrWebhookSignature for a missing or wrong signature or a timestamp out of
// tolerance, ErrWebhookForm for a signed body it cannot read; an event of a type it does not
// act on is no error (Settles false).
type WebhookVerifier interface {
	VerifyWebhook(header http.Header, body []byte, keys WebhookKeys, now time.Time) (GatewayEvent, error)
}

// Errors of WebhookVerifier, checked with errors.Is.
var (
	// ErrWebhookSignature: the call is not signed by the gateway with a configured secret
	// within the tolerance.
	ErrWebhookSignature = errors.New("webhook signature")
	// ErrWebhookForm: the call is signed, but not in a form the adapter knows.
	ErrWebhookForm = errors.New("webhook form")
)

// ChargeOfReference returns the charge id and the attempt number of an attempt reference
// (AttemptReference): ok is false for anything else.
func ChargeOfReference(ref string) (chargeID string, attempt int, ok bool) {
	i := strings.LastIndex(ref, "-a")
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(ref[i+2:])
	if err != nil || n < 1 || strconv.Itoa(n) != ref[i+2:] {
		return "", 0, false
	}
	return ref[:i], n, true
}
