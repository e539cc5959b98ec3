package resilience

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
	"github.com/payrouter/payrouter/internal/testpki"
)

func TestDomainsTransport(t *testing.T) {
	d := NewDomains([]GatewaySettings{
		{Name: "paywell", BulkheadSettings: BulkheadSettings{MaxConcurrent: 7}},
		{Name: "ding"}, // defaults
	}, nil)
	defer d.Close()
	tests := []struct {
		gateway string
		slots   int
	}{
		{"paywell", 7},
		{"ding", DefaultMaxConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.gateway, func(t *testing.T) {
			c := d.Client(tc.gateway)
			p, ok := c.Transport.(propagating)
			if !ok {
				t.Fatalf("transport %T, want the trace context propagating wrapper of an *http.Transport", c.Transport)
			}
			tr := p.base
			if c.Timeout != 0 {
				t.Errorf("client timeout %v, want 0 (the Guard's deadline rules)", c.Timeout)
			}
			if tr.Proxy != nil {
				t.Error("transport takes a proxy from the environment")
			}
			if tr.MaxConnsPerHost < tc.slots || tr.MaxIdleConnsPerHost != tc.slots {
				t.Errorf("MaxConnsPerHost %d, MaxIdleConnsPerHost %d; want >= %d and = %d",
					tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost, tc.slots, tc.slots)
			}
			if tr.DialContext == nil || tr.TLSHandshakeTimeout <= 0 {
				t.Errorf("dial %v, TLS handshake timeout %v: want both bounded", tr.DialContext != nil, tr.TLSHandshakeTimeout)
			}
			if got := d.Bulkhead(tc.gateway).Capacity(); got != tc.slots {
				t.Errorf("bulkhead capacity %d, want %d", got, tc.slots)
			}
		})
	}
	if d.Client("paywell").Transport == d.Client("ding").Transport {
		t.Error("paywell and ding share a transport")
	}
}

func TestDomainsLookUp(t *testing.T) {
	d := NewDomains([]GatewaySettings{{Name: "tranglo"}, {Name: "paywell"}}, nil)
	if d.Guard("nope", payrouter.OpCharge) != nil || d.Breaker("nope", payrouter.OpCharge) != nil ||
		d.Bulkhead("nope") != nil || d.Client("nope") != nil {
		t.Error("an unknown gateway: got something, want nil")
	}
	if d.Guard("paywell", "teleport") != nil || d.Breaker("paywell", "teleport") != nil {
		t.Error("an unknown operation: got something, want nil")
	}
	for _, op := range payrouter.Operations {
		g := d.Guard("paywell", op)
		if g == nil || g.Gateway() != "paywell" || g.Operation() != op || g.Breaker() != d.Breaker("paywell", op) {
			t.Fatalf("Guard(paywell, %s): %+v", op, g)
		}
		if g.Bulkhead() != d.Bulkhead("paywell") {
			t.Errorf("paywell/%s does not share the gateway's bulkhead", op)
		}
	}
	if slices.Equal(d.Gateways(), []string{"tranglo", "paywell"}) == false {
		t.Errorf("Gateways: %v", d.Gateways())
	}

	var names []string
	for _, s := range d.Snapshots() {
		names = append(names, s.Name)
		if s.Gateway+"/"+string(s.Operation) != s.Name || s.State != StateClosed {
			t.Errorf("snapshot %+v", s)
		}
	}
	want := []string{
		"tranglo/charge", "tranglo/capture", "tranglo/void", "tranglo/refund", "tranglo/status",
		"paywell/charge", "paywell/capture", "paywell/void", "paywell/refund", "paywell/status",
	}
	if !slices.Equal(names, want) {
		t.Errorf("snapshots in order:\n got %v\nwant %v", names, want)
	}
}

func TestDomainsSettingsDefaults(t *testing.T) {
	d := NewDomains([]GatewaySettings{{Name: "ding"}}, nil)
	s, ok := d.Settings("ding")
	if !ok || s.Timeout != DefaultTimeout || s.MaxConcurrent != DefaultMaxConcurrent ||
		s.Breaker.Cooldown != DefaultCooldown || s.Breaker.HalfOpenRequests != 1 {
		t.Errorf("defaults: %+v", s)
	}
	if got := d.Guard("ding", payrouter.OpCharge).Timeout(); got != DefaultTimeout {
		t.Errorf("guard timeout %v, want %v", got, DefaultTimeout)
	}
}

func TestDomainsRefuseBadNames(t *testing.T) {
	tests := []struct {
		name     string
		gateways []GatewaySettings
	}{
		{"empty", []GatewaySettings{{}}},
		{"repeated", []GatewaySettings{{Name: "ding"}, {Name: "ding"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			NewDomains(tc.gateways, nil)
		})
	}
}

// A real call through a gateway's client and guard, over a socket (outside any synctest bubble).
func TestDomainsClientThroughGuard(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Context().Deadline(); ok {
			t.Error("the server saw the client's deadline as its own")
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	d := NewDomains([]GatewaySettings{{Name: "paywell", TimeoutSettings: TimeoutSettings{Timeout: 5 * time.Second}}}, nil)
	defer d.Close()

	res, _ := d.Guard("paywell", payrouter.OpCharge).Do(t.Context(), func(ctx context.Context) payrouter.Result {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("the call has no deadline")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: err.Error()}
		}
		resp, err := d.Client("paywell").Do(req)
		if err != nil {
			return payrouter.Result{Outcome: payrouter.OutcomeUnavailable, Detail: err.Error()}
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return payrouter.Result{Outcome: payrouter.OutcomeSucceeded, Detail: string(body)}
	})
	if res.Outcome != payrouter.OutcomeSucceeded || res.Detail != "ok" {
		t.Errorf("call through the guard: %+v", res)
	}
}

// TestDomainsClientsNeverFollowRedirects: the customer and the probe clients of a gateway hand a
// redirect back as the answer; the address it names receives nothing.
func TestDomainsClientsNeverFollowRedirects(t *testing.T) {
	var elsewhere atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { elsewhere.Add(1) }))
	defer target.Close()
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer gateway.Close()
	d := NewDomains([]GatewaySettings{{Name: "paywell"}}, nil)
	defer d.Close()
	for name, c := range map[string]*http.Client{"customer": d.Client("paywell"), "probe": d.ProbeClient("paywell")} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, gateway.URL+"/v1/charges", strings.NewReader("amount=1"))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTemporaryRedirect {
			t.Errorf("%s client: status %d, want the 307 itself", name, resp.StatusCode)
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect target received %d requests", n)
	}
}

// TestDomainsTLS: both of a gateway's pools use its TLS configuration; an Update with another
// TLS fingerprint (a rotated client certificate under the same paths) renews both pools and
// keeps the breakers, and one with the same fingerprint keeps them.
func TestDomainsTLS(t *testing.T) {
	ca := testpki.NewCA(t, "gateways")
	pair := ca.Client(t, "payrouter")
	files := gatewayhttp.ClientTLS{CAFile: ca.CertFile, CertFile: pair.CertFile, KeyFile: pair.KeyFile, MinVersion: "1.3"}
	load := func() GatewaySettings {
		cfg, fp, err := files.Load()
		if err != nil {
			t.Fatal(err)
		}
		return GatewaySettings{Name: "paywell", Endpoint: "paywell https://gw", TLS: cfg, TLSFingerprint: fp}
	}
	d := NewDomains([]GatewaySettings{load()}, nil)
	defer d.Close()
	for name, c := range map[string]*http.Client{"customer": d.Client("paywell"), "probe": d.ProbeClient("paywell")} {
		var tr *http.Transport
		switch rt := c.Transport.(type) {
		case propagating:
			tr = rt.base
		case *http.Transport:
			tr = rt
		}
		if tr == nil || tr.TLSClientConfig == nil || tr.TLSClientConfig.MinVersion != tls.VersionTLS13 || tr.TLSClientConfig.RootCAs == nil || len(tr.TLSClientConfig.Certificates) != 1 {
			t.Errorf("%s transport: TLS config %+v, want the gateway's", name, tr)
		}
	}
	if d.ProbeClient("paywell").Transport == d.Client("paywell").Transport {
		t.Error("the prober shares the customer pool")
	}
	client, probe, breaker := d.Client("paywell"), d.ProbeClient("paywell"), d.Breaker("paywell", payrouter.OpCharge)

	report, err := d.Update([]GatewaySettings{load()}) // the same files: a new *tls.Config, the same fingerprint
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(report.Kept, []string{"paywell"}) || d.Client("paywell") != client || d.ProbeClient("paywell") != probe {
		t.Errorf("the same TLS files renewed the gateway: %+v", report)
	}

	ca.Client(t, "payrouter") // rotated: new certificate and key under the same paths
	report, err = d.Update([]GatewaySettings{load()})
	if err != nil {
		t.Fatal(err)
	}
	if got := report.Renewed["paywell"]; !slices.Equal(got, []string{"connections"}) {
		t.Errorf("renewed %v, want connections only", got)
	}
	if d.Client("paywell") == client || d.ProbeClient("paywell") == probe {
		t.Error("a new client certificate kept the old pools")
	}
	if d.Breaker("paywell", payrouter.OpCharge) != breaker {
		t.Error("a new client certificate renewed the breakers")
	}
}
