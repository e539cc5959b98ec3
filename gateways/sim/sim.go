// Package sim is what the three simulated gateways share: the behavior modes that make them slow
// or broken on demand, the request counters, the ledger of transactions, and the control API
// (docs/simulator.md, Control API). Each fake (paywellsim, dingsim, tranglosim) only writes its
// own wire format: its API handlers are registered with Server.Handle, which applies the mode,
// the counters and the latency around them.
//
// GET /_sim/trace_headers shows the W3C trace-context headers (traceparent, tracestate,
// baggage) the API calls carried, and no other header: a test checks there what its client
// propagates to a gateway, and the credentials a call carries are never kept.
//
// Besides the contract's modes, three behaviors serve chaos tests: process_then_hang, a gateway
// that moves the money and then never answers (the ledger has the charge, the caller only a
// timeout); process_then_503, a gateway that moves the money behind a proxy whose connection to
// it drops before the answer, so that the caller gets the proxy's own 503 (text/plain, Envoy's
// "upstream connect error or disconnect/reset before headers"), not the gateway's "not
// processed" form; and a heavy tail, slow_share of the calls delayed by slow_latency on top of
// the latency, recorded on arrival like any slow call.
package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DeclineToken is the payment token every fake declines, each in its own decline form.
const DeclineToken = "tok_decline"

// maxRequestBody bounds what a fake reads of a request: every real request is far smaller.
const maxRequestBody = 1 << 20

// Config is what makes one fake different from the others, as far as this package cares.
type Config struct {
	// Name is the gateway's name, for logs.
	Name string
	// TxPrefix and OpPrefix start the gateway's own transaction and operation ids.
	TxPrefix, OpPrefix string
	// Unavailable writes the gateway's own "not processed, retry later" answer (ModeUnavailable).
	// It must record nothing.
	Unavailable http.HandlerFunc
	// Rand draws, for each API call, the number in [0, 1) that decides whether the call falls in
	// the heavy tail (Behavior.SlowShare). It may be called concurrently. nil is math/rand/v2's
	// Float64; tests set it to pick which calls are slow.
	Rand func() float64
	// OnReset empties what a fake keeps beyond the ledger (stripesim's saved idempotent
	// answers): Reset calls it after emptying the ledger. nil: nothing more to empty.
	OnReset func()
	// CallbackTransport carries the fake's call backs; nil: a transport of its own. Tests inside
	// a synctest bubble give an in-memory one.
	CallbackTransport http.RoundTripper
	// OnSettle hears of each pending charge made final (Behavior.Pending), once the ledger shows
	// it so: a fake calls back from it (Server.Notify). nil: nobody hears.
	OnSettle func(Tx)
}

// Stats is what GET /_sim/stats shows: calls to the gateway's own API, never health or control
// calls.
type Stats struct {
	Requests    int64 `json:"requests"`
	InFlight    int64 `json:"in_flight"`
	MaxInFlight int64 `json:"max_in_flight"`
}

// HeaderSeen is how many API calls carried one header since the last reset, and the value the
// last of them carried (its lines joined by ", ", as one header).
type HeaderSeen struct {
	Calls int64  `json:"calls"`
	Last  string `json:"last"`
}

// TraceHeaders is what GET /_sim/trace_headers shows: the W3C trace-context headers of the API
// calls since the last reset (never health or control calls). No other header is kept.
type TraceHeaders struct {
	Traceparent HeaderSeen `json:"traceparent"`
	Tracestate  HeaderSeen `json:"tracestate"`
	Baggage     HeaderSeen `json:"baggage"`
}

// see counts the trace-context headers of one API call's header h.
func (th *TraceHeaders) see(h http.Header) {
	for name, seen := range map[string]*HeaderSeen{"Traceparent": &th.Traceparent, "Tracestate": &th.Tracestate, "Baggage": &th.Baggage} {
		if v, ok := h[name]; ok {
			seen.Calls++
			seen.Last = strings.Join(v, ", ")
		}
	}
}

// Server is one simulated gateway: an http.Handler serving the fake's API, GET /health and the
// control API under /_sim/, with the ledger and behavior reachable from Go for tests. It is safe
// for concurrent use.
type Server struct {
	name        string
	unavailable http.HandlerFunc
	rand        func() float64
	onReset     func()
	onSettle    func(Tx)
	client      *http.Client
	mux         *http.ServeMux
	ledger      *Ledger
	logger      atomic.Pointer[slog.Logger]

	mu       sync.Mutex
	behavior Behavior
	stats    Stats
	trace    TraceHeaders
	// gen counts resets: a request counts in_flight only in the generation it started in, so a
	// reset while a call hangs leaves the new counters at zero rather than going negative.
	gen uint64
	// callback is where the fake calls back (PUT /_sim/callback); cbStats how that went.
	callback Callback
	cbStats  CallbackStats

	done      chan struct{} // closed by Close: hung and delayed requests let go
	doneCtx   context.Context
	closeCtx  context.CancelFunc
	closeOnce sync.Once
	// notifying counts the deliveries and pending settlements under way, which Close waits for;
	// closed (under mu) stops new ones from being counted once Close began.
	notifying sync.WaitGroup
	closed    bool
}

// New returns a fake with an empty ledger, in normal mode, serving the control API and
// GET /health. The fake's API is added with Handle.
func New(cfg Config) *Server {
	s := &Server{
		name:        cfg.Name,
		unavailable: cfg.Unavailable,
		rand:        cfg.Rand,
		onReset:     cfg.OnReset,
		onSettle:    cfg.OnSettle,
		client: &http.Client{
			Transport:     cfg.CallbackTransport,
			Timeout:       callbackTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		mux:      http.NewServeMux(),
		ledger:   NewLedger(cfg.TxPrefix, cfg.OpPrefix),
		behavior: Behavior{Mode: ModeNormal},
		done:     make(chan struct{}),
	}
	if s.unavailable == nil {
		s.unavailable = func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "service unavailable, not processed: retry later", http.StatusServiceUnavailable)
		}
	}
	if s.rand == nil {
		s.rand = rand.Float64
	}
	s.doneCtx, s.closeCtx = context.WithCancel(context.Background())
	s.logger.Store(slog.New(slog.DiscardHandler))
	s.mux.HandleFunc("GET /health", s.healthWith(nil))
	s.mux.HandleFunc("GET /_sim/behavior", s.getBehavior)
	s.mux.HandleFunc("PUT /_sim/behavior", s.putBehavior)
	s.mux.HandleFunc("GET /_sim/stats", s.getStats)
	s.mux.HandleFunc("GET /_sim/ledger", s.getLedger)
	s.mux.HandleFunc("GET /_sim/trace_headers", s.getTraceHeaders)
	s.mux.HandleFunc("GET /_sim/callback", s.getCallback)
	s.mux.HandleFunc("PUT /_sim/callback", s.putCallback)
	s.mux.HandleFunc("POST /_sim/reset", s.postReset)
	return s
}

// Name is the gateway's name.
func (s *Server) Name() string { return s.name }

// SetLogger sets where control calls (behavior changes, resets) are logged; none by default.
func (s *Server) SetLogger(l *slog.Logger) { s.logger.Store(l) }

// ServeHTTP serves the fake's API, GET /health and the control API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Handle registers one of the fake's API handlers under an http.ServeMux pattern
// ("POST /v1/charges"). Every call is counted and goes through the mode: the handler runs only
// in normal, process_then_hang and process_then_503 modes, and its answer is held back for the
// latency (and the slow latency, for a call in the heavy tail), or forever in process_then_hang,
// or replaced by a proxy's 503 in process_then_503.
func (s *Server) Handle(pattern string, h http.HandlerFunc) {
	s.mux.Handle(pattern, s.api(h))
}

// HandleHealth registers a health endpoint of the gateway's own API besides GET /health, for a
// gateway whose adapter probes its health with a call of its API (Stripe has no health
// endpoint): it behaves as GET /health does in every mode and is not counted, and in normal mode
// h writes the answer, after the latency.
func (s *Server) HandleHealth(pattern string, h http.HandlerFunc) {
	s.mux.HandleFunc(pattern, s.healthWith(h))
}

// Ledger is the fake's ledger of transactions.
func (s *Server) Ledger() *Ledger { return s.ledger }

// Refund applies a refund to the ledger for the API call r: Ledger.Refund, or
// Ledger.RefundUnchecked when the behavior the call arrived under has RefundUnchecked. Every
// fake's refund handler calls it with the request it serves, so that all three get the behavior
// and a behavior changed while the call runs does not change it.
func (s *Server) Refund(r *http.Request, opRef, key string, amount int64) (OpResult, error) {
	b, ok := r.Context().Value(behaviorKey{}).(Behavior)
	if !ok { // not through Handle: the behavior now
		b = s.Behavior()
	}
	if b.RefundUnchecked {
		return s.ledger.RefundUnchecked(opRef, key, amount)
	}
	return s.ledger.Refund(opRef, key, amount)
}

// behaviorKey keys, in an API call's context, the behavior it arrived under.
type behaviorKey struct{}

// Behavior returns the current behavior.
func (s *Server) Behavior() Behavior {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.behavior
}

// SetBehavior replaces the behavior. Calls already in progress keep the behavior they started
// with.
func (s *Server) SetBehavior(b Behavior) {
	if b.Mode == "" {
		b.Mode = ModeNormal
	}
	s.mu.Lock()
	s.behavior = b
	s.mu.Unlock()
}

// Declines reports whether a charge with that token is declined: the decline token, or every
// token while DeclineAll is set.
func (s *Server) Declines(token string) bool {
	return token == DeclineToken || s.Behavior().DeclineAll
}

// Stats returns the counters since the last reset.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// TraceHeaders returns the trace-context headers the API calls carried since the last reset.
func (s *Server) TraceHeaders() TraceHeaders {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trace
}

// Reset sets the behavior back to normal, turns calling back off, and empties the counters, the
// trace headers seen and the ledger. Calls in progress are not interrupted, but no longer
// counted; a pending charge of the emptied ledger is never settled, and deliveries under way
// are no longer counted.
func (s *Server) Reset() {
	s.mu.Lock()
	s.behavior = Behavior{Mode: ModeNormal}
	s.callback, s.cbStats = Callback{}, CallbackStats{}
	s.stats = Stats{}
	s.trace = TraceHeaders{}
	s.gen++
	s.mu.Unlock()
	s.ledger.Reset()
	if s.onReset != nil {
		s.onReset()
	}
}

// Close lets go of every hung request (its connection is dropped without an answer) and of every
// answer waiting out its latency (it is sent at once), now and from then on, so that a server
// shutdown never waits on them; it stops the call backs and the pending charges' timers, and
// waits for them. Call it before http.Server.Shutdown; it is idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.done)
		s.closeCtx()
	})
	s.notifying.Wait()
}

// begin counts a call to the API, with its header's trace context; the returned func ends it.
func (s *Server) begin(h http.Header) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	gen := s.gen
	s.trace.see(h)
	s.stats.Requests++
	s.stats.InFlight++
	s.stats.MaxInFlight = max(s.stats.MaxInFlight, s.stats.InFlight)
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.gen == gen {
			s.stats.InFlight--
		}
	}
}

// api is the middleware every API handler goes through: counters, mode, latency.
func (s *Server) api(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		defer s.begin(r.Header)()
		b := s.Behavior() // the behavior when the request arrived holds for all of it
		delay := b.delay(s.rand())
		r = r.WithContext(context.WithValue(r.Context(), behaviorKey{}, b))
		r.Body = http.MaxBytesReader(w, r.Body, maxRequestBody)
		switch b.Mode {
		case ModeHang:
			s.hang(r)
			return
		case ModeReset:
			s.reset(w, r, delay)
			return
		}
		rec := &recorder{header: http.Header{}}
		switch b.Mode {
		case ModeUnavailable:
			s.unavailable(rec, r)
		case ModeError500:
			http.Error(rec, "Internal Server Error", http.StatusInternalServerError)
		default:
			h(rec, r) // records the transaction now, before the latency
		}
		switch b.Mode {
		case ModeProcessThenHang:
			s.hang(r) // processed; the answer is dropped
			return
		case ModeProcessThen503:
			// Processed; the gateway's answer never gets past the proxy, which makes up its own.
			rec = &recorder{header: http.Header{}}
			proxyReset(rec)
		}
		// The whole body must be read for the server to notice a client that goes away.
		_, _ = io.Copy(io.Discard, r.Body)
		if !s.wait(r, delay) {
			panic(http.ErrAbortHandler) // the client is gone: nobody to answer
		}
		rec.writeTo(w)
	}
}

// healthWith is GET /health (h nil), or a health endpoint of HandleHealth: what an out-of-band
// prober sees. It is not counted, but it behaves like the gateway: slow with the latency, 503
// while unavailable or failing, no answer while hung (process_then_hang included), reset while
// resetting, the proxy's 503 in process_then_503 (the probe goes through the same proxy), so
// that a probe never reports healthy a gateway its customers cannot use. The heavy tail is left
// out: it is a share of the API calls, and a probe that drew it would only make a prober's
// verdict random.
func (s *Server) healthWith(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { s.health(w, r, h) }
}

func (s *Server) health(w http.ResponseWriter, r *http.Request, h http.HandlerFunc) {
	b := s.Behavior()
	switch b.Mode {
	case ModeHang, ModeProcessThenHang:
		s.hang(r)
		return
	case ModeReset:
		s.reset(w, r, b.Latency)
		return
	}
	if !s.wait(r, b.Latency) {
		panic(http.ErrAbortHandler)
	}
	switch b.Mode {
	case ModeUnavailable, ModeError500:
		WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "mode": string(b.Mode)})
		return
	case ModeProcessThen503:
		proxyReset(w)
		return
	}
	if h != nil {
		h(w, r)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// proxyReset writes what Envoy answers in a gateway's place when the gateway's connection drops
// after the request was forwarded: 503, text/plain, EnvoyResetBody, and Envoy's Server header.
func proxyReset(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Server", "envoy")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, EnvoyResetBody)
}

// hang waits until the client goes away or the server closes, then drops the connection without
// an answer. The request body is read first: net/http notices a vanished client only once it has
// read the whole request.
func (s *Server) hang(r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	select {
	case <-r.Context().Done():
	case <-s.done:
	}
	panic(http.ErrAbortHandler)
}

// reset reads the request, waits out the latency, then closes the connection with SO_LINGER 0,
// so the client sees a reset after its request went out: the ambiguous failure.
func (s *Server) reset(w http.ResponseWriter, r *http.Request, latency time.Duration) {
	_, _ = io.Copy(io.Discard, r.Body)
	if !s.wait(r, latency) {
		panic(http.ErrAbortHandler)
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler) // HTTP/2: aborting resets the stream instead
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// wait waits out d; it reports false when the client went away first. Close ends the wait early
// (true): the answer is sent at once rather than hold up a shutdown.
func (s *Server) wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return true
	case <-r.Context().Done():
		return false
	}
}

func (s *Server) getBehavior(w http.ResponseWriter, _ *http.Request) {
	WriteJSON(w, http.StatusOK, s.Behavior())
}

func (s *Server) putBehavior(w http.ResponseWriter, r *http.Request) {
	b, err := ParseBehavior(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		WriteJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	s.SetBehavior(b)
	s.logger.Load().Info("behavior", "gateway", s.name, "mode", b.Mode, "latency", b.Latency.String(), "decline_all", b.DeclineAll,
		"slow_share", b.SlowShare, "slow_latency", b.SlowLatency.String(), "refund_unchecked", b.RefundUnchecked, "pending", b.Pending.String())
	WriteJSON(w, http.StatusOK, b)
}

func (s *Server) getStats(w http.ResponseWriter, _ *http.Request) {
	WriteJSON(w, http.StatusOK, s.Stats())
}

func (s *Server) getLedger(w http.ResponseWriter, _ *http.Request) {
	WriteJSON(w, http.StatusOK, map[string][]Tx{"transactions": s.ledger.Transactions()})
}

func (s *Server) getTraceHeaders(w http.ResponseWriter, _ *http.Request) {
	WriteJSON(w, http.StatusOK, s.TraceHeaders())
}

func (s *Server) postReset(w http.ResponseWriter, _ *http.Request) {
	s.Reset()
	s.logger.Load().Info("reset", "gateway", s.name)
	WriteJSON(w, http.StatusOK, map[string]string{"status": "reset"})
}

// WriteJSON writes v as a JSON answer with the status. The fakes use it for every JSON answer.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encoding the answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// recorder holds a handler's answer until the latency has passed.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}

func (r *recorder) writeTo(w http.ResponseWriter) {
	for k, v := range r.header {
		w.Header()[k] = v
	}
	if r.status == 0 {
		r.status = http.StatusOK
	}
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body.Bytes())
}
