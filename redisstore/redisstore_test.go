package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/redisstore"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

// suiteTimeout bounds each Redis call in the shared suite. The suite checks behaviour, not
// speed: a loaded CI machine running -race must not fail it for being slow. The tight default
// is tested by TestBreakerAndLeaseCallsFailFastWithRedisDown.
const suiteTimeout = time.Second

// prefixSeq gives every store a test opens a key prefix of its own, so stores sharing one
// redis-server start empty without a FLUSHDB between them.
var prefixSeq atomic.Int64

// openStore opens a store on the Redis at url, closed when tb ends; an empty o.Prefix gets a
// fresh one.
func openStore(tb testing.TB, url string, o redisstore.Options) *redisstore.Store {
	tb.Helper()
	if o.Prefix == "" {
		o.Prefix = fmt.Sprintf("test%d:", prefixSeq.Add(1))
	}
	s, err := redisstore.Open(url, o)
	if err != nil {
		tb.Fatalf("Open(%s): %v", url, err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// TestForcedStates: forced states in Redis, set and cleared through ForceBreaker and read back
// through BreakerStates.
func TestForcedStates(t *testing.T) {
	srv := redistest.Start(t)
	checkForcedStates(t, openStore(t, srv.URL(), redisstore.Options{Timeout: suiteTimeout}))
}

// checkForcedStates forces and clears breakers step by step through s, an empty store, and reads
// every forced state back after each step.
func checkForcedStates(t *testing.T, s *redisstore.Store) {
	forcedEqual(t, s, map[string]payrouter.Forced{})
	// Each step applies to the state the previous ones left.
	steps := []struct {
		name    string
		breaker string
		forced  payrouter.Forced
		want    map[string]payrouter.Forced
	}{
		{"force open", "paywell/charge", payrouter.ForcedOpen,
			map[string]payrouter.Forced{"paywell/charge": payrouter.ForcedOpen}},
		{"another operation is its own breaker", "paywell/refund", payrouter.ForcedClosed,
			map[string]payrouter.Forced{"paywell/charge": payrouter.ForcedOpen, "paywell/refund": payrouter.ForcedClosed}},
		{"force the other way", "paywell/charge", payrouter.ForcedClosed,
			map[string]payrouter.Forced{"paywell/charge": payrouter.ForcedClosed, "paywell/refund": payrouter.ForcedClosed}},
		{"none clears", "paywell/charge", payrouter.ForcedNone,
			map[string]payrouter.Forced{"paywell/refund": payrouter.ForcedClosed}},
		{"clearing a breaker never forced", "ding/charge", payrouter.ForcedNone,
			map[string]payrouter.Forced{"paywell/refund": payrouter.ForcedClosed}},
		{"clear the last", "paywell/refund", payrouter.ForcedNone,
			map[string]payrouter.Forced{}},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			if err := s.ForceBreaker(t.Context(), step.breaker, step.forced, "admin"); err != nil {
				t.Fatalf("ForceBreaker(%s, %q): %v", step.breaker, step.forced, err)
			}
			forcedEqual(t, s, step.want)
		})
	}
}

// TestLosingRedisLosesOnlyCoordination is what docs/architecture.md (State stores) promises of
// Redis's data: a Redis that comes back empty (a restart without persistence, a failover that
// dropped acknowledged writes) is a fresh start, not an error. Breakers read closed with no counts,
// so they re-learn from the next calls; no forced state is left; a lease is free for whoever asks
// next. Nothing else was there to lose.
func TestLosingRedisLosesOnlyCoordination(t *testing.T) {
	fl := newFleet(t)
	s := fl.instance(t)
	ctx := t.Context()
	rules := payrouter.BreakerRules{ConsecutiveFailures: 5, Window: time.Minute, Cooldown: time.Minute}
	if _, _, err := s.ReportOutcomes(ctx, "ding/charge", rules, failure(2), "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OpenBreaker(ctx, "paywell/charge", time.Minute, payrouter.BreakerCounts{}, 0, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.ForceBreaker(ctx, "tranglo/charge", payrouter.ForcedOpen, "a"); err != nil {
		t.Fatal(err)
	}
	holdLease(t, s, "a", time.Minute, true)

	fl.srv.Stop()
	if err := fl.srv.Restart(); err != nil {
		t.Fatal(err)
	}

	names := []string{"ding/charge", "paywell/charge", "tranglo/charge"}
	states, err := s.BreakerStates(ctx, names)
	if err != nil {
		t.Fatalf("BreakerStates after Redis came back empty: %v", err)
	}
	for _, n := range names {
		if st := states[n]; st != (payrouter.SharedBreaker{}) {
			t.Errorf("%s after Redis came back empty = %+v, want closed with no counts", n, st)
		}
	}
	holdLease(t, fl.instance(t), "b", time.Minute, true)
	if keys := fl.keys(t); len(keys) != 1 || !strings.Contains(keys[0], ":lease:") {
		t.Errorf("keys after Redis came back empty and b took the lease = %v, want only the lease", keys)
	}
}

// redisError is a server's error reply as go-redis hands it over (redis.Error), for replies a
// test cannot make a real redis-server give on demand (LOADING, READONLY).
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// TestIsUnavailable: what statestore goes down on. Errors of a Redis that cannot serve are; a
// caller's mistake, an answer about the data and a caller that gave up are not.
func TestIsUnavailable(t *testing.T) {
	fl := newFleet(t)
	up := fl.instance(t)
	silent := fl.instanceAt(t, silentRedis(t), 50*time.Millisecond)
	closed := fl.instance(t)
	closed.Close()
	if err := fl.raw.Set(t.Context(), fl.prefix+"breakers:forced", "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	canceled, cancel := context.WithCancel(ctx)
	cancel()

	tests := []struct {
		name string
		err  func() error
		want bool
	}{
		{"nil", func() error { return nil }, false},
		{"no answer within the timeout", func() error { return silent.Ping(ctx) }, true},
		{"closed client", func() error { return closed.Ping(ctx) }, true},
		{"deadline", func() error { return fmt.Errorf("redisstore: x: %w", context.DeadlineExceeded) }, true},
		{"loading", func() error {
			return fmt.Errorf("redisstore: x: %w", redisError("LOADING Redis is loading the dataset in memory"))
		}, true},
		{"read only replica", func() error { return redisError("READONLY You can't write against a read only replica.") }, true},
		{"cluster down", func() error { return redisError("CLUSTERDOWN The cluster is down") }, true},
		{"wrong type: the data, not the server", func() error {
			_, err := up.BreakerStates(ctx, []string{"paywell/charge"})
			return err
		}, false},
		{"unknown command", func() error { return redisError("ERR unknown command 'FOO'") }, false},
		{"caller's mistake", func() error { return up.ForceBreaker(ctx, "", payrouter.ForcedOpen, "") }, false},
		{"caller gave up", func() error { return up.Ping(canceled) }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			if (err == nil) != (tc.name == "nil") {
				t.Fatalf("the call returned %v", err)
			}
			if got := redisstore.IsUnavailable(err); got != tc.want {
				t.Fatalf("IsUnavailable(%v) = %v, want %v", err, got, tc.want)
			}
		})
	}

	t.Run("connection refused", func(t *testing.T) {
		fl.srv.Stop()
		err := up.Ping(ctx)
		if err == nil || !redisstore.IsUnavailable(err) {
			t.Fatalf("Ping of a stopped Redis = %v; want an error IsUnavailable reports", err)
		}
		if err := fl.srv.Restart(); err != nil {
			t.Fatal(err)
		}
		if err := up.Ping(ctx); err != nil {
			t.Fatalf("Ping after Redis restarted: %v", err)
		}
	})
}

// TestPing: Ping answers while Redis does, and fails within the timeout when it does not.
func TestPing(t *testing.T) {
	fl := newFleet(t)
	if err := fl.instance(t).Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	s := fl.instanceAt(t, silentRedis(t), redisstore.DefaultTimeout)
	start := time.Now()
	err := s.Ping(context.Background())
	if took := time.Since(start); err == nil || took > 3*redisstore.DefaultTimeout {
		t.Fatalf("Ping of a silent Redis = %v after %v; want an error within 3 × %v", err, took, redisstore.DefaultTimeout)
	}
	if !errors.Is(err, context.DeadlineExceeded) && !redisstore.IsUnavailable(err) {
		t.Fatalf("Ping of a silent Redis = %v; want a timeout", err)
	}
}

// forcedNames are the breakers forcedEqual reads: every one the tests force.
var forcedNames = []string{"paywell/charge", "paywell/refund", "ding/charge", "tranglo/charge", "tranglo/refund"}

// forcedEqual fails t unless the forced states s reads (BreakerStates, of forcedNames) are want.
func forcedEqual(t *testing.T, s *redisstore.Store, want map[string]payrouter.Forced) {
	t.Helper()
	states, err := s.BreakerStates(t.Context(), forcedNames)
	if err != nil {
		t.Fatalf("BreakerStates: %v", err)
	}
	got := map[string]payrouter.Forced{}
	for name, st := range states {
		if st.Forced != payrouter.ForcedNone {
			got[name] = st.Forced
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("forced states = %v, want %v", got, want)
	}
}
