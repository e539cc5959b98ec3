// Package statestore keeps payrouter serving when its shared state store (Redis) is slow or down
// (DESIGN.md, Breakers: "Redis slow or down must not take payrouter down"). A Store wraps the
// shared store and an in-memory memstore: while the shared store answers, every call goes to it;
// on the first call that finds it unreachable the Store goes down, serves that call and every
// later one from local state without touching the network, and a health goroutine (Run) pings
// the shared store until it answers, pushes what was written locally meanwhile (the re-sync),
// and goes up again. No request ever waits for a shared store known to be down, and a request
// that meets the outage first loses nothing: its call is served locally.
//
// The queue is served the same way, from a local queue of its own while down (see queue.go): a
// task queued during an outage is worked by this instance, or moved to the shared queue by the
// re-sync, so nothing queued is lost to the outage or waits for it to end.
//
// What the shared store cannot do while down, the caller does alone: FleetBreakers and Leases
// calls return ErrDown at once, and the breaker fleet keeps each instance's breakers local until
// the store is up.
//
// # Duplicates during an outage
//
// Idempotency keys are shared by the fleet only through the shared store. During an outage each
// instance has its own keys, so the same Idempotency-Key sent to two instances during an outage
// can be charged twice: neither instance can see the other's claim. Nor can an instance see the
// records other instances completed before the outage, which are in the shared store only: a
// retry during the outage of a request answered before it is taken as a new request, unless
// this instance answered it recently (Options.RecentAnswers keeps its last answers). What one
// instance does during the outage it remembers: keys it claimed before the outage and still holds
// answer ErrInFlight, and keys claimed or completed during it are answered locally until their
// record is in the shared store. When the store returns, the first record stored there wins (Complete keeps
// the first), so every instance replays the same answer from then on.
package statestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/memstore"
)

// Defaults of Options.
const (
	// DefaultCheckDown is how often a down store pings the shared store: short, since every
	// moment spent down is a moment with per-instance idempotency.
	DefaultCheckDown = 250 * time.Millisecond
	// DefaultCheckUp is how often an up store pings, so that an outage is noticed (and shown in
	// /readyz) even when no request calls the store.
	DefaultCheckUp = time.Second
)

// ErrDown is wrapped by every error a Store returns because the shared store is down: Ping's
// (so /readyz answers 503 with the reason) and every FleetBreakers and Leases method's (so their
// caller, the breaker fleet, works locally instead). Check it with errors.Is.
var ErrDown = errors.New("shared state store is down")

// Shared is what a shared state store offers (redisstore.Store implements it): everything
// payrouter keeps, plus the fleet's breakers and leases.
type Shared interface {
	payrouter.Store
	payrouter.FleetBreakers
	payrouter.Leases
}

// Options configures a Store. Every zero value is documented.
type Options struct {
	// Unavailable classifies the shared store's errors: true means it could not be reached or
	// could not serve, and the Store goes down and serves locally; false means an answer about
	// the data (payrouter.ErrNotFound and the like) or a caller's mistake, returned as it is.
	// nil: a net.Error or context.DeadlineExceeded is unavailable (redisstore.IsUnavailable
	// knows Redis's own errors too, and is what production passes).
	Unavailable func(error) bool
	// CheckDown is how often the shared store is pinged while down; 0: DefaultCheckDown.
	CheckDown time.Duration
	// CheckUp is how often it is pinged while up, to notice an outage with no traffic;
	// 0: DefaultCheckUp.
	CheckUp time.Duration
	// Log receives state_store.down and state_store.up, and what the re-sync could not push;
	// nil: discarded.
	Log *slog.Logger
	// OnChange is called from Run's goroutine, in order, on every change of Up (after the
	// re-sync when coming up), for the payrouter_state_store_up metric; nil: none.
	OnChange func(up bool)
	// RecentAnswers is how many of the last idempotency answers stored in the shared store are
	// also kept here, so that during an outage a retry of a request answered just before it is
	// replayed by this instance rather than charged again; 0: DefaultRecentAnswers, < 0: none.
	RecentAnswers int
	// RecentFor is how long each of them is kept at most; 0: DefaultRecentFor.
	RecentFor time.Duration
}

func (o Options) withDefaults() Options {
	if o.Unavailable == nil {
		o.Unavailable = defaultUnavailable
	}
	if o.CheckDown <= 0 {
		o.CheckDown = DefaultCheckDown
	}
	if o.CheckUp <= 0 {
		o.CheckUp = DefaultCheckUp
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.OnChange == nil {
		o.OnChange = func(bool) {}
	}
	if o.RecentAnswers == 0 {
		o.RecentAnswers = DefaultRecentAnswers
	}
	o.RecentAnswers = max(o.RecentAnswers, 0)
	if o.RecentFor <= 0 {
		o.RecentFor = DefaultRecentFor
	}
	return o
}

// defaultUnavailable knows only the errors every networked client returns, so that a Store built
// without a classifier still goes down on a dead network rather than failing every request.
func defaultUnavailable(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded)
}

// Store is a payrouter.Store, payrouter.FleetBreakers and payrouter.Leases that serves from the
// shared store while it is up and from local state while it is down; see the package doc. It is
// safe for concurrent use; Run must run for it to come up again after an outage.
type Store struct {
	primary Shared
	o       Options

	// up is read on every call without a lock; it changes under stateMu, with since and reason.
	up      atomic.Bool
	closed  atomic.Bool
	stateMu sync.Mutex
	since   time.Time
	reason  error

	// changed tells Run the store went down, so OnChange(false) is called at once; pushSoon tells
	// it something was queued for the shared store while up. Both hold one signal, never block.
	changed  chan struct{}
	pushSoon chan struct{}

	// localMu guards which memstore local is. Calls on it hold RLock together with the update of
	// the pending state below, so the compaction after a re-sync (which swaps in a fresh memstore
	// holding only what is still pending) never loses a write made meanwhile.
	localMu sync.RWMutex
	local   *memstore.Store

	// mu guards what is held locally and not yet in the shared store. Lock order: localMu, mu.
	mu  sync.Mutex
	seq uint64 // versions of pending charges, refunds and forced states: a newer local write is never forgotten by the push of an older one
	// charges saved locally, by id, with the version of the local copy.
	charges map[string]uint64
	// refunds saved locally, by id, with the version of the local copy, as charges.
	refunds map[string]uint64
	// tasks are the tasks of the local queue not acknowledged yet, by their id there (without
	// localTaskPrefix); acks are the ids of shared tasks acknowledged while the shared store was
	// down, to be acknowledged there.
	tasks map[string]localTask
	acks  map[string]struct{}
	// records completed locally, to be Completed on the shared store.
	records map[string]pendingRecord
	// claims are the keys this instance holds in flight, locally or on the shared store.
	claims map[string]claim
	// releases are keys claimed on the shared store and released while it was down; their claim
	// is released there if it has not expired by then.
	releases map[string]time.Time
	// forced are forced states set locally, by breaker.
	forced map[string]pendingForced
	// forcedGen changes with every local forced write, so that mirroring an older read of the
	// shared store's forced states never undoes a newer write.
	forcedGen uint64

	// recent are the last answers stored in the shared store, for replays during an outage.
	recent *recentAnswers

	// queue is the local queue (queue.go). It is never swapped by a compaction, since its ids
	// are in workers' hands; Ack keeps it small. Its calls are made holding mu, so that it and
	// tasks always agree.
	queue *memstore.Store
	// takeMu makes a local Take and the re-sync's move of one local task to the shared queue
	// exclusive, so that a task is never both handed out here and queued there. Lock order:
	// takeMu, mu.
	takeMu sync.Mutex
}

// pendingRecord is an idempotency record completed locally, to be pushed while it lives.
type pendingRecord struct {
	rec     payrouter.IdempotencyRecord
	expires time.Time
}

// claim is an idempotency key this instance holds in flight: on the shared store (local false),
// where a down store must still answer ErrInFlight for it, or locally, where an up store must
// keep answering for it until it is completed and pushed.
type claim struct {
	fingerprint string
	expires     time.Time
	local       bool
}

// pendingForced is a forced state set locally.
type pendingForced struct {
	f       payrouter.Forced
	version uint64
}

var (
	_ payrouter.Store         = (*Store)(nil)
	_ payrouter.FleetBreakers = (*Store)(nil)
	_ payrouter.Leases        = (*Store)(nil)
)

// New returns a Store over primary. It starts up: the shared store is assumed reachable until a
// call or a ping says otherwise, so that starting while Redis is down costs one failed call, not
// a wait. Run its health loop with Run.
func New(primary Shared, o Options) *Store {
	s := &Store{
		primary:  primary,
		o:        o.withDefaults(),
		changed:  make(chan struct{}, 1),
		pushSoon: make(chan struct{}, 1),
		local:    memstore.New(),
		charges:  map[string]uint64{},
		refunds:  map[string]uint64{},
		tasks:    map[string]localTask{},
		acks:     map[string]struct{}{},
		queue:    memstore.New(),
		records:  map[string]pendingRecord{},
		claims:   map[string]claim{},
		releases: map[string]time.Time{},
		forced:   map[string]pendingForced{},
	}
	s.recent = newRecentAnswers(s.o.RecentAnswers, s.o.RecentFor)
	s.up.Store(true)
	return s
}

// Up reports whether the shared store is up: calls go to it, and the breaker fleet shares state.
func (s *Store) Up() bool { return s.up.Load() }

// Down reports since when the shared store has been down and the last error that said so, for
// /readyz's detail; down is false (and the rest zero) while it is up.
func (s *Store) Down() (since time.Time, reason error, down bool) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if s.up.Load() {
		return time.Time{}, nil, false
	}
	return s.since, s.reason, true
}

// Ping reports whether the shared store answers. While down it answers at once, with an error
// wrapping ErrDown that says since when and why, so /readyz answers 503 with the reason and
// never waits on the network.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.downErr(); err != nil {
		return fmt.Errorf("statestore: %w", err)
	}
	err := s.primary.Ping(ctx)
	if err == nil || ctx.Err() != nil {
		return err
	}
	// A failed ping is a store that does not serve, whatever the classifier says of the error.
	s.markDown(err)
	return fmt.Errorf("statestore: %w: %w", ErrDown, err)
}

// Close closes the shared store's client and the local stores. Run is stopped by its context.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.localMu.RLock()
	local := s.local
	s.localMu.RUnlock()
	return errors.Join(s.primary.Close(), local.Close(), s.queue.Close())
}

// downErr is nil while up, and otherwise the error wrapping ErrDown that callers get.
func (s *Store) downErr() error {
	if s.up.Load() {
		return nil
	}
	since, reason, down := s.Down()
	if !down {
		return nil // came up meanwhile
	}
	return fmt.Errorf("%w since %s (%s ago): last error: %w",
		ErrDown, since.Format(time.RFC3339Nano), time.Since(since).Round(time.Millisecond), reason)
}

// fallBack reports whether a call to the shared store that returned err should be served
// locally instead, and marks the store down when so. A caller whose own context ended gets its
// error back: the deadline was its own, not a sign that the shared store is down.
func (s *Store) fallBack(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || !s.o.Unavailable(err) {
		return false
	}
	s.markDown(err)
	return true
}

// markDown switches to local state. Only the call that switches logs, so an outage met by many
// requests at once is one log line.
func (s *Store) markDown(err error) {
	if s.closed.Load() {
		return // a closed client's errors are not an outage
	}
	s.stateMu.Lock()
	s.reason = err
	if !s.up.Load() {
		s.stateMu.Unlock()
		return
	}
	s.since = time.Now()
	s.up.Store(false)
	s.stateMu.Unlock()
	s.o.Log.Warn("state_store.down", "err", err)
	signal(s.changed)
}

// noteFailure keeps the latest error of a store already down, for Down and Ping.
func (s *Store) noteFailure(err error) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if !s.up.Load() {
		s.reason = err
	}
}

// markUp switches back to the shared store and returns how long the outage lasted.
func (s *Store) markUp() time.Duration {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	outage := time.Since(s.since)
	s.since, s.reason = time.Time{}, nil
	s.up.Store(true)
	return outage
}

// signal wakes Run without ever blocking the caller: one pending signal is as good as many.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run is the health loop: while down it pings the shared store every CheckDown and, once it
// answers, re-syncs and goes up; while up it pings every CheckUp and goes down on a failure, and
// pushes whatever was queued locally. It calls OnChange on every change and returns when ctx
// ends. Call it once.
func (s *Store) Run(ctx context.Context) {
	reported := true
	report := func() {
		if up := s.up.Load(); up != reported {
			reported = up
			s.o.OnChange(up)
		}
	}
	for {
		report()
		every := s.o.CheckUp
		if !s.up.Load() {
			every = s.o.CheckDown
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.changed:
			t.Stop()
			continue
		case <-s.pushSoon:
			t.Stop()
			if s.up.Load() {
				s.pushWhileUp(ctx)
			}
			continue
		case <-t.C:
		}
		s.prune(time.Now())

		if s.up.Load() {
			if err := s.primary.Ping(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				s.markDown(err)
				continue
			}
			s.pushWhileUp(ctx)
			continue
		}

		if err := s.primary.Ping(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.noteFailure(err)
			continue
		}
		st, err := s.push(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.noteFailure(err)
			continue
		}
		outage := s.markUp()
		s.o.Log.Info("state_store.up", "outage_ms", outage.Milliseconds(),
			"pushed_charges", st.charges, "pushed_refunds", st.refunds, "pushed_records", st.records,
			"pushed_forced", st.forced, "pushed_tasks", st.tasks, "pushed_acks", st.acks,
			"still_pending", st.left)
		report()
	}
}

// pushWhileUp pushes what is pending, if anything, and goes down if the shared store stops
// answering meanwhile.
func (s *Store) pushWhileUp(ctx context.Context) {
	if !s.pending() {
		return
	}
	if _, err := s.push(ctx); err != nil && ctx.Err() == nil {
		s.markDown(err)
	}
}
