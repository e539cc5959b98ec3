package gateways_test

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/payrouter/payrouter/gateways"
)

func TestKinds(t *testing.T) {
	if got, want := gateways.Kinds(), []string{"ding", "paywell", "tranglo"}; !slices.Equal(got, want) {
		t.Fatalf("Kinds() = %v, want %v", got, want)
	}
}

func TestNew(t *testing.T) {
	creds := map[string]string{"api_key": "secret-key-123"}
	for _, kind := range gateways.Kinds() {
		t.Run(kind, func(t *testing.T) {
			g, err := gateways.New(kind, "http://127.0.0.1:9101", creds, http.DefaultClient)
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
				g, err := gateways.New(kind, c.url, c.creds, c.client)
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
	g, err := gateways.New("stripe", "http://127.0.0.1:1", map[string]string{"api_key": "k"}, http.DefaultClient)
	if !errors.Is(err, gateways.ErrUnknownKind) || g != nil {
		t.Fatalf("New(stripe) = %v, %v; want ErrUnknownKind", g, err)
	}
	if !strings.Contains(err.Error(), "ding, paywell, tranglo") {
		t.Errorf("the error should list the known kinds: %v", err)
	}
}
