// Package statestore keeps payrouter serving when Redis, which holds the fleet's coordination
// state (breaker windows and states, forced states, fleet events, leases), is slow or down
// (docs/architecture.md, Breakers: "Redis slow or down must not take payrouter down"). A Store
// wraps that coordination store (Shared; redisstore.Store in production). While it answers, every
// call goes to it. On the first call that finds it unreachable the Store goes down, and from then
// on no call waits on it: FleetBreakers and Leases calls fail at once with ErrDown, and its
// health.Watch (Run), the same watch the money store's database has, pings Redis until it
// answers and goes up again. Nothing of the fleet's state is kept here: forced states live in
// Redis, and what this instance decided alone meanwhile (forced states, breakers it opened) is
// resilience.Fleet's to send again.
//
// While Redis is away each instance keeps its own breakers, and says so: its caller
// (resilience.Fleet) decides alone on ErrDown; OnChange(false) feeds the payrouter_state_store_up
// metric; a state_store.down log line gives the error; Ping, for /readyz, answers ErrDown with
// since when and why. When Redis answers again, state_store.up gives the outage's length and
// OnChange(true) is where the caller re-syncs its breakers (resilience.Fleet.Resync).
//
// Nothing of money is here. Charges, refunds, idempotency records and durable tasks are
// payrouter.Store's, with one home, memstore or PostgreSQL (docs/architecture.md, State stores);
// this package neither holds nor wraps them.
package statestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/health"
)

// Defaults of Options.
const (
	// DefaultCheckDown is how often a down store pings Redis: short, since every moment spent
	// down is a moment when each instance's breakers decide alone.
	DefaultCheckDown = 250 * time.Millisecond
	// DefaultCheckUp is how often an up store pings, so that an outage is noticed (and shown in
	// /readyz) even when no call reaches Redis.
	DefaultCheckUp = time.Second
)

// ErrDown is wrapped by every error a Store returns because the coordination store is down:
// Ping's (so /readyz answers 503 with the reason) and every FleetBreakers and Leases method's
// (so their caller, the breaker fleet, works locally instead). Check it with errors.Is.
var ErrDown = errors.New("shared state store is down")

// Shared is the coordination state a fleet shares (redisstore.Store implements it): the fleet's
// breakers (forced states included) and leases, a health check and the client's Close. It holds
// nothing of money.
type Shared interface {
	payrouter.FleetBreakers
	payrouter.Leases
	// Ping reports whether the store answers.
	Ping(ctx context.Context) error
	// Close releases the store's connections.
	Close() error
}

// Options configures a Store. Every zero value is documented.
type Options struct {
	// Unavailable classifies the coordination store's errors: true means it could not be reached
	// or could not serve, and the Store goes down; false means a caller's mistake (an empty
	// breaker name, impossible rules) or an answer about the data, returned as it is.
	// nil: a net.Error or context.DeadlineExceeded is unavailable (redisstore.IsUnavailable
	// knows Redis's own errors too, and is what production passes).
	Unavailable func(error) bool
	// CheckDown is how often the store is pinged while down; 0: DefaultCheckDown.
	CheckDown time.Duration
	// CheckUp is how often it is pinged while up, to notice an outage with no traffic;
	// 0: DefaultCheckUp.
	CheckUp time.Duration
	// Log receives state_store.down and state_store.up; nil: discarded.
	Log *slog.Logger
	// OnChange is called from Run's goroutine, in order, on every change of Up, for the
	// payrouter_state_store_up metric and for the caller to re-sync its breakers; nil: none.
	OnChange func(up bool)
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
	return o
}

// defaultUnavailable knows only the errors every networked client returns, so that a Store built
// without a classifier still goes down on a dead network rather than waiting on it every call.
func defaultUnavailable(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded)
}

// Store is a Shared that passes every call to the coordination store while it is up and waits
// on it for nothing while it is down; see the package doc. It is safe for concurrent use; Run
// must run for it to come up again after an outage.
type Store struct {
	primary Shared
	o       Options
	// watch holds whether the coordination store is up, since when it is down and why; it logs
	// state_store.down and state_store.up and calls OnChange.
	watch *health.Watch
}

var (
	_ Shared                  = (*Store)(nil)
	_ payrouter.FleetBreakers = (*Store)(nil)
	_ payrouter.Leases        = (*Store)(nil)
)

// New returns a Store over primary. It starts up: the coordination store is assumed reachable
// until a call or a ping says otherwise, so that starting while Redis is down costs one failed
// call, not a wait. Run its health loop with Run.
func New(primary Shared, o Options) *Store {
	o = o.withDefaults()
	return &Store{
		primary: primary,
		o:       o,
		watch: health.NewWatch(primary.Ping, health.Options{
			Name:      "state_store",
			Every:     o.CheckUp,
			EveryDown: o.CheckDown,
			DownLevel: slog.LevelWarn,
			Then:      "each instance keeps its own breakers until the state store answers",
			OutageKey: "outage_ms",
			Log:       o.Log,
			OnChange:  o.OnChange,
		}),
	}
}

// Up reports whether the coordination store is up: calls go to it, and the breaker fleet shares
// state.
func (s *Store) Up() bool { return s.watch.Up() }

// Down reports since when the coordination store has been down and the last error that said so,
// for /readyz's detail; down is false (and the rest zero) while it is up.
func (s *Store) Down() (since time.Time, reason error, down bool) { return s.watch.Down() }

// Ping reports whether the coordination store answers. While down it answers at once, with an
// error wrapping ErrDown that says since when and why, so /readyz answers 503 with the reason
// and never waits on the network.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.watch.Err(ErrDown); err != nil {
		return fmt.Errorf("statestore: %w", err)
	}
	err := s.primary.Ping(ctx)
	if err == nil || ctx.Err() != nil {
		return err
	}
	// A failed ping is a store that does not serve, whatever the classifier says of the error.
	s.watch.Failed(err)
	return fmt.Errorf("statestore: %w: %w", ErrDown, err)
}

// Close closes the coordination store's client. Run is stopped by its context.
func (s *Store) Close() error {
	s.watch.Close()
	return s.primary.Close()
}

// fallBack reports whether a call to the coordination store that returned err met an outage,
// and marks the store down when so. A caller whose own context ended gets its error back: the
// deadline was its own, not a sign that the store is down.
func (s *Store) fallBack(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || !s.o.Unavailable(err) {
		return false
	}
	s.watch.Failed(err)
	return true
}

// Run is the health loop (health.Watch.Run): while down it pings the coordination store every
// CheckDown and goes up once it answers; while up it pings every CheckUp and goes down on a
// failure. It calls OnChange on every change and returns when ctx ends. Call it once.
func (s *Store) Run(ctx context.Context) { s.watch.Run(ctx) }
