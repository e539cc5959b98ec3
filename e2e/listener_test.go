package e2e

// The listeners of a real payrouter: HTTPS, a certificate rotated under load, mutual TLS on the
// admin listener, the connection cap and idle timeout, and the refusal of a request with both
// Content-Length and Transfer-Encoding.

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/payrouter/payrouter/internal/testpki"
)

// listenerGateway is one simulated gateway, enough for charges.
var listenerGateway = gatewayConfig{Timeout: 2 * time.Second, MaxConcurrent: 50, ConsecutiveFailures: 5, Cooldown: 30 * time.Second}

// listenerSetup is what a test adds to the configuration and how its clients connect.
type listenerSetup struct {
	extra      string      // top-level YAML appended to the configuration
	storefront *tls.Config // the storefront client's TLS; nil: plain HTTP
	admin      *tls.Config // the admin client's TLS; nil: plain HTTP
}

// startListenerPayrouter starts gatewaysim and a payrouter whose configuration ends with
// setup.extra, and waits for /healthz on both listeners over setup's TLS.
func startListenerPayrouter(t *testing.T, setup listenerSetup) (*sims, *instance) {
	t.Helper()
	s := startSims(t)
	cfg := routerConfig{
		RequestTimeout: 5 * time.Second,
		Gateways:       map[string]gatewayConfig{"paywell": listenerGateway},
		Routes:         []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell"}}},
	}
	in := startConfigured(t, launch{storefrontTLS: setup.storefront, adminTLS: setup.admin}, func(listen, admin string) string {
		return cfg.yaml(listen, admin, s) + setup.extra
	})
	return s, in
}

func tlsKeys(key string, p testpki.Pair, extra string) string {
	return fmt.Sprintf("%s:\n  cert_file: %q\n  key_file: %q\n%s", key, p.CertFile, p.KeyFile, extra)
}

// servedSerial opens a new TLS connection to addr (host:port) and returns the serial number of
// the certificate the server presents.
func servedSerial(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func serialOf(t *testing.T, p testpki.Pair) string {
	t.Helper()
	return p.TLS(t).Leaf.SerialNumber.String()
}

// TestChargeOverHTTPS: with tls set, a charge, /healthz and /readyz work over HTTPS, and plain
// HTTP to the same port is told it spoke the wrong protocol.
func TestChargeOverHTTPS(t *testing.T) {
	skipIfShort(t)
	ca := testpki.NewCA(t, "https")
	srv := ca.Server(t, "storefront", "127.0.0.1")
	client := &tls.Config{RootCAs: ca.Pool()}
	_, pr := startListenerPayrouter(t, listenerSetup{extra: tlsKeys("tls", srv, "  min_version: \"1.3\"\n"), storefront: client})

	r, a := pr.mustCharge(t, 1250, "USD", "tok_visa")
	if r.status != http.StatusCreated || a.chargeID() == "" {
		t.Fatalf("charge over HTTPS: %s", r)
	}
	if got, err := pr.getCharge(a.chargeID()); err != nil || got.chargeID() != a.chargeID() {
		t.Errorf("GET /charge/%s over HTTPS: %+v, %v", a.chargeID(), got, err)
	}
	if r, err := send(pr.client, "GET", pr.url+"/readyz", nil); err != nil || r.status != http.StatusOK {
		t.Errorf("/readyz over HTTPS: %s, %v", r, err)
	}
	// TLS 1.2 is below this listener's min_version: the handshake fails.
	if _, err := servedSerial(strings.TrimPrefix(pr.url, "https://"), &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12}); err == nil {
		t.Error("a TLS 1.2 client was accepted by a listener with min_version 1.3")
	}
	plain, err := send(&http.Client{Timeout: 5 * time.Second}, "GET", strings.Replace(pr.url, "https://", "http://", 1)+"/healthz", nil)
	if err != nil || plain.status != http.StatusBadRequest || !strings.Contains(string(plain.body), "HTTPS") {
		t.Errorf("plain HTTP to the HTTPS listener: %s, %v; want 400 saying so", plain, err)
	}
}

// TestCertificateRotatedUnderLoad: while charges run over HTTPS, on connections kept alive and
// on connections opened for each charge, the certificate and key files are replaced by a new
// certificate on a new key and payrouter reloads, by SIGHUP and by POST /admin/reload: no charge
// fails, and a new connection is served the new certificate. A rotation to broken files is
// refused and the certificate in use stays.
func TestCertificateRotatedUnderLoad(t *testing.T) {
	skipIfShort(t)
	ca := testpki.NewCA(t, "rotation")
	pair := ca.Server(t, "storefront", "127.0.0.1")
	client := &tls.Config{RootCAs: ca.Pool()}
	_, pr := startListenerPayrouter(t, listenerSetup{extra: tlsKeys("tls", pair, ""), storefront: client})
	addr := strings.TrimPrefix(pr.url, "https://")

	// The load: four clients on kept-alive connections, four opening a connection per charge.
	fresh := &instance{url: pr.url, client: &http.Client{Timeout: 30 * time.Second, Transport: func() *http.Transport {
		tr := tlsTransport(client, 0)
		tr.DisableKeepAlives = true
		return tr
	}()}}
	var (
		stop      atomic.Bool
		wg        sync.WaitGroup
		ok, total atomic.Int64
		mu        sync.Mutex
		failures  []string
	)
	for i := range 8 {
		in := pr
		if i%2 == 1 {
			in = fresh
		}
		wg.Go(func() {
			for !stop.Load() {
				total.Add(1)
				r, err := in.charge(1000, "USD", "tok_visa")
				if err == nil && r.status == http.StatusCreated {
					ok.Add(1)
					continue
				}
				mu.Lock()
				if len(failures) < 10 {
					failures = append(failures, fmt.Sprintf("%v %s", err, r))
				}
				mu.Unlock()
			}
		})
	}
	defer func() { stop.Store(true); wg.Wait() }()
	waitCharges := func(n int64) {
		eventually(t, 20*time.Second, fmt.Sprintf("%d more charges", n), func() (bool, string) {
			return ok.Load() >= n, fmt.Sprintf("%d succeeded", ok.Load())
		})
	}
	waitCharges(20)

	rotate := func(how string, reload func()) {
		t.Helper()
		before := ok.Load()
		next := ca.Server(t, "storefront", "127.0.0.1") // the same files, a new key
		want := serialOf(t, next)
		reload()
		eventually(t, 10*time.Second, how+": a new connection sees the new certificate", func() (bool, string) {
			got, err := servedSerial(addr, client)
			return err == nil && got == want, fmt.Sprintf("serial %s (%v), want %s", got, err, want)
		})
		waitCharges(before + 40)
	}
	rotate("SIGHUP", func() {
		if err := pr.proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	})
	rotate("POST /admin/reload", func() {
		r, err := send(pr.probeClient, "POST", pr.adminURL+"/admin/reload", nil, "Authorization", "Bearer "+adminToken)
		if err != nil || r.status != http.StatusOK {
			t.Fatalf("POST /admin/reload: %s, %v", r, err)
		}
	})

	// Broken files: the reload is refused, naming the file, and the certificate stays.
	inUse, err := servedSerial(addr, client)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pair.CertFile, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := send(pr.probeClient, "POST", pr.adminURL+"/admin/reload", nil, "Authorization", "Bearer "+adminToken)
	if err != nil || r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "tls") {
		t.Errorf("reload with a broken certificate file: %s, %v; want 422 naming tls", r, err)
	}
	before := ok.Load()
	waitCharges(before + 20)
	if got, err := servedSerial(addr, client); err != nil || got != inUse {
		t.Errorf("after the refused reload: serial %s (%v), want the one in use, %s", got, err, inUse)
	}

	stop.Store(true)
	wg.Wait()
	if len(failures) > 0 || ok.Load() != total.Load() {
		t.Fatalf("%d of %d charges failed during the rotations; first: %q", total.Load()-ok.Load(), total.Load(), failures)
	}
	t.Logf("%d charges over HTTPS, none failed, across two rotations and one refused", total.Load())
	pr.proc.waitLogged(`"certificates_reloaded":["listen"]`, 1)
	if !strings.Contains(pr.proc.out.String(), `"certificates_reloaded":["listen"]`) {
		t.Error("no config.reloaded line says the storefront's certificates were reloaded")
	}
}

// TestAdminListenerRequiresClientCertificate: with admin_tls.client_ca_file, a client without a
// certificate cannot complete the handshake, and one with a certificate the CA signed reads
// /admin/breakers.
func TestAdminListenerRequiresClientCertificate(t *testing.T) {
	skipIfShort(t)
	ca := testpki.NewCA(t, "ops")
	srv := ca.Server(t, "admin", "127.0.0.1")
	withCert := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.Client(t, "operator").TLS(t)}}
	_, pr := startListenerPayrouter(t, listenerSetup{
		extra: tlsKeys("admin_tls", srv, fmt.Sprintf("  client_ca_file: %q\n", ca.CertFile)),
		admin: withCert,
	})
	if _, err := pr.breakers(); err != nil {
		t.Fatalf("/admin/breakers with a client certificate: %v", err)
	}
	without := &http.Client{Timeout: 5 * time.Second, Transport: tlsTransport(&tls.Config{RootCAs: ca.Pool()}, 0)}
	r, err := send(without, "GET", pr.adminURL+"/admin/breakers", nil, "Authorization", "Bearer "+adminToken)
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("without a client certificate: %s, %v; want the handshake refused", r, err)
	}
	eventually(t, 5*time.Second, "the refused handshake logged", func() (bool, string) {
		return strings.Contains(pr.proc.out.String(), `"msg":"tls.handshake_failed","listener":"admin_listen"`), "no tls.handshake_failed line"
	})
}

// TestSmuggledRequestRefused: over a raw socket, a charge with both Content-Length and
// Transfer-Encoding, followed by a second charge pipelined on the same connection, gets one
// 400 invalid-request and the connection closed: the second is never served, and no gateway
// is called.
func TestSmuggledRequestRefused(t *testing.T) {
	skipIfShort(t)
	s, pr := startListenerPayrouter(t, listenerSetup{})
	calls := s.paywell.stats(t).Requests
	body := string(chargeBody(1000, "USD", "tok_visa", ""))
	head := "POST /charge HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + apiKey + "\r\nContent-Type: application/json\r\n"
	smuggled := head + "Idempotency-Key: e2e-smuggled-1\r\n" + fmt.Sprintf("Content-Length: %d\r\n", len(body)) +
		"Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	second := head + "Idempotency-Key: e2e-smuggled-2\r\n" + fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)

	c, err := net.DialTimeout("tcp", strings.TrimPrefix(pr.url, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, smuggled+second); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(b), `"/problems/invalid-request"`) {
		t.Errorf("answer %d %s %s; want 400 problem+json invalid-request", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	if extra, err := http.ReadResponse(br, nil); err == nil {
		t.Errorf("a second answer on the connection: %d; the pipelined charge was served", extra.StatusCode)
	} else if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("after the 400: %v, want the connection closed (EOF)", err)
	}
	if got := s.paywell.stats(t).Requests; got != calls {
		t.Errorf("the gateway received %d calls, want none", got-calls)
	}
	pr.proc.waitLogged(`"msg":"http.framing_refused"`, 1)
	if !strings.Contains(pr.proc.out.String(), `"msg":"http.framing_refused"`) {
		t.Error("no http.framing_refused log line")
	}
	// The listener still serves well-framed charges.
	if r, _ := pr.mustCharge(t, 1000, "USD", "tok_visa"); r.status != http.StatusCreated {
		t.Errorf("a charge after the refusal: %s", r)
	}
}

// TestIdleConnectionsBounded: far more idle keep-alive connections than max_connections leave
// the process holding no more than the cap (its goroutines and open files stay bounded), idle
// ones are closed after idle_timeout, and a new client is still served.
func TestIdleConnectionsBounded(t *testing.T) {
	skipIfShort(t)
	const (
		maxConns = 16
		clients  = 300
		idle     = 2 * time.Second
	)
	// All the clients come from one address: no limit per address, so that they meet the cap.
	_, pr := startListenerPayrouter(t, listenerSetup{extra: fmt.Sprintf("max_connections: %d\nmax_connections_per_address: 0\nidle_timeout: %s\n", maxConns, idle)})
	gauge := func(name string) float64 {
		t.Helper()
		m, err := pr.metrics()
		if err != nil {
			t.Fatal(err)
		}
		v, found := m.value(name)
		if !found {
			t.Fatalf("no %s in /metrics", name)
		}
		return v
	}
	pr.client.CloseIdleConnections()
	baseGoroutines, baseFDs := gauge("go_goroutines"), gauge("process_open_fds")

	addr := strings.TrimPrefix(pr.url, "http://")
	conns := make([]net.Conn, 0, clients)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range clients {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("client %d: %v", i+1, err)
		}
		conns = append(conns, c)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("client %d of %d not served (cap %d): %v", i+1, clients, maxConns, err)
		}
		resp.Body.Close()
	}
	goroutines, fds := gauge("go_goroutines"), gauge("process_open_fds")
	t.Logf("after %d idle clients: %v goroutines (%v before), %v open files (%v before)", clients, goroutines, baseGoroutines, fds, baseFDs)
	if goroutines > baseGoroutines+2*maxConns+10 {
		t.Errorf("%v goroutines, %v before %d clients: more than a cap of %d connections explains", goroutines, baseGoroutines, clients, maxConns)
	}
	if fds > baseFDs+maxConns+10 {
		t.Errorf("%v open files, %v before: more than a cap of %d connections explains", fds, baseFDs, maxConns)
	}
	open := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		return errors.As(err, &ne) && ne.Timeout()
	}
	held := 0
	for _, c := range conns {
		if open(c) {
			held++
		}
	}
	if held > maxConns {
		t.Errorf("%d of %d connections still open, want at most %d", held, clients, maxConns)
	}

	// idle_timeout later, the process holds none of them.
	time.Sleep(idle + 500*time.Millisecond)
	held = 0
	for _, c := range conns[len(conns)-maxConns:] {
		if open(c) {
			held++
		}
	}
	if held > 0 {
		t.Errorf("%d connections still open %v after they went idle, with idle_timeout %v", held, idle+500*time.Millisecond, idle)
	}
	if r, _ := pr.mustCharge(t, 1000, "USD", "tok_visa"); r.status != http.StatusCreated {
		t.Errorf("a new client after the flood: %s", r)
	}
}
