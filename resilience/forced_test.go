package resilience

import (
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
)

func TestForced(t *testing.T) {
	tests := []struct {
		name    string
		tripped bool // the state machine is open before forcing
		force   payrouter.Forced
		// what the breaker shows while forced
		state State
		admit bool
		// what the observer hears on forcing, then on clearing the forcing
		moves []string
	}{
		{"force open a closed breaker", false, payrouter.ForcedOpen, StateOpen, false,
			[]string{"closed>open", "open>closed"}},
		{"force open a tripped breaker", true, payrouter.ForcedOpen, StateOpen, false,
			[]string{"closed>open"}}, // open all along: nothing to hear
		{"force close a closed breaker", false, payrouter.ForcedClosed, StateClosed, true,
			nil},
		{"force close a tripped breaker", true, payrouter.ForcedClosed, StateClosed, true,
			[]string{"closed>open", "open>closed", "closed>open"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := newRecorder()
				b := NewBreaker("ding", payrouter.OpCharge, threeThenCool, rec)
				if tc.tripped {
					trip(t, b)
				}
				openUntil := b.OpenUntil()

				b.Force(tc.force)
				s := b.Snapshot()
				if s.State != tc.state || s.Forced != tc.force || !s.OpenUntil.IsZero() {
					t.Errorf("forced %q: got state %s, forced %q, open until %v; want %s, %q, zero",
						tc.force, s.State, s.Forced, s.OpenUntil, tc.state, tc.force)
				}
				if got := b.State(); got != tc.state {
					t.Errorf("State forced %q: got %s, want %s", tc.force, got, tc.state)
				}
				for i := range 10 {
					done, err := b.Allow()
					if tc.admit != (err == nil) {
						t.Fatalf("call %d forced %q: Allow error %v, want admitted %v", i+1, tc.force, err, tc.admit)
					}
					if err != nil && !errors.Is(err, ErrOpen) {
						t.Errorf("refusal forced %q: got %v, want ErrOpen", tc.force, err)
					}
					if done != nil {
						done(unav) // nothing can trip a breaker forced closed
					}
				}
				if got := b.Snapshot().State; got != tc.state {
					t.Errorf("after 10 failures forced %q: state %s, want %s", tc.force, got, tc.state)
				}

				b.Force(payrouter.ForcedNone)
				want := StateClosed
				if tc.tripped {
					want = StateOpen
				}
				s = b.Snapshot()
				if s.State != want || s.Forced != payrouter.ForcedNone || !s.OpenUntil.Equal(openUntil) {
					t.Errorf("forcing cleared: got state %s, forced %q, open until %v; want %s (as before), none, %v",
						s.State, s.Forced, s.OpenUntil, want, openUntil)
				}
				expectMoves(t, rec, tc.moves...)
			})
		})
	}
}

// Forcing leaves the state machine to its own clock: a cooldown that ends while forced open shows
// as half-open once the forcing is cleared.
func TestForcedOpenCooldownRunsOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		b := NewBreaker("ding", payrouter.OpCharge, threeThenCool, rec)
		trip(t, b)
		b.Force(payrouter.ForcedOpen)
		time.Sleep(time.Minute)
		expectState(t, b, StateOpen)
		b.Force(payrouter.ForcedNone)
		expectState(t, b, StateHalfOpen)
		expectMoves(t, rec, "closed>open", "open>half_open")
	})
}

func TestReset(t *testing.T) {
	tests := []struct {
		name  string
		setUp func(t *testing.T, b *Breaker)
		moves []string // heard in the set-up and then on reset
	}{
		{"closed", func(t *testing.T, b *Breaker) { feed(t, b, unav, unav) },
			nil},
		{"tripped", func(t *testing.T, b *Breaker) { trip(t, b) },
			[]string{"closed>open", "open>closed"}},
		{"half-open", func(t *testing.T, b *Breaker) { trip(t, b); time.Sleep(time.Minute); b.State() },
			[]string{"closed>open", "open>half_open", "half_open>closed"}},
		{"forced open", func(t *testing.T, b *Breaker) { b.Force(payrouter.ForcedOpen) },
			[]string{"closed>open", "open>closed"}},
		{"forced closed over a tripped breaker", func(t *testing.T, b *Breaker) { trip(t, b); b.Force(payrouter.ForcedClosed) },
			[]string{"closed>open", "open>closed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := newRecorder()
				b := NewBreaker("ding", payrouter.OpCharge, threeThenCool, rec)
				tc.setUp(t, b)
				b.Reset()
				want := Snapshot{Name: "ding/charge", Gateway: "ding", Operation: payrouter.OpCharge, State: StateClosed}
				if got := b.Snapshot(); got != want {
					t.Errorf("after reset:\n got %+v\nwant %+v", got, want)
				}
				expectMoves(t, rec, tc.moves...)
				// A fresh machine: the full run of failures is needed to trip it again.
				feed(t, b, unav, unav)
				expectState(t, b, StateClosed)
			})
		})
	}
}

// A call admitted before a reset reports into the old state machine, which is gone.
func TestResetIgnoresCallsAdmittedBefore(t *testing.T) {
	rec := newRecorder()
	b := NewBreaker("ding", payrouter.OpCharge, BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 1}}, rec)
	done, err := b.Allow()
	if err != nil {
		t.Fatal(err)
	}
	b.Reset()
	done(unav)
	expectState(t, b, StateClosed)
	expectMoves(t, rec)
}

// TestForcedHeard: the observer hears each change of forcing, and only changes, so that a
// forced state can be told from the breaker's own (circuit_breaker_forced). A reset clears a
// forcing and says so; a reset of a breaker nobody forced says nothing.
func TestForcedHeard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		b := NewBreaker("ding", payrouter.OpCharge, threeThenCool, rec)
		b.Reset() // nothing forced: nothing to hear
		b.Force(payrouter.ForcedClosed)
		b.Force(payrouter.ForcedClosed) // the same again
		feed(t, b, unav, unav, unav)    // a breaker forced closed does not trip, nor unforce
		b.Force(payrouter.ForcedOpen)
		b.Force(payrouter.ForcedNone)
		b.Force(payrouter.ForcedOpen)
		b.Reset()
		rec.mu.Lock()
		defer rec.mu.Unlock()
		want := []string{"ding/charge=closed", "ding/charge=open", "ding/charge=", "ding/charge=open", "ding/charge="}
		if !slices.Equal(rec.forced, want) {
			t.Errorf("forcing heard %q, want %q", rec.forced, want)
		}
	})
}
