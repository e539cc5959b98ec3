package bench

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestBenchFastFail measures payrouter's fast-fail path, the honest 503 gateways-unavailable of
// a charge when every breaker is open, against bare503: an echo server answering the same bytes
// with the same headers after the same body read. The ratio is what payrouter's authentication,
// decoding, idempotency claim, routing past three open breakers, logging and metrics cost on top
// of HTTP and echo themselves; it matters because during an outage this path is all payrouter
// does, at whatever rate the storefront retries.
func TestBenchFastFail(t *testing.T) {
	requireBench(t)
	s := startStack(t)
	s.forceOpen(t)

	// One answer looked at in full: the measured ones are checked by status only, to keep the
	// load generator's own work small and the same on both sides.
	router := s.payrouterCharge(http.StatusServiceUnavailable)
	resp, body := one(t, router)
	retryAfter := checkUnavailable(t, resp, body)

	bodyFile := filepath.Join(t.TempDir(), "problem.json")
	if err := os.WriteFile(bodyFile, body, 0o644); err != nil {
		t.Fatal(err)
	}
	bareAddr := freeAddrs(t, 1)[0]
	bareProc := startProcess(t, "bare503", s.bins.bare503, "-listen", bareAddr, "-body", bodyFile, "-retry-after", retryAfter,
		"-request-id", resp.Header.Get("X-Request-Id"))
	bareProc.waitHealthy(t, "http://"+bareAddr+"/healthz")
	bare := Target{Name: "bare503", URL: "http://" + bareAddr + "/charge", Header: router.Header, Body: router.Body, Want: http.StatusServiceUnavailable}
	bareResp, bareBody := one(t, bare)
	for _, h := range []string{"Content-Type", "Retry-After", "X-Request-Id", "Content-Length"} {
		if got, want := bareResp.Header.Get(h), resp.Header.Get(h); got != want {
			t.Fatalf("bare503 answers %s %q, payrouter %q: the baseline must send the same headers", h, got, want)
		}
	}
	if string(bareBody) != string(body) {
		t.Fatalf("bare503 answers %s\npayrouter %s\nthe baseline must send the same body", bareBody, body)
	}

	tab := newTable(t.Output(), fmt.Sprintf("(a) fast-fail: POST /charge answered 503 gateways-unavailable (%d breakers forced open, %d-byte body) vs bare503 answering the same bytes",
		len(gatewayNames), len(body)), false)
	var measured []string
	for _, workers := range concurrencies {
		c := compareAt(t, bare, router, workers)
		tab.add(workers, "bare503", "payrouter", c)
		b, s := Merge(c.Base...), Merge(c.Subject...)
		measured = append(measured, fmt.Sprintf("%.2fx with %s (p99 %.2fx)", s.Rate()/b.Rate(), workersText(workers), ratio(s.Quantile(0.99), b.Quantile(0.99))))
	}
	tab.flush()

	// The same at 20 connections with wrk, a load generator in C that leaves the servers more
	// of the 2 CPUs than the Go one does: closer to a storefront's pool of connections.
	bareWrk, ok := newWrk(t, bare)
	if ok {
		routerWrk, _ := newWrk(t, router)
		c := alternateWrk(t.Context(), t, bareWrk, routerWrk)
		b, s := pooled(c.base), pooled(c.subject)
		if b.unexpected > 0 || s.unexpected > 0 {
			t.Errorf("wrk: %d answers of bare503 and %d of payrouter were not 503 or failed", b.unexpected, s.unexpected)
		}
		printWrk(t, fmt.Sprintf("(a) fast-fail with wrk, %d connections on 2 threads: the same two servers", wrkConnections), "bare503", "payrouter", c)
		measured = append(measured, fmt.Sprintf("%.2fx with wrk at %d connections (p99 %.2fx)", s.rate()/b.rate(), wrkConnections, ratio(s.p99, b.p99)))
	} else {
		fmt.Fprintf(t.Output(), "\n(a) fast-fail with wrk at %d connections: skipped, wrk is not installed (Debian: apt-get install wrk)\n", wrkConnections)
	}
	fmt.Fprintf(t.Output(), "goal (a): payrouter / bare503 req/s >= 0.70x at 1, 16 and %d connections, p99 <= 1.5x; measured %s\n",
		wrkConnections, strings.Join(measured, ", "))

	// The point of an open breaker: not one charge reached a gateway.
	for _, name := range gatewayNames {
		if n := s.simRequests(t, name); n != 0 {
			t.Errorf("%s received %d API calls while its breaker was forced open; want 0", name, n)
		}
	}
}

// checkUnavailable fails the test unless resp and body are the API's 503 (docs/api.md): problem
// gateways-unavailable with Retry-After, an X-Request-Id and every gateway of the route passed as
// breaker_open. It returns the Retry-After value.
func checkUnavailable(t *testing.T, resp *http.Response, body []byte) string {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("503 Content-Type %q, want application/problem+json", ct)
	}
	retryAfter := resp.Header.Get("Retry-After")
	if n, err := strconv.Atoi(retryAfter); err != nil || n < 1 {
		t.Fatalf("503 Retry-After %q, want an integer >= 1", retryAfter)
	}
	if resp.Header.Get("X-Request-Id") == "" {
		t.Fatal("503 without X-Request-Id")
	}
	var p struct {
		Type     string `json:"type"`
		Status   int    `json:"status"`
		Attempts []struct {
			Gateway string `json:"gateway"`
			Outcome string `json:"outcome"`
		} `json:"attempts"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("503 body is not JSON: %v: %s", err, body)
	}
	if p.Type != "/problems/gateways-unavailable" || p.Status != http.StatusServiceUnavailable || len(p.Attempts) != len(gatewayNames) {
		t.Fatalf("503 body is not gateways-unavailable with %d attempts: %s", len(gatewayNames), body)
	}
	for i, a := range p.Attempts {
		if a.Gateway != gatewayNames[i] || a.Outcome != "breaker_open" {
			t.Fatalf("503 attempt %d is %s/%s, want %s/breaker_open: %s", i, a.Gateway, a.Outcome, gatewayNames[i], body)
		}
	}
	return retryAfter
}
