package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
)

// Defaults of docs/configuration.md. A key the file leaves out takes its default; a key the
// file gives, even as 0, keeps the file's value, so "consecutive_failures: 0" can mean "off".
const (
	defaultListen           = "127.0.0.1:8080"
	defaultAdminListen      = "127.0.0.1:9090"
	defaultRequestTimeout   = 10 * time.Second
	defaultIdempotencyTTL   = 24 * time.Hour
	defaultGatewayTimeout   = 3 * time.Second
	defaultMaxConcurrent    = 20
	defaultConsecutiveFails = 5
	defaultMinRequests      = 20
	defaultWindow           = 30 * time.Second
	defaultCooldown         = 30 * time.Second
	defaultHalfOpenRequests = 1
	defaultProbeInterval    = 5 * time.Second
	defaultProbeTimeout     = 2 * time.Second
	defaultRedisTimeout     = 100 * time.Millisecond
	defaultDatabaseTimeout  = 800 * time.Millisecond
	defaultRouteName        = "default"
)

// Fallback choices (docs/configuration.md, fallbacks): package fallback's policies.
const (
	FallbackFail    = fallback.Fail    // answer at once: 503 with Retry-After
	FallbackQueue   = fallback.Queue   // keep the operation durably and send it later (refunds)
	FallbackDegrade = fallback.Degrade // answer the last known status, marked stale
)

// HedgeP95 is the hedge.after value that hedges at the gateway's observed 95th percentile
// latency instead of a fixed delay.
const HedgeP95 = "p95"

// DefaultHedgeBudget is hedge.budget when the file leaves it out: hedges add at most 10% more
// gateway calls than the route has charges.
const DefaultHedgeBudget = 0.1

// Route strategies (routes[].strategy).
const (
	StrategyOrdered     = "ordered"      // the listed order, or split's weighted first choice
	StrategySuccessRate = "success_rate" // the gateway approving the most of its recent authorizations first
)

// ValidationError lists every problem of a configuration, one line each, naming the field path
// (or the line, for problems found while reading the YAML). Callers print it and exit 2.
type ValidationError struct {
	Problems []string
}

// Error returns the problems, one per line.
func (e *ValidationError) Error() string {
	return strings.Join(e.Problems, "\n")
}

// Load reads the configuration file at path; see Parse.
func Load(path string, getenv func(string) string, kinds []string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	return Parse(data, getenv, kinds)
}

// Parse reads a configuration: it parses the YAML, expands ${NAME} and ${NAME:-default} from
// getenv (nil: every variable is unset) inside the parsed values (expandTree), decodes strictly,
// applies the defaults and validates the result. kinds lists the gateway adapter kinds the
// binary knows (gateways.Kinds()); nil accepts any kind, for tools that only read the file.
// Every problem found is returned at once in a *ValidationError, one line each.
func Parse(data []byte, getenv func(string) string, kinds []string) (*Config, error) {
	c, d, err := decodeConfig(data, getenv)
	if err != nil {
		return nil, err
	}
	applyDefaults(c, d.present)
	problems := d.problems
	// A document that is not a mapping has no fields to validate; one line says it all.
	if !d.bad[""] {
		problems = append(problems, validateFile(c, kinds, d)...)
	}
	if len(problems) > 0 {
		return nil, &ValidationError{Problems: problems}
	}
	return c, nil
}

// decodeConfig parses text, expands its variables and decodes it into a Config, with the file
// order of gateways and splits. The decoder it returns holds the problems found, what the file
// gives, what was bad and which values came from the environment.
func decodeConfig(text []byte, getenv func(string) string) (*Config, *decoder, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(text))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, &ValidationError{Problems: []string{yamlProblem(err, text)}}
	}
	// A second document would be ignored by a plain Decode; a file that holds two configurations
	// is a mistake to stop at, not one to guess about.
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, nil, &ValidationError{Problems: []string{fmt.Sprintf("line %d: only one YAML document is allowed", extra.Line)}}
	} else if !errors.Is(err, io.EOF) {
		return nil, nil, &ValidationError{Problems: []string{yamlProblem(err, text)}}
	}
	env, problems := expandTree(&root, getenv)
	if len(problems) > 0 {
		return nil, nil, &ValidationError{Problems: problems}
	}

	c := &Config{}
	d := newDecoder()
	d.env = env
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		d.decode(root.Content[0], reflect.ValueOf(c).Elem(), "")
	}
	c.GatewayNames = d.order["gateways"]
	for i := range c.Routes {
		c.Routes[i].SplitOrder = d.order[fmt.Sprintf("routes[%d].split", i)]
	}
	return c, d, nil
}

// yamlProblem turns a yaml.v3 syntax error into one line like the others. Variables are
// expanded after parsing, so an unquoted ${NAME:-a,b} inside [ ] or { } is YAML's business
// first: the line says so when the file has a reference.
func yamlProblem(err error, text []byte) string {
	msg := strings.TrimPrefix(strings.ReplaceAll(err.Error(), "\n", " "), "yaml: ")
	var line int
	if _, err := fmt.Sscanf(msg, "line %d:", &line); err == nil && line > 0 {
		// The parser names the line where it noticed, which may be next to the value's.
		lines := bytes.Split(text, []byte("\n"))
		for _, l := range []int{line - 1, line, line - 2} {
			if l >= 0 && l < len(lines) && bytes.Contains(lines[l], []byte("${")) {
				return msg + " (a ${...} reference inside [ ] or { } must be quoted: \"${NAME}\")"
			}
		}
	}
	return msg
}

// applyDefaults fills in what the file leaves out; present tells which paths the file gives.
// Empty strings take their default too, so "${PAYROUTER_LISTEN:-}" with the variable unset
// behaves like a file without the key.
func applyDefaults(c *Config, present map[string]bool) {
	defString(&c.Listen, defaultListen)
	defString(&c.AdminListen, defaultAdminListen)
	if !present["max_connections"] {
		c.MaxConnections = defaultMaxConnections
	}
	if !present["admin_max_connections"] {
		c.AdminMaxConnections = defaultAdminMaxConnections
	}
	defDuration(&c.IdleTimeout, present["idle_timeout"], defaultIdleTimeout)
	defDuration(&c.AdminIdleTimeout, present["admin_idle_timeout"], defaultIdleTimeout)
	for _, t := range []*ListenerTLS{c.TLS, c.AdminTLS} {
		if t != nil {
			defString(&t.MinVersion, TLSVersion12)
		}
	}
	defDuration(&c.RequestTimeout, present["request_timeout"], defaultRequestTimeout)
	defDuration(&c.Idempotency.TTL, present["idempotency.ttl"], defaultIdempotencyTTL)
	defDuration(&c.State.RedisTimeout, present["state.redis_timeout"], defaultRedisTimeout)
	defDuration(&c.State.DatabaseTimeout, present["state.database_timeout"], defaultDatabaseTimeout)
	if !present["state.database_migrate"] {
		c.State.DatabaseMigrate = true
	}

	for name, g := range c.Gateways {
		p := join("gateways", name) + "."
		defDuration(&g.Timeout, present[p+"timeout"], defaultGatewayTimeout)
		if !present[p+"max_concurrent"] {
			g.MaxConcurrent = defaultMaxConcurrent
		}
		b := &g.Breaker
		p += "breaker."
		// The default trip rule applies only when the file names no rule at all: a file that
		// sets failure_rate alone means the rate rule alone, and one that sets
		// consecutive_failures: 0 alone has turned the breaker's tripping off on purpose
		// (`payrouter check` warns about it).
		if !present[p+"consecutive_failures"] && !present[p+"failures_in_window"] && !present[p+"failure_rate"] {
			b.ConsecutiveFailures = defaultConsecutiveFails
		}
		if !present[p+"min_requests"] {
			b.MinRequests = defaultMinRequests
		}
		defDuration(&b.Window, present[p+"window"], defaultWindow)
		defDuration(&b.Cooldown, present[p+"cooldown"], defaultCooldown)
		if !present[p+"half_open_requests"] {
			b.HalfOpenRequests = defaultHalfOpenRequests
		}
		defString(&b.Probe, ProbeInBand)
		defDuration(&b.ProbeInterval, present[p+"probe_interval"], defaultProbeInterval)
		defDuration(&b.ProbeTimeout, present[p+"probe_timeout"], defaultProbeTimeout)
		defString(&g.TLS.MinVersion, gatewayhttp.TLS12)
		c.Gateways[name] = g
	}

	// Without routes every charge goes to every gateway, in the order the file lists them: the
	// smallest useful configuration needs no routing section.
	if len(c.Routes) == 0 && len(c.GatewayNames) > 0 {
		c.Routes = []Route{{Name: defaultRouteName, Gateways: slices.Clone(c.GatewayNames)}}
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		defString(&r.Strategy, StrategyOrdered)
		if r.Hedge != nil && !present[fmt.Sprintf("routes[%d].hedge.budget", i)] {
			r.Hedge.Budget = DefaultHedgeBudget
		}
	}

	c.Fallbacks = c.Fallbacks.WithDefaults()
	applyLimitDefaults(c, present)
}

func defString(s *string, def string) {
	if strings.TrimSpace(*s) == "" {
		*s = def
	}
}

func defDuration(d *time.Duration, given bool, def time.Duration) {
	if !given {
		*d = def
	}
}

// Members returns the gateways a route may call, in the order the file lists them: the
// gateways list, or the keys of split.
func (r Route) Members() []string {
	if len(r.Gateways) > 0 {
		return r.Gateways
	}
	if len(r.SplitOrder) == len(r.Split) {
		return r.SplitOrder
	}
	// A Route built in code has no SplitOrder; sorted keys keep the answer deterministic.
	return sortedKeys(r.Split)
}

// IsCatchAll reports whether the route matches every charge (it has no match fields).
func (r Route) IsCatchAll() bool {
	m := r.Match
	return len(m.Currency) == 0 && len(m.Country) == 0 && m.MinAmount == 0 && m.MaxAmount == 0
}

// Delay returns the fixed hedging delay, or adaptive true when After is "p95" and the delay is
// the gateway's observed 95th percentile latency. It assumes a validated Hedge.
func (h Hedge) Delay() (d time.Duration, adaptive bool) {
	if h.After == HedgeP95 {
		return 0, true
	}
	d, _ = time.ParseDuration(h.After)
	return d, false
}

// GatewayOrder returns the gateway names in file order. A Config built in code, without
// GatewayNames, gets them sorted, so every listing stays deterministic.
func (c *Config) GatewayOrder() []string {
	if len(c.GatewayNames) == len(c.Gateways) {
		ok := true
		for _, n := range c.GatewayNames {
			if _, found := c.Gateways[n]; !found {
				ok = false
				break
			}
		}
		if ok {
			return c.GatewayNames
		}
	}
	return sortedKeys(c.Gateways)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
