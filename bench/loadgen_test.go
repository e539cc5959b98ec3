package bench

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The load generator's own tests run always: they are quick, and a wrong percentile or a
// repeated Idempotency-Key would silently falsify every figure the benchmarks print.

func TestSampleQuantile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	tests := []struct {
		name string
		lat  []time.Duration
		q    float64
		want time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", []time.Duration{7}, 0.99, 7},
		{"p50 of 100", hundred, 0.50, 50 * time.Millisecond},
		{"p99 of 100 is the 99th, not the maximum", hundred, 0.99, 99 * time.Millisecond},
		{"p100", hundred, 1, 100 * time.Millisecond},
		{"p0 is the minimum", hundred, 0, time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := (Sample{Latencies: tc.lat}).Quantile(tc.q); got != tc.want {
				t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
}

func TestLoadRun(t *testing.T) {
	var mu sync.Mutex
	keys := map[string]bool{}
	repeated := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get("Idempotency-Key")
		mu.Lock()
		if keys[k] || k == "" {
			repeated++
		}
		keys[k] = true
		n := len(keys)
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer x" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if n%10 == 0 {
			w.WriteHeader(http.StatusTeapot) // every tenth answer is wrong
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	l := NewLoad(Target{Name: "test", URL: srv.URL, Header: http.Header{"Authorization": {"Bearer x"}}, Want: http.StatusServiceUnavailable}, 4)
	defer l.Close()
	s := l.Run(t.Context(), 50*time.Millisecond)
	if s.Requests == 0 || len(s.Latencies) != s.Requests {
		t.Fatalf("Requests %d, latencies %d: want the same, above 0", s.Requests, len(s.Latencies))
	}
	if want := s.Requests / 10; s.Unexpected != want || s.Errors != 0 {
		t.Errorf("Unexpected %d, Errors %d; want %d and 0 (first problem %q)", s.Unexpected, s.Errors, want, s.FirstProblem)
	}
	if repeated != 0 {
		t.Errorf("%d requests came without a fresh Idempotency-Key", repeated)
	}
	if s.Rate() <= 0 || s.Quantile(0.5) <= 0 {
		t.Errorf("rate %v, p50 %v: want both above 0", s.Rate(), s.Quantile(0.5))
	}
}

func TestLoadRunKeys(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	keys := []string{"a", "b", "c"}
	l := NewLoad(Target{Name: "test", URL: srv.URL, Keys: keys, Want: http.StatusCreated}, 4)
	defer l.Close()
	s := l.Run(t.Context(), 50*time.Millisecond)
	if s.Requests < len(keys) || s.Unexpected != 0 || s.Errors != 0 {
		t.Fatalf("Requests %d, Unexpected %d, Errors %d: want at least %d requests, all 201", s.Requests, s.Unexpected, s.Errors, len(keys))
	}
	// In turn: each key sent s.Requests/3 times, give or take one.
	for _, k := range keys {
		if n := seen[k]; n < s.Requests/len(keys) || n > s.Requests/len(keys)+1 {
			t.Errorf("key %q sent %d times of %d requests; want the keys in turn", k, n, s.Requests)
		}
	}
	if len(seen) != len(keys) {
		t.Errorf("keys sent: %v; want only %v", seen, keys)
	}
}

func TestLoadRunURLs(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path]++
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()

	var urls []string
	for i := range 10 {
		urls = append(urls, srv.URL+"/"+strconv.Itoa(i))
	}
	target := Target{Name: "test", URLs: NewURLs(urls), Want: http.StatusCreated}
	// Each URL is sent once, the run ends when they run out (long before its time), and a
	// second Load of the target finds none left.
	first := NewLoad(target, 4)
	defer first.Close()
	a := first.Run(t.Context(), time.Minute)
	second := NewLoad(target, 4)
	defer second.Close()
	b := second.Run(t.Context(), time.Minute)
	if a.Requests != len(urls) || a.Unexpected != 0 || a.Errors != 0 || b.Requests != 0 {
		t.Fatalf("Requests %d (Unexpected %d, Errors %d), then %d: want %d, all 201, then none", a.Requests, a.Unexpected, a.Errors, b.Requests, len(urls))
	}
	if a.Elapsed+b.Elapsed > 10*time.Second {
		t.Errorf("the runs took %v and %v; want each to end when the URLs ran out", a.Elapsed, b.Elapsed)
	}
	if len(seen) != len(urls) || target.URLs.Left() != 0 {
		t.Errorf("paths sent: %v, %d left; want each of the %d once, none left", seen, target.URLs.Left(), len(urls))
	}
	for p, n := range seen {
		if n != 1 {
			t.Errorf("%s sent %d times; want once", p, n)
		}
	}
}
