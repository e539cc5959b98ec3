package resilience

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
)

// answer is a call that answers o at once.
func answer(o payrouter.Outcome) func(context.Context) payrouter.Result {
	return func(context.Context) payrouter.Result { return payrouter.Result{Outcome: o} }
}

// hang is a call to a gateway that never answers: it returns timeout when its context ends.
func hang(ctx context.Context) payrouter.Result {
	<-ctx.Done()
	return payrouter.Result{Outcome: payrouter.OutcomeTimeout, Detail: ctx.Err().Error()}
}

func TestGuardDeadline(t *testing.T) {
	gateways := []GatewaySettings{{Name: "paywell", TimeoutSettings: TimeoutSettings{Timeout: 3 * time.Second, Operations: map[payrouter.Operation]OperationSettings{payrouter.OpStatus: {Timeout: 500 * time.Millisecond}, payrouter.OpRefund: {}}}}}
	tests := []struct {
		name   string
		op     payrouter.Operation
		budget time.Duration // 0: ctx without deadline
		want   time.Duration // the call's deadline, from now
	}{
		{"no budget: the timeout", payrouter.OpCharge, 0, 3 * time.Second},
		{"a longer budget: the timeout", payrouter.OpCharge, 10 * time.Second, 3 * time.Second},
		{"a budget equal to the timeout", payrouter.OpCharge, 3 * time.Second, 3 * time.Second},
		{"a shorter budget: what is left of it", payrouter.OpCharge, time.Second, time.Second},
		{"the operation's own timeout", payrouter.OpStatus, 0, 500 * time.Millisecond},
		{"the operation's own timeout under a shorter budget", payrouter.OpStatus, 200 * time.Millisecond, 200 * time.Millisecond},
		{"an override of 0 is the gateway's timeout", payrouter.OpRefund, 0, 3 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := NewDomains(gateways, nil).Guard("paywell", tc.op)
				ctx := t.Context()
				if tc.budget > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.budget)
					defer cancel()
				}
				var deadline time.Time
				var hasDeadline bool
				g.Do(ctx, func(ctx context.Context) payrouter.Result {
					deadline, hasDeadline = ctx.Deadline()
					return payrouter.Result{Outcome: payrouter.OutcomeSucceeded}
				})
				if want := time.Now().Add(tc.want); !hasDeadline || !deadline.Equal(want) {
					t.Errorf("the call's deadline: got %v (set %v), want %v", deadline, hasDeadline, want)
				}
			})
		})
	}
}

func TestGuardRefusesWithoutCalling(t *testing.T) {
	tests := []struct {
		name  string
		setUp func(t *testing.T, g *Guard)
		want  payrouter.Outcome
	}{
		{"breaker tripped", func(t *testing.T, g *Guard) { trip(t, g.Breaker()) }, brOpen},
		{"breaker forced open", func(t *testing.T, g *Guard) { g.Breaker().Force(payrouter.ForcedOpen) }, brOpen},
		{"bulkhead full", func(t *testing.T, g *Guard) {
			if _, ok := g.Bulkhead().Acquire(t.Context()); !ok {
				t.Fatal("taking the only slot")
			}
		}, bhFull},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := newRecorder()
			d := NewDomains([]GatewaySettings{{Name: "tranglo", Breaker: threeThenCool, BulkheadSettings: BulkheadSettings{MaxConcurrent: 1}}}, rec)
			g := d.Guard("tranglo", payrouter.OpCharge)
			tc.setUp(t, g)
			called := false
			res, dur := g.Do(t.Context(), func(context.Context) payrouter.Result {
				called = true
				return payrouter.Result{Outcome: payrouter.OutcomeSucceeded}
			})
			if called || res.Outcome != tc.want || dur != 0 {
				t.Errorf("Do: called %v, outcome %s, duration %v; want not called, %s, 0", called, res.Outcome, dur, tc.want)
			}
			if got := rec.calls[len(rec.calls)-1]; got != tc.want {
				t.Errorf("CallDone heard %s, want %s", got, tc.want)
			}
		})
	}
}

// A refusal by the bulkhead is not the gateway's fault: it counts for nothing, and a half-open
// trial it refused goes to the next call.
func TestGuardBulkheadFullIsExcluded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := NewDomains([]GatewaySettings{{Name: "tranglo", Breaker: threeThenCool, BulkheadSettings: BulkheadSettings{MaxConcurrent: 1}}}, nil)
		g := d.Guard("tranglo", payrouter.OpCharge)
		release, _ := g.Bulkhead().Acquire(t.Context())
		for range 10 {
			if res, _ := g.Do(t.Context(), answer(succ)); res.Outcome != bhFull {
				t.Fatalf("Do with no slot: %s", res.Outcome)
			}
		}
		if c := g.Breaker().Snapshot().Counts; c.Failures != 0 {
			t.Errorf("counts after 10 bulkhead_full: %+v", c)
		}
		release()

		trip(t, g.Breaker())
		time.Sleep(time.Minute)
		release, _ = g.Bulkhead().Acquire(t.Context())
		if res, _ := g.Do(t.Context(), answer(succ)); res.Outcome != bhFull {
			t.Fatalf("Do in half-open with no slot: %s", res.Outcome)
		}
		release()
		if res, _ := g.Do(t.Context(), answer(succ)); res.Outcome != succ {
			t.Fatalf("Do in half-open after the slot was freed: %s, want the trial to run", res.Outcome)
		}
		expectState(t, g.Breaker(), StateClosed)
	})
}

// A failure the caller caused (its budget ended before the gateway's timeout, or it went away)
// is answered as it is, but not counted against the gateway.
func TestGuardCallerEndedIsExcluded(t *testing.T) {
	tests := []struct {
		name     string
		budget   time.Duration // 0: none
		cancelAt time.Duration // the caller goes away; 0: never
		call     func(context.Context) payrouter.Result
		outcome  payrouter.Outcome // what Do answers
		took     time.Duration     // the call's duration
		state    State             // the breaker after it (trips on 1 failure)
	}{
		{"hangs past a shorter budget", time.Second, 0, hang, tmo, time.Second, StateClosed},
		{"hangs past the timeout", 0, 0, hang, tmo, 3 * time.Second, StateOpen},
		{"hangs past the timeout under a longer budget", 10 * time.Second, 0, hang, tmo, 3 * time.Second, StateOpen},
		{"hangs past a budget equal to the timeout", 3 * time.Second, 0, hang, tmo, 3 * time.Second, StateOpen},
		{"the caller goes away", 0, 500 * time.Millisecond, hang, tmo, 500 * time.Millisecond, StateClosed},
		{"unavailable at once under a shorter budget", time.Second, 0, answer(unav), unav, 0, StateOpen},
		{"declined under a shorter budget", time.Second, 0, answer(decl), decl, 0, StateClosed},
		{"answers unknown as the budget ends", time.Second, 0, func(ctx context.Context) payrouter.Result {
			<-ctx.Done()
			return payrouter.Result{Outcome: payrouter.OutcomeUnknown}
		}, unk, time.Second, StateClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				d := NewDomains([]GatewaySettings{{Name: "paywell", TimeoutSettings: TimeoutSettings{Timeout: 3 * time.Second}, Breaker: BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 1}}}}, nil)
				g := d.Guard("paywell", payrouter.OpCharge)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tc.budget > 0 {
					ctx, cancel = context.WithTimeout(ctx, tc.budget)
					defer cancel()
				}
				if tc.cancelAt > 0 {
					time.AfterFunc(tc.cancelAt, cancel)
				}
				res, took := g.Do(ctx, tc.call)
				if res.Outcome != tc.outcome || took != tc.took {
					t.Errorf("Do: %s after %v, want %s after %v", res.Outcome, took, tc.outcome, tc.took)
				}
				expectState(t, g.Breaker(), tc.state)
			})
		})
	}
}

func TestGuardReleasesOnPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := NewDomains([]GatewaySettings{{Name: "ding", Breaker: threeThenCool, BulkheadSettings: BulkheadSettings{MaxConcurrent: 1}}}, nil)
		g := d.Guard("ding", payrouter.OpCharge)
		trip(t, g.Breaker())
		time.Sleep(time.Minute) // half-open, one trial

		func() {
			defer func() {
				if r := recover(); r != "adapter bug" {
					t.Errorf("recovered %v, want the call's own panic", r)
				}
			}()
			g.Do(t.Context(), func(context.Context) payrouter.Result { panic("adapter bug") })
		}()

		if n := g.Bulkhead().InFlight(); n != 0 {
			t.Errorf("slots taken after the call panicked: %d", n)
		}
		expectState(t, g.Breaker(), StateHalfOpen)
		if res, _ := g.Do(t.Context(), answer(succ)); res.Outcome != succ {
			t.Errorf("the next trial after a panic: %s, want it admitted", res.Outcome)
		}
		expectState(t, g.Breaker(), StateClosed)
	})
}

func TestGuardReportsEveryAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		d := NewDomains([]GatewaySettings{{Name: "ding", Breaker: BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 2}}}}, rec)
		g := d.Guard("ding", payrouter.OpCharge)
		slow := func(ctx context.Context) payrouter.Result {
			time.Sleep(200 * time.Millisecond)
			return payrouter.Result{Outcome: payrouter.OutcomeDeclined, DeclineCode: "insufficient_funds"}
		}
		res, took := g.Do(t.Context(), slow)
		if res.Outcome != decl || res.DeclineCode != "insufficient_funds" || took != 200*time.Millisecond {
			t.Errorf("Do: %+v after %v; want the call's own result after 200ms", res, took)
		}
		g.Do(t.Context(), answer(unav))
		g.Do(t.Context(), answer(unav))
		g.Do(t.Context(), answer(succ)) // refused: open
		if want := []payrouter.Outcome{decl, unav, unav, brOpen}; !slices.Equal(rec.calls, want) {
			t.Errorf("CallDone outcomes: got %v, want %v", rec.calls, want)
		}
		if want := []time.Duration{200 * time.Millisecond, 0, 0, 0}; !slices.Equal(rec.durations, want) {
			t.Errorf("CallDone durations: got %v, want %v", rec.durations, want)
		}
		if rec.rejected["ding/charge"] != 1 {
			t.Errorf("breaker rejections heard: %d, want 1", rec.rejected["ding/charge"])
		}
		expectMoves(t, rec, "closed>open")
	})
}

// Whatever happens to a breaker, every report the observer hears starts where the last ended.
func TestObserverHearsEveryTransition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		d := NewDomains([]GatewaySettings{{Name: "paywell", Breaker: BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 2, Cooldown: 10 * time.Second}, HalfOpenRequests: 2}}}, rec)
		g := d.Guard("paywell", payrouter.OpCharge)
		b := g.Breaker()
		do := func(o payrouter.Outcome) { g.Do(t.Context(), answer(o)) }

		do(unav)
		do(unav)                     // closed>open
		time.Sleep(11 * time.Second) // half-open on the next look
		do(succ)                     // open>half_open, one trial
		do(unav)                     // half_open>open
		b.Force(payrouter.ForcedClosed)
		b.Force(payrouter.ForcedOpen)
		time.Sleep(11 * time.Second)
		b.Force(payrouter.ForcedNone) // the machine is half-open by now
		do(succ)
		do(succ) // half_open>closed
		do(unav)
		do(unav) // closed>open
		b.Reset()

		expectMoves(t, rec,
			"closed>open", "open>half_open", "half_open>open",
			"open>closed", "closed>open", "open>half_open",
			"half_open>closed", "closed>open", "open>closed")
		if got := d.Snapshots()[0]; got.State != StateClosed {
			t.Errorf("after reset: %s", got.State)
		}
	})
}

func TestGuardErrOpenIsASentinel(t *testing.T) {
	b := NewBreaker("ding", payrouter.OpVoid, BreakerSettings{}, nil)
	b.Force(payrouter.ForcedOpen)
	_, err := b.Allow()
	if !errors.Is(err, ErrOpen) {
		t.Errorf("forced open: got %v, want ErrOpen", err)
	}
}

// A call its last word abandons (Guard.Send's before: the charge could not be stored) sends
// nothing and is no attempt: not reported, not counted, its half-open trial handed back.
func TestGuardAbandonedCallIsNoAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		d := NewDomains([]GatewaySettings{{Name: "ding", Breaker: BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 1, Cooldown: time.Second}, HalfOpenRequests: 1}}}, rec)
		g := d.Guard("ding", payrouter.OpCharge)
		sent := false
		send := func(context.Context) payrouter.Result { sent = true; return payrouter.Result{Outcome: succ} }
		refuse := func(context.Context) bool { time.Sleep(50 * time.Millisecond); return false }
		res, took, called := g.Send(t.Context(), refuse, send)
		if called || sent || took != 0 || res.Outcome != payrouter.OutcomeError {
			t.Fatalf("abandoned: %+v after %v, called %v, sent %v; want an error, nothing sent, no duration", res, took, called, sent)
		}
		if len(rec.calls) != 0 {
			t.Errorf("CallDone heard %v for a call never sent", rec.calls)
		}
		if c := g.Breaker().Snapshot().Counts; c.Failures != 0 || c.ConsecutiveFailures != 0 {
			t.Errorf("breaker counts %+v after an abandoned call, want no failure", c)
		}
		// Half-open, one trial: an abandoned trial hands it back for the next call.
		g.Do(t.Context(), answer(unav))
		time.Sleep(time.Second + time.Millisecond)
		expectState(t, g.Breaker(), StateHalfOpen)
		if _, _, called := g.Send(t.Context(), refuse, send); called {
			t.Fatal("the abandoned trial was sent")
		}
		if res, _, called := g.Send(t.Context(), nil, send); !called || res.Outcome != succ {
			t.Errorf("the next trial after an abandoned one: %+v, called %v; want it admitted", res, called)
		}
		expectState(t, g.Breaker(), StateClosed)
	})
}
