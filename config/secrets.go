package config

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"unicode/utf8"
)

// DemoSecrets are every secret value the repository ships in clear: the demo configurations'
// former defaults, scripts/run-demo.sh, scripts/run-fleet.sh and the README's tour. Anyone can
// read them, so serve refuses them unless both listeners are on loopback (see weakSecrets).
// Keep this the one list: a new demo secret goes here.
var DemoSecrets = []string{
	"sk_test_demo",        // auth.api_keys
	"admin_test_demo",     // auth.admin_token
	"pw_test_demo",        // gateways.paywell.credentials.api_key
	"dg_test_demo",        // gateways.ding.credentials.api_key
	"tg_test_demo",        // gateways.tranglo.credentials.api_key
	"sk_test_stripe_demo", // gateways.stripe.credentials.api_key (commented out in the demo)
}

// MinSecretLength is the shortest API key or admin token serve accepts beyond loopback: 24
// characters of a random token are well beyond guessing, even at a million tries a second.
const MinSecretLength = 24

// auth checks the API keys, the admin tokens and every secret left empty by an unset variable.
// These rules hold everywhere, on loopback too; the strength rules are weakSecrets'.
func (v *validator) auth() {
	a := v.c.Auth
	if len(a.APIKeys) == 0 {
		v.addf("auth.api_keys", "at least one API key is required")
	}
	keyAt := map[string]int{}
	for i, k := range a.APIKeys {
		p := fmt.Sprintf("auth.api_keys[%d]", i)
		if strings.TrimSpace(k.Key) == "" {
			v.empty(p, []string{p, p + ".key"}, "must not be empty (is its environment variable set?)")
		} else if j, dup := keyAt[k.Key]; dup {
			v.addf(p, "the same key as auth.api_keys[%d]; list each key once (a rotation lists the old and the new key)", j)
		} else {
			keyAt[k.Key] = i
		}
		if k.Name != "" && !validName(k.Name) {
			v.addf(p+".name", "must be letters, digits, '-' or '_' (it names the key's scope)")
		}
		if k.Rights != nil && len(k.Rights) == 0 {
			v.addf(p+".rights", "is empty, so the key could do nothing; leave rights out for every right (%s)", strings.Join(Rights, ", "))
		}
		for j, r := range k.Rights {
			if !slices.Contains(Rights, r) {
				rp := fmt.Sprintf("%s.rights[%d]", p, j)
				v.addf(rp, "unknown right %s (known: %s)", v.show(rp, r), strings.Join(Rights, ", "))
			}
		}
	}

	// An unset ${PAYROUTER_ADMIN_TOKEN} is a mistake to stop at, not a quiet "admin API off":
	// ${PAYROUTER_ADMIN_TOKEN:-} says that on purpose.
	if a.AdminToken == "" {
		v.empty("auth.admin_token", []string{"auth.admin_token"}, "")
	}
	names := map[string]string{}
	if a.AdminToken != "" {
		names[AdminTokenName] = "auth.admin_token"
	}
	tokenAt := map[string]string{}
	if a.AdminToken != "" {
		tokenAt[a.AdminToken] = "auth.admin_token"
	}
	for i, t := range a.AdminTokens {
		p := fmt.Sprintf("auth.admin_tokens[%d]", i)
		switch first, dup := names[t.Name]; {
		case t.Name == "":
			v.addf(p+".name", "required (it names the actor in audit and failed-auth lines)")
		case !validName(t.Name):
			v.addf(p+".name", "must be letters, digits, '-' or '_'")
		case dup && first == "auth.admin_token":
			v.addf(p+".name", "%q is the name of auth.admin_token; choose another", AdminTokenName)
		case dup:
			v.addf(p+".name", "already used by %s; names must be unique", first)
		default:
			names[t.Name] = p
		}
		if strings.TrimSpace(t.Token) == "" {
			v.empty(p+".token", []string{p + ".token"}, "required")
		} else if first, dup := tokenAt[t.Token]; dup {
			v.addf(p+".token", "the same token as %s; each admin needs a token of their own", first)
		} else {
			tokenAt[t.Token] = p
		}
	}

	for _, name := range v.c.GatewayOrder() {
		for _, k := range sortedKeys(v.c.Gateways[name].Credentials) {
			if v.c.Gateways[name].Credentials[k] == "" {
				p := join(join("gateways", name)+".credentials", k)
				v.empty(p, []string{p}, "")
			}
		}
	}

	if !loopbackOnly(v.c) {
		open := nonLoopback(v.c)
		for _, w := range weakSecrets(v.c) {
			v.addf(w.path, "%s; refused because %s accepts connections from other machines (with both listeners on loopback it is only a warning)",
				w.msg, strings.Join(open, " and "))
		}
	}
}

// empty reports the empty secret at path. When its value came from variables that are unset,
// the line names them; otherwise it says otherwise, or nothing when otherwise is "".
func (v *validator) empty(path string, valuePaths []string, otherwise string) {
	for _, vp := range valuePaths {
		if e := v.env[vp]; e != nil && len(e.unset) > 0 {
			refs := make([]string, len(e.unset))
			for i, name := range e.unset {
				refs[i] = "${" + name + "}"
			}
			v.addf(path, "is empty because %s is not set in payrouter's environment (set it, or write ${%s:-} to mean empty on purpose)",
				strings.Join(refs, ", "), e.unset[0])
			return
		}
	}
	if otherwise != "" {
		v.addf(path, "%s", otherwise)
	}
}

// weakness is one secret a listener beyond loopback must not accept: path names the field,
// never the value.
type weakness struct{ path, msg string }

// weakSecrets lists the secrets that are demo values, too short, or an admin token that is
// also an API key. Beyond loopback these are errors; on loopback (a developer's machine, a
// test) `payrouter check` prints them as warnings.
func weakSecrets(c *Config) []weakness {
	var out []weakness
	demo := func(path, s string) bool {
		if slices.Contains(DemoSecrets, s) {
			out = append(out, weakness{path, "is a demo secret published with payrouter; use a random one of your own (openssl rand -hex 32)"})
			return true
		}
		return false
	}
	short := func(path, s string) {
		if utf8.RuneCountInString(s) < MinSecretLength {
			out = append(out, weakness{path, fmt.Sprintf("is shorter than %d characters; use a random one (openssl rand -hex 32)", MinSecretLength)})
		}
	}
	keyAt := map[string]string{}
	for i, k := range c.Auth.APIKeys {
		p := fmt.Sprintf("auth.api_keys[%d]", i)
		if strings.TrimSpace(k.Key) == "" {
			continue // said already
		}
		if _, seen := keyAt[k.Key]; !seen {
			keyAt[k.Key] = p
		}
		if !demo(p, k.Key) {
			short(p, k.Key)
		}
	}
	admins := []weakness{{"auth.admin_token", c.Auth.AdminToken}}
	for i, t := range c.Auth.AdminTokens {
		admins = append(admins, weakness{fmt.Sprintf("auth.admin_tokens[%d]", i), t.Token})
	}
	for _, a := range admins {
		path, token := a.path, a.msg
		if strings.TrimSpace(token) == "" {
			continue
		}
		if !demo(path, token) {
			short(path, token)
		}
		if key, ok := keyAt[token]; ok {
			out = append(out, weakness{path, "the same as " + key + "; every storefront client holding that key could use /admin/"})
		}
	}
	for _, name := range c.GatewayOrder() {
		for _, k := range sortedKeys(c.Gateways[name].Credentials) {
			demo(join(join("gateways", name)+".credentials", k), c.Gateways[name].Credentials[k])
		}
	}
	return out
}

// loopbackOnly reports whether both listeners accept connections from this machine only.
func loopbackOnly(c *Config) bool { return len(nonLoopback(c)) == 0 }

// nonLoopback names the listeners that accept connections from other machines.
func nonLoopback(c *Config) []string {
	var out []string
	if !isLoopback(c.Listen) {
		out = append(out, "listen")
	}
	if !isLoopback(c.AdminListen) {
		out = append(out, "admin_listen")
	}
	return out
}

// isLoopback reports whether a listener address is on loopback only: 127.0.0.0/8, ::1 or
// localhost. An empty host (":8080") is every interface, and any other name could resolve to
// anything, so both count as beyond loopback.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
