package statestore

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/redisstore"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

// TestRedisOutage is the incident with a real redis-server killed and started again (empty, as
// after a crash without persistence): while it is down every call answers at once, the fleet's
// calls with ErrDown and forced states from this instance's memory; once it is back the Store
// comes up by itself, the forced state set meanwhile is in Redis, and the fleet's calls work.
func TestRedisOutage(t *testing.T) {
	const timeout = 100 * time.Millisecond
	srv := redistest.Start(t)
	rs, err := redisstore.Open(srv.URL(), redisstore.Options{Timeout: timeout, Prefix: "outage:"})
	if err != nil {
		t.Fatalf("redisstore.Open: %v", err)
	}
	var ups []bool
	upCh := make(chan bool, 4)
	s := New(rs, Options{
		Unavailable: redisstore.IsUnavailable, CheckDown: 20 * time.Millisecond, CheckUp: 50 * time.Millisecond,
		OnChange: func(up bool) { upCh <- up },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		s.Close()
	})
	mustSetForced(t, s, "ding/charge", payrouter.ForcedClosed)

	srv.Stop()
	// The first call to meet the outage costs at most the client's timeout; every later one
	// nothing, since none waits on a Redis known to be down.
	if _, _, err := s.ReportOutcomes(t.Context(), "paywell/charge", payrouter.BreakerRules{ConsecutiveFailures: 1, Cooldown: time.Minute},
		payrouter.BreakerReport{Failures: 1, TrailingFailures: 1}, "i1"); !errors.Is(err, ErrDown) {
		t.Fatalf("ReportOutcomes meeting the outage = %v, want ErrDown", err)
	}
	if s.Up() {
		t.Fatal("up after a call to a dead Redis")
	}
	quick := func(what string, call func() error) {
		t.Helper()
		start := time.Now()
		err := call()
		if took := time.Since(start); took >= timeout {
			t.Fatalf("%s while Redis is known to be down took %v, want no wait on it (its timeout is %v)", what, took, timeout)
		}
		if err != nil {
			t.Fatalf("%s while Redis is down: %v", what, err)
		}
	}
	quick("SetForced", func() error { return s.SetForced(t.Context(), "paywell/charge", payrouter.ForcedOpen) })
	quick("ForcedStates", func() error {
		got, err := s.ForcedStates(t.Context())
		if want := map[string]payrouter.Forced{"ding/charge": payrouter.ForcedClosed, "paywell/charge": payrouter.ForcedOpen}; err == nil && !maps.Equal(got, want) {
			t.Errorf("ForcedStates while Redis is down = %v, want %v", got, want)
		}
		return err
	})
	quick("HoldLease", func() error {
		if _, err := s.HoldLease(t.Context(), "probe/paywell", "i1", time.Minute); !errors.Is(err, ErrDown) {
			t.Errorf("HoldLease while Redis is down = %v, want ErrDown", err)
		}
		return nil
	})
	quick("Ping", func() error {
		if err := s.Ping(t.Context()); !errors.Is(err, ErrDown) {
			t.Errorf("Ping while Redis is down = %v, want ErrDown", err)
		}
		return nil
	})

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Up after Redis restarts", s.Up)
	for len(ups) < 2 {
		select {
		case up := <-upCh:
			ups = append(ups, up)
		case <-time.After(deadline):
			t.Fatalf("OnChange calls = %v, want [false true]", ups)
		}
	}
	if ups[0] || !ups[1] {
		t.Fatalf("OnChange calls = %v, want [false true]", ups)
	}
	// Redis came back empty: what it knows now is what this instance pushed, and nothing older.
	got, err := rs.ForcedStates(t.Context())
	if want := map[string]payrouter.Forced{"paywell/charge": payrouter.ForcedOpen}; err != nil || !maps.Equal(got, want) {
		t.Fatalf("Redis's forced states after the re-sync = %v, %v; want %v", got, err, want)
	}
	if held, err := s.HoldLease(t.Context(), "probe/paywell", "i1", time.Minute); err != nil || !held {
		t.Fatalf("HoldLease after Redis returned = %v, %v; want held", held, err)
	}
}
