package pgstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/pgstore/pgtest"
)

// slack is what a loaded, shared CI machine may add to a timeout before a call returns. The
// point is "about a second, never a hang", not a benchmark.
const slack = time.Second

// storeCalls are one call of each kind a request makes, for the outage tests.
func storeCalls(s *Store) map[string]func(ctx context.Context) error {
	return map[string]func(ctx context.Context) error{
		"Claim": func(ctx context.Context) error {
			_, _, err := s.Claim(ctx, "", "k-outage", fpA, time.Minute)
			return err
		},
		"ClaimCharge": func(ctx context.Context) error {
			_, err := s.ClaimCharge(ctx, "", "k-outage-charge", fpA, time.Minute, testCharge("ch_outage_claimed", payrouter.StatusProcessing))
			return err
		},
		"SaveCharge": func(ctx context.Context) error {
			return s.SaveCharge(ctx, testCharge("ch_outage", payrouter.StatusProcessing))
		},
		"Charge": func(ctx context.Context) error {
			_, err := s.Charge(ctx, "ch_outage")
			return err
		},
		"Take": func(ctx context.Context) error {
			_, err := s.Take(ctx, "c", 1, time.Minute)
			return err
		},
		"Ping": s.Ping,
	}
}

// wantUnavailable calls call and checks that it fails with an error wrapping
// ErrStateUnavailable within limit.
func wantUnavailable(t *testing.T, what string, limit time.Duration, call func(context.Context) error) {
	t.Helper()
	start := time.Now()
	err := call(t.Context())
	elapsed := time.Since(start)
	t.Logf("%s: after %v: %v", what, elapsed.Round(time.Millisecond), err)
	if !errors.Is(err, payrouter.ErrStateUnavailable) {
		t.Errorf("%s = %v; want an error wrapping ErrStateUnavailable", what, err)
	}
	for _, answer := range []error{payrouter.ErrNotFound, payrouter.ErrHoldLost, payrouter.ErrInFlight, payrouter.ErrMismatch} {
		if errors.Is(err, answer) {
			t.Errorf("%s = %v, which claims to know the data (%v)", what, err, answer)
		}
	}
	if elapsed > limit {
		t.Errorf("%s failed after %v; want within %v", what, elapsed, limit)
	}
}

// waitAnswers polls Ping until the database answers again.
func waitAnswers(t *testing.T, s *Store) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := s.Ping(t.Context())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store does not answer again 20 s after the database came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDatabaseStopped: with the database down (connections refused, pooled ones closed by its
// shutdown), every call fails at once with ErrStateUnavailable, and the store works again once
// it is back, without being reopened.
func TestDatabaseStopped(t *testing.T) {
	url := pgtest.NewDatabase(t)
	s := open(t, url, Options{})
	for name, call := range storeCalls(s) {
		if err := call(t.Context()); err != nil && !errors.Is(err, payrouter.ErrNotFound) {
			t.Fatalf("%s before the outage: %v", name, err)
		}
	}

	pgtest.Stop(t)
	for name, call := range storeCalls(s) {
		wantUnavailable(t, name+" with the database stopped", DefaultTimeout+slack, call)
	}
	// A new instance starting meanwhile fails too, as fast, and says which database.
	start := time.Now()
	_, err := Open(t.Context(), url, Options{})
	if !errors.Is(err, payrouter.ErrStateUnavailable) || time.Since(start) > DefaultTimeout+slack {
		t.Errorf("Open with the database stopped = %v after %v; want ErrStateUnavailable within %v", err, time.Since(start), DefaultTimeout+slack)
	}

	pgtest.Start(t)
	waitAnswers(t, s)
	for name, call := range storeCalls(s) {
		// Stale: the same new charge, saved again, was stored before the database stopped.
		if err := call(t.Context()); err != nil && !errors.Is(err, payrouter.ErrNotFound) && !errors.Is(err, payrouter.ErrInFlight) && !errors.Is(err, payrouter.ErrStale) {
			t.Errorf("%s after the database came back: %v", name, err)
		}
	}
}

// TestDatabaseFrozen: a database that accepts connections and never answers (every server
// process stopped with SIGSTOP) is the outage that hangs a client without deadlines. Calls on
// pooled connections and on new ones alike fail within Timeout and a little, and the store
// works again once the server goes on.
func TestDatabaseFrozen(t *testing.T) {
	const timeout = 500 * time.Millisecond
	s := open(t, pgtest.NewDatabase(t), Options{Timeout: timeout})
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}

	pgtest.Pause(t)
	// The first call finds an idle pooled connection; its deadline breaks that connection, so
	// the later ones open new connections, which hang in the startup handshake instead.
	for name, call := range storeCalls(s) {
		wantUnavailable(t, name+" with the database frozen", timeout+slack, call)
	}
	pgtest.Resume(t)
	waitAnswers(t, s)
	if err := s.SaveCharge(t.Context(), testCharge("ch_after", payrouter.StatusProcessing)); err != nil {
		t.Fatalf("SaveCharge after the database went on: %v", err)
	}
}

// TestErrorsRedactThePassword: an error naming the database never shows its password.
func TestErrorsRedactThePassword(t *testing.T) {
	for name, url := range map[string]string{
		"refused":        "postgres://payrouter:s3cr3t-pw@127.0.0.1:1/payrouter?sslmode=disable",
		"does not parse": "postgres://payrouter:s3cr3t-pw@127.0.0.1:notaport/payrouter",
		"keyword form":   "host=127.0.0.1 port=1 user=payrouter password=s3cr3t-pw sslmode=disable",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Open(t.Context(), url, Options{Timeout: 200 * time.Millisecond})
			if err == nil {
				t.Fatal("Open succeeded")
			}
			if strings.Contains(err.Error(), "s3cr3t-pw") {
				t.Fatalf("the error shows the password: %v", err)
			}
			if name == "refused" && !errors.Is(err, payrouter.ErrStateUnavailable) {
				t.Fatalf("a refused connection = %v; want ErrStateUnavailable", err)
			}
		})
	}
	if err := Migrate(t.Context(), "postgres://payrouter:s3cr3t-pw@127.0.0.1:1/x"); err == nil || strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Fatalf("Migrate of an unreachable database = %v; want an error without the password", err)
	}
}

// TestNoDeadConnectionsAfterARestart: connections pooled before the database restarted are
// dead. Once one call has met the outage, none of them is handed out again: every call after the
// database is back succeeds at once, none fails on a connection from before (the contract's
// "the earlier charge reads as it was" once the database is back).
func TestNoDeadConnectionsAfterARestart(t *testing.T) {
	s := open(t, pgtest.NewDatabase(t), Options{})
	var wg sync.WaitGroup
	for range 8 { // several pooled connections, all idle afterwards
		wg.Go(func() {
			if _, err := s.Charge(t.Context(), "ch_none"); !errors.Is(err, payrouter.ErrNotFound) {
				t.Errorf("before the restart: %v", err)
			}
		})
	}
	wg.Wait()
	pgtest.Stop(t)
	if err := s.Ping(t.Context()); !errors.Is(err, payrouter.ErrStateUnavailable) {
		t.Fatalf("Ping with the database stopped = %v; want ErrStateUnavailable", err)
	}
	pgtest.Start(t)
	for i := range 8 {
		if _, err := s.Charge(t.Context(), "ch_none"); !errors.Is(err, payrouter.ErrNotFound) {
			t.Errorf("call %d once the database is back: %v; want it answered", i+1, err)
		}
	}
}
