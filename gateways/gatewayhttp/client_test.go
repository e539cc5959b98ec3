package gatewayhttp

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/internal/testpki"
)

// TestNewClientNeverFollowsRedirects: for every redirect status, the client hands the 3xx back
// and the address in Location receives nothing, neither the body nor the credentials; an account
// built on a client that would follow (the zero http.Client) does not follow either.
func TestNewClientNeverFollowsRedirects(t *testing.T) {
	var elsewhere atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		elsewhere.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(target.Close)
	var status atomic.Int64
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", target.URL+r.URL.RequestURI())
		w.WriteHeader(int(status.Load()))
	}))
	t.Cleanup(gateway.Close)

	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	clients := map[string]*http.Client{
		"NewClient":                    NewClient(tr),
		"an account on a plain client": nil, // built below through NewAccount
	}
	acct, err := NewAccount("test", gateway.URL, map[string]string{"api_key": "k_redirect_test"}, &http.Client{Transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	clients["an account on a plain client"] = acct.HTTP
	for name, client := range clients {
		for _, code := range []int{301, 302, 303, 307, 308} {
			status.Store(int64(code))
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, gateway.URL+"/v1/charges", strings.NewReader("source=tok_visa"))
			req.Header.Set("X-Api-Key", "k_redirect_test")
			ans, err := Do(client, req)
			if err != nil {
				t.Fatalf("%s, %d: %v", name, code, err)
			}
			if ans.Status != code {
				t.Errorf("%s: a %d came back as %d", name, code, ans.Status)
			}
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the address in Location received %d requests", n)
	}
}

// TestClientTLSLoad: every way a tls section can be wrong is one problem naming the field and
// the path, and none quotes a file's contents.
func TestClientTLSLoad(t *testing.T) {
	ca := testpki.NewCA(t, "gateways")
	client := ca.Client(t, "payrouter")
	other := testpki.NewCA(t, "other").Client(t, "stranger")
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	junk := write("junk.pem", "not a certificate at all: SECRET-CONTENTS")
	keyText, _ := os.ReadFile(client.KeyFile)
	caAndKey := write("ca-and-key.pem", string(mustRead(t, ca.CertFile))+string(keyText))

	ok := []struct {
		name string
		c    ClientTLS
		min  uint16
	}{
		{"empty: the system pool, TLS 1.2", ClientTLS{}, tls.VersionTLS12},
		{"a CA and a client certificate", ClientTLS{CAFile: ca.CertFile, CertFile: client.CertFile, KeyFile: client.KeyFile, ServerName: "gw.example", MinVersion: "1.3"}, tls.VersionTLS13},
	}
	for _, tc := range ok {
		cfg, fp, err := tc.c.Load()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if cfg.MinVersion != tc.min || fp == "" {
			t.Errorf("%s: MinVersion %x, fingerprint %q", tc.name, cfg.MinVersion, fp)
		}
		if tc.c.CAFile != "" && (cfg.RootCAs == nil || len(cfg.Certificates) != 1 || cfg.ServerName != "gw.example") {
			t.Errorf("%s: %+v", tc.name, cfg)
		}
	}

	bad := []struct {
		name string
		c    ClientTLS
		want []string // each problem's start: "field: path"
	}{
		{"a CA file that does not exist", ClientTLS{CAFile: filepath.Join(dir, "nope.pem")}, []string{"ca_file: " + filepath.Join(dir, "nope.pem") + ": no such file"}},
		{"a CA file that is a directory", ClientTLS{CAFile: dir}, []string{"ca_file: " + dir + ": not a regular file"}},
		{"a CA file with no certificate", ClientTLS{CAFile: junk}, []string{"ca_file: " + junk + ": holds no PEM certificate"}},
		{"a CA file holding a key", ClientTLS{CAFile: caAndKey}, []string{"ca_file: " + caAndKey + `: holds a "PRIVATE KEY" PEM block`}},
		{"a certificate without its key", ClientTLS{CertFile: client.CertFile}, []string{"key_file: required with cert_file"}},
		{"a key without its certificate", ClientTLS{KeyFile: client.KeyFile}, []string{"cert_file: required with key_file"}},
		{"certificate and key swapped", ClientTLS{CertFile: client.KeyFile, KeyFile: client.CertFile}, []string{"cert_file: " + client.KeyFile + ": holds no PEM certificate"}},
		{"a key of another certificate", ClientTLS{CertFile: client.CertFile, KeyFile: other.KeyFile}, []string{"key_file: " + other.KeyFile + ": does not go with cert_file"}},
		{"a junk key", ClientTLS{CertFile: client.CertFile, KeyFile: junk}, []string{"key_file: " + junk + ": holds no PEM private key"}},
		{"TLS 1.1", ClientTLS{MinVersion: "1.1"}, []string{`min_version: must be "1.2" or "1.3"`}},
		{"a URL as server name", ClientTLS{ServerName: "https://gw.example"}, []string{"server_name: must be a host name"}},
		{"several at once", ClientTLS{CAFile: junk, MinVersion: "TLS1.2", CertFile: client.CertFile}, []string{"min_version:", "ca_file:", "key_file:"}},
	}
	for _, tc := range bad {
		_, _, err := tc.c.Load()
		var te *TLSError
		if !errors.As(err, &te) {
			t.Fatalf("%s: error %v, want a *TLSError", tc.name, err)
		}
		if len(te.Problems) != len(tc.want) {
			t.Fatalf("%s: problems %q, want %d", tc.name, te.Error(), len(tc.want))
		}
		for i, w := range tc.want {
			if got := te.Problems[i].Error(); !strings.HasPrefix(got, w) {
				t.Errorf("%s: problem %q, want it to start with %q", tc.name, got, w)
			}
		}
		for _, secret := range []string{"SECRET-CONTENTS", "PRIVATE KEY-----", "BEGIN"} {
			if strings.Contains(te.Error(), secret) {
				t.Errorf("%s: the problem quotes a file's contents: %q", tc.name, te.Error())
			}
		}
	}
}

// TestClientTLSFingerprint: the fingerprint changes when a file's contents change under the same
// path (a rotated certificate), and only then.
func TestClientTLSFingerprint(t *testing.T) {
	ca := testpki.NewCA(t, "gateways")
	pair := ca.Client(t, "payrouter")
	c := ClientTLS{CAFile: ca.CertFile, CertFile: pair.CertFile, KeyFile: pair.KeyFile}
	_, first, err := c.Load()
	if err != nil {
		t.Fatal(err)
	}
	_, again, _ := c.Load()
	if again != first {
		t.Errorf("the same files gave two fingerprints")
	}
	ca.Client(t, "payrouter") // rotated: the same paths, a new certificate and key
	_, rotated, err := c.Load()
	if err != nil {
		t.Fatal(err)
	}
	if rotated == first {
		t.Errorf("a rotated client certificate kept its fingerprint")
	}
}

// TestDoHandshakeFailures: a TLS handshake that fails, on either side, is unavailable: no
// request reached the gateway. With TLS 1.3 the client's handshake ends before the server judged
// its certificate, so the refusal arrives after the request was written; it is unavailable
// all the same, because a server that refused the handshake never read the request.
func TestDoHandshakeFailures(t *testing.T) {
	ca := testpki.NewCA(t, "gateways")
	serverPair := ca.Server(t, "gateway", "127.0.0.1")
	clientPair := ca.Client(t, "payrouter")
	strangerPair := testpki.NewCA(t, "stranger").Client(t, "payrouter")

	for _, run := range []struct {
		version uint16
		h2      bool
	}{{tls.VersionTLS12, false}, {tls.VersionTLS13, false}, {tls.VersionTLS12, true}, {tls.VersionTLS13, true}} {
		version := run.version
		var served atomic.Int64
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			served.Add(1)
			w.Header().Set("X-Proto", r.Proto)
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusOK)
		}))
		srv.TLS = &tls.Config{
			Certificates: []tls.Certificate{serverPair.TLS(t)},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    ca.Pool(),
			MinVersion:   version, MaxVersion: version,
		}
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
		srv.EnableHTTP2 = run.h2
		srv.StartTLS()
		t.Cleanup(srv.Close)

		cases := []struct {
			name string
			tls  ClientTLS
			want payrouter.Outcome // "" is a 200
		}{
			{"with the client certificate", ClientTLS{CAFile: ca.CertFile, CertFile: clientPair.CertFile, KeyFile: clientPair.KeyFile}, ""},
			{"without a client certificate", ClientTLS{CAFile: ca.CertFile}, payrouter.OutcomeUnavailable},
			{"with a certificate of another CA", ClientTLS{CAFile: ca.CertFile, CertFile: strangerPair.CertFile, KeyFile: strangerPair.KeyFile}, payrouter.OutcomeUnavailable},
			{"not trusting the gateway's certificate", ClientTLS{CertFile: clientPair.CertFile, KeyFile: clientPair.KeyFile}, payrouter.OutcomeUnavailable},
			{"expecting another server name", ClientTLS{CAFile: ca.CertFile, CertFile: clientPair.CertFile, KeyFile: clientPair.KeyFile, ServerName: "gw.example"}, payrouter.OutcomeUnavailable},
		}
		for _, tc := range cases {
			cfg, _, err := tc.tls.Load()
			if err != nil {
				t.Fatal(err)
			}
			tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
			client := NewClient(tr)
			before := served.Load()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/charges", strings.NewReader("amount=100"))
			ans, err := Do(client, req)
			cancel()
			tr.CloseIdleConnections()
			name := tlsName(version) + ", " + tc.name
			if run.h2 {
				name = "HTTP/2, " + name
			}
			if tc.want == "" {
				if err != nil || ans.Status != http.StatusOK {
					t.Errorf("%s: %v %+v", name, err, ans)
				} else if got := ans.Header.Get("X-Proto"); (got == "HTTP/2.0") != run.h2 {
					t.Errorf("%s: served over %s", name, got)
				}
				continue
			}
			if got := ResultOf(err).Outcome; err == nil || got != tc.want {
				t.Errorf("%s: outcome %q (%v), want %q", name, got, err, tc.want)
			}
			if served.Load() != before {
				t.Errorf("%s: the gateway served the request", name)
			}
		}
	}
}

func tlsName(v uint16) string {
	if v == tls.VersionTLS13 {
		return "TLS 1.3"
	}
	return "TLS 1.2"
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
