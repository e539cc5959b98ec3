package service_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// TestWebhooksFollowAReload: a reload that adds an endpoint makes the service push the charges
// it answers afterwards to it, signed; one that rotates the endpoint's secret signs with the new
// one.
func TestWebhooksFollowAReload(t *testing.T) {
	const (
		secretA = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
		secretB = "whsec_ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="
	)
	type delivery struct {
		header http.Header
		body   []byte
	}
	got := make(chan delivery, 10)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- delivery{r.Header.Clone(), body}
	}))
	defer receiver.Close()
	sims := gatewaySims(t)
	urls := serveSims(t, sims)
	text := func(webhooks string) string {
		named := strings.Replace(configText(urls, "routes: [{name: default, gateways: [paywell]}]\n"),
			fmt.Sprintf("api_keys: [%q]", apiKey), fmt.Sprintf("api_keys: [{name: shop, key: %q}]", apiKey), 1)
		return named + webhooks
	}
	hooks := func(secret string) string {
		return fmt.Sprintf("webhooks:\n  allow_private: true\n  poll_interval: 50ms\n  endpoints:\n    - {name: shop, url: %q, key_name: shop, secrets: [%q]}\n",
			receiver.URL, secret)
	}
	svc, path, url := start(t, text(""))
	reload := func(webhooks string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text(webhooks)), 0o600); err != nil {
			t.Fatal(err)
		}
		ch, err := svc.Reload(context.Background())
		if err != nil || !ch.Webhooks {
			t.Fatalf("reload: %+v, %v; want webhooks_changed", ch, err)
		}
	}
	next := func(what string) delivery {
		t.Helper()
		select {
		case d := <-got:
			return d
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no delivery", what)
			return delivery{}
		}
	}
	verify := func(d delivery, secret string) error {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			t.Fatal(err)
		}
		return wh.Verify(d.body, d.header)
	}

	if status, body := charge(t, url, "w-0", "USD"); status != 201 {
		t.Fatalf("charge: %d %s", status, body)
	}
	reload(hooks(secretA))
	if status, body := charge(t, url, "w-1", "USD"); status != 201 {
		t.Fatalf("charge: %d %s", status, body)
	}
	d := next("a charge after the endpoint was added")
	if err := verify(d, secretA); err != nil || !strings.Contains(string(d.body), `"type":"charge.succeeded"`) {
		t.Fatalf("delivery %s: %v", d.body, err)
	}

	reload(hooks(secretB))
	if status, body := charge(t, url, "w-2", "USD"); status != 201 {
		t.Fatalf("charge: %d %s", status, body)
	}
	d = next("a charge after the secret was rotated")
	if err := verify(d, secretB); err != nil {
		t.Fatalf("delivery after the rotation does not verify with the new secret: %v", err)
	}
	if err := verify(d, secretA); err == nil {
		t.Error("delivery after the rotation verifies with the secret removed")
	}
	select {
	case extra := <-got:
		t.Errorf("a delivery of an event written before the endpoint existed, or twice: %s", extra.body)
	default:
	}
}
