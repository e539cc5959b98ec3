// Package health follows whether a dependency answers. One Watch serves each store payrouter
// depends on (PostgreSQL for the money state, Redis for the fleet's coordination state): it pings
// on an interval, takes word of a failure from the calls that meet one, and reports every change
// between up and down once, as a log line and to its caller (the metric, the breakers' re-sync).
package health

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultEvery is Options.Every's default.
const DefaultEvery = time.Second

// Options configures a Watch. Every zero value is documented.
type Options struct {
	// Name names the dependency in the log lines: <Name>.down and <Name>.up ("database",
	// "state_store"). Required.
	Name string
	// Every is how often the dependency is pinged while up, so that an outage is noticed with no
	// traffic; 0: DefaultEvery.
	Every time.Duration
	// EveryDown is how often it is pinged while down, to notice it is back; 0: Every.
	EveryDown time.Duration
	// Timeout bounds each ping; 0: the ping's own bound.
	Timeout time.Duration
	// DownLevel is the level of the <Name>.down line; the zero value is slog.LevelInfo.
	DownLevel slog.Level
	// Then is what the <Name>.down line says follows while the dependency is down; "": not said.
	Then string
	// OutageKey is the key of the outage's length in milliseconds on the <Name>.up line;
	// "": "outage_ms".
	OutageKey string
	// Log receives the lines; nil: discarded.
	Log *slog.Logger
	// OnChange is called from Run's goroutine, in order, on every change of Up, after the line
	// is logged; nil: none.
	OnChange func(up bool)
}

func (o Options) withDefaults() Options {
	if o.Every <= 0 {
		o.Every = DefaultEvery
	}
	if o.EveryDown <= 0 {
		o.EveryDown = o.Every
	}
	if o.OutageKey == "" {
		o.OutageKey = "outage_ms"
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.OnChange == nil {
		o.OnChange = func(bool) {}
	}
	return o
}

// Watch is one dependency's health. It starts up: a dependency is taken to answer until a ping
// or a call says otherwise, so that starting while it is away costs one failed call, not a
// wait. It is safe for concurrent use; Run must run for it to come up again after an outage.
type Watch struct {
	ping func(context.Context) error
	o    Options

	// up is read on every call without a lock; it changes under mu, with since and reason.
	up     atomic.Bool
	closed atomic.Bool
	mu     sync.Mutex
	since  time.Time
	reason error
	// changed tells Run the dependency went down, so OnChange(false) is called at once. It holds
	// one signal and never blocks.
	changed chan struct{}
}

// NewWatch returns a Watch of the dependency that ping reaches. Run its loop with Run.
func NewWatch(ping func(context.Context) error, o Options) *Watch {
	w := &Watch{ping: ping, o: o.withDefaults(), changed: make(chan struct{}, 1)}
	w.up.Store(true)
	return w
}

// Up reports whether the dependency answers, as last seen.
func (w *Watch) Up() bool { return w.up.Load() }

// Down reports since when the dependency has been down and the last error that said so; down
// is false (and the rest zero) while it is up.
func (w *Watch) Down() (since time.Time, reason error, down bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.up.Load() {
		return time.Time{}, nil, false
	}
	return w.since, w.reason, true
}

// Err is nil while the dependency is up, and otherwise an error wrapping sentinel that says
// since when and why, for a caller that answers without waiting on it (/readyz).
func (w *Watch) Err(sentinel error) error {
	since, reason, down := w.Down()
	if !down {
		return nil
	}
	return fmt.Errorf("%w since %s (%s ago): last error: %w",
		sentinel, since.Format(time.RFC3339Nano), time.Since(since).Round(time.Millisecond), reason)
}

// Failed takes word from a call that found the dependency unreachable: the first one marks it
// down and logs <Name>.down, so an outage met by many calls at once is one line; later ones
// only keep the latest error.
func (w *Watch) Failed(err error) {
	if w.closed.Load() {
		return // a closed client's errors are not an outage
	}
	w.mu.Lock()
	w.reason = err
	if !w.up.Load() {
		w.mu.Unlock()
		return
	}
	w.since = time.Now()
	w.up.Store(false)
	w.mu.Unlock()
	attrs := []any{"err", err.Error()}
	if w.o.Then != "" {
		attrs = append(attrs, "then", w.o.Then)
	}
	w.o.Log.Log(context.Background(), w.o.DownLevel, w.o.Name+".down", attrs...)
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// Close stops the watch from taking word of failures, for when the dependency's client is closed
// on purpose: what its calls meet then is not an outage.
func (w *Watch) Close() { w.closed.Store(true) }

// answered marks the dependency up again and logs <Name>.up with the outage's length.
func (w *Watch) answered() {
	w.mu.Lock()
	if w.up.Load() {
		w.mu.Unlock()
		return
	}
	outage := time.Since(w.since)
	w.since, w.reason = time.Time{}, nil
	w.up.Store(true)
	w.mu.Unlock()
	w.o.Log.Info(w.o.Name+".up", w.o.OutageKey, outage.Milliseconds())
}

// Check pings the dependency once and marks it up or down by the answer. A ping cut short by
// ctx says nothing of the dependency.
func (w *Watch) Check(ctx context.Context) error {
	pctx := ctx
	if w.o.Timeout > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, w.o.Timeout)
		defer cancel()
	}
	err := w.ping(pctx)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		w.Failed(err)
	default:
		w.answered()
	}
	return err
}

// Run pings the dependency every Every while up and every EveryDown while down, and calls
// OnChange on every change of Up, until ctx ends. Call it once.
func (w *Watch) Run(ctx context.Context) {
	reported := true
	for {
		if up := w.up.Load(); up != reported {
			reported = up
			w.o.OnChange(up)
		}
		every := w.o.Every
		if !w.up.Load() {
			every = w.o.EveryDown
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-w.changed:
			t.Stop()
			continue
		case <-t.C:
		}
		if w.Check(ctx) != nil && ctx.Err() != nil {
			return
		}
	}
}
