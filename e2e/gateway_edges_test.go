package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter/internal/testpki"
)

// The gateway client's edges (issue 12, item 2): a gateway that redirects is never followed, and
// gateways reached over HTTPS with mutual TLS, against real payrouter and gatewaysim processes.

// gatewayYAML is one gateway of a configuration a test here writes; extra is more of its keys,
// indented as they are.
func gatewayYAML(name, baseURL, extra string) string {
	return fmt.Sprintf("  %s:\n    kind: %s\n    base_url: %q\n    credentials: {api_key: \"%s_e2e_key\"}\n    timeout: 2s\n    max_concurrent: 4\n%s",
		name, name, baseURL, name, extra)
}

// servePayrouterWith writes a configuration of the given gateways (gatewayYAML) and routes
// and starts `payrouter serve` on it, on free ports.
func servePayrouterWith(t *testing.T, name, gatewaysYAML, routesYAML string) *instance {
	t.Helper()
	return startConfigured(t, launch{name: name}, func(listen, admin string) string {
		return fmt.Sprintf("listen: %q\nadmin_listen: %q\nrequest_timeout: 5s\nauth:\n  api_keys: [%q]\n  admin_token: %q\ngateways:\n%sroutes:\n%sfallbacks:\n  charge: fail\n",
			listen, admin, apiKey, adminToken, gatewaysYAML, routesYAML)
	})
}

// seen is what a listener in the test received.
type seen struct {
	mu       sync.Mutex
	requests []string // "METHOD path, credential headers: ..."
}

func (s *seen) add(r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, fmt.Sprintf("%s %s (Authorization %q, X-Api-Key %q, body %d bytes)",
		r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), len(body)))
}

func (s *seen) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// TestRedirectingGatewayIsNeverFollowed is the finding "the gateway client follows redirects to
// any host": Paywell's base_url answers every request with 307 to a second listener. payrouter
// must not re-send there (no charge, no credential, no card token), must not answer 201, and must
// not fail the charge over to Ding while Paywell may have processed it: the redirect is unknown,
// the look-up at Paywell is redirected too, so the charge answers 202 processing.
func TestRedirectingGatewayIsNeverFollowed(t *testing.T) {
	skipIfShort(t)
	s := startSims(t)
	var second, first seen
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		second.add(r)
		// What a hostile host would answer: an approval, so that a followed redirect shows.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"id":"ch_stolen","object":"charge","status":"succeeded","captured":true,"amount":1999}`)
	}))
	t.Cleanup(elsewhere.Close)
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first.add(r)
		http.Redirect(w, r, elsewhere.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirecting.Close)

	in := servePayrouterWith(t, "payrouter",
		gatewayYAML("paywell", redirecting.URL, "")+gatewayYAML("ding", s.ding.url, ""),
		"  - name: default\n    gateways: [paywell, ding]\n")

	r, a := in.mustCharge(t, 1999, "USD", "tok_visa")
	if r.status == http.StatusCreated {
		t.Fatalf("a charge through a redirecting gateway was answered 201: %s", r)
	}
	if r.status != http.StatusAccepted || a.ChargeStatus != "processing" {
		t.Errorf("charge: want 202 processing (Paywell may have charged: it is looked up, not sent elsewhere): %s", r)
	}
	if len(a.Attempts) != 1 || a.Attempts[0].Gateway != "paywell" || a.Attempts[0].Outcome != "unknown" {
		t.Errorf("attempts %s, want paywell/unknown alone", describe(a.Attempts))
	}
	if len(first.list()) == 0 {
		t.Fatal("the redirecting gateway was never called: the test shows nothing")
	}
	if got := s.ding.stats(t).Requests; got != 0 {
		t.Errorf("Ding received %d requests: the charge failed over while Paywell may have processed it", got)
	}
	// The instance goes on looking the charge up (the reconciler); none of it may go elsewhere.
	got, err := in.getCharge(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ChargeStatus == "succeeded" {
		t.Errorf("the charge shows as succeeded: %+v", got)
	}
	if list := second.list(); len(list) != 0 {
		t.Errorf("the address in Location received %d requests: %q", len(list), list)
	}
	if !strings.Contains(in.proc.out.String(), "payrouter.serving") {
		t.Errorf("payrouter did not log payrouter.serving")
	}
}

// tlsSims is a gatewaysim serving HTTPS with mutual TLS: its gateways' URLs and a client holding
// a certificate it accepts, for the control API.
type tlsSims struct {
	proc    *process
	paywell *sim
}

// startTLSSims starts gatewaysim with -tls-cert, -tls-key and -tls-client-ca (the CA's), on free
// ports, and waits for Paywell's /health over mutual TLS.
func startTLSSims(t *testing.T, ca *testpki.CA) *tlsSims {
	t.Helper()
	server := ca.Server(t, "gatewaysim", "127.0.0.1")
	control := ca.Client(t, "e2e-control")
	tr := newTransport(2)
	tr.TLSClientConfig = &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{control.TLS(t)}}
	client := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	for attempt := 1; ; attempt++ {
		ports := freePorts(t, 3)
		s := &tlsSims{paywell: &sim{name: "paywell", url: "https://" + loopback(ports[0]), client: client}}
		s.proc = startProcess(t, "gatewaysim-tls", bin.gatewaysim,
			"-paywell", loopback(ports[0]), "-ding", loopback(ports[1]), "-tranglo", loopback(ports[2]),
			"-tls-cert", server.CertFile, "-tls-key", server.KeyFile, "-tls-client-ca", ca.CertFile)
		deadline := time.Now().Add(startDeadline)
		for {
			resp, err := client.Get(s.paywell.url + "/health")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return s
				}
			}
			select {
			case <-s.proc.exited:
			default:
				if time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
					continue
				}
			}
			break
		}
		if attempt < startAttempts && s.proc.clashed() {
			s.proc.expected.Store(true)
			continue
		}
		t.Fatalf("gatewaysim over mutual TLS did not come up within %v", startDeadline)
	}
}

// TestGatewayMutualTLS: a charge, its capture and a refund go through a real payrouter to a
// gatewaysim serving HTTPS and requiring a client certificate, with gateways.paywell.tls giving
// the CA and payrouter's certificate; /admin/gateways shows the paths, never a key. An instance
// without the client certificate is refused at the handshake: the attempt is unavailable (nothing
// reached the gateway), the charge 503, and the gateway counts no call.
func TestGatewayMutualTLS(t *testing.T) {
	skipIfShort(t)
	ca := testpki.NewCA(t, "e2e-gateways")
	s := startTLSSims(t, ca)
	pair := ca.Client(t, "payrouter")
	tlsYAML := fmt.Sprintf("    tls: {ca_file: %q, cert_file: %q, key_file: %q}\n", ca.CertFile, pair.CertFile, pair.KeyFile)
	in := servePayrouterWith(t, "payrouter-mtls", gatewayYAML("paywell", s.paywell.url, tlsYAML),
		"  - name: default\n    gateways: [paywell]\n")

	key := "e2e-mtls-" + strconv.FormatInt(keySeq.Add(1), 10)
	body, _ := json.Marshal(map[string]any{"amount": 2500, "currency": "USD", "capture": false,
		"payment_method": map[string]string{"type": "card", "token": "tok_visa"}})
	r, err := in.chargeKeyed(key, body)
	if err != nil {
		t.Fatal(err)
	}
	a, err := decodeAnswer(r)
	if err != nil || r.status != http.StatusCreated || a.ChargeStatus != "requires_capture" {
		t.Fatalf("authorization over mutual TLS: want 201 requires_capture: %s", r)
	}
	post := func(path string, body string, want int) reply {
		t.Helper()
		r, err := send(in.client, "POST", in.url+path, []byte(body), "Authorization", "Bearer "+apiKey,
			"Content-Type", "application/json", "Idempotency-Key", "e2e-mtls-"+strconv.FormatInt(keySeq.Add(1), 10))
		if err != nil {
			t.Fatal(err)
		}
		if r.status != want {
			t.Fatalf("POST %s: want %d: %s", path, want, r)
		}
		return r
	}
	if r := post("/charge/"+a.ID+"/capture", `{}`, http.StatusOK); !strings.Contains(string(r.body), `"status":"succeeded"`) {
		t.Errorf("capture: %s", r)
	}
	if r := post("/charge/"+a.ID+"/refund", `{"amount":1000}`, http.StatusCreated); !strings.Contains(string(r.body), `"status":"succeeded"`) {
		t.Errorf("refund: %s", r)
	}
	var ledger struct {
		Transactions []struct {
			Reference string `json:"reference"`
			Status    string `json:"status"`
			Refunded  int64  `json:"refunded"`
		} `json:"transactions"`
	}
	s.paywell.control(t, "GET", "/_sim/ledger", nil, &ledger)
	if len(ledger.Transactions) != 1 || ledger.Transactions[0].Status != "partially_refunded" || ledger.Transactions[0].Refunded != 1000 {
		t.Errorf("ledger %+v, want one transaction captured and 1000 refunded", ledger.Transactions)
	}

	gw, err := send(in.client, "GET", in.adminURL+"/admin/gateways", nil, "Authorization", "Bearer "+adminToken)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"ca_file":` + strconv.Quote(ca.CertFile), `"key_file":` + strconv.Quote(pair.KeyFile), `"min_version":"1.2"`} {
		if !strings.Contains(string(gw.body), want) {
			t.Errorf("/admin/gateways lacks %s: %s", want, gw)
		}
	}
	if strings.Contains(string(gw.body), "PRIVATE KEY") || strings.Contains(string(gw.body), "BEGIN") {
		t.Errorf("/admin/gateways shows file contents: %s", gw)
	}

	// The same gateway without a client certificate configured: the gateway refuses the
	// handshake, before it reads any request.
	before := s.paywell.stats(t).Requests
	bare := servePayrouterWith(t, "payrouter-no-client-cert",
		gatewayYAML("paywell", s.paywell.url, fmt.Sprintf("    tls: {ca_file: %q}\n", ca.CertFile)),
		"  - name: default\n    gateways: [paywell]\n")
	r, a = bare.mustCharge(t, 1999, "USD", "tok_visa")
	if r.status != http.StatusServiceUnavailable {
		t.Errorf("charge without a client certificate: want 503: %s", r)
	}
	if len(a.Attempts) != 1 || a.Attempts[0].Outcome != "unavailable" {
		t.Errorf("attempts %s, want paywell/unavailable: the handshake failed before any request reached the gateway", describe(a.Attempts))
	}
	if got := s.paywell.stats(t).Requests; got != before {
		t.Errorf("the gateway counted %d calls from an instance it refused at the handshake", got-before)
	}
	if n := len(s.paywell.ledger(t)); n != 1 {
		t.Errorf("the ledger holds %d transactions, want the first instance's one", n)
	}

	// Reload re-reads the TLS files. The bare instance is given a client certificate of another
	// CA, at paths of its own: still refused. Then the right certificate is copied over those
	// same paths; the file does not change, but the next reload reads the new files, renews
	// Paywell's connections, and the charge goes through.
	certPath, keyPath := filepath.Join(t.TempDir(), "client.pem"), filepath.Join(t.TempDir(), "client-key.pem")
	stranger := testpki.NewCA(t, "stranger").Client(t, "payrouter")
	copyFile(t, stranger.CertFile, certPath)
	copyFile(t, stranger.KeyFile, keyPath)
	cfgText, err := os.ReadFile(bare.configPath)
	if err != nil {
		t.Fatal(err)
	}
	withCert := strings.Replace(string(cfgText), fmt.Sprintf("tls: {ca_file: %q}", ca.CertFile),
		fmt.Sprintf("tls: {ca_file: %q, cert_file: %q, key_file: %q}", ca.CertFile, certPath, keyPath), 1)
	if err := os.WriteFile(bare.configPath, []byte(withCert), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := bare.adminPost(t, "/admin/reload"); r.status != http.StatusOK {
		t.Fatalf("reload with a client certificate of another CA: %s", r)
	}
	if r, a := bare.mustCharge(t, 1999, "USD", "tok_visa"); r.status != http.StatusServiceUnavailable || len(a.Attempts) != 1 || a.Attempts[0].Outcome != "unavailable" {
		t.Errorf("charge with a client certificate of another CA: want 503, paywell/unavailable: %s", r)
	}
	copyFile(t, pair.CertFile, certPath)
	copyFile(t, pair.KeyFile, keyPath)
	r = bare.adminPost(t, "/admin/reload")
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"renewed":{"paywell":["connections"]}`) {
		t.Errorf("reload after the certificate was replaced under the same paths: want paywell's connections renewed: %s", r)
	}
	if r, _ := bare.mustCharge(t, 1999, "USD", "tok_visa"); r.status != http.StatusCreated {
		t.Errorf("charge after the reload with the right client certificate: want 201: %s", r)
	}
}

// copyFile copies from to to, through a rename, as a certificate rotation does.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(to+".tmp", to); err != nil {
		t.Fatal(err)
	}
}
