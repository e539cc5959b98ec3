package testpki

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"
)

// An issued server certificate serves HTTPS that a client trusting only the CA accepts, and the
// server asking for client certificates accepts an issued one.
func TestMutualTLS(t *testing.T) {
	ca := NewCA(t, "test")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 {
			t.Error("no client certificate")
		}
	}))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{ca.Server(t, "srv", "127.0.0.1").TLS(t)},
		ClientCAs:    ca.Pool(),
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
	srv.StartTLS()
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:      ca.Pool(),
		Certificates: []tls.Certificate{ca.Client(t, "payrouter").TLS(t)},
	}}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if _, err := http.Get(srv.URL); err == nil {
		t.Fatal("a client without the CA was accepted")
	}
}
