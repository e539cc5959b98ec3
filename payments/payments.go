// Package payments owns a charge's whole life (docs/architecture.md, One owner for a charge's
// life): the Idempotency-Key's protocol (claim, renew, complete, release, peek), the fast
// refusal when no gateway can take a charge, the charge asked again by its key, the attempts
// (run by routing, which writes nothing: this package is its Keeper), resolving an answer not
// known yet, capture, void, refund, every save, the reconciler and the handlers of the queue's
// tasks. httpapi authenticates, decodes, calls one method (api.go) and sends what it renders.
// The money rules are the store's transitions (payrouter.Charge's methods, written at the
// version they were computed on): this package reads, decides, and on payrouter.ErrStale reads
// again. Every gateway call goes through routing.Call.
package payments

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/routing"
)

// Service runs a charge's life: its first answer through the router, then everything after it
// at the gateway that holds it: capture, void, refund, the look-up of a charge whose outcome is
// not known yet, the release of attempts no charge keeps, the queue's tasks (Handlers) and
// reconciliation (Reconciler).
type Service struct {
	// tab is the configuration in use: the gateways and the fallbacks; Update swaps it.
	tab     atomic.Pointer[table]
	router  *routing.Router
	keys    KeyStore
	events  payrouter.EventStore
	keysTTL time.Duration
	hold    time.Duration
	charges payrouter.ChargeStore
	refunds payrouter.RefundStore
	queue   payrouter.Queue
	budget  time.Duration
	log     *slog.Logger
	now     func() time.Time
	obs     Observer
	// captures holds the queued capture of each charge being answered succeeded with its
	// capture queued, by charge id, from QueueCapture until this instance settles it (once the
	// answer is stored and, with a sale still running, its answer came: captureAfterAnswer,
	// SaleAnswered); late counts the settlements made after their answers.
	capturesMu sync.Mutex
	captures   map[string]*queuedCapture
	late       sync.WaitGroup
	// hooks are the gateways' webhook keys, by gateway (SetWebhookKeys).
	hooks atomic.Pointer[map[string]payrouter.WebhookKeys]
}

// Observer is told what a Service decided beyond single gateway calls (the resilience Observer
// sees those). telemetry implements it, as part of routing.Observer.
type Observer interface {
	// FallbackUsed: no gateway could take op, and policy answered.
	fallback.Observer
	// ChargeReconciled: the reconciler found a processing charge final, took after its creation.
	ChargeReconciled(status payrouter.ChargeStatus, took time.Duration)
	// TaskNotQueued: a task of that kind could not be queued. For a void or a recheck, money may
	// stay held at a gateway with nothing left to release it: ops must look (it is logged too).
	TaskNotQueued(kind payrouter.TaskKind)
}

// nopObserver is the Observer when Config gives none.
type nopObserver struct{}

func (nopObserver) FallbackUsed(payrouter.Operation, fallback.Policy)      {}
func (nopObserver) ChargeReconciled(payrouter.ChargeStatus, time.Duration) {}
func (nopObserver) TaskNotQueued(payrouter.TaskKind)                       {}

// Config is what a Service needs.
type Config struct {
	// Router runs a charge's attempts (Charge); its Gateways are the adapters and domains
	// everything else calls, until Update replaces them.
	Router *routing.Router
	// Keys keeps the idempotency keys (and completes one with its charge); KeysTTL is how long
	// a completed answer is kept. Hold is how long a key stays held by a request without
	// renewal: the request renews it every third of it while it runs, so a key whose instance
	// died or stalled is free again within Hold; 0: DefaultHold.
	Keys    KeyStore
	KeysTTL time.Duration
	Hold    time.Duration
	// Events lists the events the stores wrote.
	Events  payrouter.EventStore
	Charges payrouter.ChargeStore
	// Refunds keeps refunds; Queue keeps the money work done later: queued refunds, voids of
	// approvals no charge keeps, rechecks of attempts that may be approved late.
	Refunds payrouter.RefundStore
	Queue   payrouter.Queue
	// Budget is request_timeout: one operation, its look-ups included, never takes longer.
	Budget time.Duration
	Log    *slog.Logger
	// Fallbacks are the policies of `fallbacks:`: what refunds and status look-ups answer when
	// their gateway cannot take them (fallback.Settings; the zero value is every default).
	Fallbacks fallback.Settings
	// Observer is told about fallbacks and reconciled charges; nil: nobody.
	Observer Observer
}

// table is what a reload changes in a Service.
type table struct {
	gw *routing.Gateways
	// fallbacks decides what an operation answers when its gateway cannot take it.
	fallbacks fallback.Fallbacks
}

// New returns a Service.
func New(cfg Config) *Service {
	s := &Service{
		router: cfg.Router, keys: cfg.Keys, events: cfg.Events, keysTTL: cfg.KeysTTL, hold: cfg.Hold, charges: cfg.Charges, refunds: cfg.Refunds, queue: cfg.Queue, budget: cfg.Budget,
		log: cfg.Log, now: time.Now, obs: cfg.Observer, captures: map[string]*queuedCapture{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	s.Update(cfg.Router.Gateways(), cfg.Fallbacks)
	return s
}

// Update makes gateways (the router's, after its own Update) and the fallbacks (as in Config)
// the Service's. Operations under way finish on the gateways and fallbacks they started with.
func (s *Service) Update(gateways *routing.Gateways, fallbacks fallback.Settings) {
	s.tab.Store(&table{gw: gateways, fallbacks: fallback.Fallbacks{
		Settings: fallbacks.WithDefaults(), Observer: s.obs, Now: func() time.Time { return s.now() },
	}})
}

// Fallbacks returns the fallback policies in use, defaults applied.
func (s *Service) Fallbacks() fallback.Settings { return s.table().fallbacks.Settings }

// table returns the table in use now.
func (s *Service) table() *table { return s.tab.Load() }

// ErrNoCharge is the answer for a charge id that does not exist, or that the caller may not see.
func ErrNoCharge(id string) error { return payrouter.Errorf(payrouter.ENotFound, "no charge %q", id) }

// Get returns a stored charge.
func (s *Service) Get(ctx context.Context, id string) (*payrouter.Charge, error) {
	c, err := s.charges.Charge(ctx, id)
	if errors.Is(err, payrouter.ErrNotFound) {
		return nil, ErrNoCharge(id)
	}
	return c, err
}
