package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/routing"
)

// Validate checks a Config that already holds its defaults (Parse does both) and returns every
// problem in a *ValidationError, or nil. It is exported for configurations built in code, such
// as tests of other packages. kinds lists the known gateway adapter kinds; nil accepts any.
func (c *Config) Validate(kinds []string) error {
	if problems := validate(c, kinds, nil); len(problems) > 0 {
		return &ValidationError{Problems: problems}
	}
	return nil
}

// validator collects problems, one line each, in the order a reader meets the fields.
type validator struct {
	c        *Config
	bad      map[string]bool       // paths the decoder could not read: their problems are said already
	env      map[string]*expansion // paths whose value came from ${...}: never quoted
	problems []string
}

func validate(c *Config, kinds []string, bad map[string]bool) []string {
	return validateWith(&validator{c: c, bad: bad}, kinds)
}

// validateFile validates a Config decoded by d, which knows what came from the environment.
func validateFile(c *Config, kinds []string, d *decoder) []string {
	return validateWith(&validator{c: c, bad: d.bad, env: d.fromEnv}, kinds)
}

func validateWith(v *validator, kinds []string) []string {
	v.top()
	v.gateways(kinds)
	v.routes()
	v.fallbacks()
	v.limits()
	v.webhooks()
	return v.problems
}

// addf records a problem at path, unless the decoder already reported the value at path (or
// one containing it): a bad duration should give one line, not also "must be > 0".
func (v *validator) addf(path, format string, args ...any) {
	for p := path; p != ""; {
		if v.bad[p] {
			return
		}
		i := strings.LastIndexAny(p, ".[")
		if i <= 0 {
			break
		}
		p = p[:i]
	}
	v.problems = append(v.problems, v.label(path)+": "+fmt.Sprintf(format, args...))
}

// show quotes a value for a message about path, unless it came from ${...}: then it names the
// variables instead, since the value may be a secret put in the wrong place.
func (v *validator) show(path string, value any) string {
	if e := v.env[path]; e != nil {
		return "the value of " + e.from() + " (not shown)"
	}
	if s, ok := value.(string); ok {
		return strconv.Quote(clip([]byte(s)))
	}
	return fmt.Sprint(value)
}

// label renders a path for people: a route is named by its index and its name,
// "routes[1] (big-tickets): split.paywell".
func (v *validator) label(path string) string {
	rest, ok := strings.CutPrefix(path, "routes[")
	if !ok {
		return path
	}
	idx, after, ok := strings.Cut(rest, "]")
	i, err := strconv.Atoi(idx)
	if !ok || err != nil || i < 0 || i >= len(v.c.Routes) || v.c.Routes[i].Name == "" || v.env[fmt.Sprintf("routes[%d].name", i)] != nil {
		return path
	}
	label := fmt.Sprintf("routes[%d] (%s)", i, display(v.c.Routes[i].Name))
	if after != "" {
		label += ": " + strings.TrimPrefix(after, ".")
	}
	return label
}

func (v *validator) top() {
	c := v.c
	v.hostPort("listen", c.Listen)
	v.hostPort("admin_listen", c.AdminListen)
	// Port 0 asks the system for a free port: two listeners on ":0" never clash.
	if c.AdminListen == c.Listen && !strings.HasSuffix(c.Listen, ":0") {
		v.addf("admin_listen", "same address as listen; the admin API needs its own listener")
	}
	v.listeners()
	v.positive("request_timeout", c.RequestTimeout)

	v.auth()

	if s := c.State.RedisURL; s != "" {
		// The URL may hold a password: name what is wrong, never echo the value.
		u, err := url.Parse(s)
		switch {
		case err != nil:
			v.addf("state.redis_url", "not a URL (want redis://host:6379/0 or rediss://...)")
		case u.Scheme != "redis" && u.Scheme != "rediss":
			v.addf("state.redis_url", "must be a redis:// or rediss:// URL, got scheme %s", v.show("state.redis_url", u.Scheme))
		case u.Host == "":
			v.addf("state.redis_url", "needs a host (redis://host:6379/0)")
		}
	}
	if s := c.State.DatabaseURL; s != "" {
		u, err := url.Parse(s)
		switch {
		case err != nil:
			v.addf("state.database_url", "not a URL (want postgres://user@host:5432/payrouter)")
		case u.Scheme != "postgres" && u.Scheme != "postgresql":
			v.addf("state.database_url", "must be a postgres:// or postgresql:// URL, got scheme %s", v.show("state.database_url", u.Scheme))
		case u.Host == "" && u.Query().Get("host") == "":
			v.addf("state.database_url", "needs a host (postgres://user@host:5432/payrouter)")
		}
	}
	if c.State.RedisURL != "" && c.State.DatabaseURL == "" {
		v.addf("state.redis_url", "needs state.database_url too: instances that share breakers must share their money state, or one Idempotency-Key could charge twice across them")
	}
	v.positive("state.database_timeout", c.State.DatabaseTimeout)
	if c.State.DatabaseTimeout > 10*time.Second {
		v.addf("state.database_timeout", "must be <= 10s: every money request may wait this long on a database that does not answer")
	}
	v.positive("state.redis_timeout", c.State.RedisTimeout)
	if c.State.RedisTimeout > 5*time.Second {
		v.addf("state.redis_timeout", "must be <= 5s: every request may wait this long on a struggling Redis")
	}
	v.positive("idempotency.ttl", c.Idempotency.TTL)
}

func (v *validator) gateways(kinds []string) {
	c := v.c
	if len(c.Gateways) == 0 {
		v.addf("gateways", "at least one gateway is required")
	}
	known := slices.Sorted(slices.Values(kinds))
	for _, name := range c.GatewayOrder() {
		g := c.Gateways[name]
		p := join("gateways", name)
		if !validName(name) {
			v.addf(p, "name must be letters, digits, '-' or '_' (it labels metrics and admin paths)")
		}

		switch {
		case g.Kind == "" && kinds == nil:
			v.addf(p+".kind", "required")
		case g.Kind == "":
			v.addf(p+".kind", "required (known: %s)", strings.Join(known, ", "))
		case kinds != nil && !slices.Contains(kinds, g.Kind):
			v.addf(p+".kind", "unknown kind %s (known: %s)", v.show(p+".kind", g.Kind), strings.Join(known, ", "))
		}

		if g.BaseURL == "" {
			v.addf(p+".base_url", "required (an absolute http:// or https:// URL)")
		} else if u, err := url.Parse(g.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.addf(p+".base_url", "must be an absolute http:// or https:// URL")
		} else if u.RawQuery != "" || u.Fragment != "" {
			v.addf(p+".base_url", "must have no query or fragment (credentials go under credentials:)")
		} else if u.Scheme == "http" {
			if !g.Insecure && !loopbackHost(u.Hostname()) {
				v.addf(p+".base_url", "plain http:// to %s, which is not loopback: card tokens and credentials would cross the network unencrypted; use https://, or set %s.insecure: true if the path is protected some other way",
					u.Hostname(), p)
			}
			if g.TLS.configured() {
				v.addf(p+".tls", "applies to an https:// base_url only; base_url is plain http://")
			}
		}
		v.gatewayTLS(p+".tls", g.TLS)

		v.positive(p+".timeout", g.Timeout)
		if g.MaxConcurrent < 1 {
			v.addf(p+".max_concurrent", "must be >= 1")
		}
		if g.MaxWait < 0 {
			v.addf(p+".max_wait", "must be >= 0")
		}
		for _, op := range sortedKeys(g.Operations) {
			if !slices.Contains(payrouter.Operations, op) {
				v.addf(join(p+".operations", string(op)), "unknown operation (known: %s)", operationList())
			}
			if g.Operations[op].Timeout < 0 {
				v.addf(join(p+".operations", string(op))+".timeout", "must be >= 0 (0: the gateway's timeout)")
			}
		}
		v.breaker(p+".breaker", g.Breaker)
		v.gatewayWebhook(p, g.Webhook)
	}
}

// gatewayTLS reads and checks the gateway's TLS files as serve will (gatewayhttp.ClientTLS.Load),
// one problem per field, naming the path and never a file's contents.
func (v *validator) gatewayTLS(p string, t GatewayTLS) {
	_, _, err := t.ClientTLS().Load()
	var te *gatewayhttp.TLSError
	if errors.As(err, &te) {
		for _, prob := range te.Problems {
			if prob.Path == "" {
				v.addf(p+"."+prob.Field, "%s", prob.Reason)
			} else {
				v.addf(p+"."+prob.Field, "%s: %s", prob.Path, prob.Reason)
			}
		}
	} else if err != nil {
		v.addf(p, "%v", err)
	}
}

// loopbackHost reports whether host (a URL's, without brackets or port) is this machine only:
// 127.0.0.0/8, ::1 or localhost. Plain http:// to it never crosses a network.
func loopbackHost(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (v *validator) breaker(p string, b resilience.BreakerSettings) {
	// The trip rules are checked as every shared store checks them, but a file must give a
	// window: that stricter rule stands in for the rules' own, in its place.
	windowChecked := false
	checkWindow := func() {
		if !windowChecked {
			windowChecked = true
			v.positive(p+".window", b.Window)
		}
	}
	for _, pr := range b.BreakerRules.Problems() {
		path := p + "." + pr.Key
		switch {
		case pr.Key == "window":
			checkWindow()
			continue
		case pr.Key == "cooldown":
			checkWindow()
		}
		if pr.Got != nil {
			v.addf(path, "%s, got %s", pr.Must, v.show(path, pr.Got))
			continue
		}
		v.addf(path, "%s", pr.Must)
	}
	checkWindow()
	if b.HalfOpenRequests < 1 {
		v.addf(p+".half_open_requests", "must be >= 1")
	}
	if b.Probe != resilience.ProbeInBand && b.Probe != resilience.ProbeOutOfBand {
		v.addf(p+".probe", "must be %s or %s, got %s", resilience.ProbeInBand, resilience.ProbeOutOfBand, v.show(p+".probe", string(b.Probe)))
	}
	v.positive(p+".probe_interval", b.ProbeInterval)
	v.positive(p+".probe_timeout", b.ProbeTimeout)
	if b.ProbeTimeout > b.ProbeInterval && b.ProbeInterval > 0 {
		v.addf(p+".probe_timeout", "must be <= probe_interval (%s): one probe must end before the next", v.show(p+".probe_interval", b.ProbeInterval))
	}
}

func (v *validator) routes() {
	c := v.c
	firstUse := map[string]int{}
	for i, r := range c.Routes {
		p := fmt.Sprintf("routes[%d]", i)
		if r.Name == "" {
			v.addf(p+".name", "required")
		} else if j, dup := firstUse[r.Name]; dup {
			v.addf(p, "name already used by routes[%d]", j)
		} else {
			firstUse[r.Name] = i
		}

		switch {
		case v.bad[p+".gateways"] || v.bad[p+".split"]:
			// Said already, where it could not be read.
		case len(r.Gateways) == 0 && len(r.Split) == 0:
			v.addf(p, "needs gateways (tried in order) or split (weighted first choice)")
		case len(r.Gateways) > 0 && len(r.Split) > 0:
			v.addf(p, "give gateways or split, not both")
		}
		seen := map[string]bool{}
		for j, name := range r.Gateways {
			item := fmt.Sprintf("%s.gateways[%d]", p, j)
			if _, ok := c.Gateways[name]; !ok {
				v.addf(p, "gateway %s is not configured", v.show(item, name))
			}
			if seen[name] {
				v.addf(p, "gateway %s is listed twice", v.show(item, name))
			}
			seen[name] = true
		}
		// With gateways as well, split is refused above; its names need no second complaint.
		if len(r.Gateways) == 0 {
			for _, w := range r.Split {
				if _, ok := c.Gateways[w.Gateway]; !ok {
					v.addf(p, "split: gateway %q is not configured", w.Gateway)
				}
				if w.Weight <= 0 {
					v.addf(join(p+".split", w.Gateway), "weight must be > 0, got %s", v.show(join(p+".split", w.Gateway), w.Weight))
				}
			}
		}

		v.match(p+".match", r.Match)

		if r.Hedge != nil {
			// A value the file gives is read (and refused, with its line) by the decoder.
			if r.Hedge.After == (routing.HedgeAfter{}) {
				v.addf(p+".hedge.after", "must be a positive duration (\"800ms\") or %q, got %s", routing.HedgeP95, v.show(p+".hedge.after", ""))
			}
			// Written so that NaN, which compares false with everything, is refused too.
			if b := r.Hedge.Budget; !(b > 0 && b <= 1) {
				v.addf(p+".hedge.budget", "must be > 0 and <= 1 (the most extra gateway calls hedges may add, as a share of the route's charges), got %s", v.show(p+".hedge.budget", b))
			}
		}
		if r.Strategy != routing.Ordered && r.Strategy != routing.SuccessRate {
			v.addf(p+".strategy", "must be %s or %s, got %s", routing.Ordered, routing.SuccessRate, v.show(p+".strategy", string(r.Strategy)))
		}
	}
}

func (v *validator) match(p string, m routing.Match) {
	for i, cur := range m.Currency {
		if path := fmt.Sprintf("%s.currency[%d]", p, i); !upperLetters(cur, 3) {
			v.addf(path, "%s is not a currency code (ISO 4217: 3 upper-case letters)", v.show(path, cur))
		}
	}
	for i, country := range m.Country {
		if path := fmt.Sprintf("%s.country[%d]", p, i); !upperLetters(country, 2) {
			v.addf(path, "%s is not a country code (ISO 3166 alpha-2: 2 upper-case letters)", v.show(path, country))
		}
	}
	if m.MinAmount < 0 {
		v.addf(p+".min_amount", "must be >= 0 (0: no lower bound)")
	}
	if m.MaxAmount < 0 {
		v.addf(p+".max_amount", "must be >= 0 (0: no upper bound)")
	}
	if m.MinAmount > 0 && m.MaxAmount > 0 && m.MinAmount > m.MaxAmount {
		v.addf(p, "min_amount %s is above max_amount %s; no charge can match", v.show(p+".min_amount", m.MinAmount), v.show(p+".max_amount", m.MaxAmount))
	}
}

// fallbacks reports each policy its operation does not allow (fallback.Settings.Invalid).
func (v *validator) fallbacks() {
	for _, bad := range v.c.Fallbacks.Invalid() {
		path := "fallbacks." + bad.Key
		v.addf(path, "must be %s, got %s", bad.Want(), v.show(path, string(bad.Got)))
	}
}

func (v *validator) positive(path string, d time.Duration) {
	if d <= 0 {
		v.addf(path, "must be > 0")
	}
}

// hostPort checks a listener address: a port number, with an optional host.
func (v *validator) hostPort(path, addr string) {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		var n int
		n, err = strconv.Atoi(port)
		if err == nil && (n < 0 || n > 65535) {
			err = fmt.Errorf("port out of range")
		}
	}
	if err != nil {
		v.addf(path, "%s is not host:port (e.g. \":8080\" or \"127.0.0.1:8080\")", v.show(path, addr))
	}
}

func upperLetters(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range []byte(s) {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

func operationList() string {
	names := make([]string, len(payrouter.Operations))
	for i, op := range payrouter.Operations {
		names[i] = string(op)
	}
	return strings.Join(names, ", ")
}
