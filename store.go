package payrouter

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ChargeStore keeps charges. Every write is a transition from the version its caller read:
// a charge changed meanwhile is never overwritten with what was computed from an older one.
type ChargeStore interface {
	// SaveCharge writes c as the next version of its charge: created when c.Stored.Version is 0
	// and no charge has c.ID, else in place of the stored charge only while that is still at
	// c.Stored.Version. ErrStale, and nothing written, otherwise. When c.Hold is held the write
	// is fenced too: ErrHoldLost unless c.Hold is still the key's latest claim. The events of
	// the change (ChargeEvents from c.Stored to c) are written with it, in the same
	// transaction. On success c.Stored is the new version.
	SaveCharge(ctx context.Context, c *Charge) error
	// Charge returns the charge with that id (its Stored set), or ErrNotFound.
	Charge(ctx context.Context, id string) (*Charge, error)
	// ChargesByStatus returns up to limit charges in that status, oldest first (the reconciler
	// reads the processing ones).
	ChargesByStatus(ctx context.Context, status ChargeStatus, limit int) ([]*Charge, error)
}

// IdempotencyRecord is the stored first complete answer to a request with an Idempotency-Key.
type IdempotencyRecord struct {
	Fingerprint string            `json:"fingerprint"` // of the request body: another body is a mismatch
	Status      int               `json:"status"`      // the HTTP status answered
	Header      map[string]string `json:"header,omitempty"`
	// Body is the answer's body, or empty when the answer is rendered again from the charge
	// ChargeID names as it stands when the key is replayed: a success shows its charge's
	// current state anyway (docs/api.md, Idempotency), and keeping the body would keep a second
	// copy of the charge's metadata and description for the key's whole TTL.
	Body []byte `json:"body"`
	// ChargeID, when set, is the charge the answer is rendered from (Body is then empty): the
	// store keeps that charge at least as long as this record. A store that drops charges only
	// after state.retention, which is at least the key's TTL, keeps it anyway and need not
	// store the field (pgstore); memstore, which drops charges holding no money to make room,
	// keeps the charge while the record lives.
	ChargeID  string    `json:"charge_id,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// Hold is a request's claim on an idempotency key, from Claim until Complete or Release. Token
// is its fencing token: every claim of any key gets a larger one than any claim before it, so a
// holder that stalled past its hold (a paused process, a long GC) and then resumes is told apart
// from the request that took the key after it, and every write it makes with its old Token is
// refused with ErrHoldLost.
type Hold struct {
	Key   string
	Token int64
}

// Held reports whether h is a hold at all (the zero Hold fences nothing).
func (h Hold) Held() bool { return h.Token != 0 }

// IdempotencyStore keeps idempotency keys. A key is claimed before any work begins, renewed while
// the work runs, then either completed with the answer (stored for ttl) or released (the answer
// is not stored, so the same key may be sent again).
type IdempotencyStore interface {
	// Claim takes key for a request of the API key scope owner with that fingerprint, held for
	// holdFor unless renewed. It returns the new Hold when the key is new (or its earlier hold
	// ran out); the stored record when the key completed with the same fingerprint;
	// ErrInFlight while another request holds it; ErrMismatch when it completed with another
	// fingerprint. owner is whose the key is (key is already scoped by it, as
	// IdempotencyStoreKey makes it): a store that bounds what each owner holds (memstore's
	// per-key share of state.max_memory) charges the key to it, and refuses a new key of an
	// owner holding its share with an error wrapping ErrStateFull and ErrStateUnavailable.
	Claim(ctx context.Context, owner, key, fingerprint string, holdFor time.Duration) (*IdempotencyRecord, Hold, error)
	// Renew extends h by holdFor from now; ErrHoldLost when a later claim took the key (h is
	// then no longer the holder and must change nothing).
	Renew(ctx context.Context, h Hold, holdFor time.Duration) error
	// Complete stores the answer for the key of h, kept for ttl, even when the hold ran out
	// while nobody took the key; ErrHoldLost when a later claim took it. A record already
	// stored is kept: the first complete answer is the one replayed.
	Complete(ctx context.Context, h Hold, rec IdempotencyRecord, ttl time.Duration) error
	// Release forgets a key held by h whose answer is not stored; nothing when h lost it.
	Release(ctx context.Context, h Hold) error
	// Peek tells what Claim would, without claiming and without writing anything: the stored
	// record when the key completed with the same fingerprint, ErrMismatch with another,
	// ErrInFlight while it is held, and (nil, nil) when it is free. It serves a request that
	// will be refused anyway (every breaker open), which must still replay a key answered
	// before, at the cost of one read.
	Peek(ctx context.Context, key, fingerprint string) (*IdempotencyRecord, error)
}

// Claimed is what Store.ClaimCharge came to: the record of a key completed before, or the
// claim won, with the charge stored or the one found under its id.
type Claimed struct {
	// Record is the stored answer of a key completed before with the same fingerprint.
	Record *IdempotencyRecord
	// Hold is the claim, when won (Hold.Held).
	Hold Hold
	// Stored is true when the charge was stored as its first version.
	Stored bool
	// Prev is the charge stored before under the charge's id, when the claim was won and the
	// charge not stored because of it.
	Prev *Charge
}

// Forced is a state ops imposed on a breaker through the admin API; it holds until reset and
// applies to every instance sharing the state store.
type Forced string

// The forced states; ForcedNone is no forcing.
const (
	ForcedNone   Forced = ""
	ForcedOpen   Forced = "open"
	ForcedClosed Forced = "closed"
)

// RefundChange is one move of a refund, with what it does to its charge and the task that
// follows it up, written together or not at all (RefundStore.ChangeRefund).
type RefundChange struct {
	// Refund is the refund as it is to be stored.
	Refund *Refund
	// From is the status the refund must be stored in now; "" for a new refund, which no
	// refund with its id may precede.
	From RefundStatus
	// Charge, when set, is the next version of the refund's charge (its reservations or its
	// refunded amount move with the refund), written as ChargeStore.SaveCharge writes it.
	Charge *Charge
	// Task, when set, is queued with the change; its ID is set.
	Task *Task
}

// RefundStore keeps refunds.
type RefundStore interface {
	// ChangeRefund writes ch: the refund moves from ch.From to its status, its charge to its
	// next version, and the task is queued, in one transaction; ErrStale, and nothing written,
	// when the refund is not in ch.From or the charge not at ch.Charge.Stored.Version. The
	// events of both moves (RefundEvents, ChargeEvents) are written with them.
	ChangeRefund(ctx context.Context, ch RefundChange) error
	// Refund returns the refund with that id, or ErrNotFound.
	Refund(ctx context.Context, id string) (*Refund, error)
}

// EventStore lists the events the stores wrote with every change of a charge or refund.
type EventStore interface {
	// Events returns up to limit of owner's events oldest first, from just after the event
	// with id after ("": from the oldest kept); more is true when more follow. A reader paging
	// with the last id it got never misses an event and never sees one twice, whichever order
	// concurrent writers committed in. ErrNotFound when after names no event of owner's.
	Events(ctx context.Context, owner, after string, limit int) (events []Event, more bool, err error)
}

// TaskKind says what a queued Task asks for.
type TaskKind string

// The kinds of tasks.
const (
	// TaskRefund sends the refund RefundID, which waits as queued.
	TaskRefund TaskKind = "refund"
	// TaskVoid voids the authorization Reference at Gateway that no charge keeps: a hedge that
	// lost, or a late approval after a failover. A captured one is refunded instead.
	TaskVoid TaskKind = "void"
	// TaskRecheck looks the attempt Reference at Gateway up again: it was found not processed
	// (and the charge went elsewhere, or failed), but a gateway may still process a request it
	// received late. An approval found then is voided (TaskVoid).
	TaskRecheck TaskKind = "recheck"
	// TaskCapture captures the authorization Reference at Gateway that its charge keeps and
	// was answered succeeded for with its capture queued (Charge.CaptureQueued): the capture is
	// sent with the same reference every time, so the gateway applies it once.
	TaskCapture TaskKind = "capture"
	// TaskWebhook delivers one event to one storefront endpoint (Task.Webhook): package
	// webhooks queues and handles it. It calls no gateway and holds no charge in the store.
	TaskWebhook TaskKind = "webhook"
)

// Task is a unit of money work done later, kept durably until done (docs/architecture.md, State
// stores).
type Task struct {
	// ID is the queue's id of the task, set by Enqueue and Take.
	ID       string   `json:"-"`
	Kind     TaskKind `json:"kind"`
	Gateway  string   `json:"gateway"`
	ChargeID string   `json:"charge_id"`
	RefundID string   `json:"refund_id,omitempty"` // TaskRefund
	// Reference is the charge attempt's reference at Gateway (TaskVoid, TaskRecheck,
	// TaskCapture).
	Reference        string `json:"reference,omitempty"`
	GatewayReference string `json:"gateway_reference,omitempty"`
	Amount           int64  `json:"amount,omitempty"`
	Currency         string `json:"currency,omitempty"`
	// Webhook is the delivery a TaskWebhook makes.
	Webhook *WebhookDelivery `json:"webhook,omitempty"`
	// NotBefore: the task is not handed out before then (a recheck waits for a late answer, a
	// webhook delivery for its next attempt).
	NotBefore time.Time `json:"not_before,omitzero"`
	CreatedAt time.Time `json:"created_at"`
	// Deliveries counts the times Take handed the task out, this time included; set by Take.
	Deliveries int `json:"-"`
}

// Queue keeps tasks durably until they are acknowledged (a table taken with FOR UPDATE SKIP
// LOCKED in pgstore). A task handed out by Take and never acknowledged, because its consumer crashed or
// left it for later, is handed out again once idle for long enough, to any consumer.
type Queue interface {
	// Enqueue adds a task and returns its id.
	Enqueue(ctx context.Context, t Task) (id string, err error)
	// Take hands consumer up to max tasks whose NotBefore has come: first those handed out
	// before (to anyone) and not acknowledged for longer than idle, then new ones. A task
	// stays in the queue until Ack. A task not due yet is left where it is, so thousands of
	// webhook deliveries waiting hours for their next attempt cost a Take nothing.
	Take(ctx context.Context, consumer string, max int, idle time.Duration) ([]Task, error)
	// Ack removes a task that is done.
	Ack(ctx context.Context, id string) error
	// QueueDepth counts the tasks not acknowledged yet.
	QueueDepth(ctx context.Context) (int64, error)
}

// WebhookDelivery is one event's delivery to one storefront endpoint: the task a TaskWebhook
// carries from its first attempt to its last, and a dead letter's after that.
type WebhookDelivery struct {
	// ID is WebhookDeliveryID(Endpoint, EventID): the same event for the same endpoint always
	// has the same id, in a dead letter and in POST /admin/webhooks/{delivery}/redeliver.
	ID       string `json:"id"`
	Endpoint string `json:"endpoint"`
	// EventID is the event's id, sent as webhook-id: the storefront deduplicates by it.
	EventID   string    `json:"event_id"`
	EventType EventType `json:"event_type"`
	// EventAt is when the event was written: delivery latency is measured from it.
	EventAt time.Time `json:"event_at"`
	// Body is the exact JSON sent (the event as GET /events shows it), the same bytes at
	// every attempt.
	Body []byte `json:"body"`
	// Attempt is the attempt the task makes next, from 1.
	Attempt int `json:"attempt"`
	// Deferrals counts the times the task was put back because every slot of its endpoint was
	// held (no attempt made); it sets how long it waits the next time, and an attempt clears it.
	Deferrals int `json:"deferrals,omitempty"`
	// LastError and LastStatus say how the last attempt failed (0: no answer), and
	// LastAttemptAt when it was made; empty before the first.
	LastError     string    `json:"last_error,omitempty"`
	LastStatus    int       `json:"last_status,omitempty"`
	LastAttemptAt time.Time `json:"last_attempt_at,omitzero"`
}

// WebhookDeliveryID is the id of the delivery of event eventID to endpoint: "whd_" and 26
// base32 characters of a SHA-256 of both, so that a dispatcher reading the same event twice
// makes the same delivery, and the id says nothing of either.
func WebhookDeliveryID(endpoint, eventID string) string {
	sum := sha256.Sum256([]byte(endpoint + "\x00" + eventID))
	return "whd_" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:16])
}

// DeadLetter is a webhook delivery given up: its last attempt failed, its endpoint answered
// 410 Gone, or its endpoint is no longer configured. It is kept until redelivered (or its
// retention runs out).
type DeadLetter struct {
	// Task is the delivery's task as it was when given up (Task.Webhook is set).
	Task Task
	// Reason says why it was given up.
	Reason string
	// At is when.
	At time.Time
}

// EventPage is a page of an owner's events after a webhook endpoint's cursor (WebhookStore):
// From is where the cursor stood, To where it stands once every event of the page is
// dispatched. Positions are the store's own, opaque.
type EventPage struct {
	Events   []Event
	From, To string
	// More is true when more events follow To.
	More bool
}

// WebhookDisabled is the state of an endpoint that answered 410 Gone: no delivery is sent to
// URL until an operator enables it again, or the configuration gives it another URL.
type WebhookDisabled struct {
	URL    string
	Reason string
	At     time.Time
}

// WebhookStore is what the storefront webhooks keep durably (package webhooks): each
// endpoint's cursor in its owner's event feed, the deliveries in the Queue (TaskWebhook), the
// dead letters and the endpoints disabled by a 410. The cursor moves with the deliveries it
// dispatched, in one transaction, so that neither is written without the other.
type WebhookStore interface {
	// WebhookEvents returns up to limit of owner's events after the cursor of endpoint, oldest
	// first, in the order and with the guarantee of EventStore.Events (a reader never misses
	// one, whichever order writers committed in). An endpoint with no cursor yet gets one, at
	// the end of the feed as it stands: it receives the events written from then on.
	WebhookEvents(ctx context.Context, endpoint, owner string, limit int) (EventPage, error)
	// AdvanceWebhook moves endpoint's cursor from from to to and queues tasks, in one
	// transaction; ErrStale, and nothing written, when the cursor is no longer at from (another
	// instance dispatched the same events). The tasks' IDs are not set.
	AdvanceWebhook(ctx context.Context, endpoint, from, to string, tasks []Task) error
	// RequeueTask replaces the queued task id by t, due at t.NotBefore, in one step, and sets
	// t.ID; ErrNotFound, and nothing written, when id is no longer queued (acknowledged, or
	// moved by another instance that was handed the same task).
	RequeueTask(ctx context.Context, id string, t *Task) error
	// DeadLetterTask removes the queued task id and keeps dl (whose Task.Webhook names the
	// delivery) among the dead letters, in one step, in place of an earlier dead letter of the
	// same delivery; ErrNotFound, and nothing written, when id is no longer queued.
	DeadLetterTask(ctx context.Context, id string, dl DeadLetter) error
	// DeadLetters returns up to limit dead letters, the newest first.
	DeadLetters(ctx context.Context, limit int) ([]DeadLetter, error)
	// DeadLetterOf returns the dead letter of delivery, or ErrNotFound.
	DeadLetterOf(ctx context.Context, delivery string) (*DeadLetter, error)
	// Redeliver removes the dead letter of delivery and queues t in its place, in one step,
	// and sets t.ID; ErrNotFound, and nothing queued, when there is no such dead letter (never
	// was, or redelivered already).
	Redeliver(ctx context.Context, delivery string, t *Task) error
	// WebhookBacklog counts the webhook deliveries queued (TaskWebhook tasks) and the dead
	// letters.
	WebhookBacklog(ctx context.Context) (queued, dead int64, err error)
	// SetWebhookDisabled disables endpoint (d not nil) or enables it again (nil).
	SetWebhookDisabled(ctx context.Context, endpoint string, d *WebhookDisabled) error
	// WebhooksDisabled returns the disabled endpoints by name.
	WebhooksDisabled(ctx context.Context) (map[string]WebhookDisabled, error)
}

// Store is the money state (docs/architecture.md, State stores): charges, refunds, idempotency
// records, the durable task queue and what the storefront webhooks keep, with exactly one home, memstore for one instance or pgstore
// for a fleet. It is never forked: when it cannot be reached its methods fail with an error
// wrapping ErrStateUnavailable, and nothing is kept aside to serve from meanwhile.
type Store interface {
	ChargeStore
	RefundStore
	EventStore
	Queue
	WebhookStore
	IdempotencyStore
	// CompleteCharge saves c (as SaveCharge does, events included) and completes h's key with
	// rec in one step (one transaction in the database): the final state of a charge and the
	// answer its request got are stored together or not at all. Both are fenced by h:
	// ErrHoldLost when a later claim took the key; ErrStale when the charge changed since
	// c.Stored, and then the key is not completed either.
	CompleteCharge(ctx context.Context, c *Charge, h Hold, rec IdempotencyRecord, ttl time.Duration) error
	// ClaimCharge claims key as Claim does and, when the claim is won, stores c, a new charge
	// (c.Stored.Version 0), as its first version (events included) in the same step (one
	// statement in the database): a new charge's one write before its gateway call. A key
	// completed before returns its record (Claimed.Record) and writes nothing; ErrInFlight and
	// ErrMismatch are Claim's, and nothing is stored then either. When the claim is won, c.Hold
	// is set to it, and either c is stored (Claimed.Stored, c.Stored set) or a charge with c.ID
	// was stored before (an earlier request with this key whose instance stopped mid-charge):
	// c is not stored, and that charge is Claimed.Prev, or nil when the store could not read it
	// in the same step (it was written a moment ago, by a holder now fenced off): the caller
	// reads it (Charge). An error otherwise (the charge refused: ErrStateFull) holds nothing.
	ClaimCharge(ctx context.Context, owner, key, fingerprint string, holdFor time.Duration, c *Charge) (Claimed, error)
	// Ping reports whether the store answers; /readyz uses it.
	Ping(ctx context.Context) error
	// Close releases the store's connections.
	Close() error
}

// BreakerRules are the trip rules of one breaker: each instance applies them to its own counts
// (resilience.BreakerSettings embeds them) and a shared store to the fleet's, and any one rule
// trips. They are gateways.<name>.breaker's keys of the same names (docs/configuration.md); the
// defaults a file leaving a key out gets are resilience's (resilience.DefaultBreakerSettings).
// A store is given rules whose zero values resilience has already replaced by what they mean.
type BreakerRules struct {
	// ConsecutiveFailures trips after N failures in a row (fleet-wide, for a store); 0: off.
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// FailuresInWindow trips after N failures within Window; 0: off.
	FailuresInWindow int `yaml:"failures_in_window"`
	// FailureRate trips when failures/answered >= rate over Window, once Window holds
	// MinRequests answered calls; in [0, 1], 0: off. A call still in flight has no outcome and
	// does not count: counting it would dilute the rate exactly when a gateway hangs.
	FailureRate float64 `yaml:"failure_rate"`
	// MinRequests is how many answered calls Window must hold before FailureRate applies; 0:
	// resilience.DefaultMinRequests, the same as a file that leaves the key out.
	MinRequests int `yaml:"min_requests"`
	// Window is the rolling window of FailuresInWindow and FailureRate; 0: counts are kept until
	// the breaker changes state (configuration files always give one: 0 is refused there).
	Window time.Duration `yaml:"window"`
	// Cooldown is how long an open breaker stays open before it admits trial calls; 0:
	// resilience.DefaultCooldown.
	Cooldown time.Duration `yaml:"cooldown"`
}

// BreakerTripRules are the yaml keys of BreakerRules' trip rules, in the order the reference
// (docs/configuration.md) gives them; the other fields tune them. A breaker whose every trip
// rule is 0 never trips (Trips), and a file that names none of them gets resilience's default
// rule. A new rule is added here, to Trips, and to the breakers that apply the rules.
var BreakerTripRules = []string{"consecutive_failures", "failures_in_window", "failure_rate"}

// Trips reports whether any trip rule of r is on; a breaker with none never opens by itself.
func (r BreakerRules) Trips() bool {
	return r.ConsecutiveFailures > 0 || r.FailuresInWindow > 0 || r.FailureRate > 0
}

// BreakerRuleProblem is one thing wrong with a BreakerRules: the yaml key of the field, what it
// must be, and the value when the message shows it.
type BreakerRuleProblem struct {
	Key  string // "failure_rate"
	Must string // "must be between 0 and 1 (0: off)"
	Got  any    // the value, for the message; nil: not shown
}

// String is the problem as one line, "failure_rate: must be between 0 and 1 (0: off), got 1.5".
func (p BreakerRuleProblem) String() string {
	if p.Got == nil {
		return p.Key + ": " + p.Must
	}
	return fmt.Sprintf("%s: %s, got %v", p.Key, p.Must, p.Got)
}

// Problems returns what is wrong with r, in the order of its fields, or nil: the one check of
// trip rules, which configuration (for a file's gateways.<name>.breaker) and every shared store
// (for the rules it is given) make. It takes r as a store gets it, zero values already replaced
// by what they mean: a Cooldown of 0 and a FailureRate with MinRequests 0 are refused. A Window
// of 0 is accepted (counts kept until the breaker changes state); configuration refuses it on
// its own.
func (r BreakerRules) Problems() []BreakerRuleProblem {
	var ps []BreakerRuleProblem
	add := func(key, must string, got any) {
		ps = append(ps, BreakerRuleProblem{Key: key, Must: must, Got: got})
	}
	if r.ConsecutiveFailures < 0 {
		add("consecutive_failures", "must be >= 0 (0: off)", nil)
	}
	if r.FailuresInWindow < 0 {
		add("failures_in_window", "must be >= 0 (0: off)", nil)
	}
	// Written so that NaN, which compares false with everything, is refused too.
	if !(r.FailureRate >= 0 && r.FailureRate <= 1) {
		add("failure_rate", "must be between 0 and 1 (0: off)", r.FailureRate)
	}
	switch {
	case r.FailureRate > 0 && r.MinRequests < 1:
		// 0 means resilience.DefaultMinRequests, filled in before anyone applies the rules: read
		// as anything else, a store would trip the fleet on other terms than each instance.
		add("min_requests", "must be >= 1 when failure_rate is set", nil)
	case r.MinRequests < 0:
		add("min_requests", "must be >= 0", nil)
	}
	if r.Window < 0 {
		add("window", "must be >= 0 (0: no rolling window)", nil)
	}
	if r.Cooldown <= 0 {
		add("cooldown", "must be > 0", nil)
	}
	return ps
}

// Validate returns an error listing r's Problems, or nil when it has none.
func (r BreakerRules) Validate() error {
	ps := r.Problems()
	if len(ps) == 0 {
		return nil
	}
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return errors.New("breaker rules: " + strings.Join(lines, "; "))
}

// BreakerReport is what one instance saw of one breaker's counted calls since its last report,
// in their order compressed: Successes and Failures are totals, TrailingFailures is how many of
// the failures came after the last success (all of them when Successes is 0).
type BreakerReport struct {
	Successes, Failures, TrailingFailures int64
}

// BreakerCounts are a breaker's fleet-wide counts: answered calls, failures among them, and
// failures in a row.
type BreakerCounts struct {
	Requests            int64 `json:"requests"`
	Failures            int64 `json:"failures"`
	ConsecutiveFailures int64 `json:"consecutive_failures"`
}

// SharedBreaker is one breaker's fleet-wide state as the shared store holds it.
type SharedBreaker struct {
	// Open is true while the breaker's cooldown runs; OpenFor is what is left of it. When the
	// cooldown has run out the breaker is half-open until a trial closes or reopens it, and
	// HalfOpen is true.
	Open     bool
	OpenFor  time.Duration
	HalfOpen bool
	// Gen is the generation of the opening while open or half-open (TakeTrial hands its trial
	// slots out); 0 while closed.
	Gen    TrialGen
	Forced Forced
	Counts BreakerCounts
}

// BreakerEventKind says what changed in a BreakerEvent.
type BreakerEventKind string

// The kinds of breaker events.
const (
	BreakerOpened BreakerEventKind = "opened" // open for OpenFor
	BreakerClosed BreakerEventKind = "closed" // trials succeeded: closed, counts cleared
	BreakerForced BreakerEventKind = "forced" // Forced set (ForcedNone: forcing cleared)
	BreakerReset  BreakerEventKind = "reset"  // closed, counts and forcing cleared
)

// BreakerEvent is one change of a breaker's fleet-wide state, published to every instance.
type BreakerEvent struct {
	Breaker string           `json:"breaker"` // "<gateway>/<operation>"
	Kind    BreakerEventKind `json:"kind"`
	OpenFor time.Duration    `json:"open_for,omitempty"` // BreakerOpened: the cooldown
	Forced  Forced           `json:"forced,omitempty"`   // BreakerForced
	Counts  BreakerCounts    `json:"counts"`             // BreakerOpened: the counts that tripped it
	Origin  string           `json:"origin,omitempty"`   // the instance that caused it
}

// TrialGen is the generation of a fleet's breaker: every opening starts a new one, and the
// half-open period that follows the cooldown is that generation's. A trial slot carries the
// generation it was taken in, and what its holder reports (success, failure, or the slot given
// back) counts only while the breaker is half-open in that generation, as gobreaker's own
// generations do: a trial that outlived its half-open period must not close, reopen or free a
// slot of a later one. 0 is no generation.
type TrialGen uint64

// FleetBreakers keeps the breaker state a fleet of instances shares (docs/architecture.md,
// Breakers). No method is ever called to admit a customer call while the breaker is closed:
// admission is local, and these calls report to the fleet and learn from it.
type FleetBreakers interface {
	// ReportOutcomes adds one instance's (origin's) counted calls to the fleet's counts and
	// applies rules; when they trip the breaker it is opened for rules.Cooldown, BreakerOpened is
	// published, and opened is true. Outcomes reported while the breaker is open or half-open are
	// dropped.
	ReportOutcomes(ctx context.Context, breaker string, rules BreakerRules, r BreakerReport, origin string) (opened bool, counts BreakerCounts, err error)
	// OpenBreaker opens the breaker for cooldown, clears its counts and trials, starts a new
	// TrialGen and publishes BreakerOpened. With trial 0 an instance's own counts tripped it, and
	// it opens unless open already; with a trial's TrialGen that trial failed, and it reopens
	// only a breaker still half-open in that generation. opened is false when nothing changed.
	OpenBreaker(ctx context.Context, breaker string, cooldown time.Duration, counts BreakerCounts, trial TrialGen, origin string) (opened bool, err error)
	// TakeTrial takes one of max trial slots of a half-open breaker and returns the generation
	// it belongs to; 0 when it is still open, closed, or every slot is taken. ttl frees a slot
	// whose holder never reports.
	TakeTrial(ctx context.Context, breaker string, max int, ttl time.Duration) (TrialGen, error)
	// ReturnTrial gives a slot of generation gen back unused (the call was never made or said
	// nothing); dropped when the breaker has moved on from gen.
	ReturnTrial(ctx context.Context, breaker string, gen TrialGen) error
	// TrialSucceeded counts a successful trial of generation gen; when max have succeeded the
	// breaker is closed, its counts cleared, BreakerClosed published, and closed is true. A
	// success of another generation than the breaker's half-open one is dropped.
	TrialSucceeded(ctx context.Context, breaker string, gen TrialGen, max int, origin string) (closed bool, err error)
	// CloseBreaker closes a half-open breaker at once (the out-of-band prober's verdict) and
	// publishes BreakerClosed; closed is false when it was not half-open.
	CloseBreaker(ctx context.Context, breaker, origin string) (closed bool, err error)
	// ForceBreaker sets or clears (ForcedNone) a forced state of the breaker named
	// "<gateway>/<operation>" and publishes BreakerForced. A forced state has no expiry.
	ForceBreaker(ctx context.Context, breaker string, f Forced, origin string) error
	// ResetBreaker closes the breaker, clears its counts, trials and forcing, and publishes
	// BreakerReset.
	ResetBreaker(ctx context.Context, breaker, origin string) error
	// BreakerStates returns the fleet's state of each named breaker (every name is in the map).
	BreakerStates(ctx context.Context, breakers []string) (map[string]SharedBreaker, error)
	// WatchBreakers calls fn with every BreakerEvent published from now on, in order, until ctx
	// ends. subscribed is called once the subscription is confirmed, before any event: from then
	// on nothing published is missed, so that is when the caller re-reads BreakerStates. It
	// returns when the subscription fails (the caller watches again) or ctx ends.
	WatchBreakers(ctx context.Context, subscribed func(), fn func(BreakerEvent)) error
}

// Leases elect one holder of a named job among processes (the out-of-band prober of a gateway).
type Leases interface {
	// HoldLease takes the lease called name for holder, or renews it when holder has it, for
	// ttl; held is false while another holder has it.
	HoldLease(ctx context.Context, name, holder string, ttl time.Duration) (held bool, err error)
	// DropLease gives the lease up if holder has it.
	DropLease(ctx context.Context, name, holder string) error
}
