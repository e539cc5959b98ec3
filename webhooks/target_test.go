package webhooks

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// testSecret returns a whsec_ secret of 32 bytes, all b.
func testSecret(b byte) string {
	return SecretPrefix + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32))
}

func testEndpoint(url string, secrets ...string) Endpoint {
	e := DefaultEndpoint()
	e.Name, e.URL, e.KeyName, e.Secrets = "shop", url, "shop-eu", secrets
	return e
}

func mustTarget(t *testing.T, e Endpoint, allowPrivate bool) *Target {
	t.Helper()
	tg, err := NewTarget(e, "name:shop-eu", allowPrivate)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	return tg
}

// received is one request a test endpoint got.
type received struct {
	header http.Header
	body   []byte
}

// TestSendSignedAsTheLibraryVerifies: a delivery carries Standard Webhooks' headers, and the
// Standard Webhooks Go library verifies its signature with each of the endpoint's secrets (the
// old and the new during a rotation), and refuses it with any other secret or another body.
func TestSendSignedAsTheLibraryVerifies(t *testing.T) {
	got := make(chan received, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- received{r.Header.Clone(), body}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	oldSecret, newSecret := testSecret(1), testSecret(2)
	tg := mustTarget(t, testEndpoint(srv.URL, oldSecret, newSecret), true)

	body := []byte(`{"id":"evt_ABC","type":"charge.succeeded","created_at":"2026-12-01T10:00:00Z","data":{"object":{}}}`)
	res := tg.Send(t.Context(), "evt_ABC", body, time.Now())
	if !res.Delivered() || res.Err != nil {
		t.Fatalf("Send = %+v, want delivered", res)
	}
	r := <-got
	if !bytes.Equal(r.body, body) {
		t.Fatalf("body sent = %s, want %s", r.body, body)
	}
	if id := r.header.Get("webhook-id"); id != "evt_ABC" {
		t.Errorf("webhook-id = %q, want the event's id", id)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	if sigs := strings.Fields(r.header.Get("webhook-signature")); len(sigs) != 2 || !strings.HasPrefix(sigs[0], "v1,") {
		t.Errorf("webhook-signature = %q, want one v1 signature per secret", r.header.Get("webhook-signature"))
	}
	for _, secret := range []string{oldSecret, newSecret} {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(r.body, r.header); err != nil {
			t.Errorf("the library does not verify the delivery with one of its secrets: %v", err)
		}
		if err := wh.Verify(append(bytes.Clone(r.body), ' '), r.header); err == nil {
			t.Error("the library verifies a changed body")
		}
	}
	other, _ := standardwebhooks.NewWebhook(testSecret(3))
	if err := other.Verify(r.body, r.header); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Errorf("verified with a secret the endpoint does not have: %v", err)
	}
}

// TestSendAnswers: what each kind of answer makes of an attempt.
func TestSendAnswers(t *testing.T) {
	var redirected atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { redirected.Add(1) }))
	defer elsewhere.Close()
	for _, tc := range []struct {
		name       string
		handler    http.HandlerFunc
		delivered  bool
		gone       bool
		status     int
		retryAfter time.Duration
		errHas     string
	}{
		{"200", func(w http.ResponseWriter, r *http.Request) {}, true, false, 200, 0, ""},
		{"202", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(202) }, true, false, 202, 0, ""},
		{"410 disables", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(410) }, false, true, 410, 0, "410 Gone"},
		{"500", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }, false, false, 500, 0, "answered 500"},
		{"503 with Retry-After", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(503)
		}, false, false, 503, 2 * time.Minute, "answered 503"},
		{"429 with an HTTP date", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))
			w.WriteHeader(429)
		}, false, false, 429, time.Hour, "answered 429"},
		{"302 is not followed", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere.URL, http.StatusFound)
		}, false, false, 302, 0, "redirects are not followed"},
		{"307 is not followed", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere.URL, http.StatusTemporaryRedirect)
		}, false, false, 307, 0, "redirects are not followed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			res := mustTarget(t, testEndpoint(srv.URL, testSecret(1)), true).Send(t.Context(), "evt_X", []byte(`{}`), time.Now())
			if res.Delivered() != tc.delivered || res.Gone() != tc.gone || res.Status != tc.status {
				t.Fatalf("Send = %+v, want status %d, delivered %v, gone %v", res, tc.status, tc.delivered, tc.gone)
			}
			// An HTTP date has a resolution of a second.
			if d := res.RetryAfter - tc.retryAfter; d < -2*time.Second || d > 0 {
				t.Errorf("RetryAfter = %v, want %v", res.RetryAfter, tc.retryAfter)
			}
			switch {
			case tc.errHas == "" && res.Err != nil:
				t.Errorf("Err = %v, want none", res.Err)
			case tc.errHas != "" && (res.Err == nil || !strings.Contains(res.Err.Error(), tc.errHas)):
				t.Errorf("Err = %v, want one saying %q", res.Err, tc.errHas)
			}
		})
	}
	if n := redirected.Load(); n != 0 {
		t.Errorf("the URL redirected to got %d requests, want none", n)
	}
}

// TestSendNoAnswer: an endpoint that refuses connections or hangs past the timeout is a
// failed attempt that says so, without the URL's secrets.
func TestSendNoAnswer(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL + "/hook?token=s3cr3t"
		srv.Close() // nothing listens there now
		res := mustTarget(t, testEndpoint(url, testSecret(1)), true).Send(t.Context(), "evt_X", []byte(`{}`), time.Now())
		if res.Status != 0 || res.Err == nil || !strings.Contains(res.Err.Error(), "refused") {
			t.Fatalf("Send to a closed port = %+v, want a refused connection", res)
		}
		if strings.Contains(res.Err.Error(), "s3cr3t") {
			t.Errorf("the error quotes the URL's query: %v", res.Err)
		}
	})
	t.Run("hanging", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
		defer srv.Close()
		defer close(release)
		e := testEndpoint(srv.URL, testSecret(1))
		e.Timeout = 50 * time.Millisecond
		res := mustTarget(t, e, true).Send(t.Context(), "evt_X", []byte(`{}`), time.Now())
		if res.Status != 0 || !errors.Is(res.Err, context.DeadlineExceeded) {
			t.Fatalf("Send to a hanging endpoint = %+v, want a timeout", res)
		}
	})
}

// TestPrivateAddressesRefused: with allow_private off, an endpoint resolving to loopback is
// refused when connecting, after DNS (a name is judged by the address it resolves to), and
// receives nothing; with it on, it is reached.
func TestPrivateAddressesRefused(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	byName := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	for _, url := range []string{srv.URL, byName} {
		res := mustTarget(t, testEndpoint(url, testSecret(1)), false).Send(t.Context(), "evt_X", []byte(`{}`), time.Now())
		if !errors.Is(res.Err, ErrAddressRefused) {
			t.Errorf("Send to %s with allow_private off = %+v, want ErrAddressRefused", url, res)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the loopback endpoint got %d requests with allow_private off", n)
	}
	if res := mustTarget(t, testEndpoint(srv.URL, testSecret(1)), true).Send(t.Context(), "evt_X", []byte(`{}`), time.Now()); !res.Delivered() {
		t.Fatalf("Send with allow_private on = %+v, want delivered", res)
	}
}

func TestPublic(t *testing.T) {
	for addr, want := range map[string]bool{
		"8.8.8.8": true, "1.1.1.1": true, "2606:4700:4700::1111": true, "172.32.0.1": true,
		"127.0.0.1": false, "127.9.9.9": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false,
		"192.168.1.1": false, "169.254.169.254": false, "fe80::1": false, "fc00::1": false, "fd12::1": false,
		"0.0.0.0": false, "::": false, "100.64.0.1": false, "224.0.0.1": false, "ff02::1": false,
		"::ffff:10.0.0.1": false, "::ffff:127.0.0.1": false, "::ffff:8.8.8.8": true, "255.255.255.255": false,
		"198.18.0.1": false, "192.0.2.1": false, "64:ff9b::a00:1": false,
	} {
		if got := Public(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Public(%s) = %v, want %v", addr, got, want)
		}
	}
}

// TestBulkhead: an endpoint's slots are taken without waiting, refused when all are held, and
// each given back once however often release is called.
func TestBulkhead(t *testing.T) {
	e := testEndpoint("http://127.0.0.1:1", testSecret(1))
	e.MaxConcurrent = 2
	tg := mustTarget(t, e, true)
	r1, ok1 := tg.Acquire()
	r2, ok2 := tg.Acquire()
	if !ok1 || !ok2 {
		t.Fatal("Acquire refused a free slot")
	}
	if _, ok := tg.Acquire(); ok {
		t.Fatal("Acquire took a third slot of two")
	}
	r1()
	r1()
	if tg.InFlight() != 1 {
		t.Fatalf("InFlight = %d after one release (called twice), want 1", tg.InFlight())
	}
	r3, ok := tg.Acquire()
	if !ok {
		t.Fatal("Acquire refused the slot released")
	}
	r2()
	r3()
	if tg.InFlight() != 0 {
		t.Fatalf("InFlight = %d, want 0", tg.InFlight())
	}
}

func TestParseSecret(t *testing.T) {
	if _, err := ParseSecret(testSecret(7)); err != nil {
		t.Fatalf("a 32-byte secret: %v", err)
	}
	short := SecretPrefix + base64.StdEncoding.EncodeToString(make([]byte, 16))
	long := SecretPrefix + base64.StdEncoding.EncodeToString(make([]byte, 65))
	for _, s := range []string{"", "s3cr3t-value", "whsec_not base64!", short, long,
		"sk_" + base64.StdEncoding.EncodeToString(make([]byte, 32))} {
		_, err := ParseSecret(s)
		if !errors.Is(err, ErrSecret) {
			t.Errorf("ParseSecret(%q) = %v, want ErrSecret", s, err)
			continue
		}
		if s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("the error quotes the secret: %v", err)
		}
	}
}

// TestEndpointNeverShowsSecrets: however an endpoint is printed, its secrets and its URL's
// query values are masked.
func TestEndpointNeverShowsSecrets(t *testing.T) {
	secret := testSecret(9)
	e := testEndpoint("https://shop.example/hooks?token=tok3n", secret)
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "endpoint", e)
	js, _ := json.Marshal(e)
	for _, out := range []string{fmt.Sprint(e), fmt.Sprintf("%+v", e), fmt.Sprintf("%#v", e), string(js), buf.String()} {
		if strings.Contains(out, secret) || strings.Contains(out, "tok3n") {
			t.Errorf("printed with a secret: %s", out)
		}
		if !strings.Contains(out, "shop.example") {
			t.Errorf("printed without its host: %s", out)
		}
	}
}
