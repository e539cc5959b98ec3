// Package memstore is the in-memory state store: the embedded default that lets one payrouter
// instance run with nothing else (docs/architecture.md, State stores). Its state lives and dies
// with the process, so it cannot be shared by a fleet; pgstore is the fleet's money store. Both
// pass the storetest suite.
package memstore

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/payrouter/payrouter"
)

// ErrClosed is returned by every method of a Store after Close, so that wiring which keeps using
// a closed store fails loudly instead of serving from state nobody will see again.
var ErrClosed = errors.New("memstore: store is closed")

// Store is an in-memory payrouter.Store, safe for concurrent use. It starts no goroutine:
// expired idempotency keys are forgotten on access and by a bounded sweep run with each
// idempotency operation, and, with WithBounds, settled charges past their retention or beyond
// their owner's quota go as charges are written.
//
// Locks, always taken in this order: idemMu, chargeMu, queueMu, usageMu.
type Store struct {
	now    func() time.Time
	closed atomic.Bool

	// Three locks for three independent maps, so a reconciler scanning charges never delays a
	// request claiming its idempotency key.
	chargeMu sync.RWMutex
	charges  map[string]*payrouter.Charge
	// byStatus indexes charges by status: the reconciler asks for the few processing charges
	// among many final ones, which must not cost a scan of them all.
	byStatus map[payrouter.ChargeStatus]map[string]struct{}
	// The bounds (bounds.go), guarded by chargeMu: entries holds every charge's bookkeeping;
	// heldOrder lists the settled charges holding captured money left to refund, and free each
	// owner's settled charges holding none, each written longest ago first; keyed lists when
	// the keys answering from charges expire.
	retention time.Duration
	entries   map[string]*chargeEntry
	heldOrder *list.List
	free      map[string]*list.List
	keyed     expiryHeap
	evicted   atomic.Int64
	visits    int64 // charges taken off the front of a settled order: what making room costs
	// The events (events.go), guarded by chargeMu: each owner's oldest first, every one by id,
	// and each charge's (dropped with it).
	events    map[string]*ownerEvents
	eventByID map[string]*storedEvent
	eventsOf  map[string][]*storedEvent
	eventSeq  int64

	idemMu   sync.Mutex
	idem     map[string]idemEntry
	expiries expiryHeap
	// tokens hands out fencing tokens: one sequence for every key, so that no token is ever
	// handed out twice, even to a key forgotten and claimed anew.
	tokens atomic.Int64

	// queueMu guards refunds and the task queue (queue.go).
	queueMu  sync.Mutex
	refunds  map[string]*payrouter.Refund
	queue    []*queued
	queueSeq int64
	// pins counts, per charge, its refunds queued or pending and its tasks queued: a pinned
	// charge is never dropped. unpinned lists charges whose last pin went, to go back in the
	// settled order; refundsOf lists each charge's refunds, dropped with it.
	pins      map[string]int
	unpinned  []string
	refundsOf map[string][]string

	// usageMu guards usage, what each owner holds in bytes (bounds.go); total is their sum and
	// quota each owner's bound (0: none).
	usageMu sync.Mutex
	usage   map[string]*ownerUsage
	total   atomic.Int64
	quota   atomic.Int64
	// hooks is what the storefront webhooks keep (webhooks.go).
	hooks webhookState
}

var _ payrouter.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read the time from now instead of time.Now, so tests can move time
// without sleeping. A nil now keeps time.Now.
func WithClock(now func() time.Time) Option {
	return func(s *Store) {
		if now != nil {
			s.now = now
		}
	}
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{
		now:      time.Now,
		charges:  make(map[string]*payrouter.Charge),
		byStatus: make(map[payrouter.ChargeStatus]map[string]struct{}),
		idem:     make(map[string]idemEntry),
		refunds:  make(map[string]*payrouter.Refund),

		events:    make(map[string]*ownerEvents),
		eventByID: make(map[string]*storedEvent),
		eventsOf:  make(map[string][]*storedEvent),

		entries:   make(map[string]*chargeEntry),
		heldOrder: list.New(),
		free:      make(map[string]*list.List),
		pins:      make(map[string]int),
		refundsOf: make(map[string][]string),
		usage:     make(map[string]*ownerUsage),

		hooks: webhookState{cursors: map[string]int64{}, disabled: map[string]payrouter.WebhookDisabled{}},
	}
	for _, opt := range opts {
		opt(s)
	}
	return s
}

// Ping reports whether the store answers: it always does until Close.
func (s *Store) Ping(ctx context.Context) error {
	return s.usable(ctx)
}

// Close marks the store closed; later calls return ErrClosed. There is nothing running to stop,
// and calling Close again is harmless.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// usable fails the same way a networked store would for a cancelled request or a closed client,
// so callers are tested against the same behaviour with either store.
func (s *Store) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return ErrClosed
	}
	return nil
}
