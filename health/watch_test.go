package health

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter/internal/testlog"
)

var errRefused = errors.New("dial tcp 127.0.0.1:6379: connection refused")

// dependency is a fake with an off switch; while hang is set a ping waits for its context.
type dependency struct {
	down, hang atomic.Bool
	pings      atomic.Int64
}

func (d *dependency) ping(ctx context.Context) error {
	d.pings.Add(1)
	if d.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	if d.down.Load() {
		return errRefused
	}
	return nil
}

// watched is a Watch of a dependency with its loop running until the bubble's test ends.
type watched struct {
	*Watch
	dep *dependency
	log *testlog.Buffer

	mu  sync.Mutex
	ups []bool
}

func (w *watched) changes() []bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.ups)
}

func start(t *testing.T, o Options) *watched {
	w := &watched{dep: &dependency{}, log: &testlog.Buffer{}}
	o.Log = slog.New(slog.NewJSONHandler(w.log, nil))
	o.OnChange = func(up bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.ups = append(w.ups, up)
	}
	w.Watch = NewWatch(w.dep.ping, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done // Run returns when its context ends
	})
	return w
}

var redisLike = Options{
	Name: "state_store", Every: time.Second, EveryDown: 250 * time.Millisecond,
	DownLevel: slog.LevelWarn, Then: "each instance keeps its own breakers",
}

// TestWatchNoticesOutageAndReturn: with no traffic, the loop's pings notice the outage within
// Every and the return within EveryDown; each change is one line and one OnChange.
func TestWatchNoticesOutageAndReturn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := start(t, redisLike)
		if !w.Up() {
			t.Fatal("a new Watch is down, want up until a ping says otherwise")
		}
		w.dep.down.Store(true)
		time.Sleep(time.Second)
		synctest.Wait()
		if w.Up() {
			t.Fatal("up a ping after the dependency went away")
		}
		since, reason, down := w.Down()
		if !down || !since.Equal(time.Now()) || !errors.Is(reason, errRefused) {
			t.Fatalf("Down() = %v, %v, %v; want since now and the error", since, reason, down)
		}
		if err := w.Err(errSentinel); !errors.Is(err, errSentinel) || !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "since") {
			t.Fatalf("Err = %v, want the sentinel saying since when and why", err)
		}

		// Eight failed pings more, every 250ms from 1.25s to 3s: still one line. Back at 3.1s,
		// between two pings: the next, at 3.25s, finds it.
		time.Sleep(2100 * time.Millisecond)
		w.dep.down.Store(false)
		time.Sleep(149 * time.Millisecond)
		synctest.Wait()
		if w.Up() {
			t.Fatal("up before a ping found the dependency back")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !w.Up() || w.Err(errSentinel) != nil {
			t.Fatalf("down one EveryDown after the dependency returned: %v", w.Err(errSentinel))
		}
		if got := w.changes(); !slices.Equal(got, []bool{false, true}) {
			t.Fatalf("OnChange calls = %v, want [false true]", got)
		}
		downs := w.log.Named(t, "state_store.down")
		if len(downs) != 1 || downs[0]["level"] != "WARN" || downs[0]["err"] != errRefused.Error() || downs[0]["then"] != redisLike.Then {
			t.Fatalf("state_store.down lines = %v, want one WARN with the error and what follows", downs)
		}
		ups := w.log.Named(t, "state_store.up")
		if len(ups) != 1 || ups[0]["outage_ms"] != float64(2250) {
			t.Fatalf("state_store.up lines = %v, want one with outage_ms 2250", ups)
		}
		if n := w.dep.pings.Load(); n != 1+8+1 {
			t.Fatalf("%d pings, want 10: one up, eight every 250ms while down, the one that found it back", n)
		}
	})
}

var errSentinel = errors.New("down")

// TestWatchFailedByManyCallsIsOneTransition: the calls that meet an outage mark it at once, and
// however many they are it is one line and one OnChange, which comes before the next ping.
func TestWatchFailedByManyCallsIsOneTransition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := start(t, Options{Name: "database", Every: time.Hour, DownLevel: slog.LevelError, OutageKey: "down_for_ms"})
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() { w.Failed(errRefused) })
		}
		wg.Wait()
		synctest.Wait()
		if w.Up() {
			t.Fatal("up after calls failed")
		}
		if got := w.changes(); !slices.Equal(got, []bool{false}) {
			t.Fatalf("OnChange calls = %v, want [false] at once", got)
		}
		if downs := w.log.Named(t, "database.down"); len(downs) != 1 || downs[0]["level"] != "ERROR" || downs[0]["then"] != nil {
			t.Fatalf("database.down lines = %v, want one ERROR, with no then", downs)
		}
		time.Sleep(time.Hour) // the next ping, while down, is an Every later: EveryDown is Every
		synctest.Wait()
		if ups := w.log.Named(t, "database.up"); len(ups) != 1 || ups[0]["down_for_ms"] != float64(time.Hour.Milliseconds()) {
			t.Fatalf("database.up lines = %v, want one with down_for_ms of an hour", ups)
		}
	})
}

// TestWatchTimeoutBoundsAPing: a dependency that never answers is down once Timeout runs out.
func TestWatchTimeoutBoundsAPing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := start(t, Options{Name: "database", Every: time.Second, Timeout: 800 * time.Millisecond})
		w.dep.hang.Store(true)
		time.Sleep(time.Second + 799*time.Millisecond)
		synctest.Wait()
		if !w.Up() {
			t.Fatal("down before the ping's timeout ran out")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if _, reason, down := w.Down(); !down || !errors.Is(reason, context.DeadlineExceeded) {
			t.Fatalf("Down() = %v, %v after the timeout, want down with the deadline", reason, down)
		}
	})
}

// TestWatchCheck: one ping by hand marks the dependency by its answer; a ping cut short by its
// caller's context says nothing of the dependency.
func TestWatchCheck(t *testing.T) {
	dep := &dependency{}
	w := NewWatch(dep.ping, Options{Name: "state_store"})
	dep.down.Store(true)
	if err := w.Check(t.Context()); !errors.Is(err, errRefused) || w.Up() {
		t.Fatalf("Check of a dead dependency = %v, up %v; want its error, down", err, w.Up())
	}
	dep.down.Store(false)
	if err := w.Check(t.Context()); err != nil || !w.Up() {
		t.Fatalf("Check of a live dependency = %v, up %v; want nil, up", err, w.Up())
	}
	dep.hang.Store(true)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := w.Check(ctx); !errors.Is(err, context.Canceled) || !w.Up() {
		t.Fatalf("Check with an ended context = %v, up %v; want the context's error, still up", err, w.Up())
	}
}

// TestWatchClosedTakesNoWord: once closed, a failing call is a closed client, not an outage.
func TestWatchClosedTakesNoWord(t *testing.T) {
	w := NewWatch((&dependency{}).ping, Options{Name: "state_store"})
	w.Close()
	w.Failed(errRefused)
	if !w.Up() {
		t.Fatal("down after a closed watch heard of a failure")
	}
}
