package config

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/routing"
)

// Report is what `payrouter check` prints about a valid configuration: the capacity arithmetic
// of every gateway and the warnings, things that are allowed but probably not meant.
type Report struct {
	RequestTimeout time.Duration
	Gateways       []Capacity // in file order
	Warnings       []string   // one line each, naming the field path
}

// Capacity is the arithmetic of docs/architecture.md (Bulkheads and capacity) for one gateway:
// with every bulkhead slot held by a call that runs to its timeout, the gateway completes
// Slots/Timeout calls per second, and any traffic above that is refused (bulkhead_full) rather
// than queued. That is the rate to compare with the shop's peak, because it is the rate the
// gateway gives when it is slow.
type Capacity struct {
	Gateway string
	Slots   int
	Timeout time.Duration
	MaxWait time.Duration
	Rate    float64 // calls per second while the gateway sits at its timeout
	// Operations lists the operations whose timeout override gives them another rate.
	Operations []OperationCapacity
}

// OperationCapacity is the rate of one operation whose timeout differs from its gateway's.
type OperationCapacity struct {
	Operation string
	Timeout   time.Duration
	Rate      float64
}

// Thresholds behind the "normal traffic would open this breaker" warnings.
const (
	typicalErrorRate    = 0.01 // gateways fail about 1% of calls on a good day
	noisyConsecutive    = 2    // two failures in a row happen by chance at any volume
	noisyWindowFailures = 2
)

// Check computes the capacity arithmetic and the warnings of a valid Config.
func (c *Config) Check() Report {
	r := Report{RequestTimeout: c.RequestTimeout}
	warn := func(format string, args ...any) {
		r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
	}
	c.listenerWarnings(warn)
	c.fileWarnings(warn)
	inRoute := map[string]bool{}
	for _, rt := range c.Routes {
		for _, name := range rt.Members() {
			inRoute[name] = true
		}
	}
	for _, name := range c.GatewayOrder() {
		gc := c.gatewayCapacity(name)
		r.Gateways = append(r.Gateways, gc)
		c.gatewayWarnings(gc, warn)
		c.breakerWarnings(name, warn)
		if !inRoute[name] {
			warn("%s: in no route; only charges that pin it with \"gateway\": %q reach it", join("gateways", name), name)
		}
	}
	for i := range c.Routes {
		c.routeWarnings(i, warn)
	}
	return r
}

// warnFunc adds one warning to a Report.
type warnFunc func(format string, args ...any)

// listenerWarnings warns of the secrets allowed only on loopback, of certificates about to
// expire, and of plain HTTP on an address other hosts reach.
func (c *Config) listenerWarnings(warn warnFunc) {
	// Beyond loopback, validation refuses these; on loopback they are allowed, and said.
	if loopbackOnly(c) {
		for _, w := range weakSecrets(c) {
			warn("%s: %s (allowed because both listeners are on loopback; serve refuses it on any other address)", w.path, w.msg)
		}
	}
	c.tlsWarnings(time.Now(), warn)
	if c.TLS == nil && plainHTTPBeyondHost(c.Listen) {
		warn("listen: %s is reachable from other hosts and tls is not set: API keys and card tokens cross the network in clear text unless a proxy in front terminates TLS (docs/tls.md)", c.Listen)
	}
	if c.AdminTLS == nil && plainHTTPBeyondHost(c.AdminListen) {
		warn("admin_listen: %s is reachable from other hosts and admin_tls is not set: the admin token crosses the network in clear text (docs/tls.md)", c.AdminListen)
	}
}

// gatewayCapacity is the capacity arithmetic of one gateway, and of each operation whose timeout
// is its own.
func (c *Config) gatewayCapacity(name string) Capacity {
	g := c.Gateways[name]
	gc := Capacity{Gateway: name, Slots: g.MaxConcurrent, Timeout: g.Timeout, MaxWait: g.MaxWait, Rate: rate(g.MaxConcurrent, g.Timeout)}
	for _, op := range payrouter.Operations {
		if t := g.TimeoutFor(op); t != g.Timeout {
			gc.Operations = append(gc.Operations, OperationCapacity{Operation: string(op), Timeout: t, Rate: rate(g.MaxConcurrent, t)})
		}
	}
	return gc
}

// gatewayWarnings warns of a gateway's timeouts that request_timeout cuts short, and of an
// insecure flag.
func (c *Config) gatewayWarnings(gc Capacity, warn warnFunc) {
	name, budget := gc.Gateway, c.RequestTimeout
	g := c.Gateways[name]
	p := join("gateways", name)
	// A call's deadline is min(timeout, what is left of request_timeout), so a longer
	// timeout is a promise the request budget never keeps.
	if g.Timeout > budget {
		warn("%s.timeout: %s is longer than request_timeout %s; a call is cut off at %s at the latest, so it never uses its full timeout",
			p, fmtDuration(g.Timeout), fmtDuration(budget), fmtDuration(budget))
	} else if g.MaxWait > 0 && g.MaxWait+g.Timeout > budget {
		warn("%s.max_wait: %s waiting for a slot plus the %s timeout is %s, longer than request_timeout %s; a call that waits may be cut off before %s answers",
			p, fmtDuration(g.MaxWait), fmtDuration(g.Timeout), fmtDuration(g.MaxWait+g.Timeout), fmtDuration(budget), name)
	}
	// A charge that times out is looked up at once (status), on the same request: the storefront
	// gets its answer only after both, or 202 processing when the budget ends first.
	charge, status := g.TimeoutFor(payrouter.OpCharge), g.TimeoutFor(payrouter.OpStatus)
	if charge <= budget && charge+status > budget {
		warn("%s: a charge that times out (%s) is looked up before it is answered (status, up to %s): %s in all, longer than request_timeout %s; such a charge may be answered 202 processing, its outcome left to the reconciler (raise request_timeout to %s, or lower operations.status.timeout)",
			p, fmtDuration(charge), fmtDuration(status), fmtDuration(charge+status), fmtDuration(budget), fmtDuration(charge+status))
	}
	for _, op := range gc.Operations {
		if op.Timeout > budget {
			warn("%s.operations.%s.timeout: %s is longer than request_timeout %s; the call is cut off at %s at the latest",
				p, op.Operation, fmtDuration(op.Timeout), fmtDuration(budget), fmtDuration(budget))
		}
	}
	if g.Insecure {
		if u, err := url.Parse(g.BaseURL); err == nil && u.Scheme == "http" && !loopbackHost(u.Hostname()) {
			warn("%s.insecure: plain http:// to %s is allowed; card tokens and credentials cross the network unencrypted", p, u.Hostname())
		} else {
			warn("%s.insecure: has no effect (base_url is https:// or loopback); remove it", p)
		}
	}
}

// breakerWarnings warns of a gateway's trip rules that never trip or trip on normal traffic, and
// of a cooldown shorter than request_timeout.
func (c *Config) breakerWarnings(name string, warn warnFunc) {
	b := c.Gateways[name].Breaker
	bp := join("gateways", name) + ".breaker"
	if !b.Trips() {
		warn("%s: no trip rule (%s are all 0); it never opens, so a failing %s keeps taking calls and holding slots until its timeout",
			bp, listAnd(payrouter.BreakerTripRules), name)
	}
	if n := b.ConsecutiveFailures; n > 0 && n <= noisyConsecutive {
		warn("%s.consecutive_failures: %d failure(s) in a row happen in normal traffic; the breaker would open on noise (5 is a common choice)", bp, n)
	}
	if n := b.FailuresInWindow; n > 0 && n <= noisyWindowFailures {
		warn("%s.failures_in_window: %d failure(s) within %s happen in normal traffic; the breaker would open on noise", bp, n, fmtDuration(b.Window))
	}
	switch fr := b.FailureRate; {
	case fr > 0 && fr <= typicalErrorRate:
		warn("%s.failure_rate: %v is at or below a typical 1%% error rate; normal traffic would open the breaker", bp, fr)
	case fr > 0 && b.MinRequests > 0 && fr*float64(b.MinRequests) <= 1+1e-9:
		warn("%s.failure_rate: with min_requests %d, a single failure among the first %d calls of a window reaches %v; normal traffic would open the breaker (raise min_requests or the rate)",
			bp, b.MinRequests, b.MinRequests, fr)
	}
	// Charges stuck on the slow gateway finish up to request_timeout after it opened; a
	// shorter cooldown lets trial calls in while those are still counting against it.
	if b.Cooldown < c.RequestTimeout {
		warn("%s.cooldown: %s is shorter than request_timeout %s; the breaker may go half-open while the charges that opened it are still in flight",
			bp, fmtDuration(b.Cooldown), fmtDuration(c.RequestTimeout))
	}
}

// routeWarnings warns of routes[i] when routes after it are never reached, or when its hedge or
// strategy cannot do anything.
func (c *Config) routeWarnings(i int, warn warnFunc) {
	rt := c.Routes[i]
	label := fmt.Sprintf("routes[%d] (%s)", i, display(rt.Name))
	if rt.Match.All() && i < len(c.Routes)-1 {
		var later []string
		for _, next := range c.Routes[i+1:] {
			later = append(later, display(next.Name))
		}
		warn("%s: matches every charge but is not the last route; the routes after it are never used: %s", label, strings.Join(later, ", "))
	}
	if rt.Hedge != nil && len(rt.Members()) < 2 {
		warn("%s: hedge needs a second gateway to hedge to; this route has one", label)
	}
	if rt.Hedge != nil && !rt.Hedge.After.P95 {
		// A call cut off by its timeout answers before the hedge would start: the hedge then
		// never runs there.
		after := rt.Hedge.After
		for _, name := range rt.Members() {
			if t := c.Gateways[name].TimeoutFor(payrouter.OpCharge); t <= after.Delay {
				warn("%s: hedge.after %s is not shorter than %s's charge timeout %s; a charge there ends before a hedge could start",
					label, fmtDuration(after.Delay), name, fmtDuration(t))
			}
		}
	}
	if rt.Strategy == routing.SuccessRate && len(rt.Members()) < 2 {
		warn("%s: strategy %s needs a second gateway to put first; this route has one", label, routing.SuccessRate)
	}
}

// WriteTo prints the report for people, one gateway per line, and implements io.WriterTo.
func (r Report) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "request_timeout %s: the most one API request may take, failover included\n", fmtDuration(r.RequestTimeout))
	fmt.Fprintf(&b, "capacity (bulkhead slots / timeout = the request rate a gateway holds while it sits at its timeout):\n")
	for _, g := range r.Gateways {
		fmt.Fprintf(&b, "  %s: %d slots / %s timeout = %s req/s while %s is at its timeout; max_wait %s\n",
			g.Gateway, g.Slots, fmtDuration(g.Timeout), fmtRate(g.Rate), g.Gateway, fmtDuration(g.MaxWait))
		for _, op := range g.Operations {
			fmt.Fprintf(&b, "    %s/%s: %d slots / %s timeout = %s req/s\n",
				g.Gateway, op.Operation, g.Slots, fmtDuration(op.Timeout), fmtRate(op.Rate))
		}
	}
	if len(r.Warnings) == 0 {
		fmt.Fprintf(&b, "no warnings\n")
	} else {
		fmt.Fprintf(&b, "warnings:\n")
		for _, line := range r.Warnings {
			fmt.Fprintf(&b, "  %s\n", line)
		}
	}
	n, err := w.Write(b.Bytes())
	return int64(n), err
}

func rate(slots int, timeout time.Duration) float64 {
	if timeout <= 0 {
		return 0
	}
	return float64(slots) / timeout.Seconds()
}

// fmtRate keeps two significant digits for small rates, where "0.0" would hide them.
func fmtRate(r float64) string {
	switch {
	case r >= 100:
		return strconv.FormatFloat(r, 'f', 0, 64)
	case r >= 1:
		return strconv.FormatFloat(r, 'f', 1, 64)
	default:
		return strconv.FormatFloat(r, 'g', 2, 64)
	}
}

// fmtDuration writes durations as a person would: "24h", "1h30m", "2m", not "24h0m0s".
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// listAnd writes names as a sentence does: "a", "a and b", "a, b and c".
func listAnd(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// fileWarnings warns of secrets that other users of the machine may read: the configuration
// file, when secrets are written in it rather than taken from the environment, and every
// private key file, when its mode lets others read it.
func (c *Config) fileWarnings(warn warnFunc) {
	readable := func(path string) (os.FileMode, bool) {
		st, err := os.Stat(path)
		if err != nil {
			return 0, false
		}
		return st.Mode().Perm(), st.Mode().Perm()&0o004 != 0
	}
	if c.file != "" && len(c.literalSecrets) > 0 {
		if mode, ok := readable(c.file); ok {
			names := c.literalSecrets
			if len(names) > 3 {
				names = append(slices.Clone(names[:3]), fmt.Sprintf("%d more", len(c.literalSecrets)-3))
			}
			warn("%s: readable by every user of this machine (mode %04o) and holds secrets written in it (%s): chmod 600 it, or take them from the environment with ${VAR} (docs/keys-and-secrets.md)",
				c.file, mode, strings.Join(names, ", "))
		}
	}
	keys := map[string]string{}
	if c.TLS != nil {
		keys["tls.key_file"] = c.TLS.KeyFile
	}
	if c.AdminTLS != nil {
		keys["admin_tls.key_file"] = c.AdminTLS.KeyFile
	}
	for _, name := range c.GatewayNames {
		keys[join(join("gateways", name), "tls.key_file")] = c.Gateways[name].TLS.KeyFile
	}
	for _, field := range slices.Sorted(maps.Keys(keys)) {
		if path := keys[field]; path != "" {
			if mode, ok := readable(path); ok {
				warn("%s: the private key %s is readable by every user of this machine (mode %04o): chmod 600 it", field, path, mode)
			}
		}
	}
}
