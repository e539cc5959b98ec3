package e2e

// Talking to the processes: the storefront and admin APIs of payrouter and the simulators'
// control API (docs/api.md and docs/simulator.md), with just enough decoding for the assertions.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// reply is one HTTP exchange as the tests judge it.
type reply struct {
	req     string // method and URL, for messages
	status  int
	header  http.Header
	body    []byte
	start   time.Time
	elapsed time.Duration // from sending to the whole body read
}

func (r reply) String() string {
	return fmt.Sprintf("%s answered %d in %v: %s", r.req, r.status, r.elapsed.Round(time.Millisecond), excerpt(r.body))
}

// excerpt shortens a body for a failure message.
func excerpt(b []byte) string {
	const max = 600
	s := strings.TrimSpace(string(b))
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

// send makes one request; header holds name, value pairs.
func send(client *http.Client, method, url string, body []byte, header ...string) (reply, error) {
	r := reply{req: method + " " + url}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return r, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	r.start = time.Now()
	resp, err := client.Do(req)
	if err != nil {
		r.elapsed = time.Since(r.start)
		return r, fmt.Errorf("%s: %w", r.req, err)
	}
	defer resp.Body.Close()
	r.body, err = io.ReadAll(resp.Body)
	r.elapsed = time.Since(r.start)
	r.status, r.header = resp.StatusCode, resp.Header
	if err != nil {
		return r, fmt.Errorf("%s: reading the answer: %w", r.req, err)
	}
	return r, nil
}

// --- storefront API ------------------------------------------------------------------------------

// attempt is one attempt of a charge as the API shows it.
type attempt struct {
	Gateway    string `json:"gateway"`
	Outcome    string `json:"outcome"`
	DurationMS int64  `json:"duration_ms"`
	Resolved   string `json:"resolved"`
}

func (a attempt) String() string {
	if a.Resolved != "" {
		return a.Gateway + "/" + a.Outcome + "(resolved " + a.Resolved + ")"
	}
	return a.Gateway + "/" + a.Outcome
}

func describe(list []attempt) string {
	parts := make([]string, len(list))
	for i, a := range list {
		parts[i] = a.String()
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// answer is a POST /charge answer: a charge object (201, 202) or a problem (402, 503, ...).
// "status" is a string in the one and a number in the other, so it is read apart.
type answer struct {
	ID           string    `json:"id"` // charge object
	ChargeStatus string    `json:"-"`  // charge object's status
	Gateway      string    `json:"gateway"`
	Attempts     []attempt `json:"attempts"`
	Type         string    `json:"type"`      // problem
	ChargeID     string    `json:"charge_id"` // problem
	DeclineCode  string    `json:"decline_code"`
}

// chargeID is the charge's id, whichever form the answer took.
func (a answer) chargeID() string {
	if a.ID != "" {
		return a.ID
	}
	return a.ChargeID
}

func decodeAnswer(r reply) (answer, error) {
	var a answer
	if err := json.Unmarshal(r.body, &a); err != nil {
		return a, fmt.Errorf("not a JSON charge or problem: %v", err)
	}
	var s struct {
		Status any `json:"status"`
	}
	_ = json.Unmarshal(r.body, &s)
	if str, ok := s.Status.(string); ok {
		a.ChargeStatus = str
	}
	return a, nil
}

// keySeq numbers the Idempotency-Keys of every instance of the test binary: instances sharing a
// Redis share their keys too, so a key must never be used by two of them for different charges.
var keySeq atomic.Int64

// charge sends POST /charge with a fresh Idempotency-Key.
func (in *instance) charge(amount int64, currency, token string) (reply, error) {
	key := "e2e-" + strconv.FormatInt(keySeq.Add(1), 10)
	return in.chargeKeyed(key, chargeBody(amount, currency, token, ""))
}

// chargeBody is a POST /charge body; gateway "" leaves the charge to the routes, any other
// value pins it to that gateway (no failover).
func chargeBody(amount int64, currency, token, gateway string) []byte {
	body := map[string]any{
		"amount": amount, "currency": currency,
		"payment_method": map[string]string{"type": "card", "token": token},
	}
	if gateway != "" {
		body["gateway"] = gateway
	}
	b, _ := json.Marshal(body)
	return b
}

// chargeKeyed sends POST /charge with body under the Idempotency-Key key.
func (in *instance) chargeKeyed(key string, body []byte) (reply, error) {
	return send(in.client, "POST", in.url+"/charge", body,
		"Authorization", "Bearer "+apiKey, "Content-Type", "application/json", "Idempotency-Key", key)
}

// pinnedCharge sends POST /charge pinned to gateway, with a fresh Idempotency-Key.
func (in *instance) pinnedCharge(amount int64, currency, gateway string) (reply, error) {
	key := "e2e-pinned-" + strconv.FormatInt(keySeq.Add(1), 10)
	return in.chargeKeyed(key, chargeBody(amount, currency, "tok_visa", gateway))
}

// mustCharge is charge for the test goroutine: a failure to get any answer ends the test.
func (in *instance) mustCharge(t *testing.T, amount int64, currency, token string) (reply, answer) {
	t.Helper()
	r, err := in.charge(amount, currency, token)
	if err != nil {
		t.Fatal(err)
	}
	a, err := decodeAnswer(r)
	if err != nil {
		t.Fatalf("%v: %s", err, r)
	}
	return r, a
}

// getCharge is GET /charge/{id}.
func (in *instance) getCharge(id string) (answer, error) {
	r, err := send(in.client, "GET", in.url+"/charge/"+id, nil, "Authorization", "Bearer "+apiKey)
	if err != nil {
		return answer{}, err
	}
	if r.status != http.StatusOK {
		return answer{}, fmt.Errorf("want 200: %s", r)
	}
	return decodeAnswer(r)
}

// --- admin API -----------------------------------------------------------------------------------

// breakerView is one failure domain of GET /admin/breakers.
type breakerView struct {
	Name      string  `json:"name"`
	State     string  `json:"state"`
	Forced    *string `json:"forced"`
	OpenUntil *string `json:"open_until"`
	Counts    struct {
		Requests            int64 `json:"requests"`
		Failures            int64 `json:"failures"`
		ConsecutiveFailures int64 `json:"consecutive_failures"`
	} `json:"counts"`
}

func (b breakerView) String() string {
	until := "null"
	if b.OpenUntil != nil {
		until = *b.OpenUntil
	}
	return fmt.Sprintf("%s state=%s open_until=%s counts=%+v", b.Name, b.State, until, b.Counts)
}

// breakers is GET /admin/breakers, keyed by name. It uses the probe client: the watcher calls it
// while the load runs.
func (in *instance) breakers() (map[string]breakerView, error) {
	r, err := send(in.probeClient, "GET", in.adminURL+"/admin/breakers", nil, "Authorization", "Bearer "+adminToken)
	if err != nil {
		return nil, err
	}
	var list struct {
		Breakers []breakerView `json:"breakers"`
	}
	if r.status != http.StatusOK {
		return nil, fmt.Errorf("want 200: %s", r)
	}
	if err := json.Unmarshal(r.body, &list); err != nil {
		return nil, fmt.Errorf("want {\"breakers\": [...]}: %v: %s", err, r)
	}
	out := map[string]breakerView{}
	for _, b := range list.Breakers {
		out[b.Name] = b
	}
	return out, nil
}

// breaker returns one breaker, ending the test if it cannot.
func (in *instance) breaker(t *testing.T, name string) breakerView {
	t.Helper()
	all, err := in.breakers()
	if err != nil {
		t.Fatal(err)
	}
	b, ok := all[name]
	if !ok {
		t.Fatalf("GET /admin/breakers lists no %s", name)
	}
	return b
}

// readyz is GET /readyz on the storefront listener.
func (in *instance) readyz() (reply, error) {
	return send(in.probeClient, "GET", in.url+"/readyz", nil)
}

// adminReadyz is GET /readyz on the admin listener, which says what does not answer.
func (in *instance) adminReadyz() (reply, error) {
	return send(in.probeClient, "GET", in.adminURL+"/readyz", nil)
}

// metrics scrapes GET /metrics on the admin listener.
func (in *instance) metrics() (scrape, error) {
	return scrapeMetrics(in.probeClient, in.adminURL+"/metrics")
}

// --- metrics -------------------------------------------------------------------------------------

// sample is one series of a Prometheus text exposition.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape is one GET /metrics, parsed just enough for counters and gauges.
type scrape []sample

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

func scrapeMetrics(client *http.Client, url string) (scrape, error) {
	r, err := send(client, "GET", url, nil)
	if err != nil {
		return nil, err
	}
	if r.status != http.StatusOK {
		return nil, fmt.Errorf("want 200: %s", r)
	}
	var out scrape
	for line := range strings.Lines(string(r.body)) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %v", url, line, err)
		}
		sm := sample{name: m[1], labels: map[string]string{}, value: v}
		for _, lp := range labelPair.FindAllStringSubmatch(m[2], -1) {
			sm.labels[lp[1]] = lp[2]
		}
		out = append(out, sm)
	}
	return out, nil
}

// value sums the series of name whose labels include the label, value pairs given; found is
// false when there is none (a counter never incremented has no series).
func (s scrape) value(name string, labels ...string) (sum float64, found bool) {
	for _, sm := range s {
		if sm.name != name {
			continue
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if sm.labels[labels[i]] != labels[i+1] {
				match = false
				break
			}
		}
		if match {
			sum += sm.value
			found = true
		}
	}
	return sum, found
}

// --- simulator control API -----------------------------------------------------------------------

// sim is one simulated gateway.
type sim struct {
	name   string
	url    string
	client *http.Client
}

func newSim(name string, port int) *sim {
	return &sim{name: name, url: "http://" + loopback(port), client: &http.Client{Timeout: 10 * time.Second}}
}

type simStats struct {
	Requests    int64 `json:"requests"`
	InFlight    int64 `json:"in_flight"`
	MaxInFlight int64 `json:"max_in_flight"`
}

type ledgerTx struct {
	Reference string `json:"reference"`
	Amount    int64  `json:"amount"`
	Currency  string `json:"currency"`
	Status    string `json:"status"`
}

func (s *sim) control(t *testing.T, method, path string, body []byte, into any) {
	t.Helper()
	var header []string
	if body != nil {
		header = []string{"Content-Type", "application/json"}
	}
	r, err := send(s.client, method, s.url+path, body, header...)
	if err != nil {
		t.Fatalf("%s simulator: %v", s.name, err)
	}
	if r.status/100 != 2 {
		t.Fatalf("%s simulator: want 2xx: %s", s.name, r)
	}
	if into != nil {
		if err := json.Unmarshal(r.body, into); err != nil {
			t.Fatalf("%s simulator: %v: %s", s.name, err, r)
		}
	}
}

// behave is PUT /_sim/behavior: the mode and the latency of every answer.
func (s *sim) behave(t *testing.T, mode string, latency time.Duration) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"mode": mode, "latency": latency.String(), "decline_all": false})
	s.control(t, "PUT", "/_sim/behavior", body, nil)
}

func (s *sim) stats(t *testing.T) simStats {
	t.Helper()
	var st simStats
	s.control(t, "GET", "/_sim/stats", nil, &st)
	return st
}

// headerSeen and traceHeaders are GET /_sim/trace_headers: how many API calls carried each
// trace-context header, and the last value.
type headerSeen struct {
	Calls int64  `json:"calls"`
	Last  string `json:"last"`
}

type traceHeaders struct {
	Traceparent headerSeen `json:"traceparent"`
	Tracestate  headerSeen `json:"tracestate"`
	Baggage     headerSeen `json:"baggage"`
}

func (s *sim) traceHeaders(t *testing.T) traceHeaders {
	t.Helper()
	var th traceHeaders
	s.control(t, "GET", "/_sim/trace_headers", nil, &th)
	return th
}

func (s *sim) ledger(t *testing.T) []ledgerTx {
	t.Helper()
	var l struct {
		Transactions []ledgerTx `json:"transactions"`
	}
	s.control(t, "GET", "/_sim/ledger", nil, &l)
	return l.Transactions
}

// splitReference takes a gateway reference apart: payrouter sends "<charge id>-a<n>" for the
// n-th attempt of a charge (payrouter.AttemptReference).
func splitReference(ref string) (chargeID string, n int, ok bool) {
	i := strings.LastIndex(ref, "-a")
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(ref[i+2:])
	if err != nil || n < 1 {
		return "", 0, false
	}
	return ref[:i], n, true
}
