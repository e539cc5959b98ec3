// Package settle does what happens to a charge after its first answer: capture, void, refund
// (and its queueing), the look-up of a charge whose outcome is not known yet (GET /charge/{id}
// and the reconciler), the release of attempts no charge keeps (hedges that lost, late
// approvals) and the durable tasks that finish them. routing decides a charge's first answer;
// both call gateways through routing.Call and read a gateway's answer by routing.Apply.
package settle

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/routing"
)

// Settler does everything that happens to a charge after its first answer, at the gateway that
// holds it: capture, void, refund, the look-up of a charge whose outcome is not known yet, the
// release of attempts no charge keeps, the durable tasks (Work) and reconciliation (Reconciler).
type Settler struct {
	// tab is the configuration in use: the gateways and the fallbacks; Update swaps it.
	tab     atomic.Pointer[table]
	router  *routing.Router
	charges payrouter.ChargeStore
	refunds payrouter.RefundStore
	queue   payrouter.Queue
	budget  time.Duration
	log     *slog.Logger
	now     func() time.Time
	obs     Observer
}

// Observer is told what a Settler decided beyond single gateway calls (the resilience Observer
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

// Config is what a Settler needs.
type Config struct {
	// Router runs a charge's attempts (Charge); its Gateways are the adapters and domains
	// everything else calls, until Update replaces them.
	Router  *routing.Router
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

// table is what a reload changes in a Settler.
type table struct {
	gw *routing.Gateways
	// fallbacks decides what an operation answers when its gateway cannot take it.
	fallbacks fallback.Fallbacks
}

// New returns a Settler.
func New(cfg Config) *Settler {
	s := &Settler{
		router: cfg.Router, charges: cfg.Charges, refunds: cfg.Refunds, queue: cfg.Queue, budget: cfg.Budget,
		log: cfg.Log, now: time.Now, obs: cfg.Observer,
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
// the Settler's. Operations under way finish on the gateways and fallbacks they started with.
func (s *Settler) Update(gateways *routing.Gateways, fallbacks fallback.Settings) {
	s.tab.Store(&table{gw: gateways, fallbacks: fallback.Fallbacks{
		Settings: fallbacks.WithDefaults(), Observer: s.obs, Now: func() time.Time { return s.now() },
	}})
}

// Fallbacks returns the fallback policies in use, defaults applied.
func (s *Settler) Fallbacks() fallback.Settings { return s.table().fallbacks.Settings }

// table returns the table in use now.
func (s *Settler) table() *table { return s.tab.Load() }

// ErrNoCharge is the answer for a charge id that does not exist, or that the caller may not see.
func ErrNoCharge(id string) error { return payrouter.Errorf(payrouter.ENotFound, "no charge %q", id) }

// Get returns a stored charge.
func (s *Settler) Get(ctx context.Context, id string) (*payrouter.Charge, error) {
	c, err := s.charges.Charge(ctx, id)
	if errors.Is(err, payrouter.ErrNotFound) {
		return nil, ErrNoCharge(id)
	}
	return c, err
}
