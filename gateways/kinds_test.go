package gateways_test

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/payrouter/payrouter/gateways"
	"github.com/payrouter/payrouter/gateways/stripe"
)

// apiVersion is the api_version each kind is built with in these tests: only stripe takes one.
func apiVersion(kind string) string {
	if kind == "stripe" {
		return stripe.TestedAPIVersion
	}
	return ""
}

func TestKinds(t *testing.T) {
	if got, want := gateways.Kinds(), []string{"ding", "paywell", "stripe", "tranglo"}; !slices.Equal(got, want) {
		t.Fatalf("Kinds() = %v, want %v", got, want)
	}
}

func TestNew(t *testing.T) {
	creds := map[string]string{"api_key": "secret-key-123"}
	for _, kind := range gateways.Kinds() {
		t.Run(kind, func(t *testing.T) {
			g, err := gateways.NewWith(kind, gateways.Settings{BaseURL: "http://127.0.0.1:9101", Credentials: creds, APIVersion: apiVersion(kind)}, http.DefaultClient)
			if err != nil || g == nil {
				t.Fatalf("New(%q) = %v, %v; want an adapter", kind, g, err)
			}
			cases := []struct {
				name, url string
				creds     map[string]string
				client    *http.Client
				want      string
			}{
				{"no base URL", "", creds, http.DefaultClient, "base_url is required"},
				{"relative base URL", "127.0.0.1:9101", creds, http.DefaultClient, "base_url"},
				{"ftp base URL", "ftp://127.0.0.1", creds, http.DefaultClient, "scheme must be http or https"},
				{"base URL with a query", "http://127.0.0.1:9101/?a=b", creds, http.DefaultClient, "no query"},
				{"no api_key", "http://127.0.0.1:9101", map[string]string{}, http.DefaultClient, "credentials.api_key is required"},
				{"no client", "http://127.0.0.1:9101", creds, nil, "http.Client is required"},
			}
			for _, c := range cases {
				g, err := gateways.NewWith(kind, gateways.Settings{BaseURL: c.url, Credentials: c.creds, APIVersion: apiVersion(kind)}, c.client)
				if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), kind+": ") {
					t.Errorf("%s: New = %v, %v; want an error starting %q and naming %q", c.name, g, err, kind+": ", c.want)
				}
				if g != nil {
					t.Errorf("%s: New returned a non-nil Gateway (%#v) with its error", c.name, g)
				}
				if err != nil && strings.Contains(err.Error(), "secret-key-123") {
					t.Errorf("%s: the error shows the api key: %v", c.name, err)
				}
			}
		})
	}
}

func TestNewUnknownKind(t *testing.T) {
	g, err := gateways.New("adyen", "http://127.0.0.1:1", map[string]string{"api_key": "k"}, http.DefaultClient)
	if !errors.Is(err, gateways.ErrUnknownKind) || g != nil {
		t.Fatalf("New(adyen) = %v, %v; want ErrUnknownKind", g, err)
	}
	if !strings.Contains(err.Error(), "ding, paywell, stripe, tranglo") {
		t.Errorf("the error should list the known kinds: %v", err)
	}
}

// TestAPIVersion: stripe needs api_version (it pins Stripe-Version with it) and refuses a
// publishable key; the kinds whose APIs have no versions refuse one, as a sign of a gateway
// given the wrong kind.
func TestAPIVersion(t *testing.T) {
	creds := map[string]string{"api_key": "sk_test_secret123"}
	for _, kind := range gateways.Kinds() {
		s := gateways.Settings{BaseURL: "http://127.0.0.1:9101", Credentials: creds, APIVersion: "2026-08-26.dahlia"}
		g, err := gateways.NewWith(kind, s, http.DefaultClient)
		switch {
		case kind == "stripe" && (err != nil || g == nil):
			t.Errorf("NewWith(stripe, api_version %s) = %v, %v; want an adapter", s.APIVersion, g, err)
		case kind != "stripe" && (err == nil || g != nil || !strings.Contains(err.Error(), kind+": api_version: ")):
			t.Errorf("NewWith(%s, api_version %s) = %v, %v; want an error naming api_version", kind, s.APIVersion, g, err)
		}
	}
	for _, c := range []struct {
		name string
		s    gateways.Settings
		want string
	}{
		{"no api_version", gateways.Settings{BaseURL: "https://api.stripe.com", Credentials: creds}, "stripe: api_version is required"},
		{"an old api_version", gateways.Settings{BaseURL: "https://api.stripe.com", Credentials: creds, APIVersion: "2020-08-27"}, "older than 2022-11-15"},
		{"a publishable key", gateways.Settings{BaseURL: "https://api.stripe.com", Credentials: map[string]string{"api_key": "pk_live_0123456789"}, APIVersion: stripe.TestedAPIVersion}, "publishable key"},
	} {
		g, err := gateways.NewWith("stripe", c.s, http.DefaultClient)
		if err == nil || g != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: NewWith(stripe) = %v, %v; want an error saying %q", c.name, g, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "0123456789") {
			t.Errorf("%s: the error shows the key: %v", c.name, err)
		}
	}
}
