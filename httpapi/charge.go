package httpapi

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/cardnum"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/payments"
)

// chargeView is the charge object of docs/api.md: what the storefront sees of a charge.
type chargeView struct {
	ID               string                 `json:"id"`
	Status           payrouter.ChargeStatus `json:"status"`
	Amount           int64                  `json:"amount"`
	Currency         string                 `json:"currency"`
	Country          string                 `json:"country,omitempty"`
	CustomerID       string                 `json:"customer_id,omitempty"`
	Description      string                 `json:"description,omitempty"`
	Metadata         map[string]string      `json:"metadata,omitempty"`
	Gateway          string                 `json:"gateway,omitempty"`
	GatewayReference string                 `json:"gateway_reference,omitempty"`
	DeclineCode      string                 `json:"decline_code,omitempty"`
	// AmountRefunded is what the gateway gave back so far (queued refunds are not in it yet).
	AmountRefunded int64 `json:"amount_refunded,omitempty"`
	// CaptureQueued is true on a succeeded charge whose hedge answered first, until its capture
	// is settled: its gateway may still change to its sale's (docs/api.md).
	CaptureQueued bool          `json:"capture_queued,omitempty"`
	Attempts      []attemptView `json:"attempts"`
	CreatedAt     string        `json:"created_at"`
	// Stale is true when the charge is shown as last stored because its gateway could not be
	// asked about it (fallbacks.status: degrade).
	Stale bool `json:"stale,omitempty"`
}

// attemptView is one attempt as the API shows it.
type attemptView struct {
	Gateway    string            `json:"gateway"`
	Outcome    payrouter.Outcome `json:"outcome"`
	DurationMS int64             `json:"duration_ms"`
	Resolved   payrouter.TxState `json:"resolved,omitempty"`
	Sale       bool              `json:"sale,omitempty"`
	Hedge      bool              `json:"hedge,omitempty"`
	Voided     bool              `json:"voided,omitempty"`
}

func attemptViews(list []payrouter.Attempt) []attemptView {
	if list == nil {
		return nil
	}
	out := make([]attemptView, len(list))
	for i, a := range list {
		out[i] = attemptView{Gateway: a.Gateway, Outcome: a.Outcome, DurationMS: a.Duration.Milliseconds(), Resolved: a.Resolved,
			Sale: a.Sale, Hedge: a.Hedge, Voided: a.Voided}
	}
	return out
}

func viewOf(ch *payrouter.Charge) chargeView {
	v := chargeView{
		ID: ch.ID, Status: ch.Status, Amount: ch.Amount, Currency: ch.Currency, Country: ch.Country,
		CustomerID: ch.CustomerID, Description: ch.Description, Metadata: ch.Metadata,
		Gateway: ch.Gateway, GatewayReference: ch.GatewayReference, DeclineCode: ch.DeclineCode,
		AmountRefunded: ch.Refunded, CaptureQueued: ch.CaptureQueued, Attempts: attemptViews(ch.Attempts), CreatedAt: ch.CreatedAt.UTC().Format(time.RFC3339),
	}
	if v.Attempts == nil {
		v.Attempts = []attemptView{}
	}
	return v
}

// jsonMediaType reports whether a Content-Type names application/json. The plain value, which
// nearly every request sends, is taken as it is; any other is parsed (parameters, case).
func jsonMediaType(contentType string) bool {
	if contentType == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

// readJSONBody checks the media type and size and returns the body, or the problem to answer.
func readJSONBody(c *echo.Context) ([]byte, *problem) {
	if !jsonMediaType(c.Request().Header.Get(echo.HeaderContentType)) {
		p := newProblem(codeUnsupportedMedia, "send the body as Content-Type: application/json")
		return nil, &p
	}
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, MaxBodyBytes+1))
	if err != nil {
		p := invalid("the body could not be read")
		return nil, &p
	}
	if len(body) > MaxBodyBytes {
		p := newProblem(codePayloadTooLarge, "the body is larger than 64 KiB")
		return nil, &p
	}
	return body, nil
}

// idempotencyKey returns the request's Idempotency-Key: 1 to 255 printable ASCII characters,
// and no card number. The key itself goes no further than this package: the stores keep its
// digest (payrouter.IdempotencyStoreKey), and ids derive from it (chargeIDFor).
func idempotencyKey(c *echo.Context) (string, *problem) {
	key := c.Request().Header.Get("Idempotency-Key")
	if cardnum.Contains(key) {
		p := invalid("the Idempotency-Key looks like a card number; send a key of your own making, such as a UUID",
			fieldError{Field: "Idempotency-Key", Message: cardNumberRefusal})
		return "", &p
	}
	ok := len(key) >= 1 && len(key) <= 255
	for i := 0; ok && i < len(key); i++ {
		ok = key[i] >= 0x20 && key[i] <= 0x7e
	}
	if !ok {
		p := invalid("send an Idempotency-Key header of 1 to 255 printable ASCII characters",
			fieldError{Field: "Idempotency-Key", Message: "is required: 1 to 255 printable ASCII characters"})
		return "", &p
	}
	return key, nil
}

// fingerprint identifies a request for its idempotency key: the operation and the decoded body,
// so that the same request sent with other white space or member order still replays.
func fingerprint(op string, v any) string {
	b, _ := json.Marshal(v)
	h := sha256.New()
	h.Write([]byte(op))
	h.Write([]byte{'\n'})
	h.Write(b)
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], h.Sum(make([]byte, 0, sha256.Size)))
	return string(out[:])
}

// send writes what a payments operation answered, or the problem of what kept it from
// answering (its Idempotency-Key in flight or used with another body, the store away), logged
// under event when it is internal.
func (s *server) send(c *echo.Context, event string, a payments.Answer, err error) error {
	if err != nil {
		return s.writeError(c, event, err)
	}
	for k, v := range a.Header {
		c.Response().Header().Set(k, v)
	}
	if a.Replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	return c.Blob(a.Status, a.Header[echo.HeaderContentType], a.Body)
}

// request is the payments.Request of an authenticated request with its Idempotency-Key and the
// fingerprint of what it asks.
func request(c *echo.Context, key, fp string) payments.Request {
	return payments.Request{Scope: scopeOf(c), Key: key, Fingerprint: fp}
}

// jsonAnswer encodes v as an answer with the given content type.
func jsonAnswer(status int, contentType string, v any, header ...string) (payments.Answer, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return payments.Answer{}, err
	}
	a := payments.Answer{Status: status, Body: body, Header: map[string]string{echo.HeaderContentType: contentType}}
	for i := 0; i+1 < len(header); i += 2 {
		a.Header[header[i]] = header[i+1]
	}
	return a, nil
}

// createCharge is POST /charge.
func (s *server) createCharge(c *echo.Context) error {
	body, p := readJSONBody(c)
	if p != nil {
		return writeProblem(c, *p)
	}
	key, p := idempotencyKey(c)
	if p != nil {
		return writeProblem(c, *p)
	}
	in, errs, err := decodeCharge(body)
	if err != nil {
		return writeProblem(c, invalid("the charge is not valid; see errors", errs...))
	}
	if in.Gateway != "" && s.Domains.Guard(in.Gateway, payrouter.OpCharge) == nil {
		return writeProblem(c, invalid("the charge is not valid; see errors",
			fieldError{Field: "gateway", Message: "is not a configured gateway"}))
	}
	scope := scopeOf(c)
	id := chargeIDFor(scope, key)
	c.Set("charge_id", id) // for the request's span and the audit line
	a, err := s.Payments.CreateCharge(c.Request().Context(), request(c, key, fingerprint("POST /charge", in)),
		chargeOf(id, scope, in), func(r payments.Result) (payments.Answer, error) { return s.chargeAnswer(c, r.Charge, r.Err) })
	return s.send(c, "charge.failed", a, err)
}

// chargeOf is the charge a valid request with the API key scope owner asks for, under id.
func chargeOf(id, owner string, in chargeInput) *payrouter.Charge {
	return &payrouter.Charge{
		ID: id, Owner: owner, Amount: in.Amount, Currency: in.Currency, Country: in.Country,
		CustomerID: in.CustomerID, Description: in.Description, Metadata: in.Metadata,
		PaymentMethod: payrouter.PaymentMethod{Type: in.PaymentMethod.Type, Token: in.PaymentMethod.Token},
		Capture:       in.Capture, PinnedGateway: in.Gateway,
	}
}

// chargeIDFor is the id of the charge an Idempotency-Key asks for: derived from the key (and the
// API key's scope), not drawn at random, so that a retry that finds the key free again because
// the instance holding it died mid-call gets the same charge, which may have been approved,
// instead of a second one (payments.Service.Charge). Attempt references derive from it too, so
// even a charge sent again is the same transaction at the gateway.
//
// It takes the caller's key, not its stored digest (payrouter.IdempotencyStoreKey), and must
// keep computing exactly what it did before the stores kept digests: a key claimed before an
// upgrade and retried after it must name the same charge. The id shows nothing of the key.
func chargeIDFor(scope, key string) string { return idFor("ch_", scope, key) }

// refundIDFor is the id of the refund an Idempotency-Key asks for, for the same reason
// (payments.Service.Refund): a retry after a crash finds the refund instead of making a second.
func refundIDFor(scope, key string) string { return idFor("re_", "refund\n"+scope, key) }

// idFor derives an id with prefix from an API key's scope and an Idempotency-Key.
func idFor(prefix, scope, key string) string {
	sum := sha256.Sum256([]byte(scope + "\n" + key))
	return prefix + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:16])
}

// chargeAnswer is the answer to a charge the router ran, and err what it returned.
func (s *server) chargeAnswer(c *echo.Context, ch *payrouter.Charge, err error) (payments.Answer, error) {
	var u *fallback.Unavailable
	if errors.As(err, &u) {
		if s.Metrics != nil {
			s.Metrics.ChargeAnswered("", payrouter.StatusFailed)
			s.Metrics.FallbackUsed(payrouter.OpCharge, string(fallback.Fail))
		}
	}
	if err != nil {
		return s.errorAnswer(c, "charge.failed", err)
	}
	if s.Metrics != nil {
		s.Metrics.ChargeAnswered(ch.Gateway, ch.Status)
	}
	switch ch.Status {
	case payrouter.StatusSucceeded, payrouter.StatusRequiresCapture, payrouter.StatusVoided, payrouter.StatusRefunded,
		payrouter.StatusPartiallyRefunded:
		// Voided and refunded: a charge approved, then changed, asked for again by its key.
		return jsonAnswer(http.StatusCreated, echo.MIMEApplicationJSON, viewOf(ch))
	case payrouter.StatusProcessing:
		return jsonAnswer(http.StatusAccepted, echo.MIMEApplicationJSON, viewOf(ch), echo.HeaderLocation, "/charge/"+ch.ID)
	case payrouter.StatusDeclined:
		p := newProblem(payrouter.EDeclined, "the gateway declined the card; ask the customer for another payment method")
		p.ChargeID, p.Gateway, p.DeclineCode, p.Attempts = ch.ID, ch.Gateway, ch.DeclineCode, attemptViews(ch.Attempts)
		return jsonAnswer(p.Status, "application/problem+json", p)
	default:
		detail := "the gateway refused the request as malformed; payrouter has logged it"
		if !refusedAsMalformed(ch.Attempts) {
			// A charge first answered 202 and found later never to have been taken anywhere.
			detail = "no gateway took the charge and nothing was charged; send a new request with a new Idempotency-Key to try again"
		}
		p := newProblem(payrouter.EGatewayError, detail)
		p.ChargeID, p.Gateway, p.Attempts = ch.ID, ch.Gateway, attemptViews(ch.Attempts)
		return jsonAnswer(p.Status, "application/problem+json", p)
	}
}

// refusedAsMalformed reports whether a gateway answered one of the attempts with error.
func refusedAsMalformed(attempts []payrouter.Attempt) bool {
	for _, a := range attempts {
		if a.Outcome == payrouter.OutcomeError {
			return true
		}
	}
	return false
}

// getCharge is GET /charge/{id}: the charge's latest status, asked of its gateway while it is
// processing; marked stale when the gateway could not be asked.
func (s *server) getCharge(c *echo.Context) error {
	ch, stale, err := s.Payments.Refresh(c.Request().Context(), scopeOf(c), c.Param("id"))
	if err != nil {
		return s.writeError(c, "charge.get_failed", err)
	}
	v := viewOf(ch)
	v.Stale = stale
	return c.JSON(http.StatusOK, v)
}
