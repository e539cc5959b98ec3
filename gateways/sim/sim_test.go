package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter/gateways/sim"
	"github.com/payrouter/payrouter/internal/memnet"
)

func TestParseBehavior(t *testing.T) {
	cases := []struct {
		body    string
		want    sim.Behavior
		wantErr string
	}{
		{`{"mode":"normal","latency":"20s","decline_all":false}`, sim.Behavior{Mode: sim.ModeNormal, Latency: 20 * time.Second}, ""},
		{`{"mode":"hang"}`, sim.Behavior{Mode: sim.ModeHang}, ""},
		{`{"mode":"reset","latency":"0s"}`, sim.Behavior{Mode: sim.ModeReset}, ""},
		{`{"mode":"error500","latency":"150ms","decline_all":true}`, sim.Behavior{Mode: sim.ModeError500, Latency: 150 * time.Millisecond, DeclineAll: true}, ""},
		{`{"latency":"1s"}`, sim.Behavior{Mode: sim.ModeNormal, Latency: time.Second}, ""},
		{`{}`, sim.Behavior{Mode: sim.ModeNormal}, ""},
		{`{"mode":"unavailable","latency":""}`, sim.Behavior{Mode: sim.ModeUnavailable}, ""},
		{`{"mode":"process_then_hang"}`, sim.Behavior{Mode: sim.ModeProcessThenHang}, ""},
		{`{"mode":"process_then_503","latency":"5ms"}`, sim.Behavior{Mode: sim.ModeProcessThen503, Latency: 5 * time.Millisecond}, ""},
		{`{"mode":"process_then_502"}`, sim.Behavior{}, `unknown mode "process_then_502": want one of [normal unavailable error500 hang reset process_then_hang process_then_503]`},
		{`{"slow_share":0.02,"slow_latency":"2s"}`, sim.Behavior{Mode: sim.ModeNormal, SlowShare: 0.02, SlowLatency: 2 * time.Second}, ""},
		{`{"mode":"reset","latency":"10ms","slow_share":1,"slow_latency":"1ms"}`, sim.Behavior{Mode: sim.ModeReset, Latency: 10 * time.Millisecond, SlowShare: 1, SlowLatency: time.Millisecond}, ""},
		{`{"slow_share":0,"slow_latency":"3s"}`, sim.Behavior{Mode: sim.ModeNormal, SlowLatency: 3 * time.Second}, ""},
		{`{"slow_share":0,"slow_latency":""}`, sim.Behavior{Mode: sim.ModeNormal}, ""},
		{`{"slow_share":1.5,"slow_latency":"2s"}`, sim.Behavior{}, "slow_share 1.5: want a probability between 0 and 1"},
		{`{"slow_share":-0.1,"slow_latency":"2s"}`, sim.Behavior{}, "slow_share -0.1: want a probability between 0 and 1"},
		{`{"slow_share":0.5}`, sim.Behavior{}, "slow_share 0.5 needs a slow_latency"},
		{`{"slow_share":0.5,"slow_latency":"0s"}`, sim.Behavior{}, "slow_share 0.5 needs a slow_latency"},
		{`{"slow_share":0.5,"slow_latency":"later"}`, sim.Behavior{}, `slow_latency "later"`},
		{`{"slow_share":0.5,"slow_latency":"-2s"}`, sim.Behavior{}, `slow_latency "-2s": must not be negative`},
		{`{"slow_share":"0.5","slow_latency":"2s"}`, sim.Behavior{}, "want a JSON object"},
		{`{"slow_latency":2}`, sim.Behavior{}, "want a JSON object"},
		{`{"refund_unchecked":true}`, sim.Behavior{Mode: sim.ModeNormal, RefundUnchecked: true}, ""},
		{`{"mode":"process_then_503","refund_unchecked":true}`, sim.Behavior{Mode: sim.ModeProcessThen503, RefundUnchecked: true}, ""},
		{`{"refund_unchecked":"true"}`, sim.Behavior{}, "want a JSON object"},
		{`{"pending":"2s"}`, sim.Behavior{Mode: sim.ModeNormal, Pending: 2 * time.Second}, ""},
		{`{"pending":"soon"}`, sim.Behavior{}, `pending "soon"`},
		{`{"pending":"-1s"}`, sim.Behavior{}, `pending "-1s": must not be negative`},
		{`{"mode":"down"}`, sim.Behavior{}, `unknown mode "down"`},
		{`{"mode":"normal","latency":"fast"}`, sim.Behavior{}, `latency "fast"`},
		{`{"mode":"normal","latency":"-1s"}`, sim.Behavior{}, "must not be negative"},
		{`{"mode":"normal","latency":20}`, sim.Behavior{}, "want a JSON object"},
		{`{"mode":"normal","colour":"blue"}`, sim.Behavior{}, `unknown field "colour"`},
		{`{"mode":"normal"} {}`, sim.Behavior{}, "unexpected data"},
		{`not json`, sim.Behavior{}, "want a JSON object"},
		{``, sim.Behavior{}, "want a JSON object"},
	}
	for _, c := range cases {
		got, err := sim.ParseBehavior(strings.NewReader(c.body))
		switch {
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("ParseBehavior(%s) = %+v, %v; want an error containing %q", c.body, got, err, c.wantErr)
		case c.wantErr == "" && (err != nil || got != c.want):
			t.Errorf("ParseBehavior(%s) = %+v, %v; want %+v", c.body, got, err, c.want)
		}
	}
}

func TestBehaviorJSONRoundTrip(t *testing.T) {
	b := sim.Behavior{Mode: sim.ModeHang, Latency: 1500 * time.Millisecond, DeclineAll: true, SlowShare: 0.25, SlowLatency: 2 * time.Second, RefundUnchecked: true, Pending: 3 * time.Second}
	data, err := json.Marshal(b)
	if err != nil || string(data) != `{"mode":"hang","latency":"1.5s","decline_all":true,"slow_share":0.25,"slow_latency":"2s","refund_unchecked":true,"pending":"3s"}` {
		t.Fatalf("Marshal = %s, %v", data, err)
	}
	var back sim.Behavior
	if err := json.Unmarshal(data, &back); err != nil || back != b {
		t.Fatalf("Unmarshal = %+v, %v; want %+v", back, err, b)
	}
}

// fake is the smallest gateway on top of sim: POST /pay?ref=R&token=T records a charge,
// POST /refund?ref=R&op=O refunds 40 of it.
func fake(t *testing.T) (*sim.Server, string) {
	t.Helper()
	return fakeWith(t, nil)
}

// fakeWith is fake with draws for the heavy tail (sim.Config.Rand); nil draws at random.
func fakeWith(t *testing.T, draw func() float64) (*sim.Server, string) {
	t.Helper()
	s := newFake(draw)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	t.Cleanup(s.Close)
	return s, ts.URL
}

// newFake is the fake every test serves: a charge and a refund on the package's ledger.
func newFake(draw func() float64) *sim.Server {
	s := sim.New(sim.Config{Name: "test", TxPrefix: "tx_", OpPrefix: "op_", Rand: draw, Unavailable: func(w http.ResponseWriter, _ *http.Request) {
		sim.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "try later"})
	}})
	s.Handle("POST /pay", func(w http.ResponseWriter, r *http.Request) {
		n := sim.NewTx{Reference: r.URL.Query().Get("ref"), Amount: 100, Currency: "USD", Capture: true}
		if s.Declines(r.URL.Query().Get("token")) {
			n.Decline = "no"
		}
		tx, _ := s.Create(r, n)
		sim.WriteJSON(w, http.StatusOK, tx)
	})
	s.Handle("POST /refund", func(w http.ResponseWriter, r *http.Request) {
		res, err := s.Refund(r, r.URL.Query().Get("op"), r.URL.Query().Get("ref"), 40)
		if err != nil {
			sim.WriteJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
			return
		}
		sim.WriteJSON(w, http.StatusOK, res.Tx)
	})
	return s
}

type answer struct {
	status      int
	contentType string
	body        string
	err         error
}

func call(ctx context.Context, method, url, body string) answer {
	return callOver(ctx, &http.Transport{}, method, url, body)
}

// callOver is call through tr, whose idle connections it closes.
func callOver(ctx context.Context, tr *http.Transport, method, url, body string) answer {
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: string(b), err: err}
}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// bubbled is a fake served on an in-process network, for a test inside a synctest bubble: its
// latencies, hangs and the clients' deadlines all run on the bubble's clock, and
// synctest.Wait returns once every call has got as far as it can.
type bubbled struct {
	*sim.Server
	net *memnet.Network
	url string
}

// fakeInBubble is fakeWith on an in-process network; it must be called inside the bubble.
func fakeInBubble(t *testing.T, draw func() float64) *bubbled {
	t.Helper()
	f := &bubbled{net: &memnet.Network{}}
	f.Server = newFake(draw)
	f.url = f.net.Serve(t, "sim", f.Server)
	t.Cleanup(f.Close) // before the server closes: hung calls let go
	return f
}

// call is the package's call, to path on f.
func (f *bubbled) call(ctx context.Context, method, path, body string) answer {
	return callOver(ctx, f.net.Transport(), method, f.url+path, body)
}

func TestControlAPI(t *testing.T) {
	s, url := fake(t)
	ctx := within(t, 10*time.Second)

	a := call(ctx, "PUT", url+"/_sim/behavior", `{"mode":"unavailable","latency":"5ms","decline_all":true}`)
	if a.status != 200 || !strings.Contains(a.body, `"mode":"unavailable"`) {
		t.Fatalf("PUT /_sim/behavior: %+v", a)
	}
	if got := s.Behavior(); got != (sim.Behavior{Mode: sim.ModeUnavailable, Latency: 5 * time.Millisecond, DeclineAll: true}) {
		t.Fatalf("behavior after PUT: %+v", got)
	}
	if a := call(ctx, "GET", url+"/_sim/behavior", ""); a.status != 200 || strings.TrimSpace(a.body) != `{"mode":"unavailable","latency":"5ms","decline_all":true,"slow_share":0,"slow_latency":"0s","refund_unchecked":false,"pending":"0s"}` {
		t.Fatalf("GET /_sim/behavior: %+v", a)
	}
	a = call(ctx, "PUT", url+"/_sim/behavior", `{"mode":"process_then_503"}`)
	if a.status != 200 || s.Behavior() != (sim.Behavior{Mode: sim.ModeProcessThen503}) {
		t.Fatalf("PUT /_sim/behavior process_then_503: %+v, behavior %+v", a, s.Behavior())
	}
	a = call(ctx, "PUT", url+"/_sim/behavior", `{"mode":"process_then_hang","slow_share":0.02,"slow_latency":"2s"}`)
	if a.status != 200 || !strings.Contains(a.body, `"mode":"process_then_hang"`) {
		t.Fatalf("PUT /_sim/behavior: %+v", a)
	}
	if a := call(ctx, "GET", url+"/_sim/behavior", ""); a.status != 200 || strings.TrimSpace(a.body) != `{"mode":"process_then_hang","latency":"0s","decline_all":false,"slow_share":0.02,"slow_latency":"2s","refund_unchecked":false,"pending":"0s"}` {
		t.Fatalf("GET /_sim/behavior: %+v", a)
	}
	call(ctx, "PUT", url+"/_sim/behavior", `{"mode":"unavailable","latency":"5ms","decline_all":true}`)
	for _, bad := range []string{`{"mode":"sideways"}`, `{"latency":"soon"}`, `{`, `{"slow_share":2,"slow_latency":"1s"}`, `{"slow_share":0.1}`} {
		a := call(ctx, "PUT", url+"/_sim/behavior", bad)
		var e struct{ Error string }
		if a.status != 400 || json.Unmarshal([]byte(a.body), &e) != nil || !strings.HasPrefix(e.Error, "behavior: ") {
			t.Errorf("PUT /_sim/behavior %s: %+v; want 400 {\"error\": \"behavior: ...\"}", bad, a)
		}
	}
	if s.Behavior().Mode != sim.ModeUnavailable {
		t.Errorf("a refused PUT changed the behavior: %+v", s.Behavior())
	}

	if a := call(ctx, "POST", url+"/_sim/reset", ""); a.status != 200 {
		t.Fatalf("POST /_sim/reset: %+v", a)
	}
	if got := s.Behavior(); got != (sim.Behavior{Mode: sim.ModeNormal}) {
		t.Fatalf("behavior after reset: %+v", got)
	}

	call(ctx, "POST", url+"/pay?ref=r1&token=tok_visa", "")
	call(ctx, "POST", url+"/pay?ref=r2&token=tok_decline", "")
	call(ctx, "POST", url+"/pay?ref=r1&token=tok_visa", "")
	call(ctx, "GET", url+"/health", "")
	call(ctx, "GET", url+"/_sim/ledger", "")
	call(ctx, "GET", url+"/nowhere", "")

	a = call(ctx, "GET", url+"/_sim/stats", "")
	if a.status != 200 || strings.TrimSpace(a.body) != `{"requests":3,"in_flight":0,"max_in_flight":1}` {
		t.Fatalf("GET /_sim/stats: %+v; want 3 requests (API calls only)", a)
	}
	a = call(ctx, "GET", url+"/_sim/ledger", "")
	want := `{"transactions":[{"reference":"r1","id":"tx_000001","amount":100,"currency":"USD","status":"captured","refunded":0}]}`
	if a.status != 200 || strings.TrimSpace(a.body) != want {
		t.Fatalf("GET /_sim/ledger: %+v; want %s (one transaction for r1 sent twice, the decline not listed)", a, want)
	}

	call(ctx, "POST", url+"/_sim/reset", "")
	if a := call(ctx, "GET", url+"/_sim/ledger", ""); strings.TrimSpace(a.body) != `{"transactions":[]}` {
		t.Errorf("ledger after reset: %s", a.body)
	}
	if a := call(ctx, "GET", url+"/_sim/stats", ""); strings.TrimSpace(a.body) != `{"requests":0,"in_flight":0,"max_in_flight":0}` {
		t.Errorf("stats after reset: %s", a.body)
	}
	if a := call(ctx, "PUT", url+"/_sim/reset", ""); a.status != http.StatusMethodNotAllowed {
		t.Errorf("PUT /_sim/reset: %d, want 405", a.status)
	}
}

func TestModes(t *testing.T) {
	cases := []struct {
		mode       sim.Mode
		status     int // 0: no answer (a transport error)
		healthCode int
		recorded   bool
	}{
		{sim.ModeNormal, 200, 200, true},
		{sim.ModeUnavailable, 503, 503, false},
		{sim.ModeError500, 500, 503, false},
		{sim.ModeReset, 0, 0, false},
		{sim.ModeHang, 0, 0, false},
		{sim.ModeProcessThenHang, 0, 0, true},
		{sim.ModeProcessThen503, 503, 503, true},
	}
	for _, c := range cases {
		t.Run(string(c.mode), func(t *testing.T) {
			t.Parallel()
			s, url := fake(t)
			s.SetBehavior(sim.Behavior{Mode: c.mode})
			// A call that is answered gets all the time a busy machine may need; one that is
			// not is given up after 300ms.
			deadline := func(answered bool) time.Duration {
				if answered {
					return 10 * time.Second
				}
				return 300 * time.Millisecond
			}
			a := call(within(t, deadline(c.status != 0)), "POST", url+"/pay?ref=r1", "amount=1")
			if a.status != c.status || (c.status == 0) != (a.err != nil) {
				t.Errorf("API call: %+v, want status %d", a, c.status)
			}
			if c.mode == sim.ModeError500 && !strings.Contains(a.body, "Internal Server Error") {
				t.Errorf("error500 body %q: want a plain 500", a.body)
			}
			if c.mode == sim.ModeProcessThen503 && (a.contentType != "text/plain" || a.body != sim.EnvoyResetBody) {
				t.Errorf("process_then_503: %+v; want text/plain %q", a, sim.EnvoyResetBody)
			}
			h := call(within(t, deadline(c.healthCode != 0)), "GET", url+"/health", "")
			if h.status != c.healthCode {
				t.Errorf("GET /health: %+v, want %d", h, c.healthCode)
			}
			if got := len(s.Ledger().Transactions()); (got == 1) != c.recorded {
				t.Errorf("ledger holds %d transactions, want recorded=%v", got, c.recorded)
			}
			if got := s.Stats().Requests; got != 1 {
				t.Errorf("requests = %d, want 1 (health not counted)", got)
			}
		})
	}
}

// TestProcessThenHang: the call is processed as in normal mode (a charge recorded, a refund
// applied) and then never answered; the fake lets go once the client has.
func TestProcessThenHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakeInBubble(t, nil)
		if a := f.call(within(t, 10*time.Second), "POST", "/pay?ref=r1&token=tok_visa", ""); a.status != 200 {
			t.Fatalf("a charge in normal mode: %+v", a)
		}
		f.SetBehavior(sim.Behavior{Mode: sim.ModeProcessThenHang})
		for _, c := range []struct{ what, path string }{
			{"a charge", "/pay?ref=r2&token=tok_visa"},
			{"a declined charge", "/pay?ref=r3&token=tok_decline"},
			{"a refund", "/refund?ref=r1&op=op1"},
		} {
			if a := f.call(within(t, 200*time.Millisecond), "POST", c.path, ""); !errors.Is(a.err, context.DeadlineExceeded) {
				t.Errorf("%s in process_then_hang: %+v, want no answer before the deadline", c.what, a)
			}
		}
		want := []sim.Tx{
			{Reference: "r1", ID: "tx_000001", Amount: 100, Currency: "USD", Status: sim.StatusPartiallyRefunded, Refunded: 40},
			{Reference: "r2", ID: "tx_000002", Amount: 100, Currency: "USD", Status: sim.StatusCaptured},
		}
		got := f.Ledger().Transactions()
		if len(got) != len(want) {
			t.Fatalf("ledger after a charge, a decline and a refund that were never answered: %+v, want %+v", got, want)
		}
		for i := range want {
			got[i].Fingerprint, got[i].DeclineCode = "", ""
			if got[i] != want[i] {
				t.Errorf("ledger[%d] = %+v, want %+v", i, got[i], want[i])
			}
		}
		if tx, ok := f.Ledger().Lookup("r3"); !ok || tx.Status != sim.StatusDeclined {
			t.Errorf("the declined charge: %+v, %v; want it recorded as declined", tx, ok)
		}
		synctest.Wait() // the clients gave up at their deadlines
		if n := f.Stats().InFlight; n != 0 {
			t.Errorf("%d calls in flight after their clients left, want the fake to stop waiting for them", n)
		}
		f.SetBehavior(sim.Behavior{Mode: sim.ModeNormal})
		if a := f.call(within(t, 10*time.Second), "POST", "/pay?ref=r2&token=tok_visa", ""); a.status != 200 || !strings.Contains(a.body, `"status":"captured"`) {
			t.Errorf("the unanswered charge sent again once normal: %+v, want its captured transaction", a)
		}
	})
}

// TestProcessThen503: the call is processed as in normal mode (a charge recorded, a refund
// applied, a decline recorded as such) and then answered as a proxy whose connection to the
// gateway dropped: 503, text/plain, Envoy's words, not the gateway's own answer. With a latency,
// it is recorded on arrival and answered after it.
func TestProcessThen503(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakeInBubble(t, nil)
		if a := f.call(within(t, 10*time.Second), "POST", "/pay?ref=r1&token=tok_visa", ""); a.status != 200 {
			t.Fatalf("a charge in normal mode: %+v", a)
		}
		f.SetBehavior(sim.Behavior{Mode: sim.ModeProcessThen503})
		for _, c := range []struct{ what, path string }{
			{"a charge", "/pay?ref=r2&token=tok_visa"},
			{"a declined charge", "/pay?ref=r3&token=tok_decline"},
			{"a refund", "/refund?ref=r1&op=op1"},
			{"a refund that the gateway refuses", "/refund?ref=nowhere&op=op2"},
		} {
			a := f.call(within(t, 10*time.Second), "POST", c.path, "")
			if a.err != nil || a.status != http.StatusServiceUnavailable || a.contentType != "text/plain" || a.body != sim.EnvoyResetBody {
				t.Errorf("%s in process_then_503: %+v, want 503 text/plain %q", c.what, a, sim.EnvoyResetBody)
			}
		}
		want := []sim.Tx{
			{Reference: "r1", ID: "tx_000001", Amount: 100, Currency: "USD", Status: sim.StatusPartiallyRefunded, Refunded: 40},
			{Reference: "r2", ID: "tx_000002", Amount: 100, Currency: "USD", Status: sim.StatusCaptured},
		}
		got := f.Ledger().Transactions()
		if len(got) != len(want) {
			t.Fatalf("ledger after a charge, a decline and a refund answered 503: %+v, want %+v", got, want)
		}
		for i := range want {
			got[i].Fingerprint, got[i].DeclineCode = "", ""
			if got[i] != want[i] {
				t.Errorf("ledger[%d] = %+v, want %+v", i, got[i], want[i])
			}
		}
		if tx, ok := f.Ledger().Lookup("r3"); !ok || tx.Status != sim.StatusDeclined {
			t.Errorf("the declined charge: %+v, %v; want it recorded as declined", tx, ok)
		}
		if got := f.Stats(); got.Requests != 5 || got.InFlight != 0 {
			t.Errorf("stats %+v: want 5 requests, none in flight", got)
		}

		const latency = 100 * time.Millisecond
		f.SetBehavior(sim.Behavior{Mode: sim.ModeProcessThen503, Latency: latency})
		done := make(chan answer, 1)
		began := time.Now()
		go func() { done <- f.call(within(t, 10*time.Second), "POST", "/pay?ref=r4&token=tok_visa", "") }()
		synctest.Wait() // the call waits out the latency
		if _, ok := f.Ledger().Lookup("r4"); !ok {
			t.Errorf("the slow charge, before its answer: not in the ledger; want it recorded on arrival")
		}
		a := <-done
		if took := time.Since(began); a.status != http.StatusServiceUnavailable || took != latency {
			t.Errorf("a slow call in process_then_503: %+v after %v; want 503 after %v", a, took, latency)
		}
	})
}

// TestSlowTail: a call whose draw falls within slow_share is delayed by slow_latency on top of
// the latency, and recorded on arrival; the others only by the latency. The draws are the
// test's, alternately inside and outside the share.
func TestSlowTail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		draws := []float64{0.1, 0.9} // slow_share 0.5: slow, then not
		f := fakeInBubble(t, func() float64 { return draws[(n.Add(1)-1)%2] })
		const latency, slow = 20 * time.Millisecond, time.Minute
		f.SetBehavior(sim.Behavior{Mode: sim.ModeNormal, Latency: latency, SlowShare: 0.5, SlowLatency: slow})

		if a := f.call(within(t, 300*time.Millisecond), "POST", "/pay?ref=tail", ""); !errors.Is(a.err, context.DeadlineExceeded) {
			t.Fatalf("a call drawn into the tail (%v more) with a 300ms deadline: %+v, want no answer in time", slow, a)
		}
		if tx, ok := f.Ledger().Lookup("tail"); !ok || tx.Status != sim.StatusCaptured {
			t.Errorf("the slow call: %+v, %v; want it recorded on arrival", tx, ok)
		}
		began := time.Now()
		if a := f.call(within(t, 10*time.Second), "POST", "/pay?ref=fast", ""); a.status != 200 {
			t.Fatalf("a call outside the tail: %+v", a)
		}
		if took := time.Since(began); took != latency {
			t.Errorf("a call outside the tail answered in %v, want the latency %v alone", took, latency)
		}

		// The tail is a share of calls: none at 0, all at 1; health is never in it.
		for _, share := range []float64{0, 1} {
			f.SetBehavior(sim.Behavior{Mode: sim.ModeNormal, SlowShare: share, SlowLatency: slow})
			a := f.call(within(t, 300*time.Millisecond), "POST", "/pay?ref=share", "")
			if answered := a.err == nil; answered != (share == 0) {
				t.Errorf("slow_share %v: %+v, want answered=%v", share, a, share == 0)
			}
			if h := f.call(within(t, 300*time.Millisecond), "GET", "/health", ""); h.status != 200 {
				t.Errorf("GET /health with slow_share %v: %+v, want 200 at once", share, h)
			}
		}
	})
}

// TestLatencyRecordsOnArrival: the transaction is recorded when the request arrives; giving up
// early does not undo it, and the fake stops waiting for a client that has gone.
func TestLatencyRecordsOnArrival(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakeInBubble(t, nil)
		f.SetBehavior(sim.Behavior{Mode: sim.ModeNormal, Latency: time.Minute})
		a := f.call(within(t, 100*time.Millisecond), "POST", "/pay?ref=slow", "")
		if !errors.Is(a.err, context.DeadlineExceeded) {
			t.Fatalf("a call with a minute of latency and a 100ms deadline: %+v", a)
		}
		synctest.Wait() // the fake has seen the client go
		if n := len(f.Ledger().Transactions()); n != 1 {
			t.Errorf("the ledger holds %d transactions after a call given up during its latency, want it recorded", n)
		}
		if n := f.Stats().InFlight; n != 0 {
			t.Errorf("%d calls in flight after the client left, want the fake to stop waiting for it", n)
		}
	})
}

func TestLatencyDelaysTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakeInBubble(t, nil)
		f.SetBehavior(sim.Behavior{Mode: sim.ModeNormal, Latency: 30 * time.Millisecond})
		began := time.Now()
		if a := f.call(within(t, 10*time.Second), "POST", "/pay?ref=r", ""); a.status != 200 {
			t.Fatalf("%+v", a)
		}
		if took := time.Since(began); took != 30*time.Millisecond {
			t.Errorf("answered after %v with 30ms latency", took)
		}
	})
}

// TestCloseReleases: Close lets go of hung calls (no answer) and of delayed answers (sent at
// once), so a server can shut down.
func TestCloseReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakeInBubble(t, nil)
		f.SetBehavior(sim.Behavior{Mode: sim.ModeHang})
		hung := make(chan answer, 1)
		go func() { hung <- f.call(t.Context(), "POST", "/pay?ref=h", "") }()
		synctest.Wait()
		if n := f.Stats().InFlight; n != 1 {
			t.Fatalf("%d calls in flight, want the hung one", n)
		}

		f.SetBehavior(sim.Behavior{Mode: sim.ModeNormal, Latency: time.Hour})
		delayed := make(chan answer, 1)
		go func() { delayed <- f.call(t.Context(), "POST", "/pay?ref=d", "") }()
		synctest.Wait()
		if n := f.Stats().InFlight; n != 2 {
			t.Fatalf("%d calls in flight, want the hung one and the delayed one", n)
		}

		f.Close()
		if a := <-hung; a.err == nil {
			t.Errorf("hung call after Close: %+v, want no answer", a)
		}
		if a := <-delayed; a.status != 200 {
			t.Errorf("delayed call after Close: %+v, want its answer at once", a)
		}
		f.SetBehavior(sim.Behavior{Mode: sim.ModeHang})
		if a := f.call(within(t, 10*time.Second), "POST", "/pay?ref=later", ""); a.err == nil || errors.Is(a.err, context.DeadlineExceeded) {
			t.Errorf("a call that hangs after Close: %+v, want it dropped at once", a)
		}
	})
}

// TestMaxInFlight: the counters see calls that are in flight together, and a reset while they
// are in flight starts from zero without going negative when they end.
func TestMaxInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &bubbled{Server: sim.New(sim.Config{Name: "test"}), net: &memnet.Network{}}
		f.Handle("POST /pay", func(w http.ResponseWriter, _ *http.Request) {})
		f.url = f.net.Serve(t, "sim", f.Server)
		f.SetBehavior(sim.Behavior{Mode: sim.ModeHang})
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		for i := range 5 {
			wg.Go(func() { f.call(ctx, "POST", fmt.Sprintf("/pay?ref=r%d", i), "") })
		}
		synctest.Wait()
		if st := f.Stats(); st != (sim.Stats{Requests: 5, InFlight: 5, MaxInFlight: 5}) {
			t.Fatalf("stats with 5 calls hung: %+v, want 5 requests, all in flight", st)
		}
		f.Reset()
		cancel()
		wg.Wait()
		synctest.Wait() // every handler has returned
		if st := f.Stats(); st != (sim.Stats{}) {
			t.Fatalf("stats after a reset while 5 calls hung, then their end: %+v, want zeros", st)
		}
	})
}

func TestDeclines(t *testing.T) {
	s := sim.New(sim.Config{Name: "t"})
	if !s.Declines(sim.DeclineToken) || s.Declines("tok_visa") {
		t.Fatal("only the decline token is declined in normal mode")
	}
	s.SetBehavior(sim.Behavior{DeclineAll: true})
	if !s.Declines("tok_visa") {
		t.Fatal("decline_all declines every token")
	}
	if s.Behavior().Mode != sim.ModeNormal {
		t.Fatalf("an empty mode is normal: %+v", s.Behavior())
	}
}

// TestRefundUnchecked: with refund_unchecked every refund of a captured transaction is approved
// and the ledger shows refunded beyond the amount; a PUT without it and a reset bring the check
// back.
func TestRefundUnchecked(t *testing.T) {
	s, url := fake(t)
	ctx := within(t, 10*time.Second)
	call(ctx, "POST", url+"/pay?ref=r1&token=tok_visa", "") // captures 100

	refund := func(op string) answer { return call(ctx, "POST", url+"/refund?ref=r1&op="+op, "") }
	for _, op := range []string{"o1", "o2"} {
		if a := refund(op); a.status != 200 {
			t.Fatalf("refund %s of 40 with 100 captured: %+v", op, a)
		}
	}
	if a := refund("o3"); a.status != http.StatusConflict {
		t.Fatalf("refund o3 of 40 with 20 left, checked: %+v; want refused", a)
	}

	if a := call(ctx, "PUT", url+"/_sim/behavior", `{"refund_unchecked":true}`); a.status != 200 || !strings.Contains(a.body, `"refund_unchecked":true`) {
		t.Fatalf("PUT /_sim/behavior refund_unchecked: %+v", a)
	}
	for _, op := range []string{"o3", "o4", "o5"} {
		if a := refund(op); a.status != 200 {
			t.Fatalf("refund %s, unchecked: %+v; want approved", op, a)
		}
	}
	if a := refund("o5"); a.status != 200 {
		t.Fatalf("refund o5 again, unchecked: %+v; want it replayed", a)
	}
	want := `{"transactions":[{"reference":"r1","id":"tx_000001","amount":100,"currency":"USD","status":"refunded","refunded":200}]}`
	if a := call(ctx, "GET", url+"/_sim/ledger", ""); strings.TrimSpace(a.body) != want {
		t.Fatalf("GET /_sim/ledger after five refunds of 40 (one sent twice) of 100: %s; want %s", a.body, want)
	}
	if st := s.Stats(); st.Requests != 8 {
		t.Errorf("stats: %+v, want 8 requests", st)
	}

	// Any PUT replaces the whole behavior: a mode change without the field checks again.
	call(ctx, "PUT", url+"/_sim/behavior", `{"mode":"process_then_503"}`)
	if a := refund("o6"); a.status != http.StatusServiceUnavailable {
		t.Fatalf("refund o6 in process_then_503: %+v; want the proxy's 503", a)
	}
	if tx, _ := s.Ledger().Lookup("r1"); tx.Refunded != 200 {
		t.Errorf("a refund of a refunded transaction, checked again: applied (refunded %d, want 200)", tx.Refunded)
	}
	call(ctx, "PUT", url+"/_sim/behavior", `{"mode":"process_then_503","refund_unchecked":true}`)
	refund("o7")
	if tx, _ := s.Ledger().Lookup("r1"); tx.Refunded != 240 {
		t.Errorf("refund o7 in process_then_503, unchecked: refunded %d, want 240 (processed, then the proxy's 503)", tx.Refunded)
	}
	call(ctx, "POST", url+"/_sim/reset", "")
	if got := s.Behavior(); got.RefundUnchecked {
		t.Errorf("behavior after reset: %+v, want refunds checked", got)
	}
}

// TestTraceHeaders: GET /_sim/trace_headers counts the API calls that carried each W3C
// trace-context header and shows the last value; health and control calls are not counted, no
// other header (the credentials) is shown, and a reset empties it.
func TestTraceHeaders(t *testing.T) {
	s, url := fake(t)
	ctx := within(t, 10*time.Second)
	send := func(path string, header ...string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "POST", url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Add(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	const tp1 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const tp2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	send("/pay?ref=t1&token=tok_visa", "Traceparent", tp1, "Tracestate", "shop=a", "Baggage", "user=1", "Authorization", "Bearer sk_secret_1")
	send("/pay?ref=t2&token=tok_visa", "Traceparent", tp2, "Baggage", "a=1", "Baggage", "b=2")
	send("/pay?ref=t3&token=tok_visa")
	// Not API calls: never counted.
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/health", nil)
	req.Header.Set("Baggage", "probe=1")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}

	want := sim.TraceHeaders{
		Traceparent: sim.HeaderSeen{Calls: 2, Last: tp2},
		Tracestate:  sim.HeaderSeen{Calls: 1, Last: "shop=a"},
		Baggage:     sim.HeaderSeen{Calls: 2, Last: "a=1, b=2"},
	}
	if got := s.TraceHeaders(); got != want {
		t.Errorf("TraceHeaders after three calls: %+v, want %+v", got, want)
	}
	a := call(ctx, "GET", url+"/_sim/trace_headers", "")
	var view sim.TraceHeaders
	if a.status != 200 || json.Unmarshal([]byte(a.body), &view) != nil || view != want {
		t.Errorf("GET /_sim/trace_headers: %+v, want 200 with %+v", a, want)
	}
	if strings.Contains(a.body, "sk_secret_1") || strings.Contains(a.body, "uthorization") {
		t.Errorf("GET /_sim/trace_headers shows another header: %s", a.body)
	}

	call(ctx, "POST", url+"/_sim/reset", "")
	if a := call(ctx, "GET", url+"/_sim/trace_headers", ""); strings.TrimSpace(a.body) !=
		`{"traceparent":{"calls":0,"last":""},"tracestate":{"calls":0,"last":""},"baggage":{"calls":0,"last":""}}` {
		t.Errorf("GET /_sim/trace_headers after a reset: %s", a.body)
	}
}

// TestHandleHealthAndOnReset: a gateway's own health call (HandleHealth) answers as GET /health
// does, its handler writing the healthy answer, and is not counted; OnReset runs on every reset,
// the control API's included.
func TestHandleHealthAndOnReset(t *testing.T) {
	resets := 0
	s := sim.New(sim.Config{Name: "test", TxPrefix: "tx_", OpPrefix: "op_", OnReset: func() { resets++ }})
	s.HandleHealth("GET /v1/ping", func(w http.ResponseWriter, _ *http.Request) {
		sim.WriteJSON(w, http.StatusOK, map[string]string{"object": "pong"})
	})
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	t.Cleanup(s.Close)
	ctx := within(t, 10*time.Second)

	if a := call(ctx, "GET", ts.URL+"/v1/ping", ""); a.status != 200 || strings.TrimSpace(a.body) != `{"object":"pong"}` {
		t.Fatalf("health call, normal: %+v", a)
	}
	s.SetBehavior(sim.Behavior{Mode: sim.ModeUnavailable})
	if a := call(ctx, "GET", ts.URL+"/v1/ping", ""); a.status != http.StatusServiceUnavailable || strings.Contains(a.body, "pong") {
		t.Errorf("health call, unavailable: %+v", a)
	}
	s.SetBehavior(sim.Behavior{Mode: sim.ModeHang})
	if a := call(within(t, 100*time.Millisecond), "GET", ts.URL+"/v1/ping", ""); a.err == nil {
		t.Errorf("health call, hang: %+v; want no answer", a)
	}
	if got := s.Stats().Requests; got != 0 {
		t.Errorf("%d API calls counted for health calls", got)
	}
	if a := call(ctx, "POST", ts.URL+"/_sim/reset", ""); a.status != 200 || resets != 1 {
		t.Fatalf("POST /_sim/reset: %+v, OnReset ran %d times", a, resets)
	}
	s.Reset()
	if resets != 2 {
		t.Errorf("OnReset ran %d times after two resets", resets)
	}
}
