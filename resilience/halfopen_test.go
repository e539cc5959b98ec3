package resilience

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
)

// halfOpen returns a breaker with n trial calls, tripped and past its cooldown. It sleeps: call
// it inside a synctest bubble.
func halfOpen(t *testing.T, n int, rec *recorder) *Breaker {
	t.Helper()
	s := threeThenCool
	s.HalfOpenRequests = n
	b := NewBreaker("paywell", payrouter.OpCharge, s, rec)
	trip(t, b)
	time.Sleep(s.Cooldown + time.Second)
	expectState(t, b, StateHalfOpen)
	return b
}

func TestHalfOpenTrials(t *testing.T) {
	tests := []struct {
		name   string
		trials int
		// outcomes of the trial calls, in order of their reports
		outcomes []payrouter.Outcome
		want     State
		moves    []string
	}{
		{"one trial succeeds", 1, []payrouter.Outcome{succ}, StateClosed,
			[]string{"closed>open", "open>half_open", "half_open>closed"}},
		{"a declined trial is a success", 1, []payrouter.Outcome{decl}, StateClosed,
			[]string{"closed>open", "open>half_open", "half_open>closed"}},
		{"one trial unavailable", 1, []payrouter.Outcome{unav}, StateOpen,
			[]string{"closed>open", "open>half_open", "half_open>open"}},
		{"one trial times out", 1, []payrouter.Outcome{tmo}, StateOpen,
			[]string{"closed>open", "open>half_open", "half_open>open"}},
		{"one trial unknown", 1, []payrouter.Outcome{unk}, StateOpen,
			[]string{"closed>open", "open>half_open", "half_open>open"}},
		{"three trials succeed", 3, []payrouter.Outcome{succ, pend, succ}, StateClosed,
			[]string{"closed>open", "open>half_open", "half_open>closed"}},
		{"two of three succeed: still half-open", 3, []payrouter.Outcome{succ, succ}, StateHalfOpen,
			[]string{"closed>open", "open>half_open"}},
		{"the last of three fails", 3, []payrouter.Outcome{succ, succ, unav}, StateOpen,
			[]string{"closed>open", "open>half_open", "half_open>open"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := newRecorder()
				b := halfOpen(t, tc.trials, rec)
				var dones []func(payrouter.Outcome)
				for range tc.trials {
					done, err := b.Allow()
					if err != nil {
						t.Fatalf("trial call: %v", err)
					}
					dones = append(dones, done)
				}
				if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
					t.Fatalf("call %d in half-open with %d trials: got %v, want ErrOpen", tc.trials+1, tc.trials, err)
				}
				for i, o := range tc.outcomes {
					dones[i](o)
				}
				expectState(t, b, tc.want)
				expectMoves(t, rec, tc.moves...)
				if tc.want == StateOpen {
					if got, want := b.OpenUntil(), time.Now().Add(threeThenCool.Cooldown); !got.Equal(want) {
						t.Errorf("OpenUntil after a failed trial: got %v, want %v (a new cooldown)", got, want)
					}
				}
			})
		})
	}
}

func TestHalfOpenAdmitsExactlyNTrialsUnderConcurrency(t *testing.T) {
	for _, trials := range []int{1, 3, 10} {
		t.Run("", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := newRecorder()
				b := halfOpen(t, trials, rec)

				var (
					start    = make(chan struct{})
					wg       sync.WaitGroup
					admitted atomic.Int64
					mu       sync.Mutex
					dones    []func(payrouter.Outcome)
				)
				for range 64 {
					wg.Go(func() {
						<-start
						done, err := b.Allow()
						if err != nil {
							return
						}
						admitted.Add(1)
						mu.Lock()
						dones = append(dones, done)
						mu.Unlock()
					})
				}
				close(start)
				wg.Wait()
				if got := admitted.Load(); got != int64(trials) {
					t.Fatalf("64 concurrent calls in half-open with %d trials: %d admitted", trials, got)
				}
				if got := rec.rejected["paywell/charge"]; got != 64-trials {
					t.Errorf("rejections heard: got %d, want %d", got, 64-trials)
				}
				for _, done := range dones {
					done(succ)
				}
				expectState(t, b, StateClosed)
			})
		})
	}
}

// A trial whose outcome is excluded says nothing of the gateway: its place goes to another call.
func TestHalfOpenExcludedTrialFreesItsPlace(t *testing.T) {
	for _, o := range []payrouter.Outcome{malf, bhFull} {
		t.Run(string(o), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := halfOpen(t, 1, newRecorder())
				feed(t, b, o)
				expectState(t, b, StateHalfOpen)
				feed(t, b, succ)
				expectState(t, b, StateClosed)
			})
		})
	}
}

// The counts of a failed half-open period reach the observer with half_open>open.
func TestHalfOpenFailureReportsCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		b := halfOpen(t, 3, rec)
		feed(t, b, succ, unav)
		if got, want := rec.last(), (transition{"paywell/charge", StateHalfOpen, StateOpen, Counts{2, 1, 1}}); got != want {
			t.Errorf("last transition: got %+v, want %+v", got, want)
		}
	})
}

// TestTrialOfAnEarlierHalfOpenPeriod: a trial admitted in one half-open period that reports after
// the breaker reopened and went half-open again counts for nothing in the new period, as
// gobreaker's generations drop a call admitted before the state changed: its success does not
// close it, its failure does not reopen it, and an excluded outcome does not give back a trial
// place of the new period.
func TestTrialOfAnEarlierHalfOpenPeriod(t *testing.T) {
	tests := []struct {
		name  string
		late  payrouter.Outcome
		check func(t *testing.T, b *Breaker)
	}{
		{"success", succ, func(t *testing.T, b *Breaker) {
			// Had the late success counted, this first success of the period would close it.
			nextDone(t, b)(succ)
			expectState(t, b, StateHalfOpen)
		}},
		{"failure", unav, func(t *testing.T, b *Breaker) { expectState(t, b, StateHalfOpen) }},
		{"excluded", malf, func(t *testing.T, b *Breaker) {
			nextDone(t, b) // the period's second place: both are taken
			if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
				t.Fatalf("a third trial in a period of two: %v, want ErrOpen", err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := halfOpen(t, 2, newRecorder())
				late, failing := nextDone(t, b), nextDone(t, b)
				failing(unav) // reopens
				expectState(t, b, StateOpen)
				time.Sleep(threeThenCool.Cooldown + time.Second)
				expectState(t, b, StateHalfOpen)
				first := nextDone(t, b)

				late(tc.late)
				tc.check(t, b)
				expectState(t, b, StateHalfOpen)
				first(succ) // the period's own trials still decide
				if tc.late == malf {
					return // the second place's trial is still out
				}
				nextDone(t, b)(succ)
				expectState(t, b, StateClosed)
			})
		})
	}
}

// nextDone admits one trial call and returns its report.
func nextDone(t *testing.T, b *Breaker) func(payrouter.Outcome) {
	t.Helper()
	done, err := b.Allow()
	if err != nil {
		t.Fatalf("trial call: %v", err)
	}
	return done
}
