// Package gatewaytest is the conformance suite every gateway adapter must pass against its own
// fake: each behavior mode of package sim, over real loopback sockets, must come out as the same
// payrouter.Outcome whatever the wire format. An adapter's test calls Run with an Adapter. Every
// case runs twice: over plain HTTP, and over HTTPS against a fake that requires a client
// certificate (mutual TLS, a test CA from internal/testpki), with the adapter's connections built
// as payrouter builds them (gatewayhttp.NewClient, gatewayhttp.ClientTLS).
package gatewaytest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
	"github.com/payrouter/payrouter/gateways/sim"
	"github.com/payrouter/payrouter/internal/testpki"
)

// Adapter is one adapter under test, with its fake.
type Adapter struct {
	// Name names the adapter in test names and messages.
	Name string
	// NewServer returns a fresh fake of the gateway, in normal mode with an empty ledger.
	NewServer func() *sim.Server
	// NewClient returns the adapter for the gateway at baseURL, sending through client.
	NewClient func(baseURL string, client *http.Client) (payrouter.Gateway, error)
	// LooksUpFirst is set for a gateway that names a transaction only by its own id (Stripe):
	// a capture, void or refund given only payrouter's reference (the charge's answer was lost)
	// looks the transaction up first, and is not sent when the look-up fails. The others accept
	// payrouter's reference in place of their id, so the operation itself is sent.
	LooksUpFirst bool
}

// Timings of the suite. A deadline of short against a latency of latency must come out as a
// timeout even on a starved machine running -race, where a timer can fire most of a second late;
// nothing ever waits the latency out (the client gives up, the fake stops waiting), so it costs
// nothing to make it long.
const (
	generous = 10 * time.Second       // a deadline that is never reached
	short    = 100 * time.Millisecond // a deadline that is meant to pass
	latency  = 3 * time.Second        // a slow gateway: far beyond short
	// settle is the deadline of a call that is meant to time out after one that did, whose
	// connection may not be reused (Go's HTTP/2 client does not send a new request on a
	// connection it has heard nothing on since a request timed out there): it must leave room
	// for a new connection and its TLS handshake on a starved machine (within short, the
	// deadline can pass before the request is written: unavailable, rightly) and still be far
	// short of latency.
	settle = time.Second
	slight = 50 * time.Millisecond // a latency that a generous deadline easily covers
)

// Run runs the conformance suite for a, each case in parallel with its own fake and transport,
// over HTTP ("http/...") and over HTTPS with a client certificate ("https/...").
func Run(t *testing.T, a Adapter) {
	t.Run("http", func(t *testing.T) {
		t.Parallel()
		runCases(t, a, nil)
	})
	t.Run("https", func(t *testing.T) {
		t.Parallel()
		runCases(t, a, newPKI(t))
	})
}

// pki is the HTTPS world of a run: a CA, the fakes' server certificate, payrouter's client
// certificate.
type pki struct {
	ca             *testpki.CA
	server, client testpki.Pair
}

func newPKI(t *testing.T) *pki {
	ca := testpki.NewCA(t, "conformance")
	return &pki{ca: ca, server: ca.Server(t, "gateway", "127.0.0.1"), client: ca.Client(t, "payrouter")}
}

// runCases runs every case; p nil is plain HTTP.
func runCases(t *testing.T, a Adapter, p *pki) {
	cases := []struct {
		name string
		run  func(*testing.T, *env)
	}{
		{"normal/capture", testCapture},
		{"normal/authorize_then_capture", testAuthorizeThenCapture},
		{"normal/capture_by_reference", testCaptureByReference},
		{"normal/void", testVoid},
		{"normal/refund", testRefund},
		{"refund_unchecked", testRefundUnchecked},
		{"normal/same_reference_twice", testSameReferenceTwice},
		{"normal/status_not_found", testStatusNotFound},
		{"normal/operation_on_unknown_charge", testOperationOnUnknownCharge},
		{"normal/stats", testStats},
		{"normal/health", testHealth},
		{"decline/token", testDeclineToken},
		{"decline/decline_all", testDeclineAll},
		{"latency/answer_within_deadline", testLatencyWithinDeadline},
		{"latency/timeout_but_recorded", testLatencyTimeout},
		{"unavailable", testUnavailable},
		{"unavailable/form_altered_on_the_way", testUnavailableAltered},
		{"error500", testError500},
		{"hang", testHang},
		{"reset", testReset},
		{"process_then_503", testProcessThen503},
		{"closed_port", testClosedPort},
		{"unreadable_answer", testUnreadableAnswer},
		{"foreign_answers", testForeignAnswers},
		{"redirect", testRedirect},
	}
	if p != nil {
		cases = append(cases,
			struct {
				name string
				run  func(*testing.T, *env)
			}{"tls/no_client_certificate", testNoClientCertificate},
			struct {
				name string
				run  func(*testing.T, *env)
			}{"tls/gateway_not_trusted", testGatewayNotTrusted})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, start(t, a, p))
		})
	}
}

// env is one case's world: a fake on a real socket, and the adapter talking to it.
type env struct {
	t             *testing.T
	adapter       Adapter
	sim           *sim.Server
	url           string
	client        *http.Client // the adapter's
	gw            payrouter.Gateway
	refs          atomic.Int64
	pki           *pki         // nil: plain HTTP
	controlClient *http.Client // drives the fake's control API
}

func start(t *testing.T, a Adapter, p *pki) *env {
	t.Helper()
	e := &env{t: t, adapter: a, pki: p}
	e.sim = a.NewServer()
	ts := e.serve(e.sim)
	// Cleanups run last-in first-out: hung requests are let go before ts.Close waits for them.
	t.Cleanup(e.sim.Close)
	e.url = ts.URL
	e.controlClient = e.newClient(t)
	e.client = e.newClient(t)
	gw, err := a.NewClient(ts.URL, e.client)
	if err != nil {
		t.Fatalf("%s: NewClient(%s): %v", a.Name, ts.URL, err)
	}
	e.gw = checked{gw, t, a.Name}
	return e
}

// serve starts h on a loopback socket: plain HTTP, or HTTPS requiring a client certificate of
// the run's CA.
func (e *env) serve(h http.Handler) *httptest.Server {
	ts := httptest.NewUnstartedServer(h)
	if e.pki == nil {
		ts.Start()
	} else {
		ts.TLS = &tls.Config{
			Certificates: []tls.Certificate{e.pki.server.TLS(e.t)},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    e.pki.ca.Pool(),
			MinVersion:   tls.VersionTLS12,
		}
		// The refused handshakes of the tls/ cases are logged by net/http; they are the point.
		ts.Config.ErrorLog = log.New(io.Discard, "", 0)
		ts.StartTLS()
	}
	e.t.Cleanup(ts.Close)
	return ts
}

// newClient is a client on its own transport, as each gateway has in payrouter, with no timeout
// of its own (the deadline comes with the context), built as payrouter builds them: no redirect
// followed, and for HTTPS the run's CA and payrouter's client certificate through
// gatewayhttp.ClientTLS.
func (e *env) newClient(t *testing.T) *http.Client {
	if e.pki == nil {
		return e.clientWith(t, gatewayhttp.ClientTLS{})
	}
	return e.clientWith(t, gatewayhttp.ClientTLS{CAFile: e.pki.ca.CertFile, CertFile: e.pki.client.CertFile, KeyFile: e.pki.client.KeyFile})
}

// clientWith is newClient with the TLS settings c.
func (e *env) clientWith(t *testing.T, c gatewayhttp.ClientTLS) *http.Client {
	cfg, _, err := c.Load()
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 10, TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return gatewayhttp.NewClient(tr)
}

// checked holds every result of the adapter under test to ValidResult, whatever the case
// asserts about it.
type checked struct {
	g    payrouter.Gateway
	t    *testing.T
	name string
}

func (c checked) check(op payrouter.Operation, r payrouter.Result) payrouter.Result {
	if err := ValidResult(op, r); err != nil {
		c.t.Errorf("%s: %s: invalid result: %v (%+v)", c.name, op, err, r)
	}
	return r
}

func (c checked) Authorize(ctx context.Context, req payrouter.ChargeRequest) payrouter.Result {
	return c.check(payrouter.OpCharge, c.g.Authorize(ctx, req))
}

func (c checked) Capture(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	return c.check(payrouter.OpCapture, c.g.Capture(ctx, req))
}

func (c checked) Void(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	return c.check(payrouter.OpVoid, c.g.Void(ctx, req))
}

func (c checked) Refund(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	return c.check(payrouter.OpRefund, c.g.Refund(ctx, req))
}

func (c checked) Status(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	return c.check(payrouter.OpStatus, c.g.Status(ctx, req))
}

func (c checked) Health(ctx context.Context) error { return c.g.Health(ctx) }

// ref is a new idempotency reference, unique within the case.
func (e *env) ref() string {
	return fmt.Sprintf("ch_conf_%d-a1", e.refs.Add(1))
}

func (e *env) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(e.t.Context(), d)
	e.t.Cleanup(cancel)
	return ctx
}

func (e *env) charge(ref string, amount int64, token string, capture bool) payrouter.ChargeRequest {
	return payrouter.ChargeRequest{Reference: ref, Amount: amount, Currency: "USD", Token: token, Capture: capture,
		Country: "US", CustomerID: "cus_conformance", Description: "conformance " + e.adapter.Name}
}

// control calls the fake's control API over its socket, as the contract suite does.
func (e *env) control(method, path string, body any, out any) {
	e.t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(e.ctx(generous), method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.controlClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		e.t.Fatalf("%s %s: HTTP %d", method, path, resp.StatusCode)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			e.t.Fatalf("%s %s: decoding: %v", method, path, err)
		}
	}
}

func (e *env) behave(mode sim.Mode, latency time.Duration, declineAll bool) {
	e.t.Helper()
	e.control(http.MethodPut, "/_sim/behavior", map[string]any{"mode": mode, "latency": latency.String(), "decline_all": declineAll}, nil)
}

func (e *env) ledger() []sim.Tx {
	e.t.Helper()
	var l struct {
		Transactions []sim.Tx `json:"transactions"`
	}
	e.control(http.MethodGet, "/_sim/ledger", nil, &l)
	return l.Transactions
}

func (e *env) stats() sim.Stats {
	e.t.Helper()
	var s sim.Stats
	e.control(http.MethodGet, "/_sim/stats", nil, &s)
	return s
}

// expectLedger fails unless the ledger holds exactly these transactions (ids not compared).
func (e *env) expectLedger(why string, want ...sim.Tx) {
	e.t.Helper()
	got := e.ledger()
	for i := range got {
		got[i].ID = ""
	}
	if want == nil {
		want = []sim.Tx{}
	}
	if !slices.Equal(got, want) {
		e.t.Fatalf("%s: %s: ledger %+v, want %+v", e.adapter.Name, why, got, want)
	}
}

func tx(ref string, amount int64, status sim.TxStatus, refunded int64) sim.Tx {
	return sim.Tx{Reference: ref, Amount: amount, Currency: "USD", Status: status, Refunded: refunded}
}

// validOutcomes are what an adapter may answer; breaker_open and bulkhead_full are decided
// before an adapter is called.
var validOutcomes = []payrouter.Outcome{
	payrouter.OutcomeSucceeded, payrouter.OutcomeDeclined, payrouter.OutcomePending,
	payrouter.OutcomeUnavailable, payrouter.OutcomeTimeout, payrouter.OutcomeUnknown, payrouter.OutcomeError,
}

// expect fails unless r has the outcome (and, when given, the state).
func (e *env) expect(what string, r payrouter.Result, want payrouter.Outcome, state ...payrouter.TxState) {
	e.t.Helper()
	if r.Outcome != want {
		e.t.Fatalf("%s: %s: outcome %q, want %q (%+v)", e.adapter.Name, what, r.Outcome, want, r)
	}
	if len(state) > 0 && r.State != state[0] {
		e.t.Fatalf("%s: %s: state %q, want %q (%+v)", e.adapter.Name, what, r.State, state[0], r)
	}
	if r.Outcome != payrouter.OutcomeSucceeded && r.Detail == "" {
		e.t.Errorf("%s: %s: a %s result must say why in Detail (%+v)", e.adapter.Name, what, r.Outcome, r)
	}
}

// warm leaves a connection of the adapter's client open to the gateway (a health call), so that a
// call given only short to reach the gateway does not spend it dialing: a call whose deadline
// passes before its request is written is unavailable, not the timeout the case is about.
func (e *env) warm() {
	e.t.Helper()
	if err := e.gw.Health(e.ctx(generous)); err != nil {
		e.t.Fatalf("%s: health before the case: %v", e.adapter.Name, err)
	}
}

// eventually polls cond until it holds or the deadline passes: a wait for a state, not a sleep.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(generous)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: %s: not within %v", e.adapter.Name, what, generous)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *env) status(ref string) payrouter.Result {
	return e.gw.Status(e.ctx(generous), payrouter.TxRequest{Reference: ref, ChargeReference: ref, Currency: "USD"})
}

func testCapture(t *testing.T, e *env) {
	ref := e.ref()
	r := e.gw.Authorize(e.ctx(generous), e.charge(ref, 1999, "tok_visa", true))
	e.expect("charge with capture", r, payrouter.OutcomeSucceeded, payrouter.TxCaptured)
	if r.GatewayReference == "" {
		t.Fatalf("%s: charge with capture: no GatewayReference (%+v)", e.adapter.Name, r)
	}
	e.expectLedger("after one captured charge", tx(ref, 1999, sim.StatusCaptured, 0))

	s := e.status(ref)
	e.expect("status of a captured charge", s, payrouter.OutcomeSucceeded, payrouter.TxCaptured)
	if s.GatewayReference != r.GatewayReference {
		t.Errorf("%s: status GatewayReference %q, want the charge's %q", e.adapter.Name, s.GatewayReference, r.GatewayReference)
	}
}

func testAuthorizeThenCapture(t *testing.T, e *env) {
	ref := e.ref()
	r := e.gw.Authorize(e.ctx(generous), e.charge(ref, 2500, "tok_visa", false))
	e.expect("authorize only", r, payrouter.OutcomeSucceeded, payrouter.TxAuthorized)
	e.expectLedger("after an authorization", tx(ref, 2500, sim.StatusAuthorized, 0))
	e.expect("status of an authorization", e.status(ref), payrouter.OutcomeSucceeded, payrouter.TxAuthorized)

	c := e.gw.Capture(e.ctx(generous), payrouter.TxRequest{Reference: ref + "-capture", ChargeReference: ref,
		GatewayReference: r.GatewayReference, Amount: 2500, Currency: "USD"})
	e.expect("capture", c, payrouter.OutcomeSucceeded, payrouter.TxCaptured)
	e.expectLedger("after the capture", tx(ref, 2500, sim.StatusCaptured, 0))
	e.expect("status after the capture", e.status(ref), payrouter.OutcomeSucceeded, payrouter.TxCaptured)
}

// testCaptureByReference: after a charge whose answer was lost, payrouter knows only the
// reference it sent; that must be enough to act on the transaction.
func testCaptureByReference(t *testing.T, e *env) {
	ref := e.ref()
	e.expect("authorize only", e.gw.Authorize(e.ctx(generous), e.charge(ref, 700, "tok_visa", false)), payrouter.OutcomeSucceeded)
	c := e.gw.Capture(e.ctx(generous), payrouter.TxRequest{Reference: ref + "-capture", ChargeReference: ref, Amount: 700, Currency: "USD"})
	e.expect("capture by reference only", c, payrouter.OutcomeSucceeded, payrouter.TxCaptured)
	e.expectLedger("after the capture", tx(ref, 700, sim.StatusCaptured, 0))
}

func testVoid(t *testing.T, e *env) {
	ref := e.ref()
	r := e.gw.Authorize(e.ctx(generous), e.charge(ref, 1200, "tok_visa", false))
	e.expect("authorize only", r, payrouter.OutcomeSucceeded, payrouter.TxAuthorized)
	txr := payrouter.TxRequest{Reference: ref + "-void", ChargeReference: ref, GatewayReference: r.GatewayReference, Currency: "USD"}
	e.expect("void", e.gw.Void(e.ctx(generous), txr), payrouter.OutcomeSucceeded, payrouter.TxVoided)
	e.expectLedger("after the void", tx(ref, 1200, sim.StatusVoided, 0))
	e.expect("status after the void", e.status(ref), payrouter.OutcomeSucceeded, payrouter.TxVoided)

	again := txr
	again.Reference = ref + "-capture"
	again.Amount = 1200
	e.expect("capture of a voided charge", e.gw.Capture(e.ctx(generous), again), payrouter.OutcomeError)
	e.expectLedger("after a refused capture", tx(ref, 1200, sim.StatusVoided, 0))
}

func testRefund(t *testing.T, e *env) {
	ref := e.ref()
	r := e.gw.Authorize(e.ctx(generous), e.charge(ref, 2000, "tok_visa", true))
	e.expect("charge", r, payrouter.OutcomeSucceeded, payrouter.TxCaptured)
	partial := payrouter.TxRequest{Reference: "re_conf_1", ChargeReference: ref, GatewayReference: r.GatewayReference, Amount: 500, Currency: "USD"}

	e.expect("partial refund", e.gw.Refund(e.ctx(generous), partial), payrouter.OutcomeSucceeded, payrouter.TxPartiallyRefunded)
	e.expectLedger("after a partial refund", tx(ref, 2000, sim.StatusPartiallyRefunded, 500))
	e.expect("the same partial refund again", e.gw.Refund(e.ctx(generous), partial), payrouter.OutcomeSucceeded, payrouter.TxPartiallyRefunded)
	e.expectLedger("after the same refund twice (refunded once)", tx(ref, 2000, sim.StatusPartiallyRefunded, 500))
	e.expect("status after a partial refund", e.status(ref), payrouter.OutcomeSucceeded, payrouter.TxPartiallyRefunded)

	rest := partial
	rest.Reference, rest.Amount = "re_conf_2", 1500
	e.expect("refund of the rest", e.gw.Refund(e.ctx(generous), rest), payrouter.OutcomeSucceeded, payrouter.TxRefunded)
	e.expectLedger("after the full refund", tx(ref, 2000, sim.StatusRefunded, 2000))
	e.expect("status after the full refund", e.status(ref), payrouter.OutcomeSucceeded, payrouter.TxRefunded)

	more := partial
	more.Reference, more.Amount = "re_conf_3", 1
	e.expect("refund beyond the amount", e.gw.Refund(e.ctx(generous), more), payrouter.OutcomeError)
	e.expectLedger("after a refused refund", tx(ref, 2000, sim.StatusRefunded, 2000))
}

// testRefundUnchecked: a gateway told to approve every refund takes refunds beyond the amount,
// each reference once, and its ledger shows them.
func testRefundUnchecked(t *testing.T, e *env) {
	ref := e.ref()
	r := e.gw.Authorize(e.ctx(generous), e.charge(ref, 1000, "tok_visa", true))
	e.expect("charge", r, payrouter.OutcomeSucceeded, payrouter.TxCaptured)
	e.control(http.MethodPut, "/_sim/behavior", map[string]any{"mode": sim.ModeNormal, "refund_unchecked": true}, nil)
	full := payrouter.TxRequest{Reference: "re_unchecked_1", ChargeReference: ref, GatewayReference: r.GatewayReference, Amount: 1000, Currency: "USD"}
	e.expect("a full refund", e.gw.Refund(e.ctx(generous), full), payrouter.OutcomeSucceeded, payrouter.TxRefunded)
	again := full
	again.Reference = "re_unchecked_2"
	e.expect("a second full refund, unchecked", e.gw.Refund(e.ctx(generous), again), payrouter.OutcomeSucceeded, payrouter.TxRefunded)
	e.expect("the second one sent twice", e.gw.Refund(e.ctx(generous), again), payrouter.OutcomeSucceeded, payrouter.TxRefunded)
	e.expectLedger("after two full refunds of one charge, unchecked", tx(ref, 1000, sim.StatusRefunded, 2000))
	e.behave(sim.ModeNormal, 0, false)
	third := full
	third.Reference = "re_unchecked_3"
	e.expect("a third full refund, checked again", e.gw.Refund(e.ctx(generous), third), payrouter.OutcomeError)
	e.expectLedger("after a refused refund", tx(ref, 1000, sim.StatusRefunded, 2000))
}

func testSameReferenceTwice(t *testing.T, e *env) {
	ref := e.ref()
	first := e.gw.Authorize(e.ctx(generous), e.charge(ref, 1500, "tok_visa", true))
	e.expect("first charge", first, payrouter.OutcomeSucceeded, payrouter.TxCaptured)
	second := e.gw.Authorize(e.ctx(generous), e.charge(ref, 1500, "tok_visa", true))
	e.expect("the same charge again", second, payrouter.OutcomeSucceeded, payrouter.TxCaptured)
	if second.GatewayReference != first.GatewayReference {
		t.Errorf("%s: the same reference twice gave two transactions: %q and %q", e.adapter.Name, first.GatewayReference, second.GatewayReference)
	}
	e.expectLedger("after the same reference twice", tx(ref, 1500, sim.StatusCaptured, 0))
}

func testStatusNotFound(t *testing.T, e *env) {
	e.expect("status of a reference never sent", e.status("ch_never_sent-a1"), payrouter.OutcomeSucceeded, payrouter.TxNotFound)
}

func testOperationOnUnknownCharge(t *testing.T, e *env) {
	txr := payrouter.TxRequest{Reference: "op_conf_1", ChargeReference: "ch_never_sent-a1", Amount: 100, Currency: "USD"}
	e.expect("capture of a charge never made", e.gw.Capture(e.ctx(generous), txr), payrouter.OutcomeError)
	e.expect("void of a charge never made", e.gw.Void(e.ctx(generous), txr), payrouter.OutcomeError)
	e.expect("refund of a charge never made", e.gw.Refund(e.ctx(generous), txr), payrouter.OutcomeError)
	e.expectLedger("after operations on a charge never made")
}

// testStats: the counters see API calls only, not health or control calls.
func testStats(t *testing.T, e *env) {
	e.expect("charge", e.gw.Authorize(e.ctx(generous), e.charge(e.ref(), 100, "tok_visa", true)), payrouter.OutcomeSucceeded)
	e.expect("status", e.status("ch_other-a1"), payrouter.OutcomeSucceeded, payrouter.TxNotFound)
	if err := e.gw.Health(e.ctx(generous)); err != nil {
		t.Fatalf("%s: health: %v", e.adapter.Name, err)
	}
	e.ledger()
	if got := e.stats(); got != (sim.Stats{Requests: 2, InFlight: 0, MaxInFlight: 1}) {
		t.Fatalf("%s: stats after a charge, a status look-up, a health call and control calls: %+v, want 2 requests, 0 in flight, max 1", e.adapter.Name, got)
	}
}

func testHealth(t *testing.T, e *env) {
	if err := e.gw.Health(e.ctx(generous)); err != nil {
		t.Fatalf("%s: health of a normal gateway: %v", e.adapter.Name, err)
	}
	e.behave(sim.ModeNormal, latency, false)
	if err := e.gw.Health(e.ctx(short)); err == nil {
		t.Errorf("%s: health with %v latency and a %v deadline: no error", e.adapter.Name, latency, short)
	}
	for _, m := range []sim.Mode{sim.ModeUnavailable, sim.ModeError500, sim.ModeHang, sim.ModeReset, sim.ModeProcessThen503} {
		e.behave(m, 0, false)
		if err := e.gw.Health(e.ctx(short)); err == nil {
			t.Errorf("%s: health in mode %s: no error", e.adapter.Name, m)
		}
	}
}

func testDeclineToken(t *testing.T, e *env) {
	ref := e.ref()
	r := e.gw.Authorize(e.ctx(generous), e.charge(ref, 1300, sim.DeclineToken, true))
	e.expect("charge with "+sim.DeclineToken, r, payrouter.OutcomeDeclined, payrouter.TxDeclined)
	if r.DeclineCode == "" || r.DeclineCode != strings.ToLower(r.DeclineCode) || strings.ContainsAny(r.DeclineCode, " -") {
		t.Errorf("%s: decline code %q: want a non-empty lower snake case code", e.adapter.Name, r.DeclineCode)
	}
	e.expectLedger("after a decline (declines move no money)")
	s := e.status(ref)
	e.expect("status of a declined charge", s, payrouter.OutcomeSucceeded, payrouter.TxDeclined)
	again := e.gw.Authorize(e.ctx(generous), e.charge(ref, 1300, sim.DeclineToken, true))
	e.expect("the declined charge again", again, payrouter.OutcomeDeclined, payrouter.TxDeclined)
	if again.DeclineCode != r.DeclineCode {
		t.Errorf("%s: decline code %q on the repeat, %q the first time", e.adapter.Name, again.DeclineCode, r.DeclineCode)
	}
}

func testDeclineAll(t *testing.T, e *env) {
	e.behave(sim.ModeNormal, 0, true)
	r := e.gw.Authorize(e.ctx(generous), e.charge(e.ref(), 1300, "tok_visa", true))
	e.expect("charge with decline_all", r, payrouter.OutcomeDeclined, payrouter.TxDeclined)
	if r.DeclineCode == "" {
		t.Errorf("%s: decline without a decline code (%+v)", e.adapter.Name, r)
	}
	e.expectLedger("after a decline")
}

func testLatencyWithinDeadline(t *testing.T, e *env) {
	e.behave(sim.ModeNormal, slight, false)
	began := time.Now()
	ref := e.ref()
	e.expect("charge slower than usual, within the deadline", e.gw.Authorize(e.ctx(generous), e.charge(ref, 800, "tok_visa", true)),
		payrouter.OutcomeSucceeded, payrouter.TxCaptured)
	if took := time.Since(began); took < slight {
		t.Errorf("%s: answered in %v with a latency of %v", e.adapter.Name, took, slight)
	}
	e.expectLedger("after a slow charge", tx(ref, 800, sim.StatusCaptured, 0))
}

// testLatencyTimeout is the seed incident: the gateway processes the charge but answers after the
// caller gave up. The caller sees a timeout; the money moved anyway; a later look-up finds it.
func testLatencyTimeout(t *testing.T, e *env) {
	e.warm()
	e.behave(sim.ModeNormal, latency, false)
	ref := e.ref()
	began := time.Now()
	r := e.gw.Authorize(e.ctx(short), e.charge(ref, 3001, "tok_visa", true))
	e.expect("charge with latency beyond the deadline", r, payrouter.OutcomeTimeout)
	if took := time.Since(began); took >= latency {
		t.Errorf("%s: gave up after %v, the deadline was %v", e.adapter.Name, took, short)
	}
	e.eventually("the charge the caller gave up on is in the ledger", func() bool {
		l := e.ledger()
		return len(l) == 1 && l[0].Reference == ref && l[0].Amount == 3001 && l[0].Status == sim.StatusCaptured
	})
	e.expect("status look-up while still slow, with too short a deadline", e.gw.Status(e.ctx(settle), payrouter.TxRequest{Reference: ref}), payrouter.OutcomeTimeout)
	e.behave(sim.ModeNormal, 0, false) // the slow spell is over
	e.expect("status look-up once the latency has passed", e.status(ref), payrouter.OutcomeSucceeded, payrouter.TxCaptured)
	e.expectLedger("after the timeout and the look-up", tx(ref, 3001, sim.StatusCaptured, 0))
}

// testUnavailable: the gateway's own "not processed, retry later": nothing recorded, safe to send
// elsewhere.
func testUnavailable(t *testing.T, e *env) {
	e.behave(sim.ModeUnavailable, 0, false)
	ref := e.ref()
	e.expect("charge", e.gw.Authorize(e.ctx(generous), e.charge(ref, 1001, "tok_visa", true)), payrouter.OutcomeUnavailable)
	txr := payrouter.TxRequest{Reference: "op_conf_1", ChargeReference: ref, Amount: 1001, Currency: "USD"}
	e.expect("capture", e.gw.Capture(e.ctx(generous), txr), payrouter.OutcomeUnavailable)
	e.expect("void", e.gw.Void(e.ctx(generous), txr), payrouter.OutcomeUnavailable)
	e.expect("refund", e.gw.Refund(e.ctx(generous), txr), payrouter.OutcomeUnavailable)
	e.expect("status", e.status(ref), payrouter.OutcomeUnavailable)
	e.expectLedger("while unavailable")
	if got := e.stats().Requests; got != 5 {
		t.Errorf("%s: %d requests counted, want 5", e.adapter.Name, got)
	}
}

// testUnavailableAltered: the gateway's own not-processed answer, changed by something between
// it and payrouter, is no longer proof that nothing was processed: re-served as text/plain, or
// padded beyond gatewayhttp.MaxBody (the cut would still parse, as JSON allows trailing
// spaces), it is unknown. Passed through untouched it stays unavailable.
func testUnavailableAltered(t *testing.T, e *env) {
	e.behave(sim.ModeUnavailable, 0, false)
	var alter atomic.Value // func(http.Header, []byte) []byte
	front := e.serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		e.sim.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		if f, _ := alter.Load().(func(http.Header, []byte) []byte); f != nil {
			body = f(rec.Header(), body)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	}))
	raw, err := e.adapter.NewClient(front.URL, e.newClient(t))
	if err != nil {
		t.Fatal(err)
	}
	gw := checked{raw, t, e.adapter.Name}
	cases := []struct {
		what  string
		alter func(http.Header, []byte) []byte
		want  payrouter.Outcome
	}{
		{"passed through untouched", func(_ http.Header, b []byte) []byte { return b }, payrouter.OutcomeUnavailable},
		{"re-served as text/plain", func(h http.Header, b []byte) []byte {
			h.Set("Content-Type", "text/plain; charset=utf-8")
			return b
		}, payrouter.OutcomeUnknown},
		{"with its Content-Type dropped", func(h http.Header, b []byte) []byte {
			h["Content-Type"] = nil // nil, not deleted: net/http would sniff one
			return b
		}, payrouter.OutcomeUnknown},
		{"padded beyond MaxBody", func(_ http.Header, b []byte) []byte {
			return append(bytes.TrimSpace(b), bytes.Repeat([]byte(" "), gatewayhttp.MaxBody)...)
		}, payrouter.OutcomeUnknown},
	}
	for _, c := range cases {
		alter.Store(c.alter)
		ref := e.ref()
		e.expect("charge, the not-processed answer "+c.what, gw.Authorize(e.ctx(generous), e.charge(ref, 1010, "tok_visa", true)), c.want)
		e.expect("status, the not-processed answer "+c.what, gw.Status(e.ctx(generous), payrouter.TxRequest{Reference: ref}), c.want)
	}
	e.expectLedger("while unavailable")
}

// testError500: a plain 500 may have been processed (unknown); the look-up later shows it was not.
func testError500(t *testing.T, e *env) {
	e.behave(sim.ModeError500, 0, false)
	ref := e.ref()
	e.expect("charge", e.gw.Authorize(e.ctx(generous), e.charge(ref, 1002, "tok_visa", true)), payrouter.OutcomeUnknown)
	e.expect("capture", e.gw.Capture(e.ctx(generous), payrouter.TxRequest{Reference: "op_conf_1", ChargeReference: ref, Currency: "USD"}), payrouter.OutcomeUnknown)
	e.expect("status while failing", e.status(ref), payrouter.OutcomeUnknown)
	e.expectLedger("while answering 500")
	e.behave(sim.ModeNormal, 0, false)
	e.expect("status once recovered", e.status(ref), payrouter.OutcomeSucceeded, payrouter.TxNotFound)
}

func testHang(t *testing.T, e *env) {
	e.warm()
	e.behave(sim.ModeHang, 0, false)
	ref := e.ref()
	began := time.Now()
	e.expect("charge", e.gw.Authorize(e.ctx(short), e.charge(ref, 1003, "tok_visa", true)), payrouter.OutcomeTimeout)
	if took := time.Since(began); took >= latency {
		t.Errorf("%s: a hung call returned after %v, its deadline was %v", e.adapter.Name, took, short)
	}
	e.expect("status", e.gw.Status(e.ctx(settle), payrouter.TxRequest{Reference: ref}), payrouter.OutcomeTimeout)
	e.expectLedger("while hanging")
}

func testReset(t *testing.T, e *env) {
	e.behave(sim.ModeReset, 0, false)
	ref := e.ref()
	e.expect("charge", e.gw.Authorize(e.ctx(generous), e.charge(ref, 1004, "tok_visa", true)), payrouter.OutcomeUnknown)
	e.expect("refund", e.gw.Refund(e.ctx(generous), payrouter.TxRequest{Reference: "op_conf_1", ChargeReference: ref, Amount: 1, Currency: "USD"}), payrouter.OutcomeUnknown)
	e.expect("status", e.status(ref), payrouter.OutcomeUnknown)
	e.expectLedger("while resetting")
}

// testProcessThen503 is the fault-injection run's incident: a proxy forwarded the call, the
// gateway processed it, the connection dropped before its answer, and the proxy answered its own
// 503 (text/plain). That is unknown, never unavailable (which would send the charge to another
// gateway unchecked: two captures); the money moved; once the proxy is healthy, a look-up finds
// the charge approved.
func testProcessThen503(t *testing.T, e *env) {
	e.behave(sim.ModeProcessThen503, 0, false)
	ref := e.ref()
	e.expect("charge behind a proxy that answered 503", e.gw.Authorize(e.ctx(generous), e.charge(ref, 1007, "tok_visa", true)), payrouter.OutcomeUnknown)
	e.expectLedger("after the charge the proxy answered 503 for", tx(ref, 1007, sim.StatusCaptured, 0))
	e.expect("status look-up behind the same proxy", e.status(ref), payrouter.OutcomeUnknown)

	auth := e.ref()
	e.expect("authorize only", e.gw.Authorize(e.ctx(generous), e.charge(auth, 1008, "tok_visa", false)), payrouter.OutcomeUnknown)
	txr := payrouter.TxRequest{Reference: auth + "-capture", ChargeReference: auth, Amount: 1008, Currency: "USD"}
	e.expect("capture", e.gw.Capture(e.ctx(generous), txr), payrouter.OutcomeUnknown)
	txr.Reference, txr.Amount = "re_conf_1", 8
	e.expect("refund", e.gw.Refund(e.ctx(generous), txr), payrouter.OutcomeUnknown)
	if e.adapter.LooksUpFirst {
		// The capture and the refund knew only the reference: their look-ups were answered 503
		// by the proxy, so neither was sent.
		e.expectLedger("after a charge and an authorization answered 503, and a capture and a refund whose look-ups were",
			tx(ref, 1007, sim.StatusCaptured, 0), tx(auth, 1008, sim.StatusAuthorized, 0))
	} else {
		e.expectLedger("after a charge, an authorization, its capture and a refund, all answered 503",
			tx(ref, 1007, sim.StatusCaptured, 0), tx(auth, 1008, sim.StatusPartiallyRefunded, 8))
	}

	e.behave(sim.ModeNormal, 0, false)
	e.expect("status once the proxy is healthy", e.status(ref), payrouter.OutcomeSucceeded, payrouter.TxCaptured)
	if e.adapter.LooksUpFirst {
		e.expect("status of the authorization", e.status(auth), payrouter.OutcomeSucceeded, payrouter.TxAuthorized)
		return
	}
	e.expect("status of the captured and refunded one", e.status(auth), payrouter.OutcomeSucceeded, payrouter.TxPartiallyRefunded)
}

// testClosedPort: nothing listens, so nothing was sent: unavailable.
func testClosedPort(t *testing.T, e *env) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	scheme := "http://"
	if e.pki != nil {
		scheme = "https://"
	}
	raw, err := e.adapter.NewClient(scheme+addr, e.newClient(t))
	if err != nil {
		t.Fatal(err)
	}
	gw := checked{raw, t, e.adapter.Name}
	ref := e.ref()
	e.expect("charge to a closed port", gw.Authorize(e.ctx(generous), e.charge(ref, 1005, "tok_visa", true)), payrouter.OutcomeUnavailable)
	e.expect("capture to a closed port", gw.Capture(e.ctx(generous), payrouter.TxRequest{Reference: "op_conf_1", ChargeReference: ref}), payrouter.OutcomeUnavailable)
	e.expect("status to a closed port", gw.Status(e.ctx(generous), payrouter.TxRequest{Reference: ref}), payrouter.OutcomeUnavailable)
	if err := gw.Health(e.ctx(generous)); err == nil {
		t.Errorf("%s: health of a closed port: no error", e.adapter.Name)
	}
}

// testUnreadableAnswer: a 200 that is not the gateway's answer (a proxy's page, a truncated body)
// may hide a charge: unknown, never succeeded or unavailable.
func testUnreadableAnswer(t *testing.T, e *env) {
	garbage := e.serve(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html><body>502 upstream says hello</body></html>"))
	}))
	raw, err := e.adapter.NewClient(garbage.URL, e.newClient(t))
	if err != nil {
		t.Fatal(err)
	}
	gw := checked{raw, t, e.adapter.Name}
	ref := e.ref()
	txr := payrouter.TxRequest{Reference: "op_conf_1", ChargeReference: ref, Amount: 1, Currency: "USD"}
	e.expect("charge answered with HTML", gw.Authorize(e.ctx(generous), e.charge(ref, 1006, "tok_visa", true)), payrouter.OutcomeUnknown)
	e.expect("capture answered with HTML", gw.Capture(e.ctx(generous), txr), payrouter.OutcomeUnknown)
	e.expect("void answered with HTML", gw.Void(e.ctx(generous), txr), payrouter.OutcomeUnknown)
	e.expect("refund answered with HTML", gw.Refund(e.ctx(generous), txr), payrouter.OutcomeUnknown)
	e.expect("status answered with HTML", gw.Status(e.ctx(generous), payrouter.TxRequest{Reference: ref}), payrouter.OutcomeUnknown)
}

// testForeignAnswers: every one of ForeignAnswers, served over a socket in the gateway's place
// (a proxy's page, an empty 503, a redirect without a Location), is unknown for every operation.
func testForeignAnswers(t *testing.T, e *env) {
	var current atomic.Pointer[ForeignAnswer]
	foreign := e.serve(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		a := current.Load()
		w.Header()["Content-Type"] = nil // as the answer has it, not as net/http would sniff it
		if a.ContentType != "" {
			w.Header().Set("Content-Type", a.ContentType)
		}
		w.WriteHeader(a.Status)
		_, _ = io.WriteString(w, a.Body)
	}))
	raw, err := e.adapter.NewClient(foreign.URL, e.newClient(t))
	if err != nil {
		t.Fatal(err)
	}
	e.expectUnknownEverywhere(checked{raw, t, e.adapter.Name}, func(a ForeignAnswer) { current.Store(&a) }, ForeignAnswers)
}

// testRedirect: a gateway answering a redirect, to a second server that would approve anything
// sent to it, is unknown for every operation, and the second server receives nothing: neither
// the charge nor the gateway's credentials. payrouter's gateway clients never follow redirects
// (a followed 307 sends the charge and its credentials again, wherever Location says; a followed
// 302 turns it into a GET): neither the client built as payrouter builds it nor an adapter given
// a plain http.Client, which would follow, may reach the second server. A 3xx is then what the
// adapter makes of it: unknown, so the charge is looked up, never sent elsewhere.
func testRedirect(t *testing.T, e *env) {
	var elsewhere atomic.Int64
	second := e.serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		e.sim.ServeHTTP(w, r) // the gateway's own answers: approvals, if a charge ever got here
	}))
	var current atomic.Pointer[ForeignAnswer]
	redirecting := e.serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := current.Load()
		w.Header().Set("Location", second.URL+r.URL.RequestURI())
		w.Header().Set("Content-Type", a.ContentType)
		w.WriteHeader(a.Status)
		_, _ = io.WriteString(w, a.Body)
	}))
	var redirects []ForeignAnswer
	for _, status := range []int{301, 302, 303, 307, 308} {
		redirects = append(redirects, ForeignAnswer{Name: fmt.Sprintf("%d redirect to a second server", status), Status: status,
			ContentType: HTML, Body: `<a href="` + second.URL + `">` + http.StatusText(status) + `</a>.`})
	}
	following := e.newClient(t)
	following.CheckRedirect = nil // net/http's default: follow up to 10 redirects
	for name, client := range map[string]*http.Client{"payrouter's client": e.newClient(t), "a plain http.Client": following} {
		raw, err := e.adapter.NewClient(redirecting.URL, client)
		if err != nil {
			t.Fatal(err)
		}
		for i := range redirects {
			redirects[i].Name = strings.SplitN(redirects[i].Name, " (", 2)[0] + " (" + name + ")"
		}
		e.expectUnknownEverywhere(checked{raw, t, e.adapter.Name}, func(a ForeignAnswer) { current.Store(&a) }, redirects)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("%s: the second server, named by Location, received %d requests", e.adapter.Name, n)
	}
	e.expectLedger("after redirects that were not followed")
	if got := e.stats().Requests; got != 0 {
		t.Errorf("%s: the gateway was called %d times through redirects that were not to be followed", e.adapter.Name, got)
	}
}

// testNoClientCertificate: the gateway requires a client certificate and payrouter has none
// configured: the handshake is refused before any request is read, so every operation is
// unavailable (safe to send elsewhere), nothing is recorded and no call is counted. With TLS 1.3
// the refusal arrives after the request was written (the client's handshake ends first); it is
// unavailable all the same.
func testNoClientCertificate(t *testing.T, e *env) {
	for _, version := range []string{gatewayhttp.TLS12, gatewayhttp.TLS13} {
		raw, err := e.adapter.NewClient(e.url, e.clientWith(t, gatewayhttp.ClientTLS{CAFile: e.pki.ca.CertFile, MinVersion: version}))
		if err != nil {
			t.Fatal(err)
		}
		e.expectEverywhere("TLS "+version+" without a client certificate", checked{raw, t, e.adapter.Name}, payrouter.OutcomeUnavailable)
	}
	e.expectLedger("after handshakes the gateway refused")
	if got := e.stats().Requests; got != 0 {
		t.Errorf("%s: %d calls reached the gateway through refused handshakes", e.adapter.Name, got)
	}
}

// testGatewayNotTrusted: the gateway's certificate is not signed by a CA payrouter trusts (the
// system pool, without ca_file): payrouter refuses the handshake, nothing was sent: unavailable.
func testGatewayNotTrusted(t *testing.T, e *env) {
	raw, err := e.adapter.NewClient(e.url, e.clientWith(t, gatewayhttp.ClientTLS{CertFile: e.pki.client.CertFile, KeyFile: e.pki.client.KeyFile}))
	if err != nil {
		t.Fatal(err)
	}
	e.expectEverywhere("a gateway certificate of an unknown CA", checked{raw, t, e.adapter.Name}, payrouter.OutcomeUnavailable)
	e.expectLedger("after handshakes payrouter refused")
	if got := e.stats().Requests; got != 0 {
		t.Errorf("%s: %d calls reached a gateway payrouter does not trust", e.adapter.Name, got)
	}
}

// expectEverywhere calls every operation of gw once and expects want each time.
func (e *env) expectEverywhere(what string, gw payrouter.Gateway, want payrouter.Outcome) {
	e.t.Helper()
	ref := e.ref()
	txr := payrouter.TxRequest{Reference: "op_conf_1", ChargeReference: ref, Amount: 1, Currency: "USD"}
	e.expect(what+": charge", gw.Authorize(e.ctx(generous), e.charge(ref, 1011, "tok_visa", true)), want)
	e.expect(what+": capture", gw.Capture(e.ctx(generous), txr), want)
	e.expect(what+": void", gw.Void(e.ctx(generous), txr), want)
	e.expect(what+": refund", gw.Refund(e.ctx(generous), txr), want)
	e.expect(what+": status", gw.Status(e.ctx(generous), payrouter.TxRequest{Reference: ref}), want)
	if err := gw.Health(e.ctx(generous)); err == nil {
		e.t.Errorf("%s: %s: health reported no error", e.adapter.Name, what)
	}
}

// expectUnknownEverywhere serves each answer (set puts it in place) to every operation of gw and
// expects unknown each time.
func (e *env) expectUnknownEverywhere(gw payrouter.Gateway, set func(ForeignAnswer), answers []ForeignAnswer) {
	e.t.Helper()
	for _, a := range answers {
		set(a)
		ref := e.ref()
		txr := payrouter.TxRequest{Reference: "op_conf_1", ChargeReference: ref, Amount: 1, Currency: "USD"}
		e.expect(a.Name+": charge", gw.Authorize(e.ctx(generous), e.charge(ref, 1009, "tok_visa", true)), payrouter.OutcomeUnknown)
		e.expect(a.Name+": capture", gw.Capture(e.ctx(generous), txr), payrouter.OutcomeUnknown)
		e.expect(a.Name+": void", gw.Void(e.ctx(generous), txr), payrouter.OutcomeUnknown)
		e.expect(a.Name+": refund", gw.Refund(e.ctx(generous), txr), payrouter.OutcomeUnknown)
		e.expect(a.Name+": status", gw.Status(e.ctx(generous), payrouter.TxRequest{Reference: ref}), payrouter.OutcomeUnknown)
	}
}
