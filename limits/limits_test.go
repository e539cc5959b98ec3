package limits

import (
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestKeyRatesBurstThenRate(t *testing.T) {
	k := NewKeyRates(Rate{PerSecond: 10, Burst: 5})
	for i := range 5 {
		if _, ok := k.Allow("a", t0); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	wait, ok := k.Allow("a", t0)
	if ok {
		t.Fatal("request 6 at once was let through; the burst is 5")
	}
	if wait != 100*time.Millisecond {
		t.Errorf("wait = %v, want 100ms (one token at 10/s)", wait)
	}
	// A refused request gave its reservation back: after the wait exactly one more passes.
	if _, ok := k.Allow("a", t0.Add(wait)); !ok {
		t.Error("refused after waiting the delay it was told")
	}
	if _, ok := k.Allow("a", t0.Add(wait)); ok {
		t.Error("two requests passed after one token's wait")
	}
	// Another key has its own bucket.
	if _, ok := k.Allow("b", t0); !ok {
		t.Error("key b refused because key a used its bucket")
	}
}

func TestKeyRatesOffAndSet(t *testing.T) {
	k := NewKeyRates(Rate{})
	for range 1000 {
		if _, ok := k.Allow("a", t0); !ok {
			t.Fatal("refused with the limit off")
		}
	}
	if k.Len() != 0 {
		t.Errorf("off keeps %d buckets, want 0", k.Len())
	}
	k.Set(Rate{PerSecond: 1, Burst: 1}, []string{"a", "b"})
	k.Allow("a", t0)
	k.Allow("b", t0)
	k.Allow("gone", t0)
	if k.Len() != 3 {
		t.Fatalf("Len = %d, want 3", k.Len())
	}
	k.Set(Rate{PerSecond: 1, Burst: 1}, []string{"a"})
	if k.Len() != 1 {
		t.Errorf("after Set without b and gone: Len = %d, want 1", k.Len())
	}
	// The kept bucket kept its state: a reload is no way around the limit.
	if _, ok := k.Allow("a", t0); ok {
		t.Error("a reload refilled the bucket of a key it kept")
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, tc := range []struct {
		wait time.Duration
		want int
	}{{0, 1}, {time.Millisecond, 1}, {time.Second, 1}, {1001 * time.Millisecond, 2}, {59 * time.Second, 59}} {
		if got := RetryAfterSeconds(tc.wait); got != tc.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", tc.wait, got, tc.want)
		}
	}
}

func TestAuthThrottleBlocksAfterN(t *testing.T) {
	th := NewAuthThrottle(20, 0)
	for i := range 20 {
		if _, blocked := th.Blocked("192.0.2.7", t0); blocked {
			t.Fatalf("blocked after %d failures, want 20 allowed", i)
		}
		th.Failed("192.0.2.7", t0)
	}
	wait, blocked := th.Blocked("192.0.2.7", t0)
	if !blocked {
		t.Fatal("not blocked after 20 failures within a minute")
	}
	if wait != 3*time.Second { // one token at 20 a minute
		t.Errorf("wait = %v, want 3s", wait)
	}
	if _, blocked := th.Blocked("192.0.2.8", t0); blocked {
		t.Error("another address is blocked too")
	}
	if _, blocked := th.Blocked("192.0.2.7", t0.Add(wait)); blocked {
		t.Error("still blocked after the wait it was told")
	}
	if _, blocked := th.Blocked("192.0.2.7", t0.Add(time.Minute)); blocked {
		t.Error("still blocked a minute later")
	}
}

func TestAuthThrottleIPv6CountsBy64(t *testing.T) {
	th := NewAuthThrottle(3, 0)
	for i := range 3 {
		th.Failed(fmt.Sprintf("2001:db8:1:2::%x", i+1), t0)
	}
	if _, blocked := th.Blocked("2001:db8:1:2::ffff", t0); !blocked {
		t.Error("a /64 cycling its addresses is not blocked")
	}
	if _, blocked := th.Blocked("2001:db8:1:3::1", t0); blocked {
		t.Error("the next /64 is blocked too")
	}
	if th.Len() != 1 {
		t.Errorf("table holds %d entries for one /64, want 1", th.Len())
	}
}

// An attacker cycling through addresses must not grow the table past its size.
func TestAuthThrottleBounded(t *testing.T) {
	th := NewAuthThrottle(5, 100)
	for i := range 10_000 {
		th.Failed(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), t0)
	}
	if th.Len() != 100 {
		t.Errorf("table holds %d addresses, want its size 100", th.Len())
	}
	// The most recent addresses are the ones kept.
	for range 5 {
		th.Failed("10.0.39.15", t0) // 9999
	}
	if _, blocked := th.Blocked("10.0.39.15", t0); !blocked {
		t.Error("the most recent address was forgotten")
	}
}

func TestAuthThrottleOff(t *testing.T) {
	th := NewAuthThrottle(0, 0)
	for range 100 {
		th.Failed("192.0.2.1", t0)
	}
	if _, blocked := th.Blocked("192.0.2.1", t0); blocked || th.Len() != 0 {
		t.Errorf("off: blocked=%v len=%d, want false 0", blocked, th.Len())
	}
	th.SetPerMinute(2)
	th.Failed("192.0.2.1", t0)
	th.Failed("192.0.2.1", t0)
	if _, blocked := th.Blocked("192.0.2.1", t0); !blocked {
		t.Error("not blocked after turning the throttle on with 2 a minute")
	}
}

// A blocked address's further failures, however many, do not lengthen its wait: the bucket
// refills on time, so the address is told 401 again after one token's wait (httpapi lets the
// right key through meanwhile; it asks Blocked only about missing or wrong ones).
func TestAuthThrottleFailuresWhileBlockedCountNothing(t *testing.T) {
	th := NewAuthThrottle(20, 0)
	for range 20 {
		th.Failed("192.0.2.7", t0)
	}
	for range 1000 {
		if _, blocked := th.Blocked("192.0.2.7", t0); !blocked {
			t.Fatal("not blocked after 20 failures")
		}
		th.Failed("192.0.2.7", t0)
	}
	wait, blocked := th.Blocked("192.0.2.7", t0)
	if !blocked || wait != 3*time.Second {
		t.Fatalf("after 1000 more failures: wait %v blocked %v, want 3s true", wait, blocked)
	}
	later := t0.Add(3 * time.Second)
	if _, blocked := th.Blocked("192.0.2.7", later); blocked {
		t.Fatal("still blocked after one token's wait")
	}
	th.Failed("192.0.2.7", later)
	if wait, blocked := th.Blocked("192.0.2.7", later); !blocked || wait != 3*time.Second {
		t.Errorf("after the one failure the refill allowed: wait %v blocked %v, want 3s true", wait, blocked)
	}
}
