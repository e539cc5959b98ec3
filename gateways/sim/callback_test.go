package sim_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter/gateways/sim"
	"github.com/payrouter/payrouter/internal/memnet"
)

// sign is the test fake's callback signature: hex HMAC-SHA256 of the body.
func sign(body []byte, secret string, _ time.Time) http.Header {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return http.Header{"X-Test-Signature": {hex.EncodeToString(mac.Sum(nil))}}
}

// receiver is a callback endpoint that fails its first failFirst deliveries.
type receiver struct {
	mu        sync.Mutex
	failFirst int
	calls     int
	bodies    []string
	sigs      []string
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.calls++
	if rc.calls <= rc.failFirst {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	rc.bodies = append(rc.bodies, string(body))
	rc.sigs = append(rc.sigs, r.Header.Get("X-Test-Signature"))
}

// TestPendingSettlesAndCallsBack: with pending set, a charge is recorded pending, becomes what
// it was to be that long after, and the fake calls back, signed, over HTTP, retrying a receiver
// that failed twice.
func TestPendingSettlesAndCallsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		network := &memnet.Network{}
		rc := &receiver{failFirst: 2}
		hook := network.Serve(t, "shop", rc)
		var s *sim.Server
		s = sim.New(sim.Config{Name: "test", TxPrefix: "tx_", OpPrefix: "op_", CallbackTransport: network.Transport(),
			OnSettle: func(tx sim.Tx) {
				body, _ := json.Marshal(tx)
				s.Notify(body, sign)
			}})
		s.Handle("POST /pay", func(w http.ResponseWriter, r *http.Request) {
			tx, _ := s.Create(r, sim.NewTx{Reference: r.URL.Query().Get("ref"), Amount: 100, Currency: "USD", Capture: true})
			sim.WriteJSON(w, http.StatusOK, tx)
		})
		url := network.Serve(t, "sim", s)
		t.Cleanup(s.Close)
		ctx := t.Context()
		do := func(method, path, body string) answer {
			return callOver(ctx, network.Transport(), method, url+path, body)
		}

		if a := do("PUT", "/_sim/callback", `{"url":"`+hook+`/hook","secret":"s3cret"}`); a.status != 200 {
			t.Fatalf("PUT /_sim/callback: %+v", a)
		}
		do("PUT", "/_sim/behavior", `{"pending":"2s"}`)
		if a := do("POST", "/pay?ref=r1", ""); !strings.Contains(a.body, `"status":"pending"`) {
			t.Fatalf("a charge while pending is set: %+v", a)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if tx, _ := s.Ledger().Lookup("r1"); tx.Status != sim.StatusPending {
			t.Fatalf("1s in: %s, want pending", tx.Status)
		}
		time.Sleep(time.Second + 5*time.Second) // settled at 2s, then the retries (250ms, 1s)
		synctest.Wait()
		if tx, _ := s.Ledger().Lookup("r1"); tx.Status != sim.StatusCaptured {
			t.Fatalf("after 2s: %s, want captured", tx.Status)
		}
		rc.mu.Lock()
		calls, bodies, sigs := rc.calls, rc.bodies, rc.sigs
		rc.mu.Unlock()
		if calls != 3 || len(bodies) != 1 || !strings.Contains(bodies[0], `"status":"captured"`) {
			t.Fatalf("receiver: %d calls, bodies %q; want 3 calls (2 failed), one delivered with the captured charge", calls, bodies)
		}
		if want := sign([]byte(bodies[0]), "s3cret", time.Time{}).Get("X-Test-Signature"); sigs[0] != want {
			t.Errorf("signature %q, want %q", sigs[0], want)
		}
		if got := s.CallbackStats(); got.Delivered != 1 || got.Failed != 2 || got.Dropped != 0 {
			t.Errorf("callback stats %+v, want 1 delivered, 2 failed", got)
		}
		if a := do("GET", "/_sim/callback", ""); strings.Contains(a.body, "s3cret") || !strings.Contains(a.body, `"delivered":1`) {
			t.Errorf("GET /_sim/callback: %+v (must not show the secret)", a)
		}
	})
}

// TestCallbackDropped: a receiver that never answers 2xx gets the first try and three retries,
// then the event is dropped; nothing is sent without a callback set.
func TestCallbackDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		network := &memnet.Network{}
		rc := &receiver{failFirst: 100}
		hook := network.Serve(t, "shop", rc)
		s := sim.New(sim.Config{Name: "test", CallbackTransport: network.Transport()})
		t.Cleanup(s.Close)
		s.Notify([]byte(`{}`), sign) // no callback: nothing
		s.SetCallback(sim.Callback{URL: hook, Secret: "x"})
		s.Notify([]byte(`{}`), sign)
		time.Sleep(time.Minute)
		synctest.Wait()
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if rc.calls != 4 {
			t.Errorf("%d calls, want 4 (one and three retries)", rc.calls)
		}
		if got := s.CallbackStats(); got.Failed != 4 || got.Dropped != 1 {
			t.Errorf("callback stats %+v, want 4 failed, 1 dropped", got)
		}
	})
}

func TestParseCallback(t *testing.T) {
	cases := []struct {
		body, wantErr string
	}{
		{`{"url":"http://127.0.0.1:8080/webhooks/ding","secret":"s"}`, ""},
		{`{"url":""}`, ""},
		{`{"url":"http://127.0.0.1:8080/x"}`, "needs a secret"},
		{`{"url":"ftp://x/y","secret":"s"}`, "absolute http"},
		{`{"url":"/relative","secret":"s"}`, "absolute http"},
		{`{"url":"http://x","colour":1}`, "unknown field"},
		{`{} {}`, "unexpected data"},
		{`nope`, "want a JSON object"},
	}
	for _, c := range cases {
		_, err := sim.ParseCallback(strings.NewReader(c.body))
		if (c.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("ParseCallback(%s) = %v; want %q", c.body, err, c.wantErr)
		}
	}
}
