package config

import (
	"reflect"
	"slices"
	"testing"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/resilience"
)

// breakerOf builds the paywell charge breaker the way serve does, from the file's settings.
func breakerOf(t *testing.T, c *Config) *resilience.Breaker {
	t.Helper()
	settings, err := c.GatewaySettings()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(settings, func(s resilience.GatewaySettings) bool { return s.Name == "paywell" })
	return resilience.NewBreaker("paywell", payrouter.OpCharge, settings[i].Breaker, nil)
}

// failUntilOpen fails calls through b until it opens, at most limit, and returns how many it took.
func failUntilOpen(t *testing.T, b *resilience.Breaker, limit int) int {
	t.Helper()
	for n := 1; n <= limit; n++ {
		done, err := b.Allow()
		if err != nil {
			t.Fatalf("call %d: %v", n, err)
		}
		done(payrouter.OutcomeUnavailable)
		if b.State() == resilience.StateOpen {
			return n
		}
	}
	return 0
}

// TestMinRequestsOneDefault is the regression test of min_requests written twice: config
// defaulted an absent min_requests to 20 while resilience took a MinRequests of 0 as 1, so a
// breaker built in code tripped on the first failure that one built from a file waited 20
// calls for. Now the default is resilience's alone: absent in the file and 0 in code both mean
// DefaultMinRequests, and an explicit 0 beside failure_rate is refused, as
// docs/configuration.md says.
func TestMinRequestsOneDefault(t *testing.T) {
	const rule = "      consecutive_failures: 5\n"
	absent := mustParse(t, edit(t, baseYAML, rule, "      failure_rate: 0.5\n      window: 1m\n"))
	if got := failUntilOpen(t, breakerOf(t, absent), 100); got != resilience.DefaultMinRequests {
		t.Errorf("failure_rate 0.5, min_requests absent: opened after %d failures, want %d (the documented default)", got, resilience.DefaultMinRequests)
	}

	inCode := resilience.NewBreaker("paywell", payrouter.OpCharge, resilience.BreakerSettings{
		BreakerRules: payrouter.BreakerRules{FailureRate: 0.5, Window: absent.Gateways["paywell"].Breaker.Window, Cooldown: absent.Gateways["paywell"].Breaker.Cooldown},
	}, nil)
	if got := failUntilOpen(t, inCode, 100); got != resilience.DefaultMinRequests {
		t.Errorf("MinRequests 0 in code: opened after %d failures, want %d", got, resilience.DefaultMinRequests)
	}
	if got, want := inCode.Settings(), breakerOf(t, absent).Settings(); !reflect.DeepEqual(got, want) {
		t.Errorf("the same rules in code and in a file differ:\n code %+v\n file %+v", got, want)
	}

	got := problemsOf(t, edit(t, baseYAML, rule, "      failure_rate: 0.5\n      min_requests: 0\n"))
	if want := []string{"gateways.paywell.breaker.min_requests: must be >= 1 when failure_rate is set"}; !slices.Equal(got, want) {
		t.Errorf("explicit min_requests 0 with a rate: problems %q, want %q", got, want)
	}

	explicit := mustParse(t, edit(t, baseYAML, rule, "      failure_rate: 0.5\n      min_requests: 4\n      window: 1m\n"))
	if got := failUntilOpen(t, breakerOf(t, explicit), 100); got != 4 {
		t.Errorf("min_requests 4: opened after %d failures, want 4", got)
	}
}

// TestDefaultsAreThePolicies: a file that says nothing about a gateway's timeout, bulkhead and
// breaker gets exactly the settings their packages document as defaults.
func TestDefaultsAreThePolicies(t *testing.T) {
	c := mustParse(t, baseYAML)
	g := c.Gateways["ding"]
	if got, want := g.TimeoutSettings, resilience.DefaultTimeoutSettings(); !reflect.DeepEqual(got, want) {
		t.Errorf("timeout settings %+v, want resilience's defaults %+v", got, want)
	}
	if got, want := g.BulkheadSettings, resilience.DefaultBulkheadSettings(); got != want {
		t.Errorf("bulkhead settings %+v, want resilience's defaults %+v", got, want)
	}
	if got, want := g.Breaker, resilience.DefaultBreakerSettings(); got != want {
		t.Errorf("breaker settings %+v, want resilience's defaults %+v", got, want)
	}
}
