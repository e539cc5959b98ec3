// Package payrouter holds the domain of a payment router: charges, the attempts made for them at
// gateways, the outcome of each attempt, the Gateway interface every adapter implements, and the
// interfaces of the state stores. It imports nothing of the project; every other package imports
// it (docs/architecture.md, Layout).
package payrouter

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"
)

// Operation names a kind of call to a gateway. Each operation of each gateway is its own failure
// domain ("paywell/refund" is not "paywell/charge"), with its own breaker.
type Operation string

// The operations of a gateway.
const (
	OpCharge  Operation = "charge"
	OpCapture Operation = "capture"
	OpVoid    Operation = "void"
	OpRefund  Operation = "refund"
	OpStatus  Operation = "status"
)

// Operations lists every operation, in the order the admin API shows them.
var Operations = []Operation{OpCharge, OpCapture, OpVoid, OpRefund, OpStatus}

// Outcome is what one attempt at one gateway came to. Every adapter maps its wire answers to an
// Outcome in one function; the breaker, the failover rules and the API all read it.
type Outcome string

// The outcomes of an attempt (docs/api.md, POST /charge: attempt outcomes).
const (
	// OutcomeSucceeded: the gateway approved (or, for a status look-up, answered).
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeDeclined: the gateway declined the card. The provider working correctly.
	OutcomeDeclined Outcome = "declined"
	// OutcomePending: the gateway took the request and will decide later.
	OutcomePending Outcome = "pending"
	// OutcomeUnavailable: the gateway certainly did not process the request: the connection
	// failed before the request was written, or the gateway answered in its own documented "not
	// processed, retry later" form. Never a bare 503 or 429: a proxy in front of the gateway
	// answers those after forwarding a request the gateway may have processed (OutcomeUnknown).
	// Safe to send elsewhere with no look-up.
	OutcomeUnavailable Outcome = "unavailable"
	// OutcomeTimeout: the request was sent and no answer came within the deadline. It may have
	// been processed.
	OutcomeTimeout Outcome = "timeout"
	// OutcomeUnknown: the request may have been processed (reset after sending, an ambiguous
	// code, an answer that cannot be read).
	OutcomeUnknown Outcome = "unknown"
	// OutcomeError: the gateway refused our request as malformed. Our bug, not its health.
	OutcomeError Outcome = "error"
	// OutcomeBreakerOpen: not called, its breaker is open. Decided locally.
	OutcomeBreakerOpen Outcome = "breaker_open"
	// OutcomeBulkheadFull: not called, no bulkhead slot was free in time. Decided locally.
	OutcomeBulkheadFull Outcome = "bulkhead_full"
)

// IsFailure reports whether the outcome speaks of the gateway's health and so counts against its
// breaker: unavailable, timeout, unknown.
func (o Outcome) IsFailure() bool {
	return o == OutcomeUnavailable || o == OutcomeTimeout || o == OutcomeUnknown
}

// IsExcluded reports whether the outcome is left out of the breaker's counts altogether: a
// malformed request is our bug, and breaker_open / bulkhead_full never reached the gateway.
func (o Outcome) IsExcluded() bool {
	return o == OutcomeError || o == OutcomeBreakerOpen || o == OutcomeBulkheadFull
}

// MayHaveProcessed reports whether the gateway may have acted on the request although we do not
// know its answer. Nothing may be sent to another gateway for the same charge until a status
// look-up says otherwise.
func (o Outcome) MayHaveProcessed() bool {
	return o == OutcomeTimeout || o == OutcomeUnknown
}

// NotSent reports whether the gateway was never called, or said it did not process the request:
// the only outcomes after which a charge may move to the next gateway.
func (o Outcome) NotSent() bool {
	return o == OutcomeUnavailable || o == OutcomeBreakerOpen || o == OutcomeBulkheadFull
}

// MayHaveBeenApplied reports whether the gateway may have applied the request, or will, while
// its answer does not say how it ended: no answer in time, an unreadable one, or pending. What
// follows is a look-up, or the same request sent again with its reference, never another.
func (o Outcome) MayHaveBeenApplied() bool {
	return o.MayHaveProcessed() || o == OutcomePending
}

// Unanswered reports whether an operation's answer leaves it to be done again later (the queue,
// or the caller's retry): not sent, or sent without a final word.
func (o Outcome) Unanswered() bool { return o.NotSent() || o.MayHaveBeenApplied() }

// TxState is the state of one transaction at a gateway, as a gateway's answer or a status look-up
// reports it.
type TxState string

// The transaction states a gateway can report.
const (
	TxUnknown           TxState = ""           // the answer did not say
	TxAuthorized        TxState = "authorized" // approved, not captured
	TxCaptured          TxState = "captured"
	TxVoided            TxState = "voided"
	TxRefunded          TxState = "refunded"
	TxPartiallyRefunded TxState = "partially_refunded"
	TxDeclined          TxState = "declined"
	TxPending           TxState = "pending"
	TxFailed            TxState = "failed"
	TxNotFound          TxState = "not_found" // the gateway has no transaction with that reference
)

// ChargeStatus is the status of a charge as the storefront sees it.
type ChargeStatus string

// The statuses of a charge.
const (
	StatusSucceeded       ChargeStatus = "succeeded"        // approved and captured
	StatusRequiresCapture ChargeStatus = "requires_capture" // authorized only
	StatusProcessing      ChargeStatus = "processing"       // the outcome is not known yet
	StatusDeclined        ChargeStatus = "declined"
	StatusFailed          ChargeStatus = "failed" // no gateway took it, or a gateway refused it
	StatusVoided          ChargeStatus = "voided"
	StatusRefunded        ChargeStatus = "refunded"
	// StatusPartiallyRefunded: captured, and part of it given back.
	StatusPartiallyRefunded ChargeStatus = "partially_refunded"
)

// StatusOfState maps what a gateway says of a charge's transaction to the charge's status: the
// one mapping every path uses (a charge's own answer, a status look-up, a replay, the
// reconciler, a queued task), so that no path can show a voided or refunded charge as
// succeeded. known is false for the states that say nothing final about the charge (pending,
// not found, unknown): the caller decides what those mean where it stands.
func StatusOfState(s TxState) (status ChargeStatus, known bool) {
	switch s {
	case TxAuthorized:
		return StatusRequiresCapture, true
	case TxCaptured:
		return StatusSucceeded, true
	case TxVoided:
		return StatusVoided, true
	case TxRefunded:
		return StatusRefunded, true
	case TxPartiallyRefunded:
		return StatusPartiallyRefunded, true
	case TxDeclined:
		return StatusDeclined, true
	case TxFailed:
		return StatusFailed, true
	default:
		return StatusProcessing, false
	}
}

// Final reports whether the status can no longer change by itself (a capture, void or refund
// may still move it on).
func (s ChargeStatus) Final() bool { return s != StatusProcessing }

// PaymentMethod is how the customer pays: a token issued by a vault, never a card number. Printed
// or logged, its token is masked (MaskToken); only its JSON form carries it whole.
type PaymentMethod struct {
	Type  string `json:"type"`
	Token string `json:"token"`
}

// String shows the method with its token masked.
func (p PaymentMethod) String() string { return p.Type + " " + MaskToken(p.Token) }

// Format makes every fmt verb (%v, %+v, %#v, %s) print String: a Charge printed whole in an
// error or a debug line must not carry the token.
func (p PaymentMethod) Format(f fmt.State, _ rune) { io.WriteString(f, p.String()) }

// LogValue is the method as a log line shows it: the token masked.
func (p PaymentMethod) LogValue() slog.Value {
	return slog.GroupValue(slog.String("type", p.Type), slog.String("token", MaskToken(p.Token)))
}

// Redacted is the mask a credential is replaced with wherever it could reach a log line or an
// answer.
const Redacted = "[redacted]"

// MaskToken shows a card token as its first 4 and last 4 characters ("tok_...b1a0"), or not at
// all when it is too short for that to hide most of it.
func MaskToken(token string) string {
	if len(token) < 16 {
		return Redacted
	}
	return token[:4] + "..." + token[len(token)-4:]
}

// Charge is one payment the storefront asked for, and everything payrouter did for it. Its JSON
// form is how the stores keep it (the API shows its own view); the payment token is never kept.
type Charge struct {
	ID            string            `json:"id"`
	Status        ChargeStatus      `json:"status"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	Country       string            `json:"country,omitempty"`
	CustomerID    string            `json:"customer_id,omitempty"`
	Description   string            `json:"description,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	PaymentMethod PaymentMethod     `json:"-"` // kept for the gateways, never shown
	Capture       bool              `json:"capture"`
	PinnedGateway string            `json:"pinned_gateway,omitempty"`
	Route         string            `json:"route,omitempty"`
	// Owner is the API key scope that created the charge: only requests with that scope see or
	// act on it (OwnedBy). Empty for a charge stored before owners were recorded.
	Owner            string `json:"owner,omitempty"`
	Gateway          string `json:"gateway,omitempty"`
	GatewayReference string `json:"gateway_reference,omitempty"`
	Reference        string `json:"reference,omitempty"` // sent to Gateway as its idempotency field
	DeclineCode      string `json:"decline_code,omitempty"`
	// Refunded is the sum of the refunds the gateway applied (queued ones are not in it yet).
	Refunded int64 `json:"refunded,omitempty"`
	// RefundsReserved is the sum of the refunds sent or queued whose answer is not known yet:
	// Refunded and RefundsReserved together never exceed Amount (ReserveRefund).
	RefundsReserved int64 `json:"refunds_reserved,omitempty"`
	// Changing is a capture or void of this authorization sent to its gateway and not answered
	// yet, since ChangingSince: the opposite operation is refused meanwhile (BeginChange).
	Changing      Operation `json:"changing,omitempty"`
	ChangingSince time.Time `json:"changing_since,omitzero"`
	// CaptureQueued is set on a succeeded charge whose capture is not confirmed yet: a hedged
	// charge answered succeeded once its capture was queued (TaskCapture) rather than after it
	// (docs/architecture.md, Hedging safely). Nothing may be refunded before the capture is
	// confirmed, and a capture the gateway finally refuses makes the charge failed.
	CaptureQueued bool      `json:"capture_queued,omitempty"`
	Attempts      []Attempt `json:"attempts"`
	CreatedAt     time.Time `json:"created_at"`
	UpdatedAt     time.Time `json:"updated_at"`
	// Hold is the idempotency hold of the request writing the charge: saves made with it are
	// fenced (ChargeStore.SaveCharge). Never stored.
	Hold Hold `json:"-"`
	// Stored is what the store held of the charge when it was read or last written: the version
	// the next write is conditional on, and the state that write's transition starts from. Set
	// by the stores; the zero value is a charge not stored yet.
	Stored Stored `json:"-"`
}

// Stored is a charge's version in its store and the state it was in at that version.
type Stored struct {
	Version  int64
	Status   ChargeStatus
	Refunded int64
}

// Attempt is one try at one gateway for a charge, in the order they were made.
type Attempt struct {
	Gateway  string        `json:"gateway"`
	Outcome  Outcome       `json:"outcome"`
	Duration time.Duration `json:"duration"`
	// Reference is the idempotency reference sent to the gateway (empty when it was not called).
	Reference string `json:"reference,omitempty"`
	// Resolved is what a status look-up found out after a timeout or unknown outcome.
	Resolved TxState `json:"resolved,omitempty"`
	// Hedge is true for an attempt started beside a slow one (a hedge): it only authorized.
	Hedge bool `json:"hedge,omitempty"`
	// Sale is true for the first attempt of a hedged charge that asks for capture: it
	// authorized and captured in one call, as an unhedged charge does. Should a hedge win
	// while the sale's outcome is not known, the charge's queued capture settles from the
	// sale's final outcome first (docs/architecture.md, Hedging safely): a sale that captured
	// keeps the charge and the hedge is voided; only a sale that holds nothing lets the hedge
	// be captured.
	Sale bool `json:"sale,omitempty"`
	// Voided is true when this attempt's approval was not the charge's and was voided (or
	// refunded): a hedge that lost, or a late approval after a failover.
	Voided bool `json:"voided,omitempty"`
}

// AttemptReference is the reference payrouter sends as a gateway's idempotency field for the
// n-th attempt (1-based) of a charge: a retry of the same attempt can never charge twice, and
// every attempt is told apart in the gateway's ledger.
func AttemptReference(chargeID string, n int) string {
	return chargeID + "-a" + strconv.Itoa(n)
}

// OperationReference is the reference of op (capture, void, or the refund that releases a stray
// capture) on the charge attempt sent with reference attempt: every later call on that
// authorization sends it, so that a repeat after a lost answer is applied once. A status
// look-up sends the attempt's own reference; a refund of a charge, RefundReference.
func OperationReference(attempt string, op Operation) string {
	if op == OpStatus {
		return attempt
	}
	return attempt + "-" + string(op)
}

// RefundStatus is the status of a refund.
type RefundStatus string

// The statuses of a refund.
const (
	RefundSucceeded RefundStatus = "succeeded" // the gateway applied it
	RefundQueued    RefundStatus = "queued"    // kept durably; sent when the gateway's breaker lets it through
	RefundPending   RefundStatus = "pending"   // sent, its answer is not known yet; a queued task finds out
	RefundFailed    RefundStatus = "failed"    // the gateway refused it (Detail says why)
)

// Refund gives back all or part of a captured charge, at the gateway that captured it.
type Refund struct {
	ID       string       `json:"id"`
	ChargeID string       `json:"charge_id"`
	Amount   int64        `json:"amount"`
	Currency string       `json:"currency"`
	Status   RefundStatus `json:"status"`
	Gateway  string       `json:"gateway"`
	// Owner is the API key scope of its charge (Charge.Owner): only that scope reads it.
	Owner string `json:"owner,omitempty"`
	// Reference is sent as the gateway's idempotency field for this refund, the same every time
	// it is sent: a refund sent twice is applied once.
	Reference        string    `json:"reference"`
	GatewayReference string    `json:"gateway_reference,omitempty"`
	Detail           string    `json:"detail,omitempty"` // why it failed; never card data
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
}

// OwnedBy reports whether a request with the API key scope may see and act on the charge: the
// scope that created it may. A charge stored before owners were recorded has none and stays
// open to every key until it expires, as it was when it was made.
func (c *Charge) OwnedBy(scope string) bool { return c.Owner == "" || c.Owner == scope }

// OwnedBy reports whether a request with the API key scope may read the refund (Charge.OwnedBy).
func (r *Refund) OwnedBy(scope string) bool { return r.Owner == "" || r.Owner == scope }

// RefundReference is the reference a refund is sent to its gateway with.
func RefundReference(refundID string) string { return refundID }

// ChargeRequest is what an adapter sends to authorize (and, with Capture, capture) a charge.
type ChargeRequest struct {
	Reference   string // idempotency reference: AttemptReference(charge, attempt)
	Amount      int64  // minor units
	Currency    string // ISO 4217
	Token       string // payment method token
	Capture     bool   // capture at once; false authorizes only
	Country     string
	CustomerID  string
	Description string
}

// TxRequest names an existing transaction at a gateway for capture, void, refund and status.
type TxRequest struct {
	// Reference is the idempotency reference of the new operation (a refund's own id, a
	// capture's key). For Status it is the reference the charge was sent with.
	Reference string
	// ChargeReference is the reference the original charge was sent with.
	ChargeReference string
	// GatewayReference is the gateway's own id of the transaction, when it gave one.
	GatewayReference string
	Amount           int64
	Currency         string
}

// Result is a gateway's answer to one call, already mapped to an Outcome.
type Result struct {
	Outcome          Outcome
	GatewayReference string  // the gateway's own id of the transaction
	State            TxState // the transaction's state, when the answer says it
	DeclineCode      string  // for declines: the gateway's reason, normalised to lower snake case
	// Detail says why, for logs and problem details; never a credential or card data.
	Detail string
}

// Gateway is one payment gateway, reached through its adapter. Every method returns a Result
// whose Outcome is always set; transport failures are mapped to unavailable (not sent), timeout
// (sent, no answer in time) or unknown (sent, the answer lost or unreadable). The context carries
// the deadline: adapters set none of their own.
type Gateway interface {
	// Authorize approves a charge, and captures it too when req.Capture is set.
	Authorize(ctx context.Context, req ChargeRequest) Result
	// Capture captures an authorized charge.
	Capture(ctx context.Context, req TxRequest) Result
	// Void cancels an authorized, uncaptured charge.
	Void(ctx context.Context, req TxRequest) Result
	// Refund gives back all or part of a captured charge.
	Refund(ctx context.Context, req TxRequest) Result
	// Status looks a transaction up by the reference it was sent with; Result.State says what
	// the gateway knows of it, TxNotFound when nothing.
	Status(ctx context.Context, req TxRequest) Result
	// Health calls the gateway's own health endpoint (for out-of-band probes).
	Health(ctx context.Context) error
}
