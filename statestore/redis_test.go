package statestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/redisstore"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

// TestRedisOutage is the incident with a real redis-server killed and started again (empty, as
// after a crash without persistence): every call answers quickly while it is down, and what was
// written meanwhile is in Redis once it is back.
func TestRedisOutage(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := redisstore.Open(srv.URL(), redisstore.Options{Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("redisstore.Open: %v", err)
	}
	skipIfTODO(t, rs)
	s := New(rs, Options{Unavailable: redisstore.IsUnavailable, CheckDown: 20 * time.Millisecond, CheckUp: 50 * time.Millisecond})
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
	mustSave(t, s, charge("ch_before", payrouter.StatusProcessing, base))

	srv.Stop()
	quick := func(what string, call func() error) {
		t.Helper()
		start := time.Now()
		if err := call(); err != nil {
			t.Fatalf("%s while Redis is down: %v", what, err)
		}
		if took := time.Since(start); took >= time.Second {
			t.Fatalf("%s while Redis is down took %v, want well under a second", what, took)
		}
	}
	quick("SaveCharge", func() error {
		return s.SaveCharge(t.Context(), charge("ch_out", payrouter.StatusProcessing, base))
	})
	if s.Up() {
		t.Fatal("up after a call to a dead Redis")
	}
	quick("Claim", func() error {
		rec, err := s.Claim(t.Context(), "k-out", fpA, time.Minute)
		if rec != nil {
			return fmt.Errorf("replayed %+v for a new key", rec)
		}
		return err
	})
	quick("Complete", func() error { return s.Complete(t.Context(), "k-out", record(fpA, 201, "out"), time.Hour) })
	quick("Charge", func() error { _, err := s.Charge(t.Context(), "ch_out"); return err })
	if err := s.Ping(t.Context()); !errors.Is(err, ErrDown) {
		t.Fatalf("Ping while Redis is down = %v, want ErrDown", err)
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Up after Redis restarts", s.Up)
	wantCharge(t, rs, "ch_out", payrouter.StatusProcessing)
	wantReplay(t, rs, "k-out", fpA, record(fpA, 201, "out"))
	wantReplay(t, s, "k-out", fpA, record(fpA, 201, "out"))
}

// skipIfTODO skips the test while redisstore's store methods are still stubs that panic with
// "TODO" (it is being written alongside this package); once they are implemented the test runs.
func skipIfTODO(t *testing.T, rs *redisstore.Store) {
	t.Helper()
	var todo any
	func() {
		defer func() {
			if r := recover(); r != nil {
				if !strings.Contains(fmt.Sprint(r), "TODO") {
					panic(r)
				}
				todo = r
			}
		}()
		ctx := t.Context()
		_, _ = rs.Charge(ctx, "ch_probe")
		_, _ = rs.Claim(ctx, "k-probe", fpA, time.Second)
		_ = rs.Release(ctx, "k-probe")
	}()
	if todo != nil {
		t.Skipf("redisstore's store methods still panic with %q: not implemented yet", todo)
	}
}
