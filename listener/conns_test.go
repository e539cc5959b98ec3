package listener

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The cap on connections and each address's share of them, under a synctest bubble: which
// connection is closed to make room, and which never is.

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu      sync.Mutex
	closed  []string // reason/state, in order
	refused int
}

func (r *recorder) ConnectionClosedForRoom(reason, state string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = append(r.closed, reason+"/"+state)
}

func (r *recorder) ConnectionRefused() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refused++
}

func (r *recorder) seen() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.closed...), r.refused
}

// dialFrom opens a connection to ts from the client address from ("10.0.0.2:40001").
func (ts *testServer) dialFrom(t *testing.T, from string) net.Conn {
	t.Helper()
	c, err := ts.network.DialFrom(t.Context(), from, ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends a request head (and body) on c and reads the answer.
func roundTrip(c net.Conn, req string) (int, string, error) {
	if _, err := io.WriteString(c, req); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func get(c net.Conn, path string) (int, string, error) {
	return roundTrip(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
}

// mustServe sends GET path on c and fails unless it is answered 200 without the bubble's clock
// moving: without waiting for any other connection's timeout.
func mustServe(t *testing.T, c net.Conn, path string) {
	t.Helper()
	start := time.Now()
	status, _, err := get(c, path)
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", path, status, err)
	}
	if d := time.Since(start); d != 0 {
		t.Fatalf("GET %s was answered after %v of waiting; want at once", path, d)
	}
	time.Sleep(time.Millisecond) // the next connection's times differ from this one's
}

// closedByServer reports whether the server has closed c, without moving the bubble's clock.
// Use it only on a connection the server has nothing more to send on.
func closedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		done <- err
	}()
	synctest.Wait()
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("read on a connection the server should have nothing to send on: %v", err)
		}
		return true
	default:
	}
	c.SetReadDeadline(time.Now()) // the read ends at once, with a timeout
	<-done
	c.SetReadDeadline(time.Time{})
	return false
}

// checkOpen fails unless each named connection is in the state want says.
func checkOpen(t *testing.T, want map[string]bool, conns map[string]net.Conn) {
	t.Helper()
	for name, open := range want {
		if closed := closedByServer(t, conns[name]); closed == open {
			t.Errorf("%s: closed by the server %v, want %v", name, closed, !open)
		}
	}
}

// TestWaitingConnectionsClosedForRoom: at the cap, a new client is served at once, and the
// connection closed for it is, in this order: one that has not sent a whole request head
// within HeadGrace (a silent socket, a partial head of slowloris, on a new connection or a
// keep-alive one), oldest first; then an idle keep-alive connection, idle longest first; never
// one whose head is arriving within HeadGrace while another can go, and never one serving a
// request.
func TestWaitingConnectionsClosedForRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &recorder{}
		release := make(chan struct{})
		ts := startBubbleServer(t, Options{MaxConnections: 4, Observer: obs}, time.Minute, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/block" {
				<-release
			}
			io.WriteString(w, "ok")
		})
		conns := map[string]net.Conn{}

		conns["idle"] = ts.dial(t, nil)
		mustServe(t, conns["idle"], "/") // idle since now
		time.Sleep(2 * time.Second)
		conns["silent"] = ts.dial(t, nil) // never sends a byte
		time.Sleep(2 * time.Second)       // silent is 2s old: past the 1s grace
		conns["partial"] = ts.dial(t, nil)
		io.WriteString(conns["partial"], "GET / HTTP/1.1\r\nHo") // a head under way, within the grace
		busy := ts.dial(t, nil)
		busyDone := make(chan error, 1)
		go func() {
			status, _, err := get(busy, "/block")
			if err == nil && status != http.StatusOK {
				err = fmt.Errorf("status %d", status)
			}
			busyDone <- err
		}()
		synctest.Wait() // the listener is full: idle, silent, partial, busy

		conns["c1"] = ts.dial(t, nil)
		mustServe(t, conns["c1"], "/")
		checkOpen(t, map[string]bool{"silent": false, "idle": true, "partial": true}, conns)

		conns["c2"] = ts.dial(t, nil)
		mustServe(t, conns["c2"], "/")
		checkOpen(t, map[string]bool{"idle": false, "partial": true, "c1": true}, conns)

		time.Sleep(2 * time.Second) // partial's head is now 2s under way: slowloris
		conns["c3"] = ts.dial(t, nil)
		mustServe(t, conns["c3"], "/")
		checkOpen(t, map[string]bool{"partial": false, "c1": true, "c2": true}, conns)

		// Slowloris on a keep-alive connection: c2 starts its next head and sends no more.
		io.WriteString(conns["c2"], "GET / HTTP/1.1\r\nX-Slow: ")
		time.Sleep(2 * time.Second)
		conns["c4"] = ts.dial(t, nil)
		mustServe(t, conns["c4"], "/")
		checkOpen(t, map[string]bool{"c2": false, "c1": true, "c3": true}, conns)

		// c1 is idle longest, but its next request is arriving: c3, idle next longest, goes.
		io.WriteString(conns["c1"], "GET / HTTP/1.1\r\n")
		conns["c5"] = ts.dial(t, nil)
		mustServe(t, conns["c5"], "/")
		checkOpen(t, map[string]bool{"c3": false, "c4": true, "c5": true}, conns)
		// ... and c1's request is served.
		io.WriteString(conns["c1"], "Host: x\r\n\r\n")
		if resp, err := http.ReadResponse(bufio.NewReader(conns["c1"]), nil); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("c1's request, whose head arrived while c5 needed room: %v", err)
		}

		select {
		case err := <-busyDone:
			t.Fatalf("the request in progress ended while connections were closed for room: %v", err)
		default:
		}
		close(release)
		if err := <-busyDone; err != nil {
			t.Errorf("the request in progress: %v", err)
		}
		closed, refused := obs.seen()
		want := []string{"max_connections/awaiting_head", "max_connections/idle", "max_connections/awaiting_head", "max_connections/awaiting_head", "max_connections/idle"}
		if fmt.Sprint(closed) != fmt.Sprint(want) || refused != 0 {
			t.Errorf("observer told %v, %d refused; want %v, none refused", closed, refused, want)
		}
	})
}

// TestRequestsInProgressNeverClosedForRoom: connections serving a request, a slow body
// upload among them, are never closed to make room, however long a newcomer waits: a silent
// connection is closed for the first newcomer; the next waits until a request ends, and every
// request in progress is answered in full.
func TestRequestsInProgressNeverClosedForRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &recorder{}
		release := make(chan struct{})
		ts := startBubbleServer(t, Options{MaxConnections: 4, Observer: obs}, time.Minute, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/block" {
				<-release
			}
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s", r.URL.Path, body)
		})
		type result struct {
			body string
			err  error
		}
		inFlight := func(c net.Conn, req string) chan result {
			ch := make(chan result, 1)
			go func() {
				status, body, err := roundTrip(c, req)
				if err == nil && status != http.StatusOK {
					err = fmt.Errorf("status %d", status)
				}
				ch <- result{body, err}
			}()
			return ch
		}
		const block = "GET /block HTTP/1.1\r\nHost: x\r\n\r\n"
		blocked := []chan result{inFlight(ts.dial(t, nil), block), inFlight(ts.dial(t, nil), block)}
		// A slow upload: the head and half the body now, the rest much later.
		upload := ts.dial(t, nil)
		uploaded := inFlight(upload, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello")
		silent := ts.dial(t, nil)
		time.Sleep(2 * time.Second)
		synctest.Wait()

		// The first newcomer takes the silent connection's place, and serves a request too.
		blocked = append(blocked, inFlight(ts.dial(t, nil), block))
		synctest.Wait()
		if !closedByServer(t, silent) {
			t.Fatal("the silent connection was kept while a newcomer needed room")
		}
		// Every connection serves a request: the next newcomer waits.
		next := inFlight(ts.dial(t, nil), "GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
		time.Sleep(6 * time.Second) // past the 5s header timeout: no timeout makes room either
		synctest.Wait()
		select {
		case r := <-next:
			t.Fatalf("a newcomer was served while every connection served a request: %+v", r)
		default:
		}
		// The upload ends: its answer is written in full, then its connection, idle, goes.
		io.WriteString(upload, "world")
		if r := <-uploaded; r.err != nil || r.body != "/upload helloworld" {
			t.Fatalf("the slow upload: %+v", r)
		}
		if r := <-next; r.err != nil || r.body != "/next " {
			t.Fatalf("the waiting newcomer once a request ended: %+v", r)
		}
		close(release)
		for i, ch := range blocked {
			if r := <-ch; r.err != nil || r.body != "/block " {
				t.Errorf("request in progress %d: %+v", i+1, r)
			}
		}
		closed, _ := obs.seen()
		if want := []string{"max_connections/awaiting_head", "max_connections/idle"}; fmt.Sprint(closed) != fmt.Sprint(want) {
			t.Errorf("closed for room: %v, want %v", closed, want)
		}
	})
}

// lockedBuffer is a log destination the test reads while the listener writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) lines(msg string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(l, `"msg":"`+msg+`"`) {
			out = append(out, l)
		}
	}
	return out
}

// TestAddressShare: one client address holds at most MaxConnectionsPerAddress connections.
// When it opens another, its own connection waiting longest without a request is closed for
// it, nobody else's; when every one of its connections serves a request, the new one is closed
// at once, before anything is read, counted each time and logged once in a while. The rest of
// the listener stays for the other addresses, which are served at once.
func TestAddressShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &recorder{}
		logs := &lockedBuffer{}
		release := make(chan struct{})
		ts := startBubbleServer(t, Options{
			MaxConnections: 9, MaxConnectionsPerAddress: 3, Observer: obs,
			Log: slog.New(slog.NewJSONHandler(logs, nil)),
		}, time.Minute, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/block" {
				<-release
			}
			io.WriteString(w, "ok")
		})
		from := func(host string, port int) string { return fmt.Sprintf("%s:%d", host, 40000+port) }
		const a = "10.0.0.2"
		conns := map[string]net.Conn{}
		others := ts.dialFrom(t, from("10.0.0.9", 1)) // another address's silent connection, older than all of A's
		time.Sleep(time.Second)
		for i := 1; i <= 3; i++ {
			conns[fmt.Sprint("a", i)] = ts.dialFrom(t, from(a, i)) // silent
			time.Sleep(time.Second)
		}
		conns["a4"] = ts.dialFrom(t, from(a, 4))
		mustServe(t, conns["a4"], "/")
		checkOpen(t, map[string]bool{"a1": false, "a2": true, "a3": true}, conns)
		if closedByServer(t, others) {
			t.Fatal("another address's connection was closed for A's")
		}
		others.Close()

		// A's three connections serve requests now.
		var blocked sync.WaitGroup
		for _, name := range []string{"a2", "a3", "a4"} {
			c := conns[name]
			blocked.Go(func() {
				if status, _, err := get(c, "/block"); err != nil || status != http.StatusOK {
					t.Errorf("%s's request in progress: %d, %v", name, status, err)
				}
			})
		}
		synctest.Wait()
		calls := ts.calls.Load()
		for i := 5; i < 25; i++ {
			c := ts.dialFrom(t, from(a, i))
			if !closedByServer(t, c) {
				t.Fatalf("A's connection %d, beyond its share of 3 all serving requests, was kept", i)
			}
		}
		if got := ts.calls.Load(); got != calls {
			t.Errorf("the handler saw %d requests on refused connections", got-calls)
		}
		// The other six places are for the others, each served at once.
		for _, host := range []string{"10.0.0.3", "10.0.0.4"} {
			for i := 1; i <= 3; i++ {
				mustServe(t, ts.dialFrom(t, from(host, i)), "/")
			}
		}
		closed, refused := obs.seen()
		if fmt.Sprint(closed) != "[address_share/awaiting_head]" || refused != 20 {
			t.Errorf("observer told closed %v, refused %d; want [address_share/awaiting_head], 20", closed, refused)
		}
		if lines := logs.lines("listener.connection_refused"); len(lines) != 1 ||
			!strings.Contains(lines[0], `"client_address":"10.0.0.2:40005"`) || !strings.Contains(lines[0], `"refused_since_last_line":1`) {
			t.Errorf("after 20 refusals within %v, log lines %q; want one, for the first", logInterval, lines)
		}
		time.Sleep(logInterval)
		if !closedByServer(t, ts.dialFrom(t, from(a, 25))) {
			t.Fatal("A's 25th connection was kept")
		}
		if lines := logs.lines("listener.connection_refused"); len(lines) != 2 || !strings.Contains(lines[1], `"refused_since_last_line":20`) {
			t.Errorf("a refusal %v later: log lines %q; want a second, counting the 19 unlogged and itself", logInterval, lines)
		}

		// Once A's requests end, A's next connection takes the place of its own idle one.
		close(release)
		blocked.Wait()
		synctest.Wait()
		mustServe(t, ts.dialFrom(t, from(a, 26)), "/")
		closed, refused = obs.seen()
		if fmt.Sprint(closed) != "[address_share/awaiting_head address_share/idle]" || refused != 21 {
			t.Errorf("observer told closed %v, refused %d; want an address_share/idle closed, 21 refused", closed, refused)
		}
		if n := ts.l.Open(); n != 9 {
			t.Errorf("%d connections open, want the cap, 9", n)
		}
	})
}

// TestAddressKey: connections count against the client's IPv4 address, or its IPv6 /64.
func TestAddressKey(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"10.0.0.2:40000", "10.0.0.2"},
		{"[::ffff:10.0.0.2]:40000", "10.0.0.2"},
		{"[2001:db8:1:2:aaaa::1]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:bbbb::9%eth0]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:443", "2001:db8:1:3::/64"},
		{"pipe", "pipe"},
	} {
		if got := addressKey(fakeAddr(tc.addr)); got != tc.want {
			t.Errorf("addressKey(%s) = %s, want %s", tc.addr, got, tc.want)
		}
	}
}

type fakeAddr string

func (a fakeAddr) Network() string { return "tcp" }
func (a fakeAddr) String() string  { return string(a) }
