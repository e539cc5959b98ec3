package settle

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
)

// Settler does everything that happens to a charge after its first answer, at the gateway that
// holds it: capture, void, refund, the look-up of a charge whose outcome is not known yet, the
// release of attempts no charge keeps, the durable tasks (Work) and reconciliation (Reconciler).
type Settler struct {
	// tab is the configuration in use: the gateways and the fallbacks; Update swaps it.
	tab     atomic.Pointer[table]
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
	FallbackUsed(op payrouter.Operation, policy fallback.Policy)
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
	// Gateways are the adapters and domains of the configuration in use; Update replaces them.
	Gateways *Gateways
	Charges  payrouter.ChargeStore
	// Refunds keeps refunds; Queue keeps the money work done later: queued refunds, voids of
	// approvals no charge keeps, rechecks of attempts that may be approved late.
	Refunds payrouter.RefundStore
	Queue   payrouter.Queue
	// Budget is request_timeout: one operation, its look-ups included, never takes longer.
	Budget time.Duration
	Log    *slog.Logger
	// RefundFallback is fallbacks.refund: fallback.Queue (202 queued) or fallback.Fail (503).
	// "": Queue.
	RefundFallback fallback.Policy
	// StatusFallback is fallbacks.status: fallback.Degrade (the last known status, stale) or
	// fallback.Fail. "": Degrade.
	StatusFallback fallback.Policy
	// Observer is told about fallbacks and reconciled charges; nil: nobody.
	Observer Observer
}

// table is what a reload changes in a Settler.
type table struct {
	gw                             *Gateways
	refundFallback, statusFallback fallback.Policy
}

// New returns a Settler.
func New(cfg Config) *Settler {
	s := &Settler{
		charges: cfg.Charges, refunds: cfg.Refunds, queue: cfg.Queue, budget: cfg.Budget,
		log: cfg.Log, now: time.Now, obs: cfg.Observer,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.obs == nil {
		s.obs = nopObserver{}
	}
	s.Update(cfg.Gateways, cfg.RefundFallback, cfg.StatusFallback)
	return s
}

// Update makes gateways and the fallbacks (as in Config) the Settler's. Operations under way
// finish on the gateways they started with.
func (s *Settler) Update(gateways *Gateways, refund, status fallback.Policy) {
	s.tab.Store(&table{gw: gateways, refundFallback: cmp.Or(refund, fallback.Queue), statusFallback: cmp.Or(status, fallback.Degrade)})
}

// Fallbacks returns the refund and status fallbacks in use.
func (s *Settler) Fallbacks() (refund, status fallback.Policy) {
	tab := s.table()
	return tab.refundFallback, tab.statusFallback
}

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
