package webhooks

import (
	"net/http"
	"testing"
	"time"
)

// TestSchedule: the waits are Standard Webhooks' (immediately, 5s, 5m, 30m, 2h, 5h, 10h, 10h:
// about 27 hours over eight attempts), each moved by at most Jitter either way.
func TestSchedule(t *testing.T) {
	if Attempts != 8 {
		t.Fatalf("Attempts = %d, want 8", Attempts)
	}
	var total time.Duration
	for next := 2; next <= Attempts; next++ {
		base := Schedule[next-1]
		total += base
		if got := Backoff(next, 0.5); got != base {
			t.Errorf("Backoff(%d, 0.5) = %v, want the schedule's %v", next, got, base)
		}
		lo, hi := Backoff(next, 0), Backoff(next, 0.999999)
		if lo != time.Duration(float64(base)*(1-Jitter)) || hi > time.Duration(float64(base)*(1+Jitter)) || hi < base {
			t.Errorf("Backoff(%d) spans [%v, %v], want %v ± %v%%", next, lo, hi, base, Jitter*100)
		}
	}
	if total < 27*time.Hour || total > 28*time.Hour {
		t.Errorf("the schedule spans %v, want about 27h", total)
	}
	if Backoff(1, 0.9) != 0 {
		t.Error("the first attempt waits")
	}
}

// TestWaitHonoursRetryAfter: a Retry-After longer than the schedule's wait is obeyed, bounded by
// MaxRetryAfter; a shorter one never speeds retries up.
func TestWaitHonoursRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		next       int
		retryAfter time.Duration
		want       time.Duration
	}{
		{2, 0, 5 * time.Second},
		{2, time.Minute, time.Minute},
		{3, time.Second, 5 * time.Minute},
		{3, time.Hour, time.Hour},
		{2, 48 * time.Hour, MaxRetryAfter},
	} {
		if got := Wait(tc.next, tc.retryAfter, 0.5); got != tc.want {
			t.Errorf("Wait(%d, %v) = %v, want %v", tc.next, tc.retryAfter, got, tc.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                                0,
		"30":                              30 * time.Second,
		" 7 ":                             7 * time.Second,
		"0":                               0,
		"-5":                              0,
		"soon":                            0,
		"99999999999999999999":            0, // not an int64
		"9999999999":                      MaxRetryAfter,
		"Tue, 01 Dec 2026 10:05:00 GMT":   5 * time.Minute,
		"Tue, 01 Dec 2026 09:00:00 GMT":   0, // past
		"Tuesday, 01-Dec-26 10:01:00 GMT": time.Minute,
	} {
		h := http.Header{}
		if v != "" {
			h.Set("Retry-After", v)
		}
		if got := RetryAfter(h, now); got != want {
			t.Errorf("RetryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}

// FuzzRetryAfter: whatever an endpoint sends as Retry-After, the wait read is between 0 and
// MaxRetryAfter, and reading it never panics.
func FuzzRetryAfter(f *testing.F) {
	for _, seed := range []string{"", "0", "30", "-1", "9999999999999", "Tue, 01 Dec 2026 10:05:00 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "soon"} {
		f.Add(seed)
	}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{}
		h.Set("Retry-After", v)
		if d := RetryAfter(h, now); d < 0 || d > MaxRetryAfter {
			t.Fatalf("RetryAfter(%q) = %v, want within [0, %v]", v, d, MaxRetryAfter)
		}
	})
}
