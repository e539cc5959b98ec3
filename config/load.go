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

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/routing"
)

// Defaults of docs/configuration.md that are config's own. A key the file leaves out takes its
// default; a key the file gives, even as 0, keeps the file's value, so "consecutive_failures: 0"
// can mean "off". The defaults of the policies' settings are their packages' (resilience's
// timeout, bulkhead and breaker; routing's routes and hedges), filled in by fillAbsent.
const (
	defaultListen          = "127.0.0.1:8080"
	defaultAdminListen     = "127.0.0.1:9090"
	defaultRequestTimeout  = 10 * time.Second
	defaultIdempotencyTTL  = 24 * time.Hour
	defaultRedisTimeout    = 100 * time.Millisecond
	defaultDatabaseTimeout = 800 * time.Millisecond
	defaultRouteName       = "default"
)

// Fallback choices (docs/configuration.md, fallbacks): package fallback's policies.
const (
	FallbackFail    = fallback.Fail    // answer at once: 503 with Retry-After
	FallbackQueue   = fallback.Queue   // keep the operation durably and send it later (refunds)
	FallbackDegrade = fallback.Degrade // answer the last known status, marked stale
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
	c, err := Parse(data, getenv, kinds)
	if err != nil {
		return nil, err
	}
	c.file = path
	return c, nil
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
	c.literalSecrets = d.literal
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
	if !present["max_connections_per_address"] {
		c.MaxConnectionsPerAddress = defaultPerAddress(c.MaxConnections)
	}
	if !present["admin_max_connections_per_address"] {
		c.AdminMaxConnectionsPerAddress = defaultPerAddress(c.AdminMaxConnections)
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

	given := func(path string) bool { return present[path] }
	for name, g := range c.Gateways {
		p := join("gateways", name)
		fillAbsent(&g.TimeoutSettings, resilience.DefaultTimeoutSettings(), p, given)
		fillAbsent(&g.BulkheadSettings, resilience.DefaultBulkheadSettings(), p, given)
		fillAbsent(&g.Breaker, resilience.DefaultBreakerSettings(), p+".breaker", breakerGiven(p+".breaker", present))
		defString(&g.TLS.MinVersion, gatewayhttp.TLS12)
		applyGatewayWebhookDefaults(g.Webhook, p, present)
		c.Gateways[name] = g
	}

	// Without routes every charge goes to every gateway, in the order the file lists them: the
	// smallest useful configuration needs no routing section.
	if len(c.Routes) == 0 && len(c.GatewayNames) > 0 {
		c.Routes = []routing.Route{{Name: defaultRouteName, Gateways: slices.Clone(c.GatewayNames)}}
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		if strings.TrimSpace(string(r.Strategy)) == "" {
			r.Strategy = routing.Ordered
		}
		if r.Hedge != nil && !present[fmt.Sprintf("routes[%d].hedge.budget", i)] {
			r.Hedge.Budget = routing.DefaultHedgeBudget
		}
	}

	c.Fallbacks = c.Fallbacks.WithDefaults()
	applyLimitDefaults(c, present)
	applyWebhookDefaults(c, given)
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

// breakerGiven is given for a gateway's breaker section at path, except that the default trip
// rule applies only when the file names no rule at all: a file that sets failure_rate alone means
// the rate rule alone, and one that sets consecutive_failures: 0 alone has turned the breaker's
// tripping off on purpose (`payrouter check` warns about it).
func breakerGiven(path string, present map[string]bool) func(string) bool {
	rules := slices.ContainsFunc(payrouter.BreakerTripRules, func(key string) bool { return present[join(path, key)] })
	return func(p string) bool {
		return present[p] || (rules && p == path+".consecutive_failures")
	}
}

// fillAbsent gives each key of the section at path that the file leaves out (given false) the
// value def has, def being the defaults of the policy that owns the section's type; dst points
// to a struct of the same type. The keys are the decoder's (fieldsOf), inline fields' included.
// A string the file leaves empty takes its default too, as defString.
func fillAbsent[T any](dst *T, def T, path string, given func(string) bool) {
	v, d := reflect.ValueOf(dst).Elem(), reflect.ValueOf(def)
	fields, _ := fieldsOf(v.Type())
	for key, index := range fields {
		f, df := v.FieldByIndex(index), d.FieldByIndex(index)
		switch {
		case f.Kind() == reflect.String:
			if strings.TrimSpace(f.String()) == "" {
				f.Set(df)
			}
		case !given(join(path, key)) && !df.IsZero():
			f.Set(df)
		}
	}
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

func sortedKeys[K ~string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
