package payments

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/payrouter/payrouter"
)

// Defaults of Reconciler.
const (
	// DefaultReconcileEvery is how often the reconciler reads the processing charges.
	DefaultReconcileEvery = time.Second
	// DefaultMaxBackoff is the longest wait between two look-ups of one charge: a gateway that
	// answers "pending" for an hour is asked at most this often.
	DefaultMaxBackoff = 30 * time.Second
	// DefaultOverdue is how long a charge may stay processing before the reconciler says so at
	// warning level once: ops should look at it.
	DefaultOverdue = 10 * time.Minute
	// reconcileLease names the lease that makes one instance of a fleet the reconciler.
	reconcileLease = "reconcile"
	// reconcileBatch bounds the charges read in one round.
	reconcileBatch = 500
	// reconcileParallel bounds the look-ups under way at once.
	reconcileParallel = 4
)

// Reconciler resolves every processing charge in the background: a charge whose gateway timed
// out, answered ambiguously or said pending, and one left behind by an instance that crashed
// mid-call. It looks each up at the gateway that may have it, with backoff (1s, 2s, 4s, ... up to
// MaxBackoff), until the charge is final (Service.ResolveProcessing says what final means). In a
// fleet one instance reconciles at a time, the holder of a lease; an instance that cannot reach
// the shared store reconciles what it sees.
type Reconciler struct {
	Payments *Service
	// Leases elects the reconciling instance; nil: this instance always reconciles.
	Leases payrouter.Leases
	// Holder names this instance for the lease.
	Holder string
	// Every is how often the processing charges are read; 0: DefaultReconcileEvery.
	Every time.Duration
	// MaxBackoff is the longest wait between look-ups of one charge; 0: DefaultMaxBackoff.
	MaxBackoff time.Duration
	// Overdue: a charge processing longer than this is logged once as overdue; 0: DefaultOverdue.
	Overdue time.Duration
	Log     *slog.Logger

	backoff map[string]*retry // by charge id: when to look it up next
}

// retry is one charge's backoff.
type retry struct {
	next    time.Time
	wait    time.Duration
	overdue bool // said so already
}

// Run reconciles until ctx ends.
func (rc *Reconciler) Run(ctx context.Context) {
	every := cmp.Or(rc.Every, DefaultReconcileEvery)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if rc.leads(ctx, 3*every) {
			rc.Round(ctx)
		} else {
			rc.backoff = nil // another instance reconciles; start afresh if it goes
		}
	}
}

// leads reports whether this instance reconciles now.
func (rc *Reconciler) leads(ctx context.Context, ttl time.Duration) bool {
	if rc.Leases == nil {
		return true
	}
	held, err := rc.Leases.HoldLease(ctx, reconcileLease, rc.Holder, ttl)
	return held || err != nil // no shared store: reconcile what this instance sees
}

// Round looks up each processing charge that is due, once.
func (rc *Reconciler) Round(ctx context.Context) {
	s := rc.Payments
	log := rc.Log
	if log == nil {
		log = s.log
	}
	if rc.backoff == nil {
		rc.backoff = map[string]*retry{}
	}
	charges, err := s.charges.ChargesByStatus(ctx, payrouter.StatusProcessing, reconcileBatch)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			log.WarnContext(ctx, "reconcile.list_failed", "err", err)
		}
		return
	}
	now := s.now()
	seen := make(map[string]bool, len(charges))
	var due []*payrouter.Charge
	for _, c := range charges {
		seen[c.ID] = true
		// A charge younger than the budget may still have its request running, which stores
		// its own answer.
		if now.Sub(c.CreatedAt) < s.budget+time.Second {
			continue
		}
		b := rc.backoff[c.ID]
		if b == nil {
			b = &retry{next: now}
			rc.backoff[c.ID] = b
		}
		if b.next.After(now) {
			continue
		}
		if age := now.Sub(c.CreatedAt); age > cmp.Or(rc.Overdue, DefaultOverdue) && !b.overdue {
			b.overdue = true
			log.WarnContext(ctx, "charge.reconcile_overdue", "charge_id", c.ID, "gateway", c.Gateway, "processing_for", age.Round(time.Second).String())
		}
		due = append(due, c)
	}
	for id := range rc.backoff {
		if !seen[id] {
			delete(rc.backoff, id) // final, by this round or by someone else
		}
	}

	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		sem = make(chan struct{}, reconcileParallel)
	)
	for _, c := range due {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			final := rc.reconcile(ctx, log, c)
			mu.Lock()
			defer mu.Unlock()
			if final {
				delete(rc.backoff, c.ID)
				return
			}
			b := rc.backoff[c.ID]
			b.wait = min(max(2*b.wait, time.Second), cmp.Or(rc.MaxBackoff, DefaultMaxBackoff))
			b.next = s.now().Add(b.wait)
		})
	}
	wg.Wait()
}

// reconcile looks one charge up; it reports whether the charge is final now.
func (rc *Reconciler) reconcile(ctx context.Context, log *slog.Logger, c *payrouter.Charge) bool {
	s := rc.Payments
	ctx, cancel := context.WithTimeout(ctx, s.budget)
	defer cancel()
	answered, err := s.ResolveProcessing(ctx, c)
	if err != nil {
		log.WarnContext(ctx, "reconcile.failed", "charge_id", c.ID, "gateway", c.Gateway, "err", err)
		return false
	}
	if !answered || !c.Status.Final() {
		return false
	}
	took := s.now().Sub(c.CreatedAt)
	s.obs.ChargeReconciled(c.Status, took)
	log.InfoContext(ctx, "charge.reconciled", "charge_id", c.ID, "gateway", c.Gateway, "status", c.Status, "took_ms", took.Milliseconds())
	return true
}
