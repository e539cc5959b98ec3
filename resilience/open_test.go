package resilience

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
)

var threeThenCool = BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 3, Cooldown: 30 * time.Second}, HalfOpenRequests: 1}

func TestOpenRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		b := NewBreaker("paywell", payrouter.OpCharge, threeThenCool, rec)
		trip(t, b)
		opened := time.Now()

		for i := range 5 {
			done, err := b.Allow()
			if !errors.Is(err, ErrOpen) || done != nil {
				t.Fatalf("call %d while open: Allow = (done %v, %v), want ErrOpen", i+1, done != nil, err)
			}
		}
		if got := rec.rejected["paywell/charge"]; got != 5 {
			t.Errorf("rejections heard: got %d, want 5", got)
		}
		expectMoves(t, rec, "closed>open")
		if want := (Counts{Requests: 3, Failures: 3, ConsecutiveFailures: 3}); rec.last().Counts != want {
			t.Errorf("counts heard with closed>open: got %+v, want %+v", rec.last().Counts, want)
		}

		want := Snapshot{
			Name: "paywell/charge", Gateway: "paywell", Operation: payrouter.OpCharge,
			State: StateOpen, OpenUntil: opened.Add(30 * time.Second),
		}
		if got := b.Snapshot(); got != want {
			t.Errorf("snapshot while open:\n got %+v\nwant %+v", got, want)
		}
		if got := b.OpenUntil(); !got.Equal(opened.Add(30 * time.Second)) {
			t.Errorf("OpenUntil: got %v, want %v", got, opened.Add(30*time.Second))
		}
	})
}

func TestOpenUntilCooldown(t *testing.T) {
	tests := []struct {
		name  string
		after time.Duration
		want  State
	}{
		{"just before the cooldown ends", 30*time.Second - time.Millisecond, StateOpen},
		{"at OpenUntil", 30 * time.Second, StateOpen},
		{"just after the cooldown", 30*time.Second + time.Nanosecond, StateHalfOpen},
		{"long after the cooldown", time.Hour, StateHalfOpen},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := NewBreaker("paywell", payrouter.OpCharge, threeThenCool, nil)
				trip(t, b)
				time.Sleep(tc.after)
				expectState(t, b, tc.want)
				if until := b.OpenUntil(); (tc.want == StateOpen) == until.IsZero() {
					t.Errorf("OpenUntil in state %s: got %v", tc.want, until)
				}
			})
		})
	}
}

// gobreaker moves open to half-open only when asked: the snapshot asks, so the admin API and the
// observer see half_open after the cooldown even when no call came.
func TestOpenBecomesHalfOpenWithoutTraffic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		b := NewBreaker("paywell", payrouter.OpCharge, threeThenCool, rec)
		trip(t, b)
		time.Sleep(31 * time.Second)

		s := b.Snapshot()
		if s.State != StateHalfOpen || !s.OpenUntil.IsZero() {
			t.Errorf("snapshot after the cooldown, no traffic: got state %s, open until %v; want half_open, zero", s.State, s.OpenUntil)
		}
		expectMoves(t, rec, "closed>open", "open>half_open")
	})
}

// Each operation of a gateway is its own failure domain.
func TestOpenIsPerOperation(t *testing.T) {
	d := NewDomains([]GatewaySettings{{Name: "paywell", Breaker: threeThenCool}}, nil)
	trip(t, d.Breaker("paywell", payrouter.OpRefund))
	for _, op := range payrouter.Operations {
		want := StateClosed
		if op == payrouter.OpRefund {
			want = StateOpen
		}
		if got := d.Breaker("paywell", op).State(); got != want {
			t.Errorf("paywell/%s after paywell/refund tripped: got %s, want %s", op, got, want)
		}
	}
}
