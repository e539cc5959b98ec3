package e2e

// Connections held against a real payrouter: silent sockets and partial heads are closed to
// make room for clients with a request, a client address holds only its share of a listener,
// and neither slows a request from anyone else (docs/limits.md, Connections).

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// answeredWithin is the bound on a request made while sockets are held: generous for a loaded
// test machine, and far below the 5 s header timeout a request used to wait for.
const answeredWithin = time.Second

// holdSockets opens n connections to addr from the client address from (an address of
// 127.0.0.0/8, which is all this host's own), sends nothing on them (or head, when given) and
// keeps them open until the test ends or release is called.
func holdSockets(t *testing.T, addr, from string, n int, head string) (release func()) {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	conns := make([]net.Conn, 0, n)
	release = func() {
		for _, c := range conns {
			c.Close()
		}
		conns = conns[:0]
	}
	t.Cleanup(release)
	for i := range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("socket %d of %d from %s: %v", i+1, n, from, err)
		}
		conns = append(conns, c)
		if head != "" {
			if _, err := io.WriteString(c, head); err != nil {
				t.Fatalf("socket %d of %d from %s: %v", i+1, n, from, err)
			}
		}
	}
	return release
}

// freshClient makes every request on a new connection: what a newcomer to a full listener is.
func freshClient() *http.Client {
	tr := newTransport(0)
	tr.DisableKeepAlives = true
	return &http.Client{Timeout: 15 * time.Second, Transport: tr}
}

// counter reads one series of /metrics (0 when it has none yet).
func counter(t *testing.T, in *instance, name string, labels ...string) float64 {
	t.Helper()
	m, err := in.metrics()
	if err != nil {
		t.Fatal(err)
	}
	v, _ := m.value(name, labels...)
	return v
}

// waitOpen waits until the listener holds at most n connections: the sockets a step closed
// have been closed by payrouter too.
func waitOpen(t *testing.T, in *instance, listener string, n float64) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%s holds at most %v connections", listener, n), func() (bool, string) {
		v := counter(t, in, "payrouter_connections_open", "listener", listener)
		return v <= n, fmt.Sprintf("%v open", v)
	})
}

// TestSilentSocketsLeaveRoom: with 100 silent sockets held on the admin listener, from ten
// addresses (filling it: 64 connections) or from one (which holds only its share, 16), an admin
// request on a new connection is answered well under a second; so is a charge with a tenth of
// max_connections held silent from one address, and with the listener filled to its cap with
// silent sockets and slowloris' partial heads. It used to wait for the 5 s header timeout.
func TestSilentSocketsLeaveRoom(t *testing.T) {
	skipIfShort(t)
	const maxConns = 40 // the storefront's; its share per address is a quarter: 10
	_, pr := startListenerPayrouter(t, listenerSetup{extra: fmt.Sprintf("max_connections: %d\n", maxConns)})
	adminAddr := strings.TrimPrefix(pr.adminURL, "http://")
	storeAddr := strings.TrimPrefix(pr.url, "http://")
	closedForRoom := func(listener, reason string) float64 {
		return counter(t, pr, "payrouter_connections_closed_for_room_total", "listener", listener, "reason", reason, "state", "awaiting_head")
	}
	adminRequest := func(what string) {
		t.Helper()
		r, err := send(freshClient(), "GET", pr.adminURL+"/admin/breakers", nil, "Authorization", "Bearer "+adminToken)
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("%s: GET /admin/breakers: %s, %v", what, r, err)
		}
		t.Logf("%s: GET /admin/breakers on a new connection answered in %v", what, r.elapsed.Round(time.Millisecond))
		if r.elapsed > answeredWithin {
			t.Errorf("%s: GET /admin/breakers took %v; want well under a second (bound %v)", what, r.elapsed, answeredWithin)
		}
	}
	charge := func(what string) {
		t.Helper()
		in := &instance{url: pr.url, client: freshClient()}
		r, err := in.charge(1000, "USD", "tok_visa")
		if err != nil || r.status != http.StatusCreated {
			t.Fatalf("%s: charge: %s, %v", what, r, err)
		}
		t.Logf("%s: a charge on a new connection answered in %v", what, r.elapsed.Round(time.Millisecond))
		if r.elapsed > answeredWithin {
			t.Errorf("%s: the charge took %v; want well under a second (bound %v)", what, r.elapsed, answeredWithin)
		}
	}

	// 100 silent sockets from ten addresses, each under its share: the admin listener is full
	// (64) and 36 of them were closed for later ones.
	before := closedForRoom("admin", "max_connections")
	var releases []func()
	for i := range 10 {
		releases = append(releases, holdSockets(t, adminAddr, fmt.Sprintf("127.0.0.%d", 2+i), 10, ""))
	}
	adminRequest("100 silent sockets from 10 addresses")
	if got := closedForRoom("admin", "max_connections") - before; got < 100-64 {
		t.Errorf("%v silent admin connections closed for room; want at least %d (100 held, 64 room)", got, 100-64)
	}
	if open := counter(t, pr, "payrouter_connections_open", "listener", "admin"); open > 64 {
		t.Errorf("the admin listener holds %v connections, more than admin_max_connections (64)", open)
	}
	for _, release := range releases {
		release()
	}
	waitOpen(t, pr, "admin", 2)

	// 100 silent sockets from one address: it holds 16, its own oldest closed for its newer.
	holdSockets(t, adminAddr, "127.0.0.12", 100, "")
	adminRequest("100 silent sockets from one address")
	if got := closedForRoom("admin", "address_share"); got < 100-16 {
		t.Errorf("%v of one address's silent admin connections closed for its others; want at least %d (100 held, a share of 16)", got, 100-16)
	}

	// The storefront: a tenth of max_connections silent from one address, then the rest of the
	// listener filled with silent sockets and partial heads from four others.
	holdSockets(t, storeAddr, "127.0.0.2", maxConns/10, "")
	charge(fmt.Sprintf("%d silent sockets (a tenth of max_connections)", maxConns/10))
	before = closedForRoom("storefront", "max_connections")
	if before != 0 {
		t.Errorf("%v storefront connections closed for room with %d of %d held", before, maxConns/10, maxConns)
	}
	for i := range 4 {
		head := ""
		if i%2 == 1 {
			head = "POST /charge HTTP/1.1\r\nHost: x\r\nAuthorization: Bea" // slowloris: never ends
		}
		holdSockets(t, storeAddr, fmt.Sprintf("127.0.0.%d", 3+i), 9, head)
	}
	charge(fmt.Sprintf("%d silent sockets and partial heads (max_connections)", maxConns))
	if got := closedForRoom("storefront", "max_connections") - before; got < 1 {
		t.Errorf("no storefront connection was closed for room, with %d held and a charge on a new one", maxConns)
	}
}

// TestAddressHoldsItsShare: one client address holding its share of the storefront listener
// (10 of 40), every connection busy with a request whose body is slow to come, cannot take the
// rest: its 30 further connections are closed at once, before anything is read, counted and
// logged once, not 30 times; three other addresses hold the other 30 connections, every
// request on them served, and a charge on a new connection is answered well under a second.
func TestAddressHoldsItsShare(t *testing.T) {
	skipIfShort(t)
	const (
		maxConns = 40
		share    = maxConns / 4 // the default: a quarter
	)
	_, pr := startListenerPayrouter(t, listenerSetup{extra: fmt.Sprintf("max_connections: %d\n", maxConns)})
	storeAddr := strings.TrimPrefix(pr.url, "http://")

	// A's share of connections, each a charge whose head is sent and whose body never comes.
	slowCharge := "POST /charge HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + apiKey + "\r\n" +
		"Content-Type: application/json\r\nIdempotency-Key: e2e-share-%d\r\nContent-Length: 200\r\n\r\n{\"amount\":"
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	for i := range share {
		c, err := d.Dial("tcp", storeAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := fmt.Fprintf(c, slowCharge, i); err != nil {
			t.Fatal(err)
		}
	}
	// Let payrouter read those heads: each connection then serves a request.
	eventually(t, 5*time.Second, "A's connections counted", func() (bool, string) {
		v := counter(t, pr, "payrouter_connections_open", "listener", "storefront")
		return v >= share, fmt.Sprintf("%v open", v)
	})
	time.Sleep(200 * time.Millisecond)

	refusedBefore := counter(t, pr, "payrouter_connections_refused_total", "listener", "storefront")
	for i := range maxConns - share {
		c, err := d.Dial("tcp", storeAddr)
		if err != nil {
			t.Fatalf("A's connection %d beyond its share: %v", i+1, err)
		}
		// Well before the 5 s header timeout, which would close a connection kept silent.
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		start := time.Now()
		n, err := c.Read(make([]byte, 1))
		c.Close()
		if n != 0 || !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("A's connection %d beyond its share: read %d bytes, %v after %v; want it closed at once", i+1, n, err, time.Since(start))
		}
	}
	if got := counter(t, pr, "payrouter_connections_refused_total", "listener", "storefront") - refusedBefore; got != maxConns-share {
		t.Errorf("payrouter_connections_refused_total rose by %v; want %d", got, maxConns-share)
	}
	pr.proc.waitLogged(`"msg":"listener.connection_refused"`, 1)
	lines := strings.Count(pr.proc.out.String(), `"msg":"listener.connection_refused"`)
	if lines < 1 || lines > 2 {
		t.Errorf("%d listener.connection_refused lines for %d refusals; want one (at most one every 10 s)", lines, maxConns-share)
	}

	// The rest of the listener is the others': three addresses hold ten connections each at
	// once, every one served.
	for i := range 3 {
		from := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.0.%d", 3+i))}}
		for j := range share {
			c, err := from.Dial("tcp", storeAddr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("address 127.0.0.%d, connection %d, beside A's share: %v", 3+i, j+1, err)
			}
			resp.Body.Close()
		}
	}
	// The listener is full: A's busy share and the others' idle connections. A charge on a new
	// connection takes an idle one's place, never one of A's requests in progress.
	in := &instance{url: pr.url, client: freshClient()}
	r, err := in.charge(1000, "USD", "tok_visa")
	if err != nil || r.status != http.StatusCreated {
		t.Fatalf("a charge beside A's share: %s, %v", r, err)
	}
	t.Logf("with one address holding its share of %d busy connections and refused %d more, a charge on a new connection answered in %v",
		share, maxConns-share, r.elapsed.Round(time.Millisecond))
	if r.elapsed > answeredWithin {
		t.Errorf("the charge took %v; want well under a second (bound %v)", r.elapsed, answeredWithin)
	}
}
