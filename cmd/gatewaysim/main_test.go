package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter/internal/testlog"
	"github.com/payrouter/payrouter/internal/testpki"
)

// lines collects what run writes, for reading while it runs.
type lines struct{ testlog.Buffer }

// urls reads the "listening" log lines: gateway name to URL.
func (l *lines) urls(t *testing.T) map[string]string {
	t.Helper()
	urls := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	for sc.Scan() {
		var rec struct{ Msg, Gateway, URL string }
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		if rec.Msg == "listening" {
			urls[rec.Gateway] = rec.URL
		}
	}
	return urls
}

// start runs gatewaysim on free ports, with extra flags, and waits until it logged its
// listeners: three, and the simulated Stripe's when extra asks for it.
func start(t *testing.T, extra ...string) (urls map[string]string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	out := &lines{}
	done := make(chan error, 1)
	args := append([]string{"-paywell", "127.0.0.1:0", "-ding", "127.0.0.1:0", "-tranglo", "127.0.0.1:0"}, extra...)
	listeners := 3
	if slices.Contains(extra, "-stripe") {
		listeners++
	}
	// The wait for the listeners ends early if run returns.
	waitCtx, endWait := context.WithTimeout(ctx, 10*time.Second)
	defer endWait()
	go func() {
		done <- run(ctx, args, out, io.Discard)
		endWait()
	}()
	if !out.Await(waitCtx, func(text string) bool { return strings.Count(text, `"msg":"listening"`) >= listeners }) {
		select {
		case err := <-done:
			t.Fatalf("run returned during start-up: %v\n%s", err, out)
		default:
			t.Fatalf("%d listeners not logged within 10s:\n%s", listeners, out)
		}
	}
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				err = errors.New("run did not return within 10s of its context ending")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return out.urls(t), stop
}

func get(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func TestRunServesTheThreeGateways(t *testing.T) {
	urls, stop := start(t)
	for _, name := range []string{"paywell", "ding", "tranglo"} {
		url, ok := urls[name]
		if !ok {
			t.Fatalf("no listening line for %s: %v", name, urls)
		}
		if code, err := get(t.Context(), url+"/health"); code != 200 || err != nil {
			t.Errorf("GET %s/health = %d, %v; want 200", url, code, err)
		}
		if code, err := get(t.Context(), url+"/_sim/stats"); code != 200 || err != nil {
			t.Errorf("GET %s/_sim/stats = %d, %v; want 200", url, code, err)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("run after its context ended: %v", err)
	}
	if _, err := get(t.Context(), urls["paywell"]+"/health"); err == nil {
		t.Error("paywell still answers after run returned")
	}
}

// TestRunServesStripeWhenAsked: the simulated Stripe is served on -stripe's address, with the
// control API, and not at all without it.
func TestRunServesStripeWhenAsked(t *testing.T) {
	urls, _ := start(t)
	if u, ok := urls["stripe"]; ok {
		t.Fatalf("stripe served at %s without -stripe", u)
	}
	urls, stop := start(t, "-stripe", "127.0.0.1:0")
	url, ok := urls["stripe"]
	if !ok {
		t.Fatalf("no listening line for stripe: %v", urls)
	}
	if code, err := get(t.Context(), url+"/_sim/stats"); code != 200 || err != nil {
		t.Errorf("GET %s/_sim/stats = %d, %v; want 200", url, code, err)
	}
	// Stripe's own API: a call without a key is refused as Stripe refuses it.
	if code, err := get(t.Context(), url+"/v1/charges"); code != 401 || err != nil {
		t.Errorf("GET %s/v1/charges without a key = %d, %v; want 401", url, code, err)
	}
	if err := stop(); err != nil {
		t.Fatalf("run after its context ended: %v", err)
	}
}

// TestRunStopsWithHungCalls: a call hung by mode hang does not hold up the shutdown.
//
// The test's client keeps no connection between calls. A pooling client can be left holding a
// connection it dialed and never sent a request on (dialed for a call that an idle connection
// then took; Go 1.27's client does so often under -race), and net/http's Shutdown waits up to 5 s
// for such a connection's first request: that wait is not a hung call's, and would hide one.
func TestRunStopsWithHungCalls(t *testing.T) {
	urls, stop := start(t)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, urls["ding"]+"/_sim/behavior", strings.NewReader(`{"mode":"hang"}`))
	resp, err := client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("PUT /_sim/behavior: %v %v", resp, err)
	}
	resp.Body.Close()

	hung := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, urls["ding"]+"/api/V1/SendTransfer", strings.NewReader(`{}`))
		req.Header["api_key"] = []string{"k"}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		hung <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, urls["ding"]+"/_sim/stats", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			InFlight int `json:"in_flight"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err == nil && st.InFlight == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hung call never showed in /_sim/stats")
		}
		time.Sleep(5 * time.Millisecond)
	}
	began := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if took := time.Since(began); took > shutdownGrace {
		t.Errorf("shutdown took %v with a hung call; want it let go at once", took)
	}
	if err := <-hung; err == nil {
		t.Error("the hung call got an answer; want its connection dropped")
	}
}

func TestRunRefusesBadCommandLines(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cases := []struct {
		name  string
		args  []string
		usage bool
		want  string
	}{
		{"unknown flag", []string{"-adyen", "127.0.0.1:0"}, true, "flag provided but not defined"},
		{"stray argument", []string{"serve"}, true, "unexpected arguments"},
		{"address taken", []string{"-paywell", "127.0.0.1:0", "-ding", taken.Addr().String(), "-tranglo", "127.0.0.1:0"}, false, "ding: listen tcp"},
		{"a certificate without its key", []string{"-tls-cert", "gw.pem"}, true, "-tls-cert and -tls-key go together"},
		{"a client CA without a certificate", []string{"-tls-client-ca", "ca.pem"}, true, "-tls-client-ca needs -tls-cert and -tls-key"},
		{"a certificate that does not exist", []string{"-tls-cert", "/nonexistent/gw.pem", "-tls-key", "/nonexistent/gw-key.pem"}, true, "-tls-cert /nonexistent/gw.pem"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := run(t.Context(), c.args, io.Discard, io.Discard)
			var usage usageError
			if err == nil || !strings.Contains(err.Error(), c.want) || errors.As(err, &usage) != c.usage {
				t.Fatalf("run(%q) = %v; want an error containing %q (usage error: %v)", c.args, err, c.want, c.usage)
			}
		})
	}
	if err := run(t.Context(), []string{"-h"}, io.Discard, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("run(-h) = %v; want flag.ErrHelp", err)
	}
}

// TestRunServesMutualTLS: with -tls-cert, -tls-key and -tls-client-ca, every gateway answers over
// HTTPS to a client holding a certificate of that CA, refuses the handshake of one without, and
// does not speak plain HTTP.
func TestRunServesMutualTLS(t *testing.T) {
	ca := testpki.NewCA(t, "sim")
	server := ca.Server(t, "gateways", "127.0.0.1")
	urls, _ := start(t, "-tls-cert", server.CertFile, "-tls-key", server.KeyFile, "-tls-client-ca", ca.CertFile)
	clientFor := func(certs ...tls.Certificate) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: certs}, ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	withCert, without := clientFor(ca.Client(t, "payrouter").TLS(t)), clientFor()
	for _, name := range []string{"paywell", "ding", "tranglo"} {
		url := urls[name]
		if !strings.HasPrefix(url, "https://127.0.0.1:") {
			t.Fatalf("%s listens at %q, want https://", name, url)
		}
		resp, err := withCert.Get(url + "/health")
		if err != nil {
			t.Fatalf("%s with a client certificate: %v", name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			t.Errorf("%s: %s %d, want HTTP/2 200", name, resp.Proto, resp.StatusCode)
		}
		// Over TLS 1.3 the refusal reaches the client as the gateway's alert, or as the reset
		// of the connection it closed: either way no answer.
		if resp, err := without.Get(url + "/health"); err == nil {
			resp.Body.Close()
			t.Errorf("%s answered %d to a client without a certificate", name, resp.StatusCode)
		}
		if code, err := get(t.Context(), "http://"+strings.TrimPrefix(url, "https://")+"/health"); err == nil && code == http.StatusOK {
			t.Errorf("%s answered plain HTTP", name)
		}
	}
}
