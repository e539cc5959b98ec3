package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/payrouter/payrouter/routing"
)

// TestValidation: each impossible value gives one line naming the field path and the reason.
func TestValidation(t *testing.T) {
	const top = "request_timeout: 10s\n"
	tests := []struct {
		name     string
		old, new string
		want     []string // every problem, in order
	}{
		// Top level.
		{"no api key", "api_keys: [sk_test_key_0123456789abcdef]", "api_keys: []",
			[]string{"auth.api_keys: at least one API key is required"}},
		{"api keys absent", "  api_keys: [sk_test_key_0123456789abcdef]\n", "",
			[]string{"auth.api_keys: at least one API key is required"}},
		{"empty api key", "api_keys: [sk_test_key_0123456789abcdef]", `api_keys: [sk_test_key_0123456789abcdef, "", " "]`,
			[]string{"auth.api_keys[1]: must not be empty (is its environment variable set?)", "auth.api_keys[2]: must not be empty (is its environment variable set?)"}},
		{"listen without a port", top, top + "listen: \"8080\"\n",
			[]string{`listen: "8080" is not host:port (e.g. ":8080" or "127.0.0.1:8080")`}},
		{"listen port out of range", top, top + "listen: \":99999\"\n",
			[]string{`listen: ":99999" is not host:port (e.g. ":8080" or "127.0.0.1:8080")`}},
		{"admin_listen named port", top, top + "admin_listen: \"localhost:admin\"\n",
			[]string{`admin_listen: "localhost:admin" is not host:port (e.g. ":8080" or "127.0.0.1:8080")`}},
		{"admin_listen same as listen", top, top + "listen: \":7000\"\nadmin_listen: \":7000\"\n",
			[]string{"admin_listen: same address as listen; the admin API needs its own listener"}},
		{"request_timeout zero", top, "request_timeout: 0s\n",
			[]string{"request_timeout: must be > 0"}},
		{"idempotency ttl negative", top, top + "idempotency: {ttl: -1h}\n",
			[]string{"idempotency.ttl: must be > 0"}},
		{"redis timeout zero", top, top + "state: {redis_timeout: 0s}\n",
			[]string{"state.redis_timeout: must be > 0"}},
		{"redis timeout too long", top, top + "state: {redis_timeout: 10s}\n",
			[]string{"state.redis_timeout: must be <= 5s: every request may wait this long on a struggling Redis"}},
		{"redis_url scheme", top, top + "state: {redis_url: \"http://127.0.0.1:6379\", database_url: \"postgres://db/p\"}\n",
			[]string{`state.redis_url: must be a redis:// or rediss:// URL, got scheme "http"`}},
		{"redis_url without host", top, top + "state: {redis_url: \"redis:///0\", database_url: \"postgres://db/p\"}\n",
			[]string{"state.redis_url: needs a host (redis://host:6379/0)"}},
		{"redis_url unparsable, password not echoed", top, top + "state: {redis_url: \"redis://:hunter2@%zz\", database_url: \"postgres://db/p\"}\n",
			[]string{"state.redis_url: not a URL (want redis://host:6379/0 or rediss://...)"}},
		{"redis_url without database_url", top, top + "state: {redis_url: \"redis://127.0.0.1:6379/0\"}\n",
			[]string{"state.redis_url: needs state.database_url too: instances that share breakers must share their money state, or one Idempotency-Key could charge twice across them"}},
		{"database_url scheme", top, top + "state: {database_url: \"mysql://db/p\"}\n",
			[]string{`state.database_url: must be a postgres:// or postgresql:// URL, got scheme "mysql"`}},
		{"database_url unparsable, password not echoed", top, top + "state: {database_url: \"postgres://u:hunter2@%zz\"}\n",
			[]string{"state.database_url: not a URL (want postgres://user@host:5432/payrouter)"}},
		{"database_timeout too long", top, top + "state: {database_timeout: 30s}\n",
			[]string{"state.database_timeout: must be <= 10s: every money request may wait this long on a database that does not answer"}},

		// Gateways.
		{"unknown kind", "kind: paywell", "kind: foo",
			[]string{`gateways.paywell.kind: unknown kind "foo" (known: ding, paywell, tranglo)`}},
		{"missing kind", "    kind: ding\n", "",
			[]string{"gateways.ding.kind: required (known: ding, paywell, tranglo)"}},
		{"bad gateway name", "  tranglo:\n", "  \"tranglo gw\":\n",
			[]string{
				`gateways."tranglo gw": name must be letters, digits, '-' or '_' (it labels metrics and admin paths)`,
				`routes[0] (asia): gateway "tranglo" is not configured`,
				`routes[2] (default): gateway "tranglo" is not configured`,
			}},
		{"missing base_url", "    base_url: http://127.0.0.1:9102\n", "",
			[]string{"gateways.ding.base_url: required (an absolute http:// or https:// URL)"}},
		{"relative base_url", "base_url: http://127.0.0.1:9102", "base_url: /api",
			[]string{"gateways.ding.base_url: must be an absolute http:// or https:// URL"}},
		{"ftp base_url", "base_url: http://127.0.0.1:9102", "base_url: ftp://127.0.0.1",
			[]string{"gateways.ding.base_url: must be an absolute http:// or https:// URL"}},
		{"base_url with a query", "base_url: http://127.0.0.1:9102", "base_url: http://127.0.0.1:9102/?api_key=secret",
			[]string{"gateways.ding.base_url: must have no query or fragment (credentials go under credentials:)"}},
		{"timeout zero", "timeout: 3s", "timeout: 0s",
			[]string{"gateways.paywell.timeout: must be > 0"}},
		{"timeout negative", "timeout: 3s", "timeout: -3s",
			[]string{"gateways.paywell.timeout: must be > 0"}},
		{"max_concurrent zero", "max_concurrent: 20", "max_concurrent: 0",
			[]string{"gateways.paywell.max_concurrent: must be >= 1"}},
		{"max_wait negative", "max_concurrent: 20", "max_concurrent: 20\n    max_wait: -1s",
			[]string{"gateways.paywell.max_wait: must be >= 0"}},
		{"unknown operation", "max_concurrent: 20", "max_concurrent: 20\n    operations: {charg: {timeout: 1s}}",
			[]string{"gateways.paywell.operations.charg: unknown operation (known: charge, capture, void, refund, status)"}},
		{"operation timeout negative", "max_concurrent: 20", "max_concurrent: 20\n    operations: {refund: {timeout: -1s}}",
			[]string{"gateways.paywell.operations.refund.timeout: must be >= 0 (0: the gateway's timeout)"}},

		// Breakers.
		{"consecutive_failures negative", "consecutive_failures: 5", "consecutive_failures: -1",
			[]string{"gateways.paywell.breaker.consecutive_failures: must be >= 0 (0: off)"}},
		{"failures_in_window negative", "consecutive_failures: 5", "failures_in_window: -2",
			[]string{"gateways.paywell.breaker.failures_in_window: must be >= 0 (0: off)"}},
		{"failure_rate above 1", "consecutive_failures: 5", "failure_rate: 1.5",
			[]string{"gateways.paywell.breaker.failure_rate: must be between 0 and 1 (0: off), got 1.5"}},
		{"failure_rate negative", "consecutive_failures: 5", "failure_rate: -0.1",
			[]string{"gateways.paywell.breaker.failure_rate: must be between 0 and 1 (0: off), got -0.1"}},
		{"failure_rate NaN", "consecutive_failures: 5", "failure_rate: .nan",
			[]string{"gateways.paywell.breaker.failure_rate: must be between 0 and 1 (0: off), got NaN"}},
		{"min_requests zero with a rate", "consecutive_failures: 5", "failure_rate: 0.5\n      min_requests: 0",
			[]string{"gateways.paywell.breaker.min_requests: must be >= 1 when failure_rate is set"}},
		{"min_requests negative", "consecutive_failures: 5", "consecutive_failures: 5\n      min_requests: -1",
			[]string{"gateways.paywell.breaker.min_requests: must be >= 0"}},
		{"window zero", "cooldown: 30s", "cooldown: 30s\n      window: 0s",
			[]string{"gateways.paywell.breaker.window: must be > 0"}},
		{"cooldown zero", "cooldown: 30s", "cooldown: 0s",
			[]string{"gateways.paywell.breaker.cooldown: must be > 0"}},
		{"window negative: one line, the file's rule", "cooldown: 30s", "cooldown: 30s\n      window: -1s",
			[]string{"gateways.paywell.breaker.window: must be > 0"}},
		{"window and cooldown zero, in field order", "cooldown: 30s", "cooldown: 0s\n      window: 0s",
			[]string{"gateways.paywell.breaker.window: must be > 0", "gateways.paywell.breaker.cooldown: must be > 0"}},
		{"half_open_requests zero", "cooldown: 30s", "cooldown: 30s\n      half_open_requests: 0",
			[]string{"gateways.paywell.breaker.half_open_requests: must be >= 1"}},
		{"probe unknown", "cooldown: 30s", "cooldown: 30s\n      probe: sideways",
			[]string{`gateways.paywell.breaker.probe: must be in_band or out_of_band, got "sideways"`}},
		{"probe_interval zero", "cooldown: 30s", "cooldown: 30s\n      probe_interval: 0s",
			[]string{"gateways.paywell.breaker.probe_interval: must be > 0"}},
		{"probe_timeout above probe_interval", "cooldown: 30s", "cooldown: 30s\n      probe_interval: 1s\n      probe_timeout: 2s",
			[]string{"gateways.paywell.breaker.probe_timeout: must be <= probe_interval (1s): one probe must end before the next"}},

		// Routes.
		{"route gateway not configured", "gateways: [paywell, ding, tranglo]", "gateways: [paywell, stripe, tranglo]",
			[]string{`routes[2] (default): gateway "stripe" is not configured`}},
		{"route gateway twice", "gateways: [tranglo, paywell]", "gateways: [tranglo, paywell, tranglo]",
			[]string{`routes[0] (asia): gateway "tranglo" is listed twice`}},
		{"split gateway not configured", "split: {paywell: 70, ding: 30}", "split: {paywell: 70, stripe: 30}",
			[]string{`routes[1] (big-tickets): split: gateway "stripe" is not configured`}},
		{"split weight zero", "split: {paywell: 70, ding: 30}", "split: {paywell: 70, ding: 0}",
			[]string{"routes[1] (big-tickets): split.ding: weight must be > 0, got 0"}},
		{"split weight negative", "split: {paywell: 70, ding: 30}", "split: {paywell: -1, ding: 30}",
			[]string{"routes[1] (big-tickets): split.paywell: weight must be > 0, got -1"}},
		{"route without gateways", "    gateways: [paywell, ding, tranglo]\n", "",
			[]string{"routes[2] (default): needs gateways (tried in order) or split (weighted first choice)"}},
		{"route with both", "split: {paywell: 70, ding: 30}", "split: {paywell: 70, ding: 30}\n    gateways: [paywell]",
			[]string{"routes[1] (big-tickets): give gateways or split, not both"}},
		{"route without a name", "  - name: default\n", "  - name: \"\"\n",
			[]string{"routes[2].name: required"}},
		{"route name twice", "  - name: default\n", "  - name: asia\n",
			[]string{"routes[2] (asia): name already used by routes[0]"}},
		{"lower-case currency", "currency: [MYR]", "currency: [MYR, sgd]",
			[]string{`routes[0] (asia): match.currency[1]: "sgd" is not a currency code (ISO 4217: 3 upper-case letters)`}},
		{"long country", "country: [MY]", "country: [MYS]",
			[]string{`routes[0] (asia): match.country[0]: "MYS" is not a country code (ISO 3166 alpha-2: 2 upper-case letters)`}},
		{"min above max", "match: {min_amount: 100000}", "match: {min_amount: 100000, max_amount: 500}",
			[]string{"routes[1] (big-tickets): match: min_amount 100000 is above max_amount 500; no charge can match"}},
		{"negative amounts", "match: {min_amount: 100000}", "match: {min_amount: -1, max_amount: -2}",
			[]string{"routes[1] (big-tickets): match.min_amount: must be >= 0 (0: no lower bound)", "routes[1] (big-tickets): match.max_amount: must be >= 0 (0: no upper bound)"}},
		{"hedge not a duration", "split: {paywell: 70, ding: 30}", "split: {paywell: 70, ding: 30}\n    hedge: {after: fast}",
			[]string{`line 29: routes[1].hedge.after: must be a positive duration ("800ms") or "p95", got "fast"`}},
		{"hedge zero", "split: {paywell: 70, ding: 30}", "split: {paywell: 70, ding: 30}\n    hedge: {after: 0s}",
			[]string{`line 29: routes[1].hedge.after: must be a positive duration ("800ms") or "p95", got "0s"`}},
		{"hedge empty", "split: {paywell: 70, ding: 30}", "split: {paywell: 70, ding: 30}\n    hedge: {}",
			[]string{`routes[1] (big-tickets): hedge.after: must be a positive duration ("800ms") or "p95", got ""`}},
		{"hedge budget zero", "split: {paywell: 70, ding: 30}", "split: {paywell: 70, ding: 30}\n    hedge: {after: p95, budget: 0}",
			[]string{"routes[1] (big-tickets): hedge.budget: must be > 0 and <= 1 (the most extra gateway calls hedges may add, as a share of the route's charges), got 0"}},
		{"hedge budget above 1", "split: {paywell: 70, ding: 30}", "split: {paywell: 70, ding: 30}\n    hedge: {after: 800ms, budget: 1.5}",
			[]string{"routes[1] (big-tickets): hedge.budget: must be > 0 and <= 1 (the most extra gateway calls hedges may add, as a share of the route's charges), got 1.5"}},
		{"hedge budget NaN", "split: {paywell: 70, ding: 30}", "split: {paywell: 70, ding: 30}\n    hedge: {after: 800ms, budget: .nan}",
			[]string{"routes[1] (big-tickets): hedge.budget: must be > 0 and <= 1 (the most extra gateway calls hedges may add, as a share of the route's charges), got NaN"}},
		{"hedge budget not a number", "split: {paywell: 70, ding: 30}", "split: {paywell: 70, ding: 30}\n    hedge: {after: 800ms, budget: lots}",
			[]string{`line 29: routes[1].hedge.budget: want a number, got "lots"`}},
		{"strategy unknown", "split: {paywell: 70, ding: 30}", "split: {paywell: 70, ding: 30}\n    strategy: fastest",
			[]string{`routes[1] (big-tickets): strategy: must be ordered or success_rate, got "fastest"`}},

		// Fallbacks.
		{"fallbacks out of their sets", top, top + "fallbacks: {charge: queue, refund: degrade, status: queue}\n",
			[]string{`fallbacks.charge: must be fail, got "queue"`, `fallbacks.refund: must be queue or fail, got "degrade"`, `fallbacks.status: must be degrade or fail, got "queue"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := problemsOf(t, edit(t, baseYAML, tc.old, tc.new))
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestValidationNoGateways(t *testing.T) {
	got := problemsOf(t, "auth: {api_keys: [key_0123456789abcdef012345]}\n")
	if !slices.Equal(got, []string{"gateways: at least one gateway is required"}) {
		t.Errorf("problems = %q", got)
	}
}

func TestValidationAll(t *testing.T) {
	text := edit(t, baseYAML, "timeout: 3s", "timeout: 0s")
	text = edit(t, text, "max_concurrent: 20", "max_concurrent: 0")
	text = edit(t, text, "kind: ding", "kind: nope")
	text = edit(t, text, "api_keys: [sk_test_key_0123456789abcdef]", "api_keys: []")
	text = edit(t, text, "gateways: [paywell, ding, tranglo]", "gateways: [paywell, stripe]")
	want := []string{
		"auth.api_keys: at least one API key is required",
		"gateways.paywell.timeout: must be > 0",
		"gateways.paywell.max_concurrent: must be >= 1",
		`gateways.ding.kind: unknown kind "nope" (known: ding, paywell, tranglo)`,
		`routes[2] (default): gateway "stripe" is not configured`,
	}
	_, err := Parse([]byte(text), nil, testKinds)
	var ve *ValidationError
	if !errors.As(err, &ve) || !slices.Equal(ve.Problems, want) {
		t.Fatalf("problems:\n got %v\nwant %q", err, want)
	}
	if got := err.Error(); got != strings.Join(want, "\n") {
		t.Errorf("Error() = %q, want the problems one per line", got)
	}
}

// TestValidationKindsNil: without a list of kinds, any kind is accepted (a tool that only reads
// the file), but one must still be given.
func TestValidationKindsNil(t *testing.T) {
	if _, err := Parse([]byte(edit(t, baseYAML, "kind: ding", "kind: custom")), nil, nil); err != nil {
		t.Errorf("kinds nil: %v", err)
	}
	_, err := Parse([]byte(edit(t, baseYAML, "    kind: ding\n", "")), nil, nil)
	if err == nil || err.Error() != "gateways.ding.kind: required" {
		t.Errorf("kinds nil, kind missing: %v", err)
	}
}

func TestValidHedges(t *testing.T) {
	for _, after := range []string{"800ms", "p95", "1s"} {
		c := mustParse(t, edit(t, baseYAML, "split: {paywell: 70, ding: 30}", "split: {paywell: 70, ding: 30}\n    hedge: {after: "+after+"}"))
		if h := c.Routes[1].Hedge; h == nil || h.After.String() != after || h.Budget != routing.DefaultHedgeBudget {
			t.Errorf("hedge.after %s: got %+v, want budget %v by default", after, h, routing.DefaultHedgeBudget)
		}
	}
	for _, budget := range []float64{0.05, 1} {
		c := mustParse(t, edit(t, baseYAML, "split: {paywell: 70, ding: 30}",
			fmt.Sprintf("split: {paywell: 70, ding: 30}\n    hedge: {after: p95, budget: %v}", budget)))
		if h := c.Routes[1].Hedge; h == nil || h.Budget != budget {
			t.Errorf("hedge.budget %v: got %+v", budget, h)
		}
	}
	if c := mustParse(t, baseYAML); c.Routes[1].Hedge != nil {
		t.Errorf("a route without hedge got %+v", c.Routes[1].Hedge)
	}
}

func TestValidStrategies(t *testing.T) {
	c := mustParse(t, edit(t, baseYAML, "split: {paywell: 70, ding: 30}", "split: {paywell: 70, ding: 30}\n    strategy: success_rate"))
	want := []routing.Strategy{routing.Ordered, routing.SuccessRate, routing.Ordered} // absent: ordered
	for i, r := range c.Routes {
		if r.Strategy != want[i] {
			t.Errorf("routes[%d].strategy = %q, want %q", i, r.Strategy, want[i])
		}
	}
}

func TestValidateBuiltInCode(t *testing.T) {
	c := mustParse(t, baseYAML)
	c.Gateways["ding"] = Gateway{Kind: "ding"} // no base URL, zero timeouts, no breaker settings
	err := c.Validate(testKinds)
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) < 5 {
		t.Fatalf("Validate: want every problem of ding, got %v", err)
	}
	for _, p := range ve.Problems {
		if !strings.HasPrefix(p, "gateways.ding.") {
			t.Errorf("unexpected problem %q", p)
		}
	}
}
