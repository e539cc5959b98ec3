package gatewaytest_test

import (
	"net/http"
	"testing"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/ding"
	"github.com/payrouter/payrouter/gateways/ding/dingsim"
	"github.com/payrouter/payrouter/gateways/gatewaytest"
	"github.com/payrouter/payrouter/gateways/paywell"
	"github.com/payrouter/payrouter/gateways/paywell/paywellsim"
	"github.com/payrouter/payrouter/gateways/stripe"
	"github.com/payrouter/payrouter/gateways/stripe/stripesim"
	"github.com/payrouter/payrouter/gateways/tranglo"
	"github.com/payrouter/payrouter/gateways/tranglo/tranglosim"
)

// adapters is every adapter with its fake.
var adapters = []gatewaytest.Adapter{
	{
		Name:      "paywell",
		NewServer: paywellsim.New,
		NewClient: func(baseURL string, client *http.Client) (payrouter.Gateway, error) {
			return paywell.New(paywell.Config{BaseURL: baseURL, Credentials: map[string]string{"api_key": "pw_test"}}, client)
		},
	},
	{
		Name:      "ding",
		NewServer: dingsim.New,
		NewClient: func(baseURL string, client *http.Client) (payrouter.Gateway, error) {
			return ding.New(ding.Config{BaseURL: baseURL, Credentials: map[string]string{"api_key": "dg_test"}}, client)
		},
	},
	{
		Name:      "stripe",
		NewServer: stripesim.New,
		NewClient: func(baseURL string, client *http.Client) (payrouter.Gateway, error) {
			return stripe.New(stripe.Config{BaseURL: baseURL, Credentials: map[string]string{"api_key": "sk_test_conformance"}, APIVersion: stripe.TestedAPIVersion}, client)
		},
		LooksUpFirst: true,
	},
	{
		Name:      "tranglo",
		NewServer: tranglosim.New,
		NewClient: func(baseURL string, client *http.Client) (payrouter.Gateway, error) {
			return tranglo.New(tranglo.Config{BaseURL: baseURL, Credentials: map[string]string{"api_key": "tg_test"}}, client)
		},
	},
}

func TestConformance(t *testing.T) {
	for _, a := range adapters {
		t.Run(a.Name, func(t *testing.T) {
			t.Parallel()
			gatewaytest.Run(t, a)
		})
	}
}
