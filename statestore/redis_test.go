package statestore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/redisstore"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

// TestRedisOutage is the incident with a real redis-server killed and started again (empty, as
// after a crash without persistence): while it is down every call answers at once, with ErrDown;
// once it is back the Store comes up by itself and the fleet's calls work.
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
	quick("ForceBreaker", func() error {
		if err := s.ForceBreaker(t.Context(), "paywell/charge", payrouter.ForcedOpen, "i1"); !errors.Is(err, ErrDown) {
			t.Errorf("ForceBreaker while Redis is down = %v, want ErrDown", err)
		}
		return nil
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
	if err := s.ForceBreaker(t.Context(), "paywell/charge", payrouter.ForcedOpen, "i1"); err != nil {
		t.Fatalf("ForceBreaker after Redis returned: %v", err)
	}
	if st, err := rs.BreakerStates(t.Context(), []string{"paywell/charge"}); err != nil || st["paywell/charge"].Forced != payrouter.ForcedOpen {
		t.Fatalf("Redis's state of paywell/charge after ForceBreaker = %+v, %v; want forced open", st, err)
	}
	if held, err := s.HoldLease(t.Context(), "probe/paywell", "i1", time.Minute); err != nil || !held {
		t.Fatalf("HoldLease after Redis returned = %v, %v; want held", held, err)
	}
}
