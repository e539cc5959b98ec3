package webhooks

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Schedule is Standard Webhooks' retry schedule: the wait before each attempt after the
// previous one failed, the first attempt being immediate. Eight attempts over about 27 hours;
// the delivery is dead-lettered when the last one fails.
var Schedule = []time.Duration{
	0, 5 * time.Second, 5 * time.Minute, 30 * time.Minute,
	2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour,
}

// Attempts is how many attempts a delivery gets before it is dead-lettered.
var Attempts = len(Schedule)

// Jitter is how far each wait of the schedule is moved at random, either way, as a share of
// it: deliveries that failed together (an endpoint down) do not all come back at the same
// instant.
const Jitter = 0.2

// MaxRetryAfter bounds the Retry-After an endpoint may ask for: the schedule's longest wait.
const MaxRetryAfter = 10 * time.Hour

// Backoff is the wait before attempt next (2 to Attempts) after attempt next-1 failed, the
// schedule's moved by up to Jitter either way; r is a random number in [0, 1).
func Backoff(next int, r float64) time.Duration {
	if next < 2 {
		return 0
	}
	base := Schedule[min(next, len(Schedule))-1]
	return time.Duration(float64(base) * (1 - Jitter + 2*Jitter*r))
}

// Wait is the wait before attempt next: Backoff, or what the endpoint asked for in Retry-After
// (bounded by MaxRetryAfter) when that is longer. An endpoint can slow its retries down, never
// speed them up.
func Wait(next int, retryAfter time.Duration, r float64) time.Duration {
	return max(Backoff(next, r), min(retryAfter, MaxRetryAfter))
}

// RetryAfter reads a Retry-After header as a wait from now: a number of seconds or an HTTP date,
// at most MaxRetryAfter. 0 when it is absent, malformed or in the past.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > int64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter // and no overflow, whatever the number
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), MaxRetryAfter)
	}
	return 0
}
