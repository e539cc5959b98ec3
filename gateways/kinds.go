// Package gateways names the adapters a configuration can use: a plain map from a gateway's kind
// ("paywell", "ding", "tranglo", "stripe") to its constructor. Each adapter lives in its own
// package with its fake; this file is the one place that knows them all.
package gateways

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/ding"
	"github.com/payrouter/payrouter/gateways/paywell"
	"github.com/payrouter/payrouter/gateways/stripe"
	"github.com/payrouter/payrouter/gateways/tranglo"
)

// ErrUnknownKind is returned by New for a kind that is not in Kinds.
var ErrUnknownKind = errors.New("unknown gateway kind")

// Settings is what configuration says of one gateway's adapter (gateways.<name> in the file):
// where it is, its secrets, and the settings only some kinds take.
type Settings struct {
	// BaseURL is the gateway's API root (base_url).
	BaseURL string
	// Credentials are the secrets the adapter sends (credentials); every kind needs api_key.
	Credentials map[string]string
	// APIVersion is the version of the gateway's API the adapter pins in its requests
	// (api_version): required by stripe, refused by the kinds whose API has no versions to pin.
	APIVersion string
}

// constructor builds one adapter. Each returns its *Client only when err is nil, so that a
// failure never hides a typed nil inside a non-nil payrouter.Gateway.
type constructor func(s Settings, client *http.Client) (payrouter.Gateway, error)

var constructors = map[string]constructor{
	"paywell": func(s Settings, client *http.Client) (payrouter.Gateway, error) {
		if err := noAPIVersion("paywell", s); err != nil {
			return nil, err
		}
		c, err := paywell.New(paywell.Config{BaseURL: s.BaseURL, Credentials: s.Credentials}, client)
		if err != nil {
			return nil, err
		}
		return c, nil
	},
	"ding": func(s Settings, client *http.Client) (payrouter.Gateway, error) {
		if err := noAPIVersion("ding", s); err != nil {
			return nil, err
		}
		c, err := ding.New(ding.Config{BaseURL: s.BaseURL, Credentials: s.Credentials}, client)
		if err != nil {
			return nil, err
		}
		return c, nil
	},
	"tranglo": func(s Settings, client *http.Client) (payrouter.Gateway, error) {
		if err := noAPIVersion("tranglo", s); err != nil {
			return nil, err
		}
		c, err := tranglo.New(tranglo.Config{BaseURL: s.BaseURL, Credentials: s.Credentials}, client)
		if err != nil {
			return nil, err
		}
		return c, nil
	},
	"stripe": func(s Settings, client *http.Client) (payrouter.Gateway, error) {
		c, err := stripe.New(stripe.Config{BaseURL: s.BaseURL, Credentials: s.Credentials, APIVersion: s.APIVersion}, client)
		if err != nil {
			return nil, err
		}
		return c, nil
	},
}

// noAPIVersion refuses an api_version for a kind whose API has no versions to pin: set there, it
// would be a mistake (a Stripe gateway given the wrong kind, say), not a setting.
func noAPIVersion(kind string, s Settings) error {
	if s.APIVersion != "" {
		return fmt.Errorf("%s: api_version: the %s adapter speaks the one version of its API there is; leave api_version out", kind, kind)
	}
	return nil
}

// New returns the adapter of that kind for the gateway at baseURL, sending through client (the
// gateway's own transport; the deadline comes with each call's context): NewWith with only a base
// URL and credentials, which is all the kinds but stripe take.
func New(kind string, baseURL string, credentials map[string]string, client *http.Client) (payrouter.Gateway, error) {
	return NewWith(kind, Settings{BaseURL: baseURL, Credentials: credentials}, client)
}

// NewWith returns the adapter of that kind for the gateway s describes, sending through client.
// An unknown kind is ErrUnknownKind; a bad base URL, missing credentials.api_key, or an
// api_version the kind does not take (or needs and lacks) is an error naming the field.
func NewWith(kind string, s Settings, client *http.Client) (payrouter.Gateway, error) {
	c, ok := constructors[kind]
	if !ok {
		return nil, fmt.Errorf("%w %q: want one of %s", ErrUnknownKind, kind, strings.Join(Kinds(), ", "))
	}
	return c(s, client)
}

// Kinds lists the known kinds, sorted.
func Kinds() []string {
	kinds := make([]string, 0, len(constructors))
	for k := range constructors {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return kinds
}
