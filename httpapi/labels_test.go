package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/labstack/echo/v5"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestStrangersCannotGrowMetrics (issue 19, bounded labels): 300 requests with made-up 2 KB
// methods grew /metrics from 41 KB to 8.8 MB, each method a new route label value of
// payrouter_http_request_duration_seconds and a new span name. Here 10,000 odd requests (made-up
// methods and paths, long ones, unicode, methods HTTP defines on paths that do not take them)
// go to both listeners over real sockets, without a credential; /metrics grows by no more than
// the few series of their status codes, every route label value is a route or unmatchedRoute,
// and so is every request span's name.
func TestStrangersCannotGrowMetrics(t *testing.T) {
	spans := recordServerSpans(t)
	st := newStack(t, "admin-token")
	listeners := map[string]http.Handler{"storefront": st.api, "admin": st.admin}

	// What ordinary traffic leaves: every route of both listeners called once by a stranger
	// (401 where a credential is needed), once with credentials, and a mistyped path.
	routes := servedRouteNames(st.api, st.admin)
	for _, h := range []http.Handler{st.api, st.admin} {
		for route := range servedRouteNames(h) {
			method, pattern, _ := strings.Cut(route, " ")
			if route != "GET /metrics" {
				do(h, method, routeParams.Replace(pattern), "")
			}
		}
	}
	r := st.charge("labels-1", `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"}}`)
	if r.status != 201 {
		t.Fatalf("charge: %d %s", r.status, r.body)
	}
	do(st.api, "GET", "/charge/ch_nope", "", "Authorization", "Bearer key-1")
	do(st.api, "GET", "/events", "", "Authorization", "Bearer key-1")
	do(st.admin, "GET", "/admin/breakers", "", "Authorization", "Bearer admin-token")
	do(st.admin, "GET", "/admin/gateways", "", "Authorization", "Bearer admin-token")
	do(st.api, "GET", "/nope", "")
	do(st.admin, "GET", "/nope", "")
	before := scrape(t, st)

	// Sent in two halves: the first may add the few series of the status codes odd requests
	// are answered (404, 405, 401, 400 for an id that is none, and echo's 204 to OPTIONS), each
	// at most once per route and code; the second must add nothing but digits.
	const n = 10_000
	odd := oddRequests(n)
	counts := map[string]*wireCounts{"storefront": {}, "admin": {}}
	servers := map[string]*httptest.Server{}
	for name, h := range listeners {
		servers[name] = httptest.NewServer(h)
		t.Cleanup(servers[name].Close)
	}
	send := func(batch []oddRequest) {
		var wg sync.WaitGroup
		for name, h := range listeners {
			var mine []oddRequest
			for i, o := range batch {
				if (i%2 == 0) == (name == "storefront") {
					mine = append(mine, o)
				}
			}
			wg.Go(func() { sendOdd(t, servers[name].Listener.Addr().String(), h, mine, counts[name]) })
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	send(odd[:n/2])
	half := scrape(t, st)
	send(odd[n/2:])
	after := scrape(t, st)

	for name, c := range counts {
		t.Logf("%s: %d odd requests answered by payrouter over the socket; %d refused by net/http (400), then handed to the handler itself", name, c.wire, c.direct)
	}
	growth, late := len(after)-len(before), len(after)-len(half)
	t.Logf("/metrics: %d bytes before, %d after %d odd requests (%+d), %d after the first %d (the last %d: %+d)",
		len(before), len(after), n, growth, len(half), n/2, n/2, late)
	t.Logf("series the odd requests added: %v", newSeries(before, after))
	if growth > 12<<10 {
		t.Errorf("/metrics grew by %d bytes after %d odd requests, want at most 12 KiB", growth, n)
	}
	if late > 1<<10 {
		t.Errorf("/metrics grew by %d bytes over the last %d odd requests, want at most 1 KiB: strangers still add series", late, n/2)
	}

	for _, v := range routeLabelValues(after) {
		if !routes[v] && v != unmatchedRoute {
			t.Errorf("route label value %.80q is neither a route nor %q", v, unmatchedRoute)
		}
	}
	for name, count := range spans.names() {
		if !routes[name] && name != unmatchedRoute {
			t.Errorf("%d request spans named %.80q, neither a route nor %q", count, name, unmatchedRoute)
		}
	}
	total := 0
	for _, count := range spans.names() {
		total += count
	}
	if total < n {
		t.Errorf("%d request spans, want one per odd request (%d) at least", total, n)
	}
	for _, m := range spans.methods() {
		if !slices.Contains([]string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE", "_OTHER"}, m) {
			t.Errorf("a span's http.request.method is %.80q: made-up methods are _OTHER", m)
		}
	}
}

// oddRequest is one request a stranger might send: any method, any path.
type oddRequest struct{ method, path string }

// oddRequests returns n requests, the same every run: made-up methods up to 2 KB (on routed
// paths too), made-up paths up to 4 KB, unicode in either, ids that are no id, and the methods
// HTTP defines on paths that do not answer them.
func oddRequests(n int) []oddRequest {
	rng := rand.New(rand.NewPCG(19, 4))
	const tchar = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~"
	word := func(alphabet string, max int) string {
		b := make([]byte, 1+rng.IntN(max))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	unicode := []string{"ПОСТ", "GÉT", "支付", "🙂", "Ä", "ＧＥＴ", "POST\u00a0"}
	routed := []string{"/charge", "/charge/ch_1", "/charge/ch_1/capture", "/charge/ch_1/void", "/charge/ch_1/refund",
		"/refund/re_1", "/events", "/healthz", "/readyz", "/metrics", "/admin/", "/admin/breakers", "/admin/gateways",
		"/admin/charges", "/admin/reload", "/admin/breakers/paywell/charge/reset", "/admin/statuspage.js"}
	method := func() string {
		switch rng.IntN(4) {
		case 0:
			return word(tchar, 2048)
		case 1:
			return word(strings.ToUpper(tchar[:26]), 12)
		case 2:
			return unicode[rng.IntN(len(unicode))]
		default:
			return []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE"}[rng.IntN(8)]
		}
	}
	path := func() string {
		switch rng.IntN(6) {
		case 0:
			return routed[rng.IntN(len(routed))]
		case 1:
			return "/" + word("abcdefghijklmnopqrstuvwxyz0123456789-_.~/", 4096)
		case 2:
			return "/charge/" + word("abcdefghijklmnopqrstuvwxyz0123456789_", 2048) + []string{"", "/capture", "/refund", "/x/y"}[rng.IntN(4)]
		case 3:
			return "/" + url.PathEscape(unicode[rng.IntN(len(unicode))]) + "/" + word("abcdefghijklmnopqrstuvwxyz", 64)
		case 4:
			return "/admin/" + word("abcdefghijklmnopqrstuvwxyz/", 1024)
		default:
			return "/zahlung/" + unicode[rng.IntN(len(unicode))] + "/ü/€" // raw UTF-8 on the wire
		}
	}
	out := make([]oddRequest, n)
	for i := range out {
		out[i] = oddRequest{method(), path()}
		for out[i].method == http.MethodGet && out[i].path == "/metrics" { // a scrape, not traced
			out[i].method = method()
		}
	}
	return out
}

// wireCounts counts how one listener's odd requests reached payrouter.
type wireCounts struct{ wire, direct int }

// sendOdd writes each request on a kept-alive connection to addr, by hand (net/http's client
// refuses to send most of them), and reads its answer. One that net/http's server refuses
// before payrouter sees it (a method that is no token, for one) is then handed to h itself: a
// server in front that let it through must not grow /metrics either.
func sendOdd(t *testing.T, addr string, h http.Handler, odd []oddRequest, counts *wireCounts) {
	var conn net.Conn
	var br *bufio.Reader
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for _, o := range odd {
		if conn == nil {
			var err error
			if conn, err = net.Dial("tcp", addr); err != nil {
				t.Error(err)
				return
			}
			br = bufio.NewReader(conn)
		}
		if _, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: payrouter\r\n\r\n", o.method, o.path); err != nil {
			t.Error(err)
			return
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: o.method})
		if err != nil {
			t.Errorf("%.40s %.40s: %v", o.method, o.path, err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Close {
			conn.Close()
			conn = nil
		}
		if resp.Header.Get(echo.HeaderXRequestID) != "" {
			counts.wire++
			continue
		}
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%.40s %.40s: %d without an X-Request-Id, and not net/http's 400", o.method, o.path, resp.StatusCode)
			continue
		}
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Method, req.RequestURI = o.method, o.path
		if req.URL, err = url.ParseRequestURI(o.path); err != nil {
			t.Errorf("%.40s: %v", o.path, err)
			continue
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
		counts.direct++
	}
}

// scrape returns the admin listener's /metrics, as Prometheus reads it.
func scrape(t *testing.T, st *stack) string {
	t.Helper()
	r := do(st.admin, "GET", "/metrics", "")
	if r.status != 200 {
		t.Fatalf("/metrics: %d", r.status)
	}
	return r.body
}

// routeParams fills a route pattern's parameters with values that look right.
var routeParams = strings.NewReplacer(":id", "ch_1", ":gateway", "paywell", ":operation", "charge", ":action", "reset")

var routeLabel = regexp.MustCompile(`(?m)^payrouter_http_request_duration_seconds_count\{.*route="((?:[^"\\]|\\.)*)"`)

// routeLabelValues lists the route label values of payrouter_http_request_duration_seconds.
func routeLabelValues(metrics string) []string {
	var out []string
	for _, m := range routeLabel.FindAllStringSubmatch(metrics, -1) {
		out = append(out, m[1])
	}
	return out
}

// newSeries lists the _count series of payrouter_http_request_duration_seconds in after and
// not in before, by their labels, each cut to 120 bytes.
func newSeries(before, after string) []string {
	series := func(line string) string { // the line without its value
		if i := strings.LastIndexByte(line, ' '); i >= 0 {
			return line[:i]
		}
		return line
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(before, "\n") {
		seen[series(line)] = true
	}
	var out []string
	for _, line := range strings.Split(after, "\n") {
		name := series(line)
		if strings.HasPrefix(name, "payrouter_http_request_duration_seconds_count") && !seen[name] {
			out = append(out, fmt.Sprintf("%.120s", strings.TrimPrefix(name, "payrouter_http_request_duration_seconds_count")))
		}
	}
	return out
}

// servedRouteNames is every "<METHOD> <pattern>" the handlers route, as routeOf names them.
func servedRouteNames(handlers ...http.Handler) map[string]bool {
	out := map[string]bool{}
	for _, h := range handlers {
		for _, r := range h.(*echo.Echo).Router().Routes() {
			if r.Method != echo.RouteNotFound {
				out[r.Method+" "+r.Path] = true
			}
		}
	}
	return out
}

// serverSpans records the name and http.request.method of every server span that ends.
type serverSpans struct {
	mu     sync.Mutex
	byName map[string]int
	method map[string]bool
}

// recordServerSpans sets a global TracerProvider that samples every span into a serverSpans
// until the test ends.
func recordServerSpans(t *testing.T) *serverSpans {
	t.Helper()
	s := &serverSpans{byName: map[string]int{}, method: map[string]bool{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() {
		otel.SetTracerProvider(prev)
		_ = tp.Shutdown(context.Background())
	})
	return s
}

func (s *serverSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (s *serverSpans) OnEnd(span sdktrace.ReadOnlySpan) {
	if span.SpanKind() != trace.SpanKindServer {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byName[span.Name()]++
	for _, a := range span.Attributes() {
		if a.Key == attrMethod {
			s.method[a.Value.AsString()] = true
		}
	}
}

func (s *serverSpans) Shutdown(context.Context) error   { return nil }
func (s *serverSpans) ForceFlush(context.Context) error { return nil }

func (s *serverSpans) names() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.byName))
	for k, v := range s.byName {
		out[k] = v
	}
	return out
}

func (s *serverSpans) methods() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for m := range s.method {
		out = append(out, m)
	}
	return out
}
