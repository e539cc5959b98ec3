package fallback_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
)

// These tests decide each operation under each policy it allows, and check what its caller then
// answers: the answer itself, Retry-After and open_until, what is queued or failed, what counted.

var decideNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// counted records the fallbacks used, "<operation>/<policy>".
type counted []string

func (c *counted) FallbackUsed(op payrouter.Operation, p fallback.Policy) {
	*c = append(*c, string(op)+"/"+string(p))
}

// fallbacksOf returns Fallbacks under s, at decideNow, and what they count.
func fallbacksOf(s fallback.Settings) (fallback.Fallbacks, *counted) {
	obs := &counted{}
	return fallback.Fallbacks{Settings: s, Observer: obs, Now: func() time.Time { return decideNow }}, obs
}

// breakerOpen is what is known of an operation refused by paywell's breaker, which reopens in
// 2.5s: the caller is told to come back in 3.
func breakerOpen(chargeID string) fallback.Missed {
	return fallback.Missed{
		ChargeID: chargeID,
		Attempts: []payrouter.Attempt{{Gateway: "paywell", Outcome: payrouter.OutcomeBreakerOpen}},
		OpenUntil: func(g string) time.Time {
			if g == "paywell" {
				return decideNow.Add(2500 * time.Millisecond)
			}
			return time.Time{}
		},
	}
}

// wantUnavailable checks err is the 503 of op on chargeID, for breakerOpen's attempt: come back
// when paywell's breaker reopens.
func wantUnavailable(t *testing.T, err error, op payrouter.Operation, chargeID string) {
	t.Helper()
	var u *fallback.Unavailable
	if !errors.As(err, &u) {
		t.Fatalf("answer %v, want a *fallback.Unavailable", err)
	}
	if u.Operation != op || u.ChargeID != chargeID || len(u.Attempts) != 1 || u.Attempts[0].Gateway != "paywell" {
		t.Errorf("Unavailable %+v, want %s of %q with paywell's attempt", u, op, chargeID)
	}
	// Only a breaker that refused the call tells when to come back; otherwise the next second.
	wantOpen, wantSeconds := decideNow.Add(2500*time.Millisecond), 3
	if len(u.Attempts) > 0 && u.Attempts[0].Outcome != payrouter.OutcomeBreakerOpen {
		wantOpen, wantSeconds = time.Time{}, 1
	}
	if !u.OpenUntil.Equal(wantOpen) || u.RetryAfterSeconds() != wantSeconds {
		t.Errorf("open_until %v, Retry-After %d; want %v, %d", u.OpenUntil, u.RetryAfterSeconds(), wantOpen, wantSeconds)
	}
}

func wantCounted(t *testing.T, got *counted, want ...string) {
	t.Helper()
	if !slices.Equal(*got, want) {
		t.Errorf("counted %v, want %v", *got, want)
	}
}

func TestChargeFails(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings fallback.Settings
		chargeID string
	}{
		{"default, never stored", fallback.Settings{}, ""},
		{"fail, stored", fallback.Settings{Charge: fallback.Fail}, "ch_1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, obs := fallbacksOf(tc.settings)
			wantUnavailable(t, f.Charge(breakerOpen(tc.chargeID)), payrouter.OpCharge, tc.chargeID)
			wantCounted(t, obs) // the API counts the 503 it answers
		})
	}
}

func TestCaptureAndVoidFail(t *testing.T) {
	for _, tc := range []struct {
		op     payrouter.Operation
		decide func(fallback.Fallbacks, fallback.Missed) error
	}{
		{payrouter.OpCapture, fallback.Fallbacks.Capture},
		{payrouter.OpVoid, fallback.Fallbacks.Void},
	} {
		t.Run(string(tc.op), func(t *testing.T) {
			// No setting changes it: every policy a configuration may hold is tried.
			for _, s := range []fallback.Settings{{}, {Refund: fallback.Queue, Status: fallback.Degrade}, {Refund: fallback.Fail, Status: fallback.Fail}} {
				f, obs := fallbacksOf(s)
				err := tc.decide(f, breakerOpen("ch_1"))
				wantUnavailable(t, err, tc.op, "ch_1")
				if payrouter.Code(err) != payrouter.EGatewaysUnavailable {
					t.Errorf("code %q, want gateways-unavailable", payrouter.Code(err))
				}
				wantCounted(t, obs, string(tc.op)+"/fail")
			}
		})
	}
}

func TestStatus(t *testing.T) {
	stored := &payrouter.Charge{ID: "ch_1", Status: payrouter.StatusProcessing}
	t.Run("degrade answers the stored charge, stale", func(t *testing.T) {
		for _, s := range []fallback.Settings{{}, {Status: fallback.Degrade}} {
			f, obs := fallbacksOf(s)
			c, stale, err := f.Status(breakerOpen("ch_1"), stored)
			if err != nil || c != stored || !stale {
				t.Errorf("%+v: answered %v stale %v err %v, want the stored charge, stale", s, c, stale, err)
			}
			wantCounted(t, obs, "status/degrade")
		}
	})
	t.Run("fail answers 503", func(t *testing.T) {
		f, obs := fallbacksOf(fallback.Settings{Status: fallback.Fail})
		c, stale, err := f.Status(breakerOpen("ch_1"), stored)
		if c != nil || stale {
			t.Errorf("answered %v stale %v besides the 503", c, stale)
		}
		wantUnavailable(t, err, payrouter.OpStatus, "ch_1")
		wantCounted(t, obs, "status/fail")
	})
}

// refundSteps records what the refund fallback did to a refund; queueErr is Queue's answer.
type refundSteps struct {
	queued   []bool // maybeSent of each Queue
	failed   []string
	queueErr error
}

func (r *refundSteps) steps() fallback.RefundSteps {
	return fallback.RefundSteps{
		Queue: func(maybeSent bool) error {
			r.queued = append(r.queued, maybeSent)
			return r.queueErr
		},
		Fail: func(detail string) { r.failed = append(r.failed, detail) },
	}
}

// refundCase is a refund the gateway did not take, decided under settings.
type refundCase struct {
	name     string
	settings fallback.Settings
	outcome  payrouter.Outcome // of the refund's one attempt
	queueErr error             // what Queue answers
	// The refund is answered queued, or else a 503 (unavailable), or else another error.
	queued, unavailable bool
	wantQueue           []bool   // maybeSent of each Queue
	wantFailed          []string // the detail of each Fail
	wantCounted         []string
}

func TestRefund(t *testing.T) {
	queueDown := errors.New("queue: connection refused")
	cases := []refundCase{
		{"queue, not sent: queued", fallback.Settings{}, payrouter.OutcomeBreakerOpen, nil,
			true, false, []bool{false}, nil, []string{"refund/queue"}},
		{"queue, bulkhead full: queued", fallback.Settings{Refund: fallback.Queue}, payrouter.OutcomeBulkheadFull, nil,
			true, false, []bool{false}, nil, []string{"refund/queue"}},
		{"queue, not sent, queue down: failed, 503", fallback.Settings{}, payrouter.OutcomeBreakerOpen, queueDown,
			false, true, []bool{false}, []string{"not sent, and could not be queued"}, []string{"refund/fail"}},
		{"fail, not sent: failed, 503, nothing queued", fallback.Settings{Refund: fallback.Fail}, payrouter.OutcomeBreakerOpen, nil,
			false, true, nil, []string{"not sent: breaker_open"}, []string{"refund/fail"}},
		{"fail, gateway unavailable: failed, 503", fallback.Settings{Refund: fallback.Fail}, payrouter.OutcomeUnavailable, nil,
			false, true, nil, []string{"not sent: unavailable"}, []string{"refund/fail"}},
	}
	// A refund the gateway may have applied is queued whatever the policy, and is never failed:
	// when it cannot be queued, it stays pending and the answer is no 503.
	for _, p := range []fallback.Policy{fallback.Queue, fallback.Fail} {
		for _, o := range []payrouter.Outcome{payrouter.OutcomeTimeout, payrouter.OutcomeUnknown, payrouter.OutcomePending} {
			s := fallback.Settings{Refund: p}
			cases = append(cases,
				refundCase{fmt.Sprintf("%s, %s: queued", p, o), s, o, nil, true, false, []bool{true}, nil, []string{"refund/queue"}},
				refundCase{fmt.Sprintf("%s, %s, queue down: an error, not failed", p, o), s, o, queueDown, false, false, []bool{true}, nil, nil},
			)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, obs := fallbacksOf(tc.settings)
			rec := &refundSteps{queueErr: tc.queueErr}
			rf := &payrouter.Refund{ID: "re_1", ChargeID: "ch_1", Status: payrouter.RefundPending}
			m := breakerOpen("ch_1")
			m.Attempts[0].Outcome = tc.outcome
			got, err := f.Refund(m, rf, rec.steps())
			switch {
			case tc.queued:
				if err != nil || got != rf {
					t.Errorf("answered %v, %v; want the refund", got, err)
				}
			case tc.unavailable:
				if got != nil {
					t.Errorf("answered the refund besides the 503")
				}
				wantUnavailable(t, err, payrouter.OpRefund, "ch_1")
			default:
				var u *fallback.Unavailable
				if got != nil || err == nil || errors.As(err, &u) || !errors.Is(err, queueDown) {
					t.Errorf("answered %v, %v; want an error wrapping the queue's, not a 503", got, err)
				}
				if want := "refund re_1 of charge ch_1: " + string(tc.outcome) + " at the gateway, and not queued"; err != nil && !strings.HasPrefix(err.Error(), want) {
					t.Errorf("error %q, want it to start %q", err, want)
				}
			}
			if !slices.Equal(rec.queued, tc.wantQueue) || !slices.Equal(rec.failed, tc.wantFailed) {
				t.Errorf("queued %v failed %q; want queued %v failed %q", rec.queued, rec.failed, tc.wantQueue, tc.wantFailed)
			}
			wantCounted(t, obs, tc.wantCounted...)
		})
	}
}
