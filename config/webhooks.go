package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/webhooks"
)

// NamedScope is the scope of the API key named name: "name:" and the name. A plain key's scope
// is 16 hex digits of its digest, and a name has no ':' (validation refuses one), so no named
// scope can equal another key's. Charges, refunds, idempotency keys and events are kept under
// it, and a webhook endpoint's key_name picks its events by it.
func NamedScope(name string) string { return "name:" + name }

// WebhookOwner is the scope whose events the endpoint receives (its key_name's).
func WebhookOwner(e webhooks.Endpoint) string { return NamedScope(e.KeyName) }

// applyWebhookDefaults fills in what the webhooks section leaves out.
func applyWebhookDefaults(c *Config, given func(string) bool) {
	fillAbsent(&c.Webhooks, webhooks.DefaultSettings(), "webhooks", given)
	for i := range c.Webhooks.Endpoints {
		fillAbsent(&c.Webhooks.Endpoints[i], webhooks.DefaultEndpoint(), fmt.Sprintf("webhooks.endpoints[%d]", i), given)
	}
}

// webhooks checks the webhooks section: each endpoint's name, URL, key, events, secrets and
// limits. A secret is never shown, only its path.
func (v *validator) webhooks() {
	w := v.c.Webhooks
	if w.PollInterval <= 0 || w.PollInterval > webhooks.MaxPollInterval {
		v.addf("webhooks.poll_interval", "must be > 0 and at most %s (events wait up to one interval before they are sent)", fmtDuration(webhooks.MaxPollInterval))
	}
	named := map[string]bool{}
	for _, k := range v.c.Auth.APIKeys {
		if k.Name != "" {
			named[k.Name] = true
		}
	}
	names := map[string]int{}
	for i, e := range w.Endpoints {
		p := fmt.Sprintf("webhooks.endpoints[%d]", i)
		switch first, dup := names[e.Name]; {
		case e.Name == "":
			v.addf(p+".name", "required (it labels metrics, logs and admin paths, and keeps the endpoint's place in the event feed)")
		case !validName(e.Name):
			v.addf(p+".name", "must be letters, digits, '-' or '_'")
		case dup:
			v.addf(p+".name", "%s is already the name of webhooks.endpoints[%d]; names must be unique", v.show(p+".name", e.Name), first)
		default:
			names[e.Name] = i
		}
		v.webhookURL(p+".url", e, w.AllowPrivate)
		switch {
		case e.KeyName == "":
			v.addf(p+".key_name", "required: the name of the API key (auth.api_keys[].name) whose charges' and refunds' events the endpoint receives")
		case !named[e.KeyName]:
			v.addf(p+".key_name", "%s names no API key; it must be the name of an auth.api_keys entry (known names: %s). A plain key has no name: give it one, which gives it a new scope (docs/keys-and-secrets.md)",
				v.show(p+".key_name", e.KeyName), nameList(named))
		}
		v.webhookEvents(p+".events", e.Events)
		v.webhookSecrets(p+".secrets", e.Secrets)
		if e.Timeout <= 0 || e.Timeout > webhooks.MaxTimeout {
			v.addf(p+".timeout", "must be > 0 and at most %s", fmtDuration(webhooks.MaxTimeout))
		}
		if e.MaxConcurrent < 1 {
			v.addf(p+".max_concurrent", "must be >= 1")
		}
	}
}

// webhookURL checks an endpoint's URL: absolute http(s), plain http only to loopback unless
// insecure, and, without allow_private, no literal address or name that is not public (the
// dialer refuses those anyway; saying so here says it before the first event).
func (v *validator) webhookURL(p string, e webhooks.Endpoint, allowPrivate bool) {
	if e.URL == "" {
		v.addf(p, "required (an absolute https:// URL)")
		return
	}
	u, err := url.Parse(e.URL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		v.addf(p, "must be an absolute https:// (or http://) URL")
		return
	case u.Fragment != "":
		v.addf(p, "must have no fragment")
	}
	host := u.Hostname()
	if u.Scheme == "http" && !e.Insecure && !loopbackHost(host) {
		v.addf(p, "plain http:// to %s, which is not loopback: the events would cross the network unencrypted; use https://, or set %s: true if the path is protected some other way",
			host, strings.TrimSuffix(p, ".url")+".insecure")
	}
	if allowPrivate {
		return
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if loopbackHost(host) || err == nil && !webhooks.Public(ip) {
		v.addf(p, "%s is not a public address (loopback, private, link-local or reserved), so payrouter refuses to connect to it; set webhooks.allow_private: true to allow it (a test, a storefront on your own network)", host)
	}
}

func (v *validator) webhookEvents(p string, events []string) {
	if events != nil && len(events) == 0 {
		v.addf(p, "is empty, so the endpoint would receive nothing; leave events out (or write [\"*\"]) for every type")
	}
	seen := map[string]bool{}
	for j, t := range events {
		item := fmt.Sprintf("%s[%d]", p, j)
		switch {
		case t == webhooks.AllEvents && len(events) > 1:
			v.addf(item, "\"*\" already means every type; list it alone")
		case t != webhooks.AllEvents && !slices.Contains(payrouter.EventTypes, payrouter.EventType(t)):
			v.addf(item, "unknown event type %s (known: %s, or \"*\" for all)", v.show(item, t), eventTypeList())
		case seen[t]:
			v.addf(item, "%s is listed twice", v.show(item, t))
		}
		seen[t] = true
	}
}

func (v *validator) webhookSecrets(p string, secrets []string) {
	if len(secrets) == 0 {
		v.addf(p, "at least one signing secret is required (echo %s$(openssl rand -base64 32))", webhooks.SecretPrefix)
	}
	seen := map[string]int{}
	for j, s := range secrets {
		item := fmt.Sprintf("%s[%d]", p, j)
		if strings.TrimSpace(s) == "" {
			v.empty(item, []string{item}, "must not be empty")
			continue
		}
		if first, dup := seen[s]; dup {
			v.addf(item, "the same secret as %s[%d]; a rotation lists the old and the new one", p, first)
			continue
		}
		seen[s] = j
		if _, err := webhooks.ParseSecret(s); err != nil {
			v.addf(item, "%v", err)
		}
	}
}

func eventTypeList() string {
	names := make([]string, len(payrouter.EventTypes))
	for i, t := range payrouter.EventTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

func nameList(named map[string]bool) string {
	if len(named) == 0 {
		return "none: no API key has a name"
	}
	return strings.Join(sortedKeys(named), ", ")
}
