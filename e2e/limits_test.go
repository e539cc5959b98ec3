package e2e

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLimitsUnderAFlood is the "one key can take everything", against real processes
// with two API keys: one key flooding a slow gateway while the other is idle uses every slot of
// its bulkhead, and beside the other key holds only its share while the other key's charges get
// slots and succeed; the same key flooding faster than its rate is
// answered 429 with Retry-After while the other key, at a normal pace, is never refused; and an
// address guessing keys has its further guesses answered 429 after
// limits.auth_failures_per_minute failures, while its right key and admin token, and another
// address's right key, go through (issue 19).
func TestLimitsUnderAFlood(t *testing.T) {
	skipIfShort(t)
	gw := gatewayConfig{Timeout: 2 * time.Second, MaxConcurrent: 4, ConsecutiveFailures: 5, Cooldown: 30 * time.Second}
	s := startSims(t)
	pr := startPayrouterEdited(t, s, routerConfig{
		RequestTimeout: 5 * time.Second,
		Gateways:       map[string]gatewayConfig{"paywell": gw},
		Routes:         []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell"}}},
	}, func(yaml string) string {
		return strings.Replace(yaml, "limits:\n  requests_per_second: 0\n",
			"limits:\n  requests_per_second: 20\n  burst: 20\n  key_share: 0.5\n  auth_failures_per_minute: 10\n", 1)
	})
	charge := func(key, idem string) reply {
		r, err := send(pr.client, "POST", pr.url+"/charge", chargeBody(1999, "USD", "tok_visa", ""),
			"Authorization", "Bearer "+key, "Content-Type", "application/json", "Idempotency-Key", idem)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	t.Run("key share", func(t *testing.T) {
		s.paywell.behave(t, "normal", 800*time.Millisecond)
		defer s.paywell.behave(t, "normal", 0)
		// flood sends n charges of key at once; the func it returns waits for them and counts.
		flood := func(key, name string, n int) func() (ok, full int) {
			var wg sync.WaitGroup
			replies := make([]reply, n)
			for i := range replies {
				wg.Go(func() { replies[i] = charge(key, fmt.Sprintf("%s-%d", name, i)) })
			}
			return func() (ok, full int) {
				wg.Wait()
				for _, r := range replies {
					switch {
					case r.status == 201:
						ok++
					case r.status == 503 && strings.Contains(string(r.body), `"bulkhead_full"`):
						full++
					default:
						t.Errorf("a flood charge: %s", r)
					}
				}
				return ok, full
			}
		}

		// The other key idle: the flood uses every slot, none refused while one is free, and
		// only what is past them is refused.
		ok, full := flood(apiKey, "share-alone", 4)()
		t.Logf("one key alone, 4 charges at a bulkhead of 4: %d succeeded, %d bulkhead_full; paywell saw %d at once", ok, full, s.paywell.stats(t).MaxInFlight)
		if ok != 4 || full != 0 {
			t.Errorf("one key alone, 4 charges at a bulkhead of 4 with key_share 0.5: %d succeeded, %d bulkhead_full; want 4 and 0", ok, full)
		}
		if ok, full := flood(apiKey, "share-alone-past", 6)(); ok != 4 || full != 2 {
			t.Errorf("one key alone, 6 charges at a bulkhead of 4: %d succeeded, %d bulkhead_full; want 4 and 2", ok, full)
		}
		if st := s.paywell.stats(t); st.MaxInFlight != 4 {
			t.Errorf("paywell saw at most %d calls at once from the lone key, want all 4 slots", st.MaxInFlight)
		}
		sc, err := pr.metrics()
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := sc.value("payrouter_rate_limited_total", "reason", "key_concurrency"); v != 0 {
			t.Errorf("payrouter_rate_limited_total{reason=key_concurrency} = %v with the other key idle, want 0", v)
		}

		// Both keys: the other key's charge holds a slot, the flood gets its share and a slot
		// stays free for the other key's next charge.
		shop1 := flood(otherAPIKey, "share-shop-1", 1)
		time.Sleep(200 * time.Millisecond) // at paywell, answered after 800ms
		floodDone := flood(apiKey, "share-flood", 8)
		time.Sleep(200 * time.Millisecond)
		shop2 := flood(otherAPIKey, "share-shop-2", 1)
		shopOK1, _ := shop1()
		shopOK2, _ := shop2()
		ok, full = floodDone()
		t.Logf("both keys: the flood %d succeeded, %d bulkhead_full; the other key %d of 2 succeeded", ok, full, shopOK1+shopOK2)
		if shopOK1+shopOK2 != 2 {
			t.Errorf("the other key's 2 charges while the flood holds its share: %d succeeded, want 2", shopOK1+shopOK2)
		}
		if ok != 2 || full != 6 {
			t.Errorf("the flood of 8 beside the other key at a bulkhead of 4 with key_share 0.5: %d succeeded, %d bulkhead_full; want 2 and 6", ok, full)
		}
		if st := s.paywell.stats(t); st.MaxInFlight > 4 {
			t.Errorf("paywell saw %d calls at once, over its bulkhead of 4", st.MaxInFlight)
		}
	})

	t.Run("key rate", func(t *testing.T) {
		time.Sleep(time.Second) // both buckets full again
		var limited, passed atomic.Int64
		var retryAfter atomic.Value
		stop := time.Now().Add(2 * time.Second)
		var wg sync.WaitGroup
		for w := range 2 { // no more at once than the key's share of paywell's bulkhead
			wg.Go(func() {
				for i := 0; time.Now().Before(stop); i++ {
					r := charge(apiKey, fmt.Sprintf("rate-flood-%d-%d", w, i))
					switch r.status {
					case 429:
						limited.Add(1)
						retryAfter.Store(r.header.Get("Retry-After"))
					case 201:
						passed.Add(1)
					default:
						t.Errorf("a flood charge: %s", r)
						return
					}
				}
			})
		}
		var shopFailed []string
		for i := range 10 { // 5 a second, a quarter of the rate
			if r := charge(otherAPIKey, fmt.Sprintf("rate-shop-%d", i)); r.status != 201 {
				shopFailed = append(shopFailed, r.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
		wg.Wait()
		if len(shopFailed) > 0 {
			t.Errorf("the other key at 5 charges a second during the flood: %d refused: %v", len(shopFailed), shopFailed)
		}
		// 2 s at 20/s plus a burst of 20: at most about 60 of the flood get through.
		if limited.Load() == 0 || passed.Load() > 65 {
			t.Errorf("the flood: %d passed, %d answered 429; want some 429 and at most about 60 passed", passed.Load(), limited.Load())
		}
		if ra, _ := retryAfter.Load().(string); ra != "1" {
			t.Errorf("Retry-After of a 429 at 20/s: %q, want 1", ra)
		}
		sc, err := pr.metrics()
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := sc.value("payrouter_rate_limited_total", "reason", "key_rate"); int64(v) != limited.Load() {
			t.Errorf("payrouter_rate_limited_total{reason=key_rate} = %v, want the %d 429s", v, limited.Load())
		}
		if v, _ := sc.value("payrouter_rate_limited_total", "reason", "key_concurrency"); v != 6 {
			t.Errorf("payrouter_rate_limited_total{reason=key_concurrency} = %v, want the 6 refused in the share test", v)
		}
	})

	t.Run("auth failures", func(t *testing.T) {
		time.Sleep(time.Second) // both keys' buckets full again after the rate flood
		// Every client above connects from 127.0.0.1; this one from 127.0.0.2, another address
		// of the loopback network, so its requests count as another client's.
		other := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			DialContext: (&net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext,
		}}
		t.Cleanup(other.CloseIdleConnections)
		otherAddress := func(when string) {
			t.Helper()
			r, err := send(other, "GET", pr.url+"/charge/ch_x", nil, "Authorization", "Bearer "+otherAPIKey)
			if err != nil || r.status != 404 {
				t.Errorf("the right key from another address %s: want 404, got %v %v", when, r, err)
			}
		}
		otherAddress("before the guesses")
		// limits.auth_failures_per_minute is 10 here: 10 wrong tokens are 401, the next 15 429.
		for i := range 25 {
			r, err := send(pr.client, "GET", pr.url+"/charge/ch_x", nil, "Authorization", fmt.Sprintf("Bearer guess-%d", i))
			want := 401
			if i >= 10 {
				want = 429
			}
			if err != nil || r.status != want {
				t.Fatalf("wrong key %d: want %d, got %v %v", i+1, want, r, err)
			}
			if i == 9 || i == 10 || i == 24 { // not after each: the key's rate here is 20/s, burst 20
				otherAddress(fmt.Sprintf("after %d guesses", i+1))
			}
		}
		for _, tc := range []struct {
			name, url, token string
			want             int
		}{
			{"storefront, right key", pr.url + "/charge/ch_x", apiKey, 404},
			{"admin, right token", pr.adminURL + "/admin/breakers", adminToken, 200},
		} {
			r, err := send(pr.client, "GET", tc.url, nil, "Authorization", "Bearer "+tc.token)
			if err != nil || r.status != tc.want {
				t.Errorf("%s from the address that sent 25 wrong ones: want %d at once, got %v %v", tc.name, tc.want, r, err)
			}
		}
		for _, tc := range []struct{ name, url string }{
			{"storefront, 26th wrong key", pr.url + "/charge/ch_x"},
			{"admin, wrong token", pr.adminURL + "/admin/breakers"},
		} {
			r, err := send(pr.client, "GET", tc.url, nil, "Authorization", "Bearer guess-again")
			if err != nil || r.status != 429 || !strings.Contains(string(r.body), "/problems/rate-limited") || r.header.Get("Retry-After") != "6" {
				t.Errorf("%s: want 429 rate-limited with Retry-After 6, got %v %v", tc.name, r, err)
			}
		}
		otherAddress("after it all")
		sc, err := pr.metrics()
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := sc.value("payrouter_rate_limited_total", "reason", "auth_failures"); v != 17 {
			t.Errorf("payrouter_rate_limited_total{reason=auth_failures} = %v, want the 17 guesses over the limit", v)
		}
	})
}
