package listener

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter/internal/memnet"
	"github.com/payrouter/payrouter/internal/testpki"
)

// testServer is an http.Server on a Listener over a loopback port, or over an in-process
// network (startBubbleServer).
type testServer struct {
	l       *Listener
	srv     *http.Server
	addr    string
	network *memnet.Network // nil: addr is a loopback port
	calls   atomic.Int64    // requests the handler served
}

func startServer(t *testing.T, opts Options, idle time.Duration, h http.HandlerFunc) *testServer {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveOn(t, inner, opts, idle, h)
}

// startBubbleServer is startServer on an in-process network, for a test inside a synctest
// bubble: its idle timeouts and the clients' deadlines run on the bubble's clock.
func startBubbleServer(t *testing.T, opts Options, idle time.Duration, h http.HandlerFunc) *testServer {
	t.Helper()
	n := &memnet.Network{}
	inner, err := n.Listen("listener:80")
	if err != nil {
		t.Fatal(err)
	}
	ts := serveOn(t, inner, opts, idle, h)
	ts.network = n
	return ts
}

// serveOn serves the test's handler, or h, on a Listener over inner until the test ends.
func serveOn(t *testing.T, inner net.Listener, opts Options, idle time.Duration, h http.HandlerFunc) *testServer {
	t.Helper()
	ts := &testServer{addr: inner.Addr().String()}
	if opts.Refuse == nil {
		opts.Refuse = func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"type":"/problems/invalid-request"}`)
		}
	}
	ts.l = New(inner, opts)
	ts.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ts.calls.Add(1)
			if h != nil {
				h(w, r)
				return
			}
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, body)
		}),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       idle,
	}
	ts.l.Attach(ts.srv)
	go ts.srv.Serve(ts.l)
	t.Cleanup(func() { ts.srv.Close() })
	return ts
}

// dial opens a raw connection to ts, over TLS when cfg is not nil (on loopback only).
func (ts *testServer) dial(t *testing.T, cfg *tls.Config) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	switch {
	case ts.network != nil && cfg != nil:
		t.Fatal("the tests dial TLS on loopback only")
	case ts.network != nil:
		c, err = ts.network.DialContext(t.Context(), "tcp", ts.addr)
	case cfg != nil:
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ts.addr, cfg)
	default:
		c, err = net.DialTimeout("tcp", ts.addr, 5*time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// responses reads every response on c until the server closes it; eof says whether it did.
func responses(t *testing.T, c net.Conn) (statuses []int, bodies []string, eof bool) {
	t.Helper()
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return statuses, bodies, errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		statuses, bodies = append(statuses, resp.StatusCode), append(bodies, string(b))
	}
}

// TestRefusesContentLengthWithTransferEncoding: over a raw socket, a request with both
// Content-Length and Transfer-Encoding gets 400 problem+json and the connection ends: the
// request pipelined behind it is never served. The requests before it are.
func TestRefusesContentLengthWithTransferEncoding(t *testing.T) {
	const (
		smuggler = "POST /charge HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
		get      = "GET /after HTTP/1.1\r\nHost: x\r\n\r\n"
		chunked  = "POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
	)
	ca := testpki.NewCA(t, "guard")
	serverTLS := &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "srv", "127.0.0.1").TLS(t)}}
	clientTLS := &tls.Config{RootCAs: ca.Pool()}
	for _, mode := range []struct {
		name           string
		server, client *tls.Config
	}{{"plain", nil, nil}, {"tls", serverTLS, clientTLS}} {
		t.Run(mode.name, func(t *testing.T) {
			for _, tc := range []struct {
				name     string
				stream   string
				statuses []int
				served   int64
			}{
				{"smuggler first", smuggler + get, []int{400}, 0},
				{"smuggler second", get + smuggler + get, []int{200, 400}, 1},
				{"headers in the other order, other case", "POST /c HTTP/1.1\r\nHost: x\r\ntransfer-encoding: Chunked\r\ncontent-length: 0\r\n\r\n0\r\n\r\n" + get, []int{400}, 0},
				{"HTTP/1.0 with Transfer-Encoding", "POST /c HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + get, []int{400}, 0},
				{"chunked alone is served", chunked + get, []int{200, 200}, 2},
			} {
				t.Run(tc.name, func(t *testing.T) {
					ts := startServer(t, Options{TLS: mode.server}, time.Minute, nil)
					c := ts.dial(t, mode.client)
					if _, err := io.WriteString(c, tc.stream); err != nil {
						t.Fatal(err)
					}
					if tc.served == 2 { // keep-alive: the server keeps the connection; end it
						time.AfterFunc(500*time.Millisecond, func() { c.SetReadDeadline(time.Now()) })
					}
					statuses, bodies, eof := responses(t, c)
					if fmt.Sprint(statuses) != fmt.Sprint(tc.statuses) {
						t.Fatalf("statuses %v, want %v (bodies %q)", statuses, tc.statuses, bodies)
					}
					if tc.statuses[len(tc.statuses)-1] == 400 {
						if !eof {
							t.Error("the connection stayed open after the 400")
						}
						if !strings.Contains(bodies[len(bodies)-1], "invalid-request") {
							t.Errorf("400 body %q, want the problem document", bodies[len(bodies)-1])
						}
					} else if bodies[0] != "POST /chunked hello" {
						t.Errorf("chunked request served as %q", bodies[0])
					}
					if got := ts.calls.Load(); got != tc.served {
						t.Errorf("the handler served %d requests, want %d", got, tc.served)
					}
				})
			}
		})
	}
}

// TestIdleConnectionsClosed: a keep-alive connection idle for the server's IdleTimeout is closed.
func TestIdleConnectionsClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startBubbleServer(t, Options{MaxConnections: 4}, 300*time.Millisecond, nil)
		c := ts.dial(t, nil)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		start := time.Now()
		statuses, _, eof := responses(t, c)
		if len(statuses) != 1 || !eof {
			t.Fatalf("statuses %v, closed %v", statuses, eof)
		}
		if d := time.Since(start); d != 300*time.Millisecond {
			t.Errorf("closed after %v, want the 300ms idle timeout", d)
		}
	})
}

// TestConnectionCap: with every slot held by an idle keep-alive connection, a new client is
// served at once and the connection idle longest closed for it; with every slot held by a
// request in progress, a new client waits for one to end. However many connect, the server
// holds no more connections (nor goroutines for them) than the cap.
func TestConnectionCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const cap = 8
		release := make(chan struct{})
		ts := startBubbleServer(t, Options{MaxConnections: cap}, time.Minute, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/block" {
				<-release
			}
			io.WriteString(w, "ok")
		})
		get := func(c net.Conn, path string) error {
			if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
				return err
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return err
			}
			resp.Body.Close()
			return nil
		}
		open := func(c net.Conn) bool { // still held by the server?
			c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			_, err := c.Read(make([]byte, 1))
			var ne net.Error
			return errors.As(err, &ne) && ne.Timeout()
		}

		runtime.GC()
		base := runtime.NumGoroutine()
		const clients = 20 * cap
		conns := make([]net.Conn, clients)
		for i := range conns {
			conns[i] = ts.dial(t, nil)
			if err := get(conns[i], "/"); err != nil {
				t.Fatalf("client %d of %d (cap %d) not served: %v", i+1, clients, cap, err)
			}
			time.Sleep(time.Millisecond) // the bubble's clock: each idles since a time of its own
		}
		synctest.Wait() // the closed connections' goroutines have ended
		if g := runtime.NumGoroutine(); g > base+2*cap+4 {
			t.Errorf("%d goroutines after %d idle clients, %d before: more than the cap of %d connections explains", g, clients, base, cap)
		}
		held := 0
		for i, c := range conns {
			if open(c) {
				held++
				// The longest idle goes first; the order the server marks connections idle in may
				// differ a little from the clients' order.
				if i < clients-2*cap {
					t.Errorf("client %d is still connected, though %d connected after it", i+1, clients-1-i)
				}
			}
		}
		if held != cap {
			t.Errorf("%d connections held, want the cap, %d", held, cap)
		}
		if n := ts.calls.Load(); n != clients {
			t.Errorf("%d requests served, want %d", n, clients)
		}

		// Every slot busy with a request in progress: the next client waits for one to end.
		var answered sync.WaitGroup
		for range cap {
			c := ts.dial(t, nil)
			// Each reads its answer: a connection of the in-process network buffers nothing,
			// so an answer nobody reads would keep its request busy.
			answered.Go(func() { _ = get(c, "/block") })
		}
		synctest.Wait() // every busy request is in the handler
		if n := ts.calls.Load(); n != clients+cap {
			t.Fatalf("%d requests reached the handler, want %d: every slot busy", n, clients+cap)
		}
		served := make(chan error, 1)
		go func() { served <- get(ts.dial(t, nil), "/") }()
		synctest.Wait() // the next client has gone as far as it can
		select {
		case err := <-served:
			t.Fatalf("a client was served beyond the cap while every connection was busy (err %v)", err)
		default:
		}
		close(release)
		select {
		case err := <-served:
			if err != nil {
				t.Fatalf("the waiting client, once a slot freed: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the waiting client was not served after the busy requests ended")
		}
		answered.Wait()
	})
}

// TestCertificateRotation: SetTLS serves the new certificate to new connections while an open
// connection goes on with the old one.
func TestCertificateRotation(t *testing.T) {
	ca := testpki.NewCA(t, "rotation")
	first := ca.Server(t, "srv", "127.0.0.1").TLS(t)
	ts := startServer(t, Options{TLS: &tls.Config{Certificates: []tls.Certificate{first}}}, time.Minute, nil)
	client := &tls.Config{RootCAs: ca.Pool()}
	serial := func(c net.Conn) string {
		return c.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	old := ts.dial(t, client)
	io.WriteString(old, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(old)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("before the rotation: %v", err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	wantOld := first.Leaf.SerialNumber.String()
	if serial(old) != wantOld {
		t.Fatalf("serial %s, want %s", serial(old), wantOld)
	}

	second := ca.Server(t, "srv", "127.0.0.1").TLS(t)
	if err := ts.l.SetTLS(&tls.Config{Certificates: []tls.Certificate{second}}); err != nil {
		t.Fatal(err)
	}
	if got := serial(ts.dial(t, client)); got != second.Leaf.SerialNumber.String() {
		t.Errorf("a new connection got serial %s, want the new %s", got, second.Leaf.SerialNumber)
	}
	io.WriteString(old, "GET /2 HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the connection opened before the rotation: %v", err)
	}
	if err := New(mustListen(t), Options{}).SetTLS(&tls.Config{}); err == nil {
		t.Error("SetTLS on a plain listener: no error")
	}
}

func mustListen(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestClientCertificateRequired: with ClientCAs and RequireAndVerifyClientCert, a client without
// a certificate is refused and one with a certificate the CA signed is served, with r.TLS.
func TestClientCertificateRequired(t *testing.T) {
	ca := testpki.NewCA(t, "mtls")
	other := testpki.NewCA(t, "stranger")
	ts := startServer(t, Options{TLS: &tls.Config{
		Certificates: []tls.Certificate{ca.Server(t, "srv", "127.0.0.1").TLS(t)},
		ClientCAs:    ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert,
	}}, time.Minute, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	})
	get := func(certs ...tls.Certificate) (string, error) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: certs}}}
		defer c.CloseIdleConnections()
		resp, err := c.Get("https://" + ts.addr + "/")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), nil
	}
	if _, err := get(); err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("without a client certificate: err %v, want the handshake refused", err)
	}
	if _, err := get(other.Client(t, "mallory").TLS(t)); err == nil {
		t.Error("a certificate of another CA was accepted")
	}
	if cn, err := get(ca.Client(t, "ops").TLS(t)); err != nil || cn != "ops" {
		t.Errorf("with a client certificate: %q, %v; want the handler to see CN ops", cn, err)
	}
}

// TestPlainHTTPToTLS: plain HTTP sent to a TLS listener gets a readable 400, as net/http says it.
func TestPlainHTTPToTLS(t *testing.T) {
	ca := testpki.NewCA(t, "plain")
	ts := startServer(t, Options{TLS: &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "srv", "127.0.0.1").TLS(t)}}}, time.Minute, nil)
	c := ts.dial(t, nil)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	b, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(b), "HTTP/1.0 400 Bad Request") || !strings.Contains(string(b), "HTTPS server") {
		t.Errorf("answer %q", b)
	}
}

func TestMain(m *testing.M) { os.Exit(m.Run()) }
