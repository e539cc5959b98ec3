package gatewayhttp

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// freshClient has its own transport, so no test reuses another's connection (the transport
// retries some failures on reused connections by itself).
func freshClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// rawServer accepts TCP connections and hands each to handle, for answers net/http would never
// write.
func rawServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return "http://" + l.Addr().String()
}

// readRequest reads one request off a raw connection, body included.
func readRequest(c net.Conn) {
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err == nil {
		_, _ = io.Copy(io.Discard, req.Body)
	}
}

func resetAfterReading(c net.Conn) {
	readRequest(c)
	_ = c.(*net.TCPConn).SetLinger(0)
	c.Close()
}

func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestDoClassifiesTransportFailures(t *testing.T) {
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	received := make(chan struct{}, 1)

	cases := []struct {
		name    string
		url     func(t *testing.T) string
		client  func(t *testing.T) *http.Client
		ctx     func(t *testing.T) context.Context
		outcome payrouter.Outcome
		stage   string
	}{
		{
			name:    "connection refused: nothing sent",
			url:     closedPort,
			outcome: payrouter.OutcomeUnavailable, stage: "connect",
		},
		{
			name: "DNS failure: nothing sent",
			url:  func(*testing.T) string { return "http://gateway.example:80" },
			client: func(*testing.T) *http.Client {
				return &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
					return nil, &net.DNSError{Err: "no such host", Name: "gateway.example", IsNotFound: true}
				}}}
			},
			outcome: payrouter.OutcomeUnavailable, stage: "connect",
		},
		{
			name: "deadline while dialing: nothing sent",
			url:  func(*testing.T) string { return "http://gateway.example:80" },
			client: func(*testing.T) *http.Client {
				return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					<-ctx.Done()
					return nil, ctx.Err()
				}}}
			},
			ctx:     deadline(50 * time.Millisecond),
			outcome: payrouter.OutcomeUnavailable, stage: "connect",
		},
		{
			name: "deadline after the request was written",
			url: func(t *testing.T) string {
				return rawServer(t, func(c net.Conn) { readRequest(c); <-hang; c.Close() })
			},
			ctx:     deadline(100 * time.Millisecond),
			outcome: payrouter.OutcomeTimeout, stage: "answer",
		},
		{
			name: "cancel after the request was written",
			url: func(t *testing.T) string {
				return rawServer(t, func(c net.Conn) { readRequest(c); received <- struct{}{}; <-hang; c.Close() })
			},
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithCancel(t.Context())
				go func() { <-received; cancel() }()
				return ctx
			},
			outcome: payrouter.OutcomeTimeout, stage: "answer",
		},
		{
			name:    "reset after the request was written",
			url:     func(t *testing.T) string { return rawServer(t, resetAfterReading) },
			outcome: payrouter.OutcomeUnknown, stage: "answer",
		},
		{
			name:    "EOF after the request was written",
			url:     func(t *testing.T) string { return rawServer(t, func(c net.Conn) { readRequest(c); c.Close() }) },
			outcome: payrouter.OutcomeUnknown, stage: "answer",
		},
		{
			name: "not HTTP at all",
			url: func(t *testing.T) string {
				return rawServer(t, func(c net.Conn) { readRequest(c); _, _ = c.Write([]byte("garbage\r\n\r\n")); c.Close() })
			},
			outcome: payrouter.OutcomeUnknown, stage: "answer",
		},
		{
			name: "body cut short",
			url: func(t *testing.T) string {
				return rawServer(t, func(c net.Conn) {
					readRequest(c)
					_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"id\":"))
					c.Close()
				})
			},
			outcome: payrouter.OutcomeUnknown, stage: "body",
		},
		{
			name: "deadline while reading the body",
			url: func(t *testing.T) string {
				return rawServer(t, func(c net.Conn) {
					readRequest(c)
					_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"id\":"))
					<-hang
					c.Close()
				})
			},
			ctx:     deadline(100 * time.Millisecond),
			outcome: payrouter.OutcomeTimeout, stage: "body",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			client := freshClient(t)
			if c.client != nil {
				client = c.client(t)
			}
			ctx := t.Context()
			if c.ctx != nil {
				ctx = c.ctx(t)
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(t)+"/v1/charges", strings.NewReader("amount=100"))
			if err != nil {
				t.Fatal(err)
			}
			a, err := Do(client, req)
			var te *TransportError
			if !errors.As(err, &te) {
				t.Fatalf("Do = %+v, %v; want a *TransportError", a, err)
			}
			if te.Outcome != c.outcome || te.Stage != c.stage {
				t.Errorf("Do: outcome %s at stage %s, want %s at %s (%v)", te.Outcome, te.Stage, c.outcome, c.stage, te)
			}
			if r := ResultOf(err); r.Outcome != c.outcome || r.Detail == "" {
				t.Errorf("ResultOf = %+v, want outcome %s with a detail", r, c.outcome)
			}
		})
	}
}

func deadline(d time.Duration) func(t *testing.T) context.Context {
	return func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), d)
		t.Cleanup(cancel)
		return ctx
	}
}

// TestDoWriteFailure: a request that could not be written whole cannot have been acted on.
func TestDoWriteFailure(t *testing.T) {
	url := rawServer(t, func(c net.Conn) {
		_ = c.(*net.TCPConn).SetLinger(0)
		c.Close() // before reading anything: the client's big body meets a reset
	})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(strings.Repeat("x", 16<<20)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Do(freshClient(t), req)
	var te *TransportError
	if !errors.As(err, &te) {
		t.Fatalf("Do = %v; want a *TransportError", err)
	}
	// The reset may reach the client while it writes (unavailable) or, once the body is all in
	// the kernel's buffers, only when it reads (unknown); never a success or a timeout.
	if te.Outcome != payrouter.OutcomeUnavailable && te.Outcome != payrouter.OutcomeUnknown {
		t.Fatalf("Do: %v; want unavailable or unknown", te)
	}
	if te.Stage == "write" && te.Outcome != payrouter.OutcomeUnavailable {
		t.Fatalf("Do: %v; a failed write must be unavailable", te)
	}
	t.Logf("a reset while writing 16 MiB: %v", te)
}

func TestDoReadsAnswers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			_, _ = w.Write([]byte(strings.Repeat("x", MaxBody+10)))
		case "/503":
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy", http.StatusServiceUnavailable)
		default:
			_, _ = w.Write([]byte(`{"ok":true}`))
		}
	}))
	t.Cleanup(srv.Close)
	do := func(path string) *Answer {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
		a, err := Do(freshClient(t), req)
		if err != nil {
			t.Fatalf("Do(%s): %v", path, err)
		}
		return a
	}
	if a := do("/"); a.Status != 200 || string(a.Body) != `{"ok":true}` || a.Truncated {
		t.Errorf("Do(/) = %+v", a)
	}
	if a := do("/503"); a.Status != 503 || a.Header.Get("Retry-After") != "1" {
		t.Errorf("Do(/503) = %+v", a)
	}
	if a := do("/big"); len(a.Body) != MaxBody || !a.Truncated {
		t.Errorf("Do(/big): %d bytes, truncated %v; want %d, true", len(a.Body), a.Truncated, MaxBody)
	}
}

// TestExchange: the mapping gets the status, the Content-Type as sent and the body; an answer
// cut at MaxBody never reaches it, even one whose cut would parse (JSON padded with spaces), as
// a gateway's own "not processed" form padded by something on the way would.
func TestExchange(t *testing.T) {
	const form = `{"error":{"type":"api_error","code":"service_unavailable"}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		body := form
		if r.URL.Path == "/padded" {
			body += strings.Repeat(" ", MaxBody)
		}
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	acct := Account{APIKey: "k-0123456789", HTTP: freshClient(t)}
	for _, c := range []struct {
		path   string
		called bool
		want   payrouter.Outcome
	}{
		{"/", true, payrouter.OutcomeUnavailable},
		{"/padded", false, payrouter.OutcomeUnknown},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+c.path, nil)
		called := false
		r := acct.Exchange("gw", req, func(status int, contentType string, body []byte) payrouter.Result {
			called = true
			if status != 503 || contentType != "application/json; charset=utf-8" || string(body) != form {
				t.Errorf("%s: parse(%d, %q, %q)", c.path, status, contentType, body)
			}
			return payrouter.Result{Outcome: payrouter.OutcomeUnavailable, Detail: "gw: not processed"}
		})
		if called != c.called || r.Outcome != c.want || !strings.HasPrefix(r.Detail, "gw: ") {
			t.Errorf("Exchange(%s) = %+v, parse called %v; want %s, parse called %v", c.path, r, called, c.want, c.called)
		}
	}
}

func TestIsJSONAndMediaType(t *testing.T) {
	cases := []struct {
		ct     string
		isJSON bool
		media  string
	}{
		{"application/json", true, "application/json"},
		{"application/json; charset=utf-8", true, "application/json"},
		{"Application/JSON", true, "application/json"},
		{"text/plain", false, "text/plain"},
		{"text/html; charset=utf-8", false, "text/html"},
		{"application/problem+json", false, "application/problem+json"},
		{"application/jsonx", false, "application/jsonx"},
		{"", false, "no Content-Type"},
		{"   ", false, "no Content-Type"},
		{"application/json; charset", false, "an unreadable Content-Type"},
		{"json", false, "json"},
		{"application/json;;", false, "an unreadable Content-Type"},
		{"application/" + strings.Repeat("x", 100), false, "application/" + strings.Repeat("x", 52) + "..."},
	}
	for _, c := range cases {
		if got := IsJSON(c.ct); got != c.isJSON {
			t.Errorf("IsJSON(%q) = %v, want %v", c.ct, got, c.isJSON)
		}
		if got := MediaType(c.ct); got != c.media {
			t.Errorf("MediaType(%q) = %q, want %q", c.ct, got, c.media)
		}
	}
}

func TestCheckHealth(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }))
	t.Cleanup(srv.Close)
	if err := CheckHealth(t.Context(), freshClient(t), srv.URL+"/health"); err != nil {
		t.Errorf("healthy: %v", err)
	}
	status = http.StatusServiceUnavailable
	if err := CheckHealth(t.Context(), freshClient(t), srv.URL+"/health"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("503: %v", err)
	}
	if err := CheckHealth(t.Context(), freshClient(t), closedPort(t)+"/health"); err == nil {
		t.Error("closed port: no error")
	}
}

func TestParseBaseURL(t *testing.T) {
	cases := []struct{ in, want, err string }{
		{"http://127.0.0.1:9101", "http://127.0.0.1:9101", ""},
		{"https://api.gw.example/base/", "https://api.gw.example/base", ""},
		{"", "", "required"},
		{"127.0.0.1:9101", "", "base_url"},
		{"ftp://x", "", "scheme"},
		{"http://", "", "no host"},
		{"http://x/#frag", "", "no query or fragment"},
	}
	for _, c := range cases {
		u, err := ParseBaseURL(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ParseBaseURL(%q) = %v, %v; want an error about %q", c.in, u, err, c.err)
		case c.err == "" && (err != nil || u.String() != c.want):
			t.Errorf("ParseBaseURL(%q) = %v, %v; want %s", c.in, u, err, c.want)
		}
	}
	u, _ := ParseBaseURL("http://gw.example/api")
	if got := Endpoint(u, "/v1/charges/ch_1/capture"); got != "http://gw.example/api/v1/charges/ch_1/capture" {
		t.Errorf("Endpoint = %s", got)
	}
}

func TestSnakeCase(t *testing.T) {
	cases := map[string]string{
		"DoNotHonour":           "do_not_honour",
		"generic_decline":       "generic_decline",
		"card-declined":         "card_declined",
		"Do not honour":         "do_not_honour",
		"  InsufficientFunds  ": "insufficient_funds",
		"":                      "",
		"!!!":                   "",
		"ABC":                   "abc",
		"code 51":               "code_51",
	}
	for in, want := range cases {
		if got := SnakeCase(in); got != want {
			t.Errorf("SnakeCase(%q) = %q, want %q", in, got, want)
		}
	}
	if got := SnakeCase(strings.Repeat("Ab", 100)); len(got) > 64 || strings.HasSuffix(got, "_") {
		t.Errorf("SnakeCase of a long reason = %q (%d bytes); want at most 64, no trailing _", got, len(got))
	}
}

func TestAPIKey(t *testing.T) {
	if k, err := APIKey(map[string]string{"api_key": "k1"}); k != "k1" || err != nil {
		t.Errorf("APIKey = %q, %v", k, err)
	}
	for _, creds := range []map[string]string{nil, {}, {"api_key": "  "}} {
		if _, err := APIKey(creds); err == nil {
			t.Errorf("APIKey(%v): no error", creds)
		}
	}
}
