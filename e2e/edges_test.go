package e2e

// The edges of what payrouter takes in, against the real binaries: card numbers in every form and
// place a caller can put one, requests no route answers that must not grow /metrics or the span
// names, and the smaller guards (control characters, what /readyz tells a stranger, the trace
// context a gateway receives, TLS 1.2 suites, `check`'s warnings about readable secrets, a
// refused refund's failure_reason, the length of a list of field errors).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/payrouter/payrouter/gateways/paywell/paywellsim"
	simserver "github.com/payrouter/payrouter/gateways/sim"
	"github.com/payrouter/payrouter/internal/testpki"
	"github.com/payrouter/payrouter/pgstore/pgtest"
)

// --- card numbers ------------------------------------------------------------------------------

// cardForm is a card number written the way a careless integration writes one: beside a word,
// glued to a short hexadecimal word, with spaces or hyphens. number is the card number alone.
type cardForm struct{ text, number string }

// The forms docs/input.md refuses (a card number beside a word of any kind; docs/input.md,
// False positives, and the policy that keeps them rare), each in the field the incident found
// it accepted in. Each passes the field's character set, so only the
// card-number screen can refuse it.
var (
	cardInDescription = cardForm{"card 4111 1111 1111 1111 a1", "4111111111111111"}
	cardInMetadata    = cardForm{"5555555555554444-c0ffee1", "5555555555554444"}
	cardAsCustomer    = cardForm{"1a 378282246310005", "378282246310005"}
	cardAsToken       = cardForm{"4111111111111111-a1", "4111111111111111"}
	cardAsKey         = cardForm{"4111111111111111 1a", "4111111111111111"}
	cardAsID          = cardForm{"4111111111111111-a1", "4111111111111111"} // a path id and an X-Request-Id
)

// chanceUUID is a canonical UUID whose digits 4333 9682 6425 7799 are a valid Visa number by
// chance (docs/input.md): what a storefront puts in its fields every day, and must keep passing.
const chanceUUID = "8663c8b8-e080-4333-9682-642577993312"

// cardSecrets are the forms and the bare numbers, for scanLog and for the answers: none may
// hold any of them.
func cardSecrets() []logSecret {
	var out []logSecret
	for _, f := range []cardForm{cardInDescription, cardInMetadata, cardAsCustomer, cardAsToken, cardAsKey, cardAsID} {
		for _, v := range []string{f.text, f.number} {
			if !slices.ContainsFunc(out, func(s logSecret) bool { return s.value == v }) {
				out = append(out, logSecret{"the card number " + f.number[:4] + "..." + f.number[len(f.number)-4:], v})
			}
		}
	}
	return append(out, logSecret{"the card number 4111 1111 1111 1111 in groups", "4111 1111 1111 1111"})
}

// TestCardNumbersRefusedEverywhere (issue 19, item 3): a card number beside a word, in every
// body field, header and path id payrouter screens, is answered 400 invalid-request naming the
// field, stores nothing, reaches no gateway, and is in no answer and no log line; an X-Request-Id
// holding one is replaced by an id payrouter makes (docs/input.md). A UUID whose digits happen
// to be a valid card number still passes in every one of those places.
func TestCardNumbersRefusedEverywhere(t *testing.T) {
	skipIfShort(t)
	s := startSims(t)
	in := startPayrouter(t, s, edgeConfig(""))
	secrets := cardSecrets()
	var answers []reply
	ask := func(method, path string, body []byte, header ...string) reply {
		t.Helper()
		r := askStorefront(t, in, method, path, body, header...)
		answers = append(answers, r)
		return r
	}
	captured := chargeID(t, ask("POST", "/charge", chargeWith(nil), "Idempotency-Key", edgeKey("card-setup")))
	before := takeFootprint(t, in, s)

	cases := []struct {
		name, method, path string
		body               []byte
		header             []string
		field              string // the field the 400 must name
	}{
		{"description beside words", "POST", "/charge", chargeWith(map[string]any{"description": cardInDescription.text}), nil, "description"},
		{"metadata value glued to a hex word", "POST", "/charge", chargeWith(map[string]any{"metadata": map[string]string{"note": cardInMetadata.text}}), nil, "metadata.note"},
		{"metadata key glued to a hex word", "POST", "/charge", chargeWith(map[string]any{"metadata": map[string]string{cardInMetadata.text: "x"}}), nil, "metadata"},
		{"customer_id after a hex word", "POST", "/charge", chargeWith(map[string]any{"customer_id": cardAsCustomer.text}), nil, "customer_id"},
		{"payment token glued to a hex word", "POST", "/charge", chargeWith(map[string]any{"payment_method": map[string]string{"type": "card", "token": cardAsToken.text}}), nil, "payment_method.token"},
		{"Idempotency-Key of a charge", "POST", "/charge", chargeWith(nil), []string{"Idempotency-Key", cardAsKey.text}, "Idempotency-Key"},
		{"Idempotency-Key of a refund", "POST", "/charge/" + captured + "/refund", []byte(`{"amount":100}`), []string{"Idempotency-Key", cardAsKey.text}, "Idempotency-Key"},
		{"path id of GET /charge", "GET", "/charge/" + cardAsID.text, nil, nil, "id"},
		{"path id of GET /refund", "GET", "/refund/" + cardAsID.text, nil, nil, "id"},
		{"path id of a capture", "POST", "/charge/" + cardAsID.text + "/capture", nil, nil, "id"},
		{"path id of a void", "POST", "/charge/" + cardAsID.text + "/void", nil, nil, "id"},
		{"path id of a refund", "POST", "/charge/" + cardAsID.text + "/refund", nil, nil, "id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			header := tc.header
			if tc.method == "POST" && !slices.Contains(header, "Idempotency-Key") {
				header = append([]string{"Idempotency-Key", edgeKey("card")}, header...)
			}
			wantInvalid(t, "a card number as "+tc.name, ask(tc.method, tc.path, tc.body, header...), tc.field)
		})
	}
	t.Run("nothing stored, nothing sent", func(t *testing.T) {
		after := takeFootprint(t, in, s)
		after.mustEqual(t, before, "after the refused requests")
	})

	t.Run("X-Request-Id is replaced", func(t *testing.T) {
		r := ask("POST", "/charge", chargeWith(nil), "Idempotency-Key", edgeKey("card-rid"), "X-Request-Id", cardAsID.text)
		if r.status != http.StatusCreated {
			t.Fatalf("a charge with a card number as X-Request-Id: want 201 under an id payrouter makes (docs/input.md); got %s", r)
		}
		if got := r.header.Get("X-Request-Id"); !strings.HasPrefix(got, "req_") {
			t.Errorf("the answer's X-Request-Id is %q; want one payrouter made (req_...), never the one sent", got)
		}
		eventually(t, 5*time.Second, "payrouter logs http.request_id_replaced", logged(in.proc, "http.request_id_replaced"))
	})

	t.Run("a UUID passes everywhere", func(t *testing.T) {
		body := chargeWith(map[string]any{
			"description": chanceUUID, "customer_id": chanceUUID, "metadata": map[string]string{chanceUUID: chanceUUID},
			"payment_method": map[string]string{"type": "card", "token": chanceUUID},
		})
		r := ask("POST", "/charge", body, "Idempotency-Key", chanceUUID, "X-Request-Id", chanceUUID)
		if r.status != http.StatusCreated {
			t.Fatalf("a charge with a UUID in every field, as its Idempotency-Key and X-Request-Id: want 201; got %s", r)
		}
		if got := r.header.Get("X-Request-Id"); got != chanceUUID {
			t.Errorf("a UUID sent as X-Request-Id is answered %q; want it echoed", got)
		}
		var ch struct {
			ID, Description, CustomerID string
			Metadata                    map[string]string
		}
		got := ask("GET", "/charge/"+chargeID(t, r), nil)
		if err := json.Unmarshal(got.body, &ch); err != nil || got.status != http.StatusOK {
			t.Fatalf("GET of the charge: %v %s", err, got)
		}
		if ch.Description != chanceUUID || ch.Metadata[chanceUUID] != chanceUUID {
			t.Errorf("the charge shows description %q, metadata %v; want the UUID kept as sent", ch.Description, ch.Metadata)
		}
		if r := ask("POST", "/charge/"+ch.ID+"/refund", []byte(`{"amount":100}`), "Idempotency-Key", "550e8400-e29b-41d4-a716-446655440000"); r.status != http.StatusCreated {
			t.Errorf("a refund with a UUID as Idempotency-Key: want 201; got %s", r)
		}
		if r := ask("GET", "/charge/"+chanceUUID, nil); r.status != http.StatusNotFound {
			t.Errorf("GET /charge/<a UUID>: want 404 not-found, as any id that names no charge; got %s", r)
		}
	})

	t.Run("no answer holds a card number", func(t *testing.T) {
		for _, r := range answers {
			for _, sc := range secrets {
				if bytes.Contains(r.body, []byte(sc.value)) || strings.Contains(fmt.Sprint(r.header), sc.value) {
					t.Errorf("%s answered with %s in it", r.req, sc.name)
				}
			}
		}
	})
	t.Run("no log line holds a card number", func(t *testing.T) {
		lines, findings := scanLog(in.proc.out.String(), secrets)
		for _, f := range findings {
			t.Errorf("payrouter's log, %s", f)
		}
		t.Logf("%d requests answered, %d log lines read for %d forms of card numbers", len(answers), len(lines), len(secrets))
	})
}

// --- bounded labels ------------------------------------------------------------------------------

// oddRequestCount is how many made-up requests TestOddRequestsLeaveMetricsBounded sends.
const oddRequestCount = 10_000

// TestOddRequestsLeaveMetricsBounded (issue 19, item 4): 10,000 requests with made-up methods (up
// to 2 KB) and made-up paths (up to 4 KB), without a credential, over kept-alive sockets to both
// listeners, leave /metrics within a few KB of its size before them (once a shop's traffic and a
// stranger's first call of each route have left their series); every route label value of
// payrouter_http_request_duration_seconds and every request span's name (exported over OTLP to
// a collector in the test) is a route or "(unmatched)", and a made-up method is "_OTHER".
func TestOddRequestsLeaveMetricsBounded(t *testing.T) {
	skipIfShort(t)
	spans := startSpanCollector(t)
	s := startSims(t)
	cfg := edgeConfig("")
	in := startConfigured(t, launch{env: []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + spans.url,
		// Every span kept and sent within a moment: the test counts them.
		"OTEL_BSP_SCHEDULE_DELAY=200", "OTEL_BSP_MAX_QUEUE_SIZE=50000", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=2048",
	}}, func(listen, admin string) string { return cfg.yaml(listen, admin, s) })

	shopTraffic(t, in)
	shop := metricsText(t, in)
	strangerProbes(t, in)
	before := metricsText(t, in)
	odd := oddRequests(oddRequestCount)
	var counts oddCounts
	sendOddRequests(t, in, odd[:len(odd)/2], &counts)
	half := metricsText(t, in)
	sendOddRequests(t, in, odd[len(odd)/2:], &counts)
	after := metricsText(t, in)

	growth, late := len(after)-len(before), len(after)-len(half)
	t.Logf("/metrics: %d bytes after a shop's traffic, %d after strangers probed each route once; %d odd requests then: %d bytes after the first half, %d after all (%+d; the last half %+d)",
		len(shop), len(before), len(odd), len(half), len(after), growth, late)
	t.Logf("answers: %s", &counts)
	t.Logf("series of payrouter_http_request_duration_seconds the odd requests added: %v", addedSeries(before, after))
	if growth > 4<<10 {
		t.Errorf("/metrics grew by %d bytes (%d to %d) over %d odd requests; want at most 4 KiB", growth, len(before), len(after), len(odd))
	}
	if late > 2<<10 {
		t.Errorf("/metrics grew by %d bytes over the last %d odd requests; want at most 2 KiB: each odd request still adds series", late, len(odd)/2)
	}
	routes := routeLabels(after)
	t.Logf("route label values after: %d (%d before)", len(routes), len(routeLabels(before)))
	checkRouteNames(t, "the route label value", routes)

	// Every request payrouter served has its span; none of them names what the caller made up.
	eventually(t, 30*time.Second, "the request spans exported", func() (bool, string) {
		n := spans.serverSpans()
		return n >= counts.served, fmt.Sprintf("%d server spans, want at least the %d odd requests payrouter answered", n, counts.served)
	})
	names, methods := spans.seen()
	t.Logf("request span names: %d, http.request.method values: %v", len(names), methods)
	checkRouteNames(t, "the request span name", names)
	for _, m := range methods {
		if !slices.Contains([]string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "_OTHER"}, m) {
			t.Errorf("a request span's http.request.method is %.80q; a made-up method is _OTHER", m)
		}
	}
}

// shopTraffic is a shop's and its operators' calls on both listeners.
func shopTraffic(t *testing.T, in *instance) {
	t.Helper()
	id := chargeID(t, askStorefront(t, in, "POST", "/charge", chargeWith(nil), "Idempotency-Key", edgeKey("ordinary")))
	for _, c := range []struct {
		client     *http.Client
		url, token string
	}{
		{in.client, in.url + "/charge/" + id, apiKey},
		{in.client, in.url + "/charge/ch_nope", apiKey},
		{in.client, in.url + "/events", apiKey},
		{in.probeClient, in.adminURL + "/admin/breakers", adminToken},
		{in.probeClient, in.adminURL + "/admin/gateways", adminToken},
	} {
		if _, err := send(c.client, "GET", c.url, nil, "Authorization", "Bearer "+c.token); err != nil {
			t.Fatal(err)
		}
	}
}

// strangerProbes calls every route once the way strangers call routes: without a credential,
// with an id that is none, with a method the path does not take; first from an address with no
// failures yet (401), then from one over limits.auth_failures_per_minute (429). Each leaves the
// series of its route and status code, as any stranger's first probes do; the odd requests that
// follow must add none.
func strangerProbes(t *testing.T, in *instance) {
	t.Helper()
	long := strings.Repeat("x", 80) // longer than any id payrouter makes or takes: 400 on id
	probes := map[string][][2]string{
		in.url: {
			{"GET", "/healthz"}, {"GET", "/readyz"}, {"POST", "/charge"}, {"GET", "/events"},
			{"GET", "/charge/ch_1"}, {"POST", "/charge/ch_1/capture"}, {"POST", "/charge/ch_1/void"}, {"POST", "/charge/ch_1/refund"}, {"GET", "/refund/re_1"},
			{"GET", "/charge/" + long}, {"POST", "/charge/" + long + "/capture"}, {"POST", "/charge/" + long + "/void"}, {"POST", "/charge/" + long + "/refund"}, {"GET", "/refund/" + long},
			{"GET", "/nope"}, {"PUT", "/charge"}, {"OPTIONS", "/charge"},
		},
		in.adminURL: {
			{"GET", "/healthz"}, {"GET", "/readyz"}, {"GET", "/admin/"}, {"GET", "/admin/statuspage.js"},
			{"GET", "/admin/breakers"}, {"POST", "/admin/breakers/paywell/charge/reset"}, {"GET", "/admin/gateways"}, {"GET", "/admin/charges"}, {"POST", "/admin/reload"},
			{"GET", "/admin/nope"}, {"GET", "/nope"}, {"PUT", "/admin/breakers"}, {"OPTIONS", "/admin/breakers"},
		},
	}
	// Two more addresses of the loopback network, so that the throttle counts their failures
	// apart from the tests' own 127.0.0.1 (limits_test.go does the same).
	fresh, throttled := fromAddress(t, net.IPv4(127, 0, 0, 2)), fromAddress(t, net.IPv4(127, 0, 0, 3))
	for range 25 { // over auth_failures_per_minute (20 by default): its next failures are 429
		if _, err := send(throttled, "GET", in.url+"/charge/ch_1", nil, "Authorization", "Bearer guess"); err != nil {
			t.Fatal(err)
		}
	}
	for _, client := range []*http.Client{fresh, throttled} {
		for base, list := range probes {
			for _, p := range list {
				if _, err := send(client, p[0], base+p[1], nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// fromAddress is a client whose connections come from ip, a loopback address.
func fromAddress(t *testing.T, ip net.IP) *http.Client {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: ip}}).DialContext,
	}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// oddRequest is one request a stranger might send: any method, any path, no credential.
type oddRequest struct {
	admin        bool // to the admin listener, else the storefront's
	method, path string
}

// oddRequests returns n requests, the same every run, half to each listener: made-up methods up
// to 2 KB (on routed paths too), made-up paths up to 4 KB, unicode in either (which net/http
// itself refuses), ids that are no id, and the methods HTTP defines on paths that do not take
// them.
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
	unicode := []string{"ПОСТ", "GÉT", "支付", "🙂", "ＧＥＴ"}
	routed := []string{"/charge", "/charge/ch_1", "/charge/ch_1/capture", "/charge/ch_1/void", "/charge/ch_1/refund",
		"/refund/re_1", "/events", "/healthz", "/readyz", "/admin/", "/admin/breakers", "/admin/gateways",
		"/admin/charges", "/admin/reload", "/admin/breakers/paywell/charge/reset", "/admin/statuspage.js"}
	method := func() string {
		switch rng.IntN(4) {
		case 0:
			return word(tchar, 2048)
		case 1:
			return word(tchar[:26], 12)
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
			return "/zahlung/" + unicode[rng.IntN(len(unicode))] + "/ü" // raw UTF-8 on the wire
		}
	}
	out := make([]oddRequest, n)
	for i := range out {
		out[i] = oddRequest{admin: i%2 == 1, method: method(), path: path()}
	}
	return out
}

// oddCounts counts how the odd requests were answered.
type oddCounts struct {
	mu      sync.Mutex
	served  int         // answered by payrouter (with an X-Request-Id)
	refused int         // refused by net/http before payrouter saw them
	status  map[int]int // by status code
}

func (c *oddCounts) add(status int, served bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.status == nil {
		c.status = map[int]int{}
	}
	c.status[status]++
	if served {
		c.served++
	} else {
		c.refused++
	}
}

func (c *oddCounts) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d by payrouter, %d refused by net/http before it; by status %v", c.served, c.refused, c.status)
}

// sendOddRequests sends odd over raw sockets (net/http's client refuses most of them), two
// workers per listener, each on one kept-alive connection, opening another only when the server
// closed it.
func sendOddRequests(t *testing.T, in *instance, odd []oddRequest, counts *oddCounts) {
	t.Helper()
	const workersPerListener = 2
	var wg sync.WaitGroup
	errs := make(chan error, 2*workersPerListener)
	for _, admin := range []bool{false, true} {
		addr := strings.TrimPrefix(in.url, "http://")
		if admin {
			addr = strings.TrimPrefix(in.adminURL, "http://")
		}
		var mine []oddRequest
		for _, o := range odd {
			if o.admin == admin {
				mine = append(mine, o)
			}
		}
		for w := range workersPerListener {
			var share []oddRequest
			for i := w; i < len(mine); i += workersPerListener {
				share = append(share, mine[i])
			}
			wg.Go(func() {
				if err := sendOddOn(addr, share, counts); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// sendOddOn writes each request on a connection to addr and reads its answer.
func sendOddOn(addr string, odd []oddRequest, counts *oddCounts) error {
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
			if conn, err = net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
				return err
			}
			br = bufio.NewReader(conn)
		}
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: payrouter\r\n\r\n", o.method, o.path); err != nil {
			return fmt.Errorf("%.40s %.40s to %s: %w", o.method, o.path, addr, err)
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: o.method})
		if err != nil {
			return fmt.Errorf("%.40s %.40s to %s: reading the answer: %w", o.method, o.path, addr, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		served := resp.Header.Get("X-Request-Id") != ""
		if !served && resp.StatusCode != http.StatusBadRequest {
			return fmt.Errorf("%.40s %.40s to %s: %d without an X-Request-Id, and not net/http's 400", o.method, o.path, addr, resp.StatusCode)
		}
		counts.add(resp.StatusCode, served)
		if resp.Close {
			conn.Close()
			conn = nil
		}
	}
	return nil
}

// addedSeries lists the series of payrouter_http_request_duration_seconds (by their _count) in
// after and not in before.
func addedSeries(before, after string) []string {
	series := func(text string) []string {
		var out []string
		for line := range strings.Lines(text) {
			if m := sampleLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil && m[1] == "payrouter_http_request_duration_seconds_count" {
				out = append(out, "{"+m[2]+"}")
			}
		}
		return out
	}
	had := series(before)
	var added []string
	for _, s := range series(after) {
		if !slices.Contains(had, s) {
			added = append(added, fmt.Sprintf("%.120s", s))
		}
	}
	return added
}

// metricsText is the admin listener's GET /metrics, as Prometheus reads it.
func metricsText(t *testing.T, in *instance) string {
	t.Helper()
	r, err := send(in.probeClient, "GET", in.adminURL+"/metrics", nil)
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("GET /metrics: want 200; got %v %s", err, r)
	}
	return string(r.body)
}

// routeLabels lists the distinct route label values of payrouter_http_request_duration_seconds.
func routeLabels(metrics string) []string {
	var out []string
	for line := range strings.Lines(metrics) {
		m := sampleLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil || m[1] != "payrouter_http_request_duration_seconds_count" {
			continue
		}
		for _, lp := range labelPair.FindAllStringSubmatch(m[2], -1) {
			if lp[1] == "route" && !slices.Contains(out, lp[2]) {
				out = append(out, lp[2])
			}
		}
	}
	return out
}

// routeName is what a route label value or a request span's name may be: a method and a route
// pattern of payrouter's, or "(unmatched)".
var routeName = regexp.MustCompile(`^(\(unmatched\)|(GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) /[a-z/:._]*)$`)

// checkRouteNames fails for a name no route gives, and for more names than payrouter has routes.
func checkRouteNames(t *testing.T, what string, names []string) {
	t.Helper()
	const routesAtMost = 40 // payrouter has about 25 routes on its two listeners
	for _, n := range names {
		if !routeName.MatchString(n) || len(n) > 64 {
			t.Errorf("%s %.100q is neither a route nor (unmatched)", what, n)
		}
	}
	if len(names) > routesAtMost {
		t.Errorf("%d distinct values of %s; payrouter has fewer than %d routes", len(names), what, routesAtMost)
	}
}

// spanCollector is an OTLP/HTTP trace receiver: it keeps the names and the http.request.method
// of the server spans payrouter exports.
type spanCollector struct {
	url string

	mu      sync.Mutex
	names   map[string]int
	methods map[string]bool
}

func startSpanCollector(t *testing.T) *spanCollector {
	t.Helper()
	c := &spanCollector{names: map[string]int{}, methods: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		req := &collectortrace.ExportTraceServiceRequest{}
		if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		c.keep(req)
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	c.url = srv.URL
	return c
}

func (c *spanCollector) keep(req *collectortrace.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				if sp.GetKind() != tracev1.Span_SPAN_KIND_SERVER {
					continue
				}
				c.names[sp.GetName()]++
				for _, a := range sp.GetAttributes() {
					if a.GetKey() == "http.request.method" {
						c.methods[a.GetValue().GetStringValue()] = true
					}
				}
			}
		}
	}
}

// serverSpans is how many server spans arrived.
func (c *spanCollector) serverSpans() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, count := range c.names {
		n += count
	}
	return n
}

// seen lists the server spans' distinct names and methods.
func (c *spanCollector) seen() (names, methods []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for n := range c.names {
		names = append(names, n)
	}
	for m := range c.methods {
		methods = append(methods, m)
	}
	slices.Sort(names)
	slices.Sort(methods)
	return names, methods
}

// --- the smaller ones ----------------------------------------------------------------------------

// TestSmallerEdges (issue 19, item 7), each guard as a user meets it.
func TestSmallerEdges(t *testing.T) {
	skipIfShort(t)
	t.Run("control characters refused alike on both stores", testControlCharacters)
	t.Run("storefront readyz says up or down only", testReadyzSaysLittle)
	t.Run("gateways get no baggage and no tracestate", testTraceContextToGateways)
	t.Run("TLS 1.2 with AEAD suites only", testTLSAEADOnly)
	t.Run("check warns of secrets others can read", testCheckWarnsReadableSecrets)
	t.Run("refused refund and capture in payrouter's words", testRefusedRefundReason)
	t.Run("unknown-field errors capped", testUnknownFieldsCapped)
}

// testControlCharacters: NUL and the other control characters in a description, a customer id,
// a metadata key and a metadata value are 400 invalid-request naming the field, with the same
// answer on memory and on PostgreSQL, nothing stored or sent; the same charge without them is
// then taken.
func testControlCharacters(t *testing.T) {
	controls := []struct{ name, char string }{
		{"NUL", "\x00"}, {"line feed", "\n"}, {"carriage return", "\r"}, {"tab", "\t"},
		{"escape", "\x1b"}, {"DEL", "\x7f"}, {"C1 next line", "\u0085"}, {"C1 CSI", "\u009b"},
	}
	fields := []struct {
		name  string
		extra func(text string) map[string]any
		field string
	}{
		{"description", func(s string) map[string]any { return map[string]any{"description": s} }, "description"},
		{"customer_id", func(s string) map[string]any { return map[string]any{"customer_id": s} }, "customer_id"},
		{"metadata key", func(s string) map[string]any { return map[string]any{"metadata": map[string]string{s: "1"}} }, "metadata"},
		{"metadata value", func(s string) map[string]any { return map[string]any{"metadata": map[string]string{"note": s}} }, "metadata.note"},
	}
	answers := map[string]map[string]string{} // by store, by case: the answer's body
	for _, store := range []string{"memory", "postgresql"} {
		t.Run(store, func(t *testing.T) {
			s := startSims(t)
			db := ""
			if store == "postgresql" {
				db = pgtest.NewDatabase(t)
			}
			in := startPayrouter(t, s, edgeConfig(db))
			before := takeFootprint(t, in, s)
			answers[store] = map[string]string{}
			for _, f := range fields {
				for _, c := range controls {
					what := fmt.Sprintf("%s in %s", c.name, f.name)
					r := askStorefront(t, in, "POST", "/charge", chargeWith(f.extra("order"+c.char+"42")), "Idempotency-Key", edgeKey("control"))
					wantInvalid(t, what+" on "+store, r, f.field)
					answers[store][what] = string(r.body)
				}
			}
			takeFootprint(t, in, s).mustEqual(t, before, "after the refused requests on "+store)
			for _, f := range fields {
				if r := askStorefront(t, in, "POST", "/charge", chargeWith(f.extra("order 42")), "Idempotency-Key", edgeKey("control-clean")); r.status != http.StatusCreated {
					t.Errorf("the same charge without the control character in %s on %s: want 201; got %s", f.name, store, r)
				}
			}
		})
	}
	if t.Failed() {
		return // the answers differ from a 400 already; comparing them says no more
	}
	for what, mem := range answers["memory"] {
		if pg, ok := answers["postgresql"][what]; ok && pg != mem {
			t.Errorf("%s: memory answers %s, PostgreSQL %s; want the same answer on both stores", what, mem, pg)
		}
	}
}

// testReadyzSaysLittle: with its database stopped, payrouter's storefront /readyz answers 503
// {"status":"unavailable"} and no more (not the database's user, name or address), while the
// admin listener's says the money state store does not answer; both are ready again once it
// is back.
func testReadyzSaysLittle(t *testing.T) {
	s := startSims(t)
	db := pgtest.NewDatabase(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	in := startPayrouter(t, s, edgeConfig(db))
	readyBody := func(r reply) map[string]any {
		var m map[string]any
		_ = json.Unmarshal(r.body, &m)
		return m
	}
	r, err := in.readyz()
	if err != nil || r.status != http.StatusOK || fmt.Sprint(readyBody(r)) != "map[status:ready]" {
		t.Fatalf("storefront /readyz with the database up: want 200 {\"status\":\"ready\"}; got %v %s", err, r)
	}

	pgtest.Stop(t)
	var public reply
	eventually(t, 10*time.Second, "the storefront's /readyz answers 503 with the database stopped", func() (bool, string) {
		r, err := in.readyz()
		if err != nil {
			return false, err.Error()
		}
		public = r
		return r.status == http.StatusServiceUnavailable, r.String()
	})
	if got := readyBody(public); fmt.Sprint(got) != "map[status:unavailable]" {
		t.Errorf("storefront /readyz with the database stopped: want {\"status\":\"unavailable\"} and nothing more; got %s", public.body)
	}
	for what, v := range map[string]string{"user": u.User.Username(), "name": strings.TrimPrefix(u.Path, "/"), "address": u.Host, "port": u.Port()} {
		if v != "" && bytes.Contains(public.body, []byte(v)) {
			t.Errorf("storefront /readyz tells a stranger the database's %s: %s", what, public.body)
		}
	}
	private, err := in.adminReadyz()
	if err != nil {
		t.Fatal(err)
	}
	var why struct{ Status, Reason string }
	if json.Unmarshal(private.body, &why) != nil || private.status != http.StatusServiceUnavailable || !strings.HasPrefix(why.Reason, "money state store") {
		t.Errorf("admin /readyz with the database stopped: want 503 with a reason naming the money state store; got %s", private)
	}
	t.Logf("with the database stopped: storefront %d %s; admin %d %s", public.status, public.body, private.status, private.body)

	pgtest.Start(t)
	eventually(t, 15*time.Second, "both /readyz answer 200 once the database is back", func() (bool, string) {
		a, errA := in.readyz()
		b, errB := in.adminReadyz()
		if errA != nil || errB != nil {
			return false, fmt.Sprint(errA, errB)
		}
		return a.status == http.StatusOK && b.status == http.StatusOK, a.String() + "; " + b.String()
	})
}

// testTraceContextToGateways: a charge and its refund sent with traceparent, tracestate and
// baggage, and a charge with baggage alone, reach the gateway with a traceparent of the caller's
// trace, and with no tracestate and no baggage (gatewaysim's /_sim/trace_headers).
func testTraceContextToGateways(t *testing.T) {
	const (
		callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		traceparent = "00-" + callerTrace + "-00f067aa0ba902b7-01"
		tracestate  = "shop=cart-4242,vendor=c3RvcmVmcm9udA"
		baggage     = "customer.email=jane%40example.com,cart.total=129.00"
	)
	s := startSims(t)
	in := startPayrouter(t, s, edgeConfig(""))
	before := s.paywell.traceHeaders(t)

	if r := askStorefront(t, in, "POST", "/charge", chargeWith(nil), "Idempotency-Key", edgeKey("baggage-only"), "Baggage", baggage); r.status != http.StatusCreated {
		t.Fatalf("a charge with baggage: want 201; got %s", r)
	}
	traced := []string{"Traceparent", traceparent, "Tracestate", tracestate, "Baggage", baggage}
	r := askStorefront(t, in, "POST", "/charge", chargeWith(nil), append([]string{"Idempotency-Key", edgeKey("traced")}, traced...)...)
	if r.status != http.StatusCreated {
		t.Fatalf("a charge with traceparent, tracestate and baggage: want 201; got %s", r)
	}
	rf := askStorefront(t, in, "POST", "/charge/"+chargeID(t, r)+"/refund", []byte(`{"amount":500}`), append([]string{"Idempotency-Key", edgeKey("traced-refund")}, traced...)...)
	if rf.status != http.StatusCreated {
		t.Fatalf("a refund with traceparent, tracestate and baggage: want 201; got %s", rf)
	}

	after := s.paywell.traceHeaders(t)
	t.Logf("paywell saw: %+v (before: %+v)", after, before)
	if n := after.Traceparent.Calls - before.Traceparent.Calls; n < 3 {
		t.Errorf("%d of paywell's 3 calls carried a traceparent; want every one: the gateway joins the charge's trace", n)
	}
	if parts := strings.Split(after.Traceparent.Last, "-"); len(parts) != 4 || parts[1] != callerTrace || parts[2] == "00f067aa0ba902b7" {
		t.Errorf("the refund reached paywell with traceparent %q; want the caller's trace %s, under a span of payrouter's", after.Traceparent.Last, callerTrace)
	}
	if after.Tracestate.Calls != before.Tracestate.Calls {
		t.Errorf("%d calls reached paywell with a tracestate (the last %q); want none: it is the storefront's, unscreened", after.Tracestate.Calls-before.Tracestate.Calls, after.Tracestate.Last)
	}
	if after.Baggage.Calls != before.Baggage.Calls {
		t.Errorf("%d calls reached paywell with baggage (the last %q); want none: the storefront's baggage is dropped", after.Baggage.Calls-before.Baggage.Calls, after.Baggage.Last)
	}
}

// cbcSHA1Suites are TLS 1.2's CBC suites with SHA-1, for keys of both kinds: what an old client
// offers, and payrouter must not accept.
var cbcSHA1Suites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
	tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA,
	tls.TLS_RSA_WITH_AES_128_CBC_SHA, tls.TLS_RSA_WITH_AES_256_CBC_SHA,
}

// testTLSAEADOnly: on both TLS listeners, a TLS 1.2 client offering only CBC-SHA1 suites fails
// the handshake, and a TLS 1.2 client with Go's default suites gets an AEAD one; and to a
// gateway, payrouter does not charge through a TLS 1.2 gateway offering only CBC-SHA1 suites
// (nothing reaches it, the attempt is unavailable) while one offering AEAD suites is charged.
func testTLSAEADOnly(t *testing.T) {
	t.Run("listeners", testListenersAEADOnly)
	t.Run("to a gateway", testGatewayAEADOnly)
}

func testListenersAEADOnly(t *testing.T) {
	ca := testpki.NewCA(t, "aead")
	client := &tls.Config{RootCAs: ca.Pool()}
	_, pr := startListenerPayrouter(t, listenerSetup{
		extra:      tlsKeys("tls", ca.Server(t, "storefront", "127.0.0.1"), "") + tlsKeys("admin_tls", ca.Server(t, "admin", "127.0.0.1"), ""),
		storefront: client, admin: client,
	})
	for name, addr := range map[string]string{"listen": strings.TrimPrefix(pr.url, "https://"), "admin_listen": strings.TrimPrefix(pr.adminURL, "https://")} {
		old := &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12, CipherSuites: cbcSHA1Suites}
		if st, err := handshake(addr, old); err == nil {
			t.Errorf("%s: a TLS 1.2 client offering only CBC-SHA1 suites was accepted with %s", name, tls.CipherSuiteName(st.CipherSuite))
		} else {
			t.Logf("%s: a TLS 1.2 client offering only CBC-SHA1 suites: %v", name, err)
		}
		st, err := handshake(addr, &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12})
		if err != nil {
			t.Errorf("%s: a TLS 1.2 client with Go's default suites: %v", name, err)
			continue
		}
		if !slices.Contains(aeadSuites, st.CipherSuite) {
			t.Errorf("%s: TLS 1.2 negotiated %s; want an AEAD suite", name, tls.CipherSuiteName(st.CipherSuite))
		}
	}
	eventually(t, 5*time.Second, "the refused handshakes logged", func() (bool, string) {
		return strings.Count(pr.proc.out.String(), `"msg":"tls.handshake_failed"`) >= 2, "fewer than 2 tls.handshake_failed lines"
	})
}

func testGatewayAEADOnly(t *testing.T) {
	ca := testpki.NewCA(t, "gateway-aead")
	s := startSims(t)
	for _, gw := range []struct {
		name   string
		suites []uint16 // nil: Go's defaults
		want   int
	}{
		{"a TLS 1.2 gateway offering only CBC-SHA1 suites", cbcSHA1Suites, http.StatusServiceUnavailable},
		{"a TLS 1.2 gateway offering Go's default suites", nil, http.StatusCreated},
	} {
		paywell, url := tlsPaywell(t, ca, gw.suites)
		in := startPayrouterEdited(t, s, edgeConfig(""), func(yaml string) string {
			return strings.Replace(yaml, fmt.Sprintf("base_url: %q\n", s.paywell.url),
				fmt.Sprintf("base_url: %q\n    tls: {ca_file: %q}\n", url, ca.CertFile), 1)
		})
		r, a := in.mustCharge(t, 1999, "USD", "tok_visa")
		t.Logf("%s: %s; it saw %d calls", gw.name, r, paywell.Stats().Requests)
		if r.status != gw.want {
			t.Errorf("a charge at %s: want %d; got %s", gw.name, gw.want, r)
		}
		if gw.suites == nil {
			continue
		}
		if describe(a.Attempts) != "[paywell/unavailable]" {
			t.Errorf("a charge at %s: want the one attempt paywell/unavailable (no request could reach it); got %s", gw.name, describe(a.Attempts))
		}
		if n := paywell.Stats().Requests; n != 0 {
			t.Errorf("%s received %d calls; want none: no handshake completes", gw.name, n)
		}
	}
}

// tlsPaywell serves paywell's simulator over TLS 1.2 at most, with ca's certificate for
// 127.0.0.1 and only suites (nil: Go's defaults), as a gateway that has not moved past them:
// gatewaysim's TLS cannot be narrowed so. It returns the simulator and its base URL.
func tlsPaywell(t *testing.T, ca *testpki.CA, suites []uint16) (*simserver.Server, string) {
	t.Helper()
	gw := paywellsim.New()
	srv := httptest.NewUnstartedServer(gw)
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{ca.Server(t, fmt.Sprintf("paywell-%d", keySeq.Add(1)), "127.0.0.1").TLS(t)},
		MaxVersion:   tls.VersionTLS12, CipherSuites: suites,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	t.Cleanup(gw.Close) // before the server closes: nothing waits on it
	return gw, srv.URL
}

// aeadSuites are TLS 1.2's ECDHE suites with AES-GCM or ChaCha20-Poly1305.
var aeadSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// handshake completes a TLS handshake with addr and returns what was agreed.
func handshake(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	return c.ConnectionState(), nil
}

// testCheckWarnsReadableSecrets: `payrouter check` on a configuration file every user may read,
// with its secrets written in it, and a private key file every user may read, warns of both,
// naming the fields and never the secrets; with both at mode 0600 it warns of neither.
func testCheckWarnsReadableSecrets(t *testing.T) {
	ca := testpki.NewCA(t, "check")
	key := ca.Server(t, "storefront", "127.0.0.1")
	ports := freePorts(t, 5)
	unstarted := &sims{paywell: newSim("paywell", ports[2]), ding: newSim("ding", ports[3]), tranglo: newSim("tranglo", ports[4])}
	path := filepath.Join(t.TempDir(), "payrouter.yaml")
	text := edgeConfig("").yaml(loopback(ports[0]), loopback(ports[1]), unstarted) + tlsKeys("tls", key, "")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	secrets := []string{apiKey, otherAPIKey, adminToken, "paywell_e2e_key"}
	fileWarning := path + ": readable by every user of this machine (mode 0644) and holds secrets written in it (auth.api_keys[0], "
	keyWarning := "tls.key_file: the private key " + key.KeyFile + " is readable by every user of this machine (mode 0644)"

	chmod(t, 0o644, path, key.KeyFile)
	out := runCheck(t, path)
	for _, want := range []string{fileWarning, keyWarning} {
		if !strings.Contains(out, want) {
			t.Errorf("payrouter check with the file and the key at 0644: want the warning %q; it printed:\n%s", want, out)
		}
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("payrouter check prints a secret written in the file (%.4s...):\n%s", s, out)
		}
	}

	chmod(t, 0o600, path, key.KeyFile)
	if out := runCheck(t, path); strings.Contains(out, "readable by every user") {
		t.Errorf("payrouter check with the file and the key at 0600: want no warning about readers; it printed:\n%s", out)
	}
}

func chmod(t *testing.T, mode os.FileMode, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
}

// runCheck runs `payrouter check -config path`, which must exit 0, and returns what it printed.
func runCheck(t *testing.T, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.payrouter, "check", "-config", path)
	cmd.Env = processEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("payrouter check -config %s: %v\n%s", path, err, out)
	}
	return string(out)
}

// testRefusedRefundReason: a charge refunded at the gateway behind payrouter's back (from the
// gateway's own dashboard) is refunded again through payrouter; the gateway refuses it. The
// answer, the refund's failure_reason and its refund.failed event say so in payrouter's words
// with a reason code, never in the gateway's text, which is in the refund.attempt log line. So
// does the answer to a capture of an authorization voided at the gateway's dashboard.
func testRefusedRefundReason(t *testing.T) {
	const gatewayText = "cannot refund a refunded transaction" // paywellsim's message for it
	s := startSims(t)
	in := startPayrouter(t, s, edgeConfig(""))
	r := askStorefront(t, in, "POST", "/charge", chargeWith(nil), "Idempotency-Key", edgeKey("refund-refused"))
	id := chargeID(t, r)
	atPaywellDashboard(t, s, "/v1/refunds", url.Values{"charge": {gatewayReferenceOf(t, r)}})

	refused := askStorefront(t, in, "POST", "/charge/"+id+"/refund", nil, "Idempotency-Key", edgeKey("refund-again"))
	p := decodeProblem(refused)
	if refused.status != http.StatusBadGateway || p.Type != "/problems/gateway-error" {
		t.Fatalf("a refund paywell refuses: want 502 gateway-error; got %s", refused)
	}
	refundID := regexp.MustCompile(`\bre_[A-Z0-9]+\b`).FindString(p.Detail)
	if refundID == "" {
		t.Fatalf("the 502's detail names no refund: %s", refused)
	}
	got := askStorefront(t, in, "GET", "/refund/"+refundID, nil)
	var rf struct {
		Status        string `json:"status"`
		FailureReason string `json:"failure_reason"`
	}
	if json.Unmarshal(got.body, &rf) != nil || got.status != http.StatusOK || rf.Status != "failed" {
		t.Fatalf("GET /refund/%s: want 200 with status failed; got %s", refundID, got)
	}
	if !ownWords.MatchString(rf.FailureReason) {
		t.Errorf("the refund's failure_reason is %q; want payrouter's own words and a reason code (%s)", rf.FailureReason, ownWords)
	}
	if !strings.Contains(p.Detail, "("+rf.FailureReason+")") {
		t.Errorf("the 502's detail %q does not give the failure_reason %q", p.Detail, rf.FailureReason)
	}
	events := askStorefront(t, in, "GET", "/events?limit=100", nil)
	if !bytes.Contains(events.body, []byte(`"refund.failed"`)) {
		t.Errorf("GET /events lists no refund.failed: %s", events)
	}
	for _, a := range []reply{refused, got, events} {
		if bytes.Contains(a.body, []byte(gatewayText)) || bytes.Contains(a.body, []byte("invalid transaction state")) {
			t.Errorf("%s answers with the gateway's own text: %s", a.req, a.body)
		}
	}
	eventually(t, 5*time.Second, "the gateway's text is in the refund.attempt log line", func() (bool, string) {
		for line := range strings.Lines(in.proc.out.String()) {
			if strings.Contains(line, `"msg":"refund.attempt"`) && strings.Contains(line, refundID) && strings.Contains(line, gatewayText) {
				return true, ""
			}
		}
		return false, "no refund.attempt line of " + refundID + " quoting the gateway"
	})
	t.Logf("failure_reason %q; the 502's detail %q", rf.FailureReason, p.Detail)

	t.Run("a refused capture", func(t *testing.T) {
		const gatewayText = "cannot capture a voided transaction"
		auth := askStorefront(t, in, "POST", "/charge", chargeWith(map[string]any{"capture": false}), "Idempotency-Key", edgeKey("capture-refused"))
		id := chargeID(t, auth)
		atPaywellDashboard(t, s, "/v1/charges/"+gatewayReferenceOf(t, auth)+"/cancel", url.Values{})
		refused := askStorefront(t, in, "POST", "/charge/"+id+"/capture", nil, "Idempotency-Key", edgeKey("capture"))
		p := decodeProblem(refused)
		why := regexp.MustCompile(`\(([^()]*)\)$`).FindStringSubmatch(p.Detail)
		if refused.status != http.StatusBadGateway || p.Type != "/problems/gateway-error" || why == nil || !ownWords.MatchString(why[1]) {
			t.Errorf("a capture paywell refuses: want 502 gateway-error saying why in payrouter's words and a reason code; got %s", refused)
		}
		if bytes.Contains(refused.body, []byte(gatewayText)) || bytes.Contains(refused.body, []byte("invalid transaction state")) {
			t.Errorf("a capture paywell refuses is answered with the gateway's own text: %s", refused.body)
		}
		eventually(t, 5*time.Second, "the gateway's text is in the charge.operation_refused log line", func() (bool, string) {
			for line := range strings.Lines(in.proc.out.String()) {
				if strings.Contains(line, `"msg":"charge.operation_refused"`) && strings.Contains(line, id) && strings.Contains(line, gatewayText) {
					return true, ""
				}
			}
			return false, "no charge.operation_refused line of " + id + " quoting the gateway"
		})
	})
}

// atPaywellDashboard does at paywell's own API what a shop's staff does in its dashboard, behind
// payrouter's back: POST path with form.
func atPaywellDashboard(t *testing.T, s *sims, path string, form url.Values) {
	t.Helper()
	r, err := send(s.paywell.client, "POST", s.paywell.url+path, []byte(form.Encode()), "Authorization", "Bearer dashboard",
		"Content-Type", "application/x-www-form-urlencoded", "Idempotency-Key", edgeKey("dashboard"))
	if err != nil || r.status != http.StatusOK {
		t.Fatalf("POST %s at paywell's own API: want 200; got %v %s", path, err, r)
	}
}

// ownWords is a failure_reason in payrouter's words (payments' whyRefused) with a reason code in
// lower snake case.
var ownWords = regexp.MustCompile(`^(declined by the gateway|refused by the gateway as malformed): [a-z0-9_]{1,64}$`)

// gatewayReferenceOf reads gateway_reference from a charge object.
func gatewayReferenceOf(t *testing.T, r reply) string {
	t.Helper()
	var ch struct {
		GatewayReference string `json:"gateway_reference"`
	}
	if json.Unmarshal(r.body, &ch) != nil || ch.GatewayReference == "" {
		t.Fatalf("no gateway_reference in %s", r)
	}
	return ch.GatewayReference
}

// testUnknownFieldsCapped: a charge with 4,000 unknown fields is 400 invalid-request listing 20
// of them and one error saying there are more, in an answer of a few hundred bytes, and nothing
// is stored or sent.
func testUnknownFieldsCapped(t *testing.T) {
	s := startSims(t)
	in := startPayrouter(t, s, edgeConfig(""))
	before := takeFootprint(t, in, s)
	extra := map[string]any{}
	for i := range 4000 {
		extra[fmt.Sprintf("x_%04d", i)] = i
	}
	body := chargeWith(extra)
	r := askStorefront(t, in, "POST", "/charge", body, "Idempotency-Key", edgeKey("unknown-fields"))
	p := wantInvalid(t, "a charge with 4,000 unknown fields", r, "x_0000")
	t.Logf("4,000 unknown fields in a %d-byte body: answered %d bytes with %d errors", len(body), len(r.body), len(p.Errors))
	if len(p.Errors) != 21 || p.Errors[20].Field != "(body)" {
		t.Errorf("want 20 field errors and a last one on (body) saying there are more; got %d, the last %+v", len(p.Errors), p.Errors[len(p.Errors)-1])
	}
	if len(r.body) > 2<<10 {
		t.Errorf("the answer is %d bytes; want at most 2 KiB", len(r.body))
	}
	takeFootprint(t, in, s).mustEqual(t, before, "after 4,000 unknown fields")
}

// --- helpers -------------------------------------------------------------------------------------

// edgeConfig is one gateway, paywell, taking USD, on memory ("") or on the database at
// databaseURL.
func edgeConfig(databaseURL string) routerConfig {
	gw := gatewayConfig{Timeout: 2 * time.Second, MaxConcurrent: 10, ConsecutiveFailures: 50, Cooldown: 30 * time.Second}
	return routerConfig{
		RequestTimeout: 5 * time.Second,
		DatabaseURL:    databaseURL,
		Gateways:       map[string]gatewayConfig{"paywell": gw},
		Routes:         []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell"}}},
	}
}

// edgeKey is a fresh Idempotency-Key.
func edgeKey(what string) string {
	return fmt.Sprintf("e2e-edge-%s-%d", what, keySeq.Add(1))
}

// chargeWith is a valid charge body (1999 USD, a card token) with the members of extra added
// or replaced.
func chargeWith(extra map[string]any) []byte {
	body := map[string]any{
		"amount": 1999, "currency": "USD",
		"payment_method": map[string]string{"type": "card", "token": "tok_visa"},
	}
	for k, v := range extra {
		body[k] = v
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	return b
}

// askStorefront sends a storefront request with the API key, header pairs added (and winning).
func askStorefront(t *testing.T, in *instance, method, path string, body []byte, header ...string) reply {
	t.Helper()
	h := []string{"Authorization", "Bearer " + apiKey}
	if body != nil {
		h = append(h, "Content-Type", "application/json")
	}
	r, err := send(in.client, method, in.url+path, body, append(h, header...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// chargeID reads the id of a charge object answered 201.
func chargeID(t *testing.T, r reply) string {
	t.Helper()
	var ch struct{ ID string }
	if r.status != http.StatusCreated || json.Unmarshal(r.body, &ch) != nil || ch.ID == "" {
		t.Fatalf("want a charge, 201; got %s", r)
	}
	return ch.ID
}

// problem is an RFC 9457 answer, as far as these tests read it.
type problem struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
}

func decodeProblem(r reply) problem {
	var p problem
	_ = json.Unmarshal(r.body, &p)
	return p
}

// wantInvalid fails unless r is 400 invalid-request whose errors name field.
func wantInvalid(t *testing.T, what string, r reply, field string) problem {
	t.Helper()
	p := decodeProblem(r)
	named := slices.ContainsFunc(p.Errors, func(e struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	}) bool {
		return e.Field == field
	})
	if r.status != http.StatusBadRequest || p.Type != "/problems/invalid-request" || !named {
		t.Errorf("%s: want 400 invalid-request naming %s; got %s", what, field, r)
	}
	return p
}

// footprint is what a request may leave behind: events (every stored change writes one) and
// what the gateways saw.
type footprint struct {
	events       int
	gatewayCalls int64
	transactions int
}

// takeFootprint counts the API key's events and the calls and transactions of the three
// simulated gateways.
func takeFootprint(t *testing.T, in *instance, s *sims) footprint {
	t.Helper()
	var f footprint
	after := ""
	for {
		path := "/events?limit=100"
		if after != "" {
			path += "&starting_after=" + after
		}
		r := askStorefront(t, in, "GET", path, nil)
		var page struct {
			Data    []struct{ ID string } `json:"data"`
			HasMore bool                  `json:"has_more"`
		}
		if r.status != http.StatusOK || json.Unmarshal(r.body, &page) != nil {
			t.Fatalf("GET /events: want 200 with a page of events; got %s", r)
		}
		f.events += len(page.Data)
		if !page.HasMore || len(page.Data) == 0 {
			break
		}
		after = page.Data[len(page.Data)-1].ID
	}
	for _, g := range []*sim{s.paywell, s.ding, s.tranglo} {
		f.gatewayCalls += g.stats(t).Requests
		f.transactions += len(g.ledger(t))
	}
	return f
}

// mustEqual fails when f differs from before: something was stored or sent.
func (f footprint) mustEqual(t *testing.T, before footprint, when string) {
	t.Helper()
	if f.events != before.events {
		t.Errorf("%s: GET /events lists %d new events; want none: something was stored", when, f.events-before.events)
	}
	if f.gatewayCalls != before.gatewayCalls || f.transactions != before.transactions {
		t.Errorf("%s: the gateways got %d calls and %d new transactions; want none", when, f.gatewayCalls-before.gatewayCalls, f.transactions-before.transactions)
	}
}
