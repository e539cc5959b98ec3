package resilience

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
)

// strict trips on anything that counts as a failure, by every rule at once.
var strict = BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 1, FailuresInWindow: 1, FailureRate: 0.01, MinRequests: 1, Window: time.Minute}}

func TestClosedTripRules(t *testing.T) {
	consecutive3 := BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 3}}
	window3 := BreakerSettings{BreakerRules: payrouter.BreakerRules{FailuresInWindow: 3, Window: time.Minute}}
	rate := BreakerSettings{BreakerRules: payrouter.BreakerRules{FailureRate: 0.5, MinRequests: 10, Window: time.Minute}}
	rateMin4 := BreakerSettings{BreakerRules: payrouter.BreakerRules{FailureRate: 0.5, MinRequests: 4, Window: time.Minute}}

	tests := []struct {
		name     string
		settings BreakerSettings
		outcomes []payrouter.Outcome
		want     State
	}{
		{"3 consecutive failures trip", consecutive3, repeat(unav, 3), StateOpen},
		{"2 consecutive failures do not", consecutive3, repeat(unav, 2), StateClosed},
		{"a success breaks the run", consecutive3, seq(repeat(unav, 2), []payrouter.Outcome{succ}, repeat(unav, 2)), StateClosed},
		{"a decline breaks the run", consecutive3, seq(repeat(unav, 2), []payrouter.Outcome{decl}, repeat(unav, 2)), StateClosed},
		{"an excluded error does not break the run", consecutive3, []payrouter.Outcome{unav, unav, malf, unav}, StateOpen},
		{"timeouts are failures", consecutive3, repeat(tmo, 3), StateOpen},
		{"unknowns are failures", consecutive3, repeat(unk, 3), StateOpen},
		{"failures mixed are failures", consecutive3, []payrouter.Outcome{unav, tmo, unk}, StateOpen},

		{"3 failures in the window trip", window3, []payrouter.Outcome{unav, succ, succ, unav, decl, succ, unav}, StateOpen},
		{"2 failures in the window do not", window3, []payrouter.Outcome{unav, succ, succ, unav, decl, succ}, StateClosed},

		{"rate under min requests does not trip", rate, repeat(unav, 9), StateClosed},
		{"rate at min requests trips", rate, seq(repeat(succ, 5), repeat(unav, 5)), StateOpen},
		{"rate below the threshold does not", rate, seq(repeat(succ, 6), repeat(unav, 4)), StateClosed},
		{"rate counts declines as successes", rate, seq(repeat(decl, 6), repeat(unav, 4)), StateClosed},
		// With exclusions counted toward min requests, the first failure would trip (1/1).
		{"exclusions do not count toward min requests", rateMin4, seq(repeat(malf, 20), []payrouter.Outcome{unav, unav, unav}), StateClosed},
		// With exclusions counted as requests, 3/24 would stay closed.
		{"exclusions are left out of the rate", rateMin4, seq(repeat(malf, 20), []payrouter.Outcome{succ, unav, unav, unav}), StateOpen},
		{"bulkhead_full left out of the rate", rateMin4, seq(repeat(bhFull, 20), []payrouter.Outcome{succ, unav, unav, unav}), StateOpen},

		{"50 declines leave it closed", strict, repeat(decl, 50), StateClosed},
		{"50 pendings leave it closed", strict, repeat(pend, 50), StateClosed},
		{"50 successes leave it closed", strict, repeat(succ, 50), StateClosed},
		{"50 errors are excluded", strict, repeat(malf, 50), StateClosed},
		{"50 bulkhead_full are excluded", strict, repeat(bhFull, 50), StateClosed},
		{"50 breaker_open are excluded", strict, repeat(brOpen, 50), StateClosed},
		{"an outcome no adapter should give is excluded", strict, repeat("bogus", 50), StateClosed},
		{"one failure trips strict", strict, seq(repeat(decl, 50), []payrouter.Outcome{unav}), StateOpen},
		{"no rule set never trips", BreakerSettings{}, repeat(unav, 100), StateClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			b := NewBreaker("paywell", payrouter.OpCharge, tc.settings, rec)
			feed(t, b, tc.outcomes...)
			expectState(t, b, tc.want)
			if tc.want == StateOpen {
				expectMoves(t, rec, "closed>open")
			} else {
				expectMoves(t, rec)
			}
		})
	}
}

func TestClosedCounts(t *testing.T) {
	b := NewBreaker("paywell", payrouter.OpCharge, BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 5}}, nil)
	feed(t, b, unav, succ, decl, malf, unav, tmo)
	want := Counts{Requests: 6, Failures: 3, ConsecutiveFailures: 2}
	if got := b.Snapshot().Counts; got != want {
		t.Errorf("counts after unav, succ, decl, malf, unav, tmo: got %+v, want %+v", got, want)
	}
}

// The counts that tripped the breaker reach the observer, although gobreaker clears its own on
// the transition.
func TestClosedTripReportsCounts(t *testing.T) {
	rec := newRecorder()
	b := NewBreaker("paywell", payrouter.OpCharge, BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 3}}, rec)
	feed(t, b, succ, malf, unav, unav, unav)
	want := Counts{Requests: 5, Failures: 3, ConsecutiveFailures: 3}
	if got := rec.last().Counts; got != want {
		t.Errorf("counts heard with closed>open: got %+v, want %+v", got, want)
	}
}

func TestClosedWindowRolls(t *testing.T) {
	tests := []struct {
		name     string
		settings BreakerSettings
	}{
		{"failures in window", BreakerSettings{BreakerRules: payrouter.BreakerRules{FailuresInWindow: 3, Window: 10 * time.Second}}},
		{"failure rate", BreakerSettings{BreakerRules: payrouter.BreakerRules{FailureRate: 1, MinRequests: 3, Window: 10 * time.Second}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := NewBreaker("paywell", payrouter.OpCharge, tc.settings, nil)
				feed(t, b, unav)
				time.Sleep(4 * time.Second)
				feed(t, b, unav)
				time.Sleep(7 * time.Second) // the first failure is now 11s old: out of the window
				feed(t, b, unav)
				expectState(t, b, StateClosed)
				if got := b.Snapshot().Counts.Failures; got != 2 {
					t.Errorf("failures in the window: got %d, want 2", got)
				}
				feed(t, b, unav)
				expectState(t, b, StateOpen)
			})
		})
	}
}

// A report that arrives after the breaker tripped belongs to the closed period that ended.
func TestClosedLateReportIgnored(t *testing.T) {
	b := NewBreaker("paywell", payrouter.OpCharge, BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 1, Cooldown: time.Minute}}, nil)
	late, err := b.Allow()
	if err != nil {
		t.Fatal(err)
	}
	feed(t, b, unav)
	late(succ)
	expectState(t, b, StateOpen)
}
