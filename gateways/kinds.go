// Package gateways names the adapters a configuration can use: a plain map from a gateway's kind
// ("paywell", "ding", "tranglo") to its constructor. Each adapter lives in its own package with
// its fake; this file is the one place that knows them all.
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
	"github.com/payrouter/payrouter/gateways/tranglo"
)

// ErrUnknownKind is returned by New for a kind that is not in Kinds.
var ErrUnknownKind = errors.New("unknown gateway kind")

// constructor builds one adapter. Each returns its *Client only when err is nil, so that a
// failure never hides a typed nil inside a non-nil payrouter.Gateway.
type constructor func(baseURL string, credentials map[string]string, client *http.Client) (payrouter.Gateway, error)

var constructors = map[string]constructor{
	"paywell": func(baseURL string, credentials map[string]string, client *http.Client) (payrouter.Gateway, error) {
		c, err := paywell.New(paywell.Config{BaseURL: baseURL, Credentials: credentials}, client)
		if err != nil {
			return nil, err
		}
		return c, nil
	},
	"ding": func(baseURL string, credentials map[string]string, client *http.Client) (payrouter.Gateway, error) {
		c, err := ding.New(ding.Config{BaseURL: baseURL, Credentials: credentials}, client)
		if err != nil {
			return nil, err
		}
		return c, nil
	},
	"tranglo": func(baseURL string, credentials map[string]string, client *http.Client) (payrouter.Gateway, error) {
		c, err := tranglo.New(tranglo.Config{BaseURL: baseURL, Credentials: credentials}, client)
		if err != nil {
			return nil, err
		}
		return c, nil
	},
}

// New returns the adapter of that kind for the gateway at baseURL, sending through client (the
// gateway's own transport; the deadline comes with each call's context). An unknown kind is
// ErrUnknownKind; a bad base URL or missing credentials.api_key is an error naming the field.
func New(kind string, baseURL string, credentials map[string]string, client *http.Client) (payrouter.Gateway, error) {
	c, ok := constructors[kind]
	if !ok {
		return nil, fmt.Errorf("%w %q: want one of %s", ErrUnknownKind, kind, strings.Join(Kinds(), ", "))
	}
	return c(baseURL, credentials, client)
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
