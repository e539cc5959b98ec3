package stripe_test

// The adapter and its fake held to Stripe's own wire. stripe-mock (github.com/stripe/stripe-mock,
// the version below, installed by .ci/run) validates every request it gets against Stripe's
// OpenAPI specification and answers from fixtures; it keeps no state. So:
//
//   - TestStripeMockConformance drives every operation of the adapter against stripe-mock, with
//     -strict-version-check: every request must be accepted (200) and every answer read into a
//     valid Result;
//   - TestStripeSimMatchesStripe drives the adapter against stripesim, then sends every request
//     stripesim got to stripe-mock (each must be accepted: stripesim takes nothing Stripe would
//     refuse) and checks every answer stripesim gave against the specification's schema of that
//     endpoint's answer (required fields, no field Stripe does not have, types, enums), so the
//     fake cannot drift from Stripe.
//
// Without stripe-mock on PATH these tests skip, saying how to install it; with CI=true they fail.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
	"github.com/payrouter/payrouter/gateways/gatewaytest"
	"github.com/payrouter/payrouter/gateways/sim"
	"github.com/payrouter/payrouter/gateways/stripe"
	"github.com/payrouter/payrouter/gateways/stripe/stripesim"
)

// stripeMockVersion is the stripe-mock the adapter is held to; its specification is of
// stripe.TestedAPIVersion.
const stripeMockVersion = "v0.203.0"

const stripeMockInstall = "go install github.com/stripe/stripe-mock@" + stripeMockVersion

// need skips the test, or fails it with CI=true, for want of a tool.
func need(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s; CI installs it (.ci/run: %s)", why, stripeMockInstall)
	}
	t.Skipf("SKIPPED, NOT RUN: %s. The Stripe adapter is held to Stripe's specification by stripe-mock: %s, with its GOBIN on PATH", why, stripeMockInstall)
}

// startStripeMock runs stripe-mock on free loopback ports (HTTP and HTTPS both bound there, so
// nothing listens beyond loopback), version check strict, and returns its HTTP URL.
func startStripeMock(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("stripe-mock")
	if err != nil {
		need(t, "stripe-mock is not on PATH")
	}
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0", "-strict-version-check")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		listening := regexp.MustCompile(`^Listening for HTTP at address: (\S+)$`)
		sc := bufio.NewScanner(out)
		for sc.Scan() { // read to the end: stripe-mock writes a line per request
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(60 * time.Second):
		t.Fatalf("stripe-mock did not say where it listens within 60s")
	}
	return ""
}

// exchange is one request and its answer, as they crossed the wire.
type exchange struct {
	method, path, query string
	header              http.Header
	body                []byte
	status              int
	contentType         string
	answer              []byte
}

// String shows the exchange on two lines: the request, and the answer (cut).
func (x exchange) String() string {
	req := x.method + " " + x.path
	if x.query != "" {
		req += "?" + x.query
	}
	if len(x.body) > 0 {
		req += "  " + string(x.body)
	}
	if k := x.header.Get("Idempotency-Key"); k != "" {
		req += "  [Idempotency-Key " + k + "]"
	}
	ans := string(bytes.Join(bytes.Fields(x.answer), []byte(" ")))
	if len(ans) > 400 {
		ans = ans[:400] + "..."
	}
	return fmt.Sprintf("-> %s\n<- %d %s", req, x.status, ans)
}

// recorder is a transport that keeps every exchange.
type recorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	xs   []exchange
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(answer))
	r.mu.Lock()
	r.xs = append(r.xs, exchange{method: req.Method, path: req.URL.Path, query: req.URL.RawQuery, header: req.Header.Clone(), body: body,
		status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), answer: answer})
	r.mu.Unlock()
	return resp, nil
}

func (r *recorder) exchanges() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.xs)
}

// newAdapter is the stripe adapter for baseURL, its exchanges recorded.
func newAdapter(t *testing.T, baseURL string) (*stripe.Client, *recorder) {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	rec := &recorder{next: tr}
	c, err := stripe.New(stripe.Config{BaseURL: baseURL, Credentials: map[string]string{"api_key": "sk_test_payrouter"}, APIVersion: stripe.TestedAPIVersion},
		gatewayhttp.NewClient(rec))
	if err != nil {
		t.Fatal(err)
	}
	return c, rec
}

// op is one call of the adapter, its result held to gatewaytest.ValidResult (but for the health
// call, op "", which has none).
type op struct {
	name string
	op   payrouter.Operation
	call func(ctx context.Context) payrouter.Result
}

// run makes the calls in order, each result kept in results under its name.
func run(t *testing.T, ops []op, results map[string]payrouter.Result) {
	t.Helper()
	for _, o := range ops {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		r := o.call(ctx)
		cancel()
		if err := gatewaytest.ValidResult(o.op, r); o.op != "" && err != nil {
			t.Errorf("%s: invalid result %+v: %v", o.name, r, err)
		}
		results[o.name] = r
	}
}

func charge(ref, token string, capture bool) payrouter.ChargeRequest {
	return payrouter.ChargeRequest{Reference: ref, Amount: 2000, Currency: "USD", Token: token, Capture: capture,
		Country: "US", CustomerID: "cus_shop_42", Description: "order 42"}
}

// everyOperation is every operation of the adapter, in every form it sends: a charge captured
// and one authorized only; a capture, a void and a refund by the PaymentIntent's id and by the
// reference alone (a look-up first); a partial and a full refund; declines; the look-up; the
// health call. id gives the PaymentIntent id payrouter would know from an earlier result.
func everyOperation(c *stripe.Client, id func(name string) string) []op {
	tx := func(ref, chargeRef, gatewayRef string, amount int64) payrouter.TxRequest {
		return payrouter.TxRequest{Reference: ref, ChargeReference: chargeRef, GatewayReference: gatewayRef, Amount: amount, Currency: "USD"}
	}
	authorize := func(ref, token string, capture bool) func(context.Context) payrouter.Result {
		return func(ctx context.Context) payrouter.Result { return c.Authorize(ctx, charge(ref, token, capture)) }
	}
	return []op{
		{"charge, captured", payrouter.OpCharge, authorize("ch_conf_1-a1", "pm_card_visa", true)},
		{"charge, authorized only", payrouter.OpCharge, authorize("ch_conf_2-a1", "pm_card_visa", false)},
		{"capture by id", payrouter.OpCapture, func(ctx context.Context) payrouter.Result {
			return c.Capture(ctx, tx("ch_conf_2-a1-capture", "ch_conf_2-a1", id("charge, authorized only"), 1500))
		}},
		{"charge, authorized to capture by reference", payrouter.OpCharge, authorize("ch_conf_3-a1", "pm_card_visa", false)},
		{"capture by reference", payrouter.OpCapture, func(ctx context.Context) payrouter.Result {
			return c.Capture(ctx, tx("ch_conf_3-a1-capture", "ch_conf_3-a1", "", 2000))
		}},
		{"charge, authorized to void by id", payrouter.OpCharge, authorize("ch_conf_4-a1", "pm_card_visa", false)},
		{"void by id", payrouter.OpVoid, func(ctx context.Context) payrouter.Result {
			return c.Void(ctx, tx("ch_conf_4-a1-void", "ch_conf_4-a1", id("charge, authorized to void by id"), 0))
		}},
		{"charge, authorized to void by reference", payrouter.OpCharge, authorize("ch_conf_5-a1", "pm_card_visa", false)},
		{"void by reference", payrouter.OpVoid, func(ctx context.Context) payrouter.Result {
			return c.Void(ctx, tx("ch_conf_5-a1-void", "ch_conf_5-a1", "", 0))
		}},
		{"partial refund by id", payrouter.OpRefund, func(ctx context.Context) payrouter.Result {
			return c.Refund(ctx, tx("re_conf_1", "ch_conf_1-a1", id("charge, captured"), 500))
		}},
		{"refund of the rest by reference", payrouter.OpRefund, func(ctx context.Context) payrouter.Result {
			return c.Refund(ctx, tx("re_conf_2", "ch_conf_1-a1", "", 0))
		}},
		{"charge, declined", payrouter.OpCharge, authorize("ch_conf_6-a1", sim.DeclineToken, true)},
		{"charge, needing 3-D Secure", payrouter.OpCharge, authorize("ch_conf_7-a1", stripesim.AuthenticationRequired, true)},
		{"charge, the same reference again", payrouter.OpCharge, authorize("ch_conf_1-a1", "pm_card_visa", true)},
		{"status of a refunded charge", payrouter.OpStatus, func(ctx context.Context) payrouter.Result {
			return c.Status(ctx, payrouter.TxRequest{Reference: "ch_conf_1-a1"})
		}},
		{"status of a declined charge", payrouter.OpStatus, func(ctx context.Context) payrouter.Result {
			return c.Status(ctx, payrouter.TxRequest{Reference: "ch_conf_6-a1"})
		}},
		{"status of a reference never sent", payrouter.OpStatus, func(ctx context.Context) payrouter.Result {
			return c.Status(ctx, payrouter.TxRequest{Reference: "ch_never-a1"})
		}},
		{"capture of a voided charge", payrouter.OpCapture, func(ctx context.Context) payrouter.Result {
			return c.Capture(ctx, tx("ch_conf_4-a1-capture", "ch_conf_4-a1", id("charge, authorized to void by id"), 0))
		}},
		{"health", "", func(ctx context.Context) payrouter.Result {
			if err := c.Health(ctx); err != nil {
				return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: err.Error()}
			}
			return payrouter.Result{Outcome: payrouter.OutcomeSucceeded}
		}},
	}
}

// TestStripeMockConformance: every request the adapter sends is one Stripe's specification
// accepts (stripe-mock answers 200 to each, the pinned Stripe-Version included), and every answer
// Stripe's fixtures give reads into a valid Result. stripe-mock keeps no state, so what the
// answers say is not checked here (stripesim's tests do); that they are read is.
func TestStripeMockConformance(t *testing.T) {
	base := startStripeMock(t)
	c, rec := newAdapter(t, base)
	results := map[string]payrouter.Result{}
	// stripe-mock's fixtures name one PaymentIntent whatever the request, and its charges name
	// none, so an operation by reference stops at its look-up there (stripesim runs them whole).
	ops := everyOperation(c, func(name string) string { return results[name].GatewayReference })
	run(t, ops, results)
	for _, o := range ops {
		r := results[o.name]
		t.Logf("%s: %s %s %s %s", o.name, r.Outcome, r.State, r.GatewayReference, r.Detail)
	}

	xs := rec.exchanges()
	if len(xs) < 15 {
		t.Fatalf("only %d requests reached stripe-mock", len(xs))
	}
	checkVersion(t, xs)
	for _, x := range xs {
		t.Logf("stripe-mock accepted:\n%s", x)
		if x.status != http.StatusOK {
			t.Errorf("stripe-mock refused a request of the adapter:\n%s", x)
		}
		if got := x.header.Get("Stripe-Version"); got != stripe.TestedAPIVersion {
			t.Errorf("%s %s: Stripe-Version %q", x.method, x.path, got)
		}
	}
	for _, name := range []string{"charge, captured", "charge, authorized only"} {
		if r := results[name]; r.GatewayReference == "" {
			t.Errorf("%s: stripe-mock's PaymentIntent read without its id: %+v", name, r)
		}
	}
}

// checkVersion fails the test, saying why, when stripe-mock refused the pinned Stripe-Version:
// the stripe-mock installed is not the one the adapter is tested against.
func checkVersion(t *testing.T, xs []exchange) {
	t.Helper()
	for _, x := range xs {
		if x.status == http.StatusBadRequest && bytes.Contains(x.answer, []byte("Stripe-Version")) {
			t.Fatalf("stripe-mock refused Stripe-Version %s: %s\nThe adapter is tested against stripe-mock %s (%s)",
				stripe.TestedAPIVersion, x.answer, stripeMockVersion, stripeMockInstall)
		}
	}
}

// TestStripeMockRefuses: stripe-mock refuses what Stripe refuses, so the acceptance above says
// something: a capture_method Stripe does not have, a parameter it does not know, and another
// Stripe-Version than the one of its specification.
func TestStripeMockRefuses(t *testing.T) {
	base := startStripeMock(t)
	for _, c := range []struct {
		name, body, version string
	}{
		{"a capture_method Stripe does not have", "amount=100&currency=usd&capture_method=sometimes", stripe.TestedAPIVersion},
		{"an unknown parameter", "amount=100&currency=usd&source_of_truth=payrouter", stripe.TestedAPIVersion},
		{"an amount that is not an integer", "amount=19.99&currency=usd", stripe.TestedAPIVersion},
		{"another Stripe-Version", "amount=100&currency=usd", "2020-08-27"},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/payment_intents", strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer sk_test_payrouter")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Stripe-Version", c.version)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: stripe-mock answered %d %s; want 400", c.name, resp.StatusCode, body)
		}
	}
}

// TestStripeSimMatchesStripe: every request the adapter sent stripesim is one stripe-mock accepts,
// and every answer stripesim gave is one Stripe's specification allows for that endpoint.
func TestStripeSimMatchesStripe(t *testing.T) {
	base := startStripeMock(t)
	spec := loadSpec(t)

	s := stripesim.New()
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	t.Cleanup(s.Close)
	c, rec := newAdapter(t, ts.URL)
	got := map[string]payrouter.Result{}
	run(t, everyOperation(c, func(name string) string { return got[name].GatewayReference }), got)
	// What the fake answered is what Stripe would: checked here so that a fake answering errors
	// to everything could not pass as matching.
	for name, want := range map[string]payrouter.Outcome{
		"charge, captured": payrouter.OutcomeSucceeded, "capture by id": payrouter.OutcomeSucceeded,
		"void by id": payrouter.OutcomeSucceeded, "void by reference": payrouter.OutcomeSucceeded,
		"partial refund by id": payrouter.OutcomeSucceeded, "refund of the rest by reference": payrouter.OutcomeSucceeded,
		"capture by reference": payrouter.OutcomeSucceeded, "charge, declined": payrouter.OutcomeDeclined,
		"charge, needing 3-D Secure": payrouter.OutcomeDeclined, "charge, the same reference again": payrouter.OutcomeSucceeded,
		"status of a refunded charge": payrouter.OutcomeSucceeded, "status of a reference never sent": payrouter.OutcomeSucceeded,
		"capture of a voided charge": payrouter.OutcomeError, "health": payrouter.OutcomeSucceeded,
	} {
		if got[name].Outcome != want {
			t.Errorf("stripesim: %s: %+v, want %s", name, got[name], want)
		}
	}
	if r := got["status of a refunded charge"]; r.State != payrouter.TxRefunded {
		t.Errorf("stripesim: status of a refunded charge: %+v", r)
	}

	xs := rec.exchanges()
	// Errors too: an unknown PaymentIntent, a refund beyond what is left; and a retrieval.
	extra := []struct{ method, path, body string }{
		{http.MethodPost, "/v1/payment_intents/pi_nope/capture", ""},
		{http.MethodPost, "/v1/refunds", "payment_intent=" + got["charge, captured"].GatewayReference + "&amount=1"},
		{http.MethodGet, "/v1/payment_intents/" + got["charge, authorized only"].GatewayReference, ""},
	}
	for _, e := range extra {
		xs = append(xs, send(t, ts.URL, e.method, e.path, e.body))
	}
	if len(xs) < 20 {
		t.Fatalf("only %d exchanges with stripesim", len(xs))
	}
	statuses := map[int]int{}
	for _, x := range xs {
		statuses[x.status]++
		if problems := spec.checkAnswer(x); len(problems) > 0 {
			t.Errorf("stripesim answered what Stripe's specification does not allow:\n%s\n  %s", x, strings.Join(problems, "\n  "))
		}
		again := send(t, base, x.method, x.path+query(x.query), string(x.body), x.header)
		if again.status != http.StatusOK {
			t.Errorf("stripesim took a request stripe-mock refuses:\n%s\nstripe-mock: %d %s", x, again.status, again.answer)
		}
	}
	for _, want := range []int{200, 400, 402, 404} {
		if statuses[want] == 0 {
			t.Errorf("no %d answer among stripesim's exchanges %v: the check of that form did not run", want, statuses)
		}
	}
}

// TestSpecCheckRefuses: the schema check finds what it is there to find, so its silence above
// says something.
func TestSpecCheckRefuses(t *testing.T) {
	if _, err := exec.LookPath("stripe-mock"); err != nil {
		need(t, "stripe-mock is not on PATH")
	}
	spec := loadSpec(t)
	good := `{"id":"pi_1","object":"payment_intent","created":1,"livemode":false,"status":"succeeded","amount":100}`
	if p := spec.checkAnswer(exchange{method: "POST", path: "/v1/payment_intents", status: 200, answer: []byte(good)}); len(p) > 0 {
		t.Fatalf("a plain PaymentIntent: %v", p)
	}
	for name, body := range map[string]string{
		"a field Stripe does not have":      `{"id":"pi_1","object":"payment_intent","created":1,"livemode":false,"status":"succeeded","payrouter":1}`,
		"a required field missing":          `{"id":"pi_1","object":"payment_intent","livemode":false,"status":"succeeded"}`,
		"a status Stripe does not have":     `{"id":"pi_1","object":"payment_intent","created":1,"livemode":false,"status":"approved"}`,
		"an amount as a string":             `{"id":"pi_1","object":"payment_intent","created":1,"livemode":false,"status":"succeeded","amount":"100"}`,
		"an error of a type Stripe has not": `{"error":{"type":"rate_limit_error","message":"slow down"}}`,
	} {
		status := 200
		if strings.HasPrefix(body, `{"error"`) {
			status = 429
		}
		if p := spec.checkAnswer(exchange{method: "POST", path: "/v1/payment_intents", status: status, answer: []byte(body)}); len(p) == 0 {
			t.Errorf("%s: no problem found in %s", name, body)
		}
	}
}

func query(q string) string {
	if q == "" {
		return ""
	}
	return "?" + q
}

// send makes one request to base with the given headers (the adapter's, for a request sent again;
// a test key and version otherwise) and returns the exchange.
func send(t *testing.T, base, method, pathAndQuery, body string, header ...http.Header) exchange {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, base+pathAndQuery, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(header) > 0 {
		for _, h := range []string{"Authorization", "Stripe-Version", "Idempotency-Key", "Content-Type", "Accept"} {
			if v := header[0].Get(h); v != "" {
				req.Header.Set(h, v)
			}
		}
	} else {
		req.Header.Set("Authorization", "Bearer sk_test_payrouter")
		req.Header.Set("Stripe-Version", stripe.TestedAPIVersion)
		if method == http.MethodPost {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return exchange{method: method, path: req.URL.Path, query: req.URL.RawQuery, header: req.Header, body: []byte(body),
		status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), answer: answer}
}

// spec is the part of Stripe's OpenAPI specification the checks read: the answers of each path
// and method, and the schemas they refer to.
type spec struct {
	Paths      map[string]map[string]specOperation `json:"paths"`
	Components struct {
		Schemas map[string]*schema `json:"schemas"`
	} `json:"components"`
}

type specOperation struct {
	Responses map[string]struct {
		Content map[string]struct {
			Schema *schema `json:"schema"`
		} `json:"content"`
	} `json:"responses"`
}

// schema is an OpenAPI schema object, as far as Stripe's specification uses it.
type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 string             `json:"type"`
	Enum                 []any              `json:"enum"`
	Nullable             bool               `json:"nullable"`
	Properties           map[string]*schema `json:"properties"`
	Required             []string           `json:"required"`
	AdditionalProperties json.RawMessage    `json:"additionalProperties"`
	Items                *schema            `json:"items"`
	AnyOf                []*schema          `json:"anyOf"`
	OneOf                []*schema          `json:"oneOf"`
}

// loadSpec reads the specification stripe-mock validates with, from the module cache where
// `go install` put stripe-mock's source.
func loadSpec(t *testing.T) *spec {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "github.com", "stripe", "stripe-mock@"+stripeMockVersion, "embedded", "openapi", "spec3.json")
	data, err := os.ReadFile(path)
	if err != nil {
		need(t, fmt.Sprintf("stripe-mock %s's OpenAPI specification is not in the module cache (%v)", stripeMockVersion, err))
	}
	var s spec
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &s
}

// answerSchema is the schema of the answer an exchange got: 200's for a 2xx, the default (an
// error) for the rest.
func (s *spec) answerSchema(x exchange) (*schema, error) {
	for tmpl, ops := range s.Paths {
		if !matches(tmpl, x.path) {
			continue
		}
		o, ok := ops[strings.ToLower(x.method)]
		if !ok {
			continue
		}
		code := "default"
		if x.status/100 == 2 {
			code = "200"
		}
		sc := o.Responses[code].Content["application/json"].Schema
		if sc == nil {
			return nil, fmt.Errorf("the specification gives no %s answer for %s %s", code, x.method, tmpl)
		}
		return sc, nil
	}
	return nil, fmt.Errorf("the specification has no %s %s", x.method, x.path)
}

// matches reports whether a path fits a template of the specification (/v1/payment_intents/{intent}).
func matches(tmpl, path string) bool {
	ts, ps := strings.Split(tmpl, "/"), strings.Split(path, "/")
	if len(ts) != len(ps) {
		return false
	}
	for i := range ts {
		if ts[i] != ps[i] && !(strings.HasPrefix(ts[i], "{") && ps[i] != "") {
			return false
		}
	}
	return true
}

// checkAnswer lists what is wrong with an exchange's answer by the specification.
func (s *spec) checkAnswer(x exchange) []string {
	if !gatewayhttp.IsJSON(x.contentType) && x.contentType != "" {
		return []string{"Content-Type " + x.contentType + ", not JSON"}
	}
	sc, err := s.answerSchema(x)
	if err != nil {
		return []string{err.Error()}
	}
	dec := json.NewDecoder(bytes.NewReader(x.answer))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return []string{"not JSON: " + err.Error()}
	}
	var problems []string
	s.check(v, sc, "", &problems)
	return problems
}

func (s *spec) resolve(sc *schema) *schema {
	for sc != nil && sc.Ref != "" {
		sc = s.Components.Schemas[strings.TrimPrefix(sc.Ref, "#/components/schemas/")]
	}
	return sc
}

// check adds to problems what is wrong with v as sc, at path.
func (s *spec) check(v any, sc *schema, path string, problems *[]string) {
	sc = s.resolve(sc)
	if sc == nil {
		*problems = append(*problems, path+": no schema")
		return
	}
	at := path
	if at == "" {
		at = "(the answer)"
	}
	bad := func(format string, args ...any) { *problems = append(*problems, at+": "+fmt.Sprintf(format, args...)) }
	if v == nil {
		if !sc.Nullable {
			bad("null, which Stripe never gives here")
		}
		return
	}
	if alts := append(slices.Clone(sc.AnyOf), sc.OneOf...); len(alts) > 0 {
		var best []string
		for i, alt := range alts {
			var p []string
			s.check(v, alt, path, &p)
			if len(p) == 0 {
				return
			}
			if i == 0 || len(p) < len(best) {
				best = p
			}
		}
		*problems = append(*problems, best...)
		return
	}
	if len(sc.Enum) > 0 && !slices.ContainsFunc(sc.Enum, func(e any) bool { return fmt.Sprint(e) == fmt.Sprint(v) }) {
		bad("%v, not one of %v", v, sc.Enum)
	}
	typ := sc.Type
	if typ == "" && sc.Properties != nil {
		typ = "object"
	}
	switch typ {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			bad("a %T, want an object", v)
			return
		}
		for _, r := range sc.Required {
			if _, ok := obj[r]; !ok {
				bad("required field %q missing", r)
			}
		}
		var extra *schema
		open := false
		if a := bytes.TrimSpace(sc.AdditionalProperties); len(a) > 0 {
			if string(a) == "true" {
				open = true
			} else if string(a) != "false" {
				extra = &schema{}
				_ = json.Unmarshal(a, extra)
			}
		}
		for k, fv := range obj {
			switch p, known := sc.Properties[k]; {
			case known:
				s.check(fv, p, path+"."+k, problems)
			case extra != nil:
				s.check(fv, extra, path+"."+k, problems)
			case !open:
				bad("field %q, which Stripe's %s does not have", k, objectName(obj))
			}
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			bad("a %T, want an array", v)
			return
		}
		for i, e := range arr {
			s.check(e, sc.Items, fmt.Sprintf("%s[%d]", path, i), problems)
		}
	case "string":
		if _, ok := v.(string); !ok {
			bad("%v, want a string", v)
		}
	case "integer":
		if n, ok := v.(json.Number); !ok || strings.ContainsAny(n.String(), ".eE") {
			bad("%v, want an integer", v)
		}
	case "number":
		if _, ok := v.(json.Number); !ok {
			bad("%v, want a number", v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			bad("%v, want a boolean", v)
		}
	}
}

func objectName(obj map[string]any) string {
	if o, ok := obj["object"].(string); ok {
		return o
	}
	return "object"
}

// TestStripeMockInstallIsCI: .ci/run installs the stripe-mock these tests expect, so that CI runs
// them rather than skipping.
func TestStripeMockInstallIsCI(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "github.com/stripe/stripe-mock@"+stripeMockVersion) {
		t.Errorf(".ci/run does not install stripe-mock %s (%s)", stripeMockVersion, stripeMockInstall)
	}
}
