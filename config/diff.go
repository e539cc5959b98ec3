package config

import "reflect"

// Changes is what a reload finds between the running configuration and the file: what it applies
// in place (gateways, routes, fallbacks, auth, limits, webhooks) and what waits for a restart.
type Changes struct {
	Gateways GatewayChanges `json:"gateways"`
	// Renewed lists, for each changed gateway, the parts that started afresh ("breakers",
	// "bulkhead", "connections"); the serving side fills it in.
	Renewed       map[string][]string `json:"renewed"`
	Routes        bool                `json:"routes_changed"`
	Fallbacks     bool                `json:"fallbacks_changed"`
	Auth          bool                `json:"auth_changed"`     // API keys or admin token (never shown)
	Limits        bool                `json:"limits_changed"`   // rate limits, key share, failed-auth throttle
	Webhooks      bool                `json:"webhooks_changed"` // endpoints, their secrets, allow_private, poll_interval
	RestartNeeded []string            `json:"restart_needed"`   // top-level keys whose new value waits for a restart
}

// GatewayChanges sorts the gateways by what a reload does to them, each list in file order (the
// removed ones in the running configuration's order).
type GatewayChanges struct {
	Added     []string `json:"added"`
	Changed   []string `json:"changed"`
	Removed   []string `json:"removed"`
	Unchanged []string `json:"unchanged"`
}

// None reports whether the file changes nothing.
func (c Changes) None() bool {
	g := c.Gateways
	return len(g.Added)+len(g.Changed)+len(g.Removed) == 0 && !c.Routes && !c.Fallbacks && !c.Auth && !c.Limits && !c.Webhooks && len(c.RestartNeeded) == 0
}

// Diff compares the running configuration with next, both loaded (defaults applied).
func Diff(running, next *Config) Changes {
	ch := Changes{Renewed: map[string][]string{}}
	g := &ch.Gateways
	g.Added, g.Changed, g.Removed, g.Unchanged = []string{}, []string{}, []string{}, []string{}
	for _, name := range next.GatewayNames {
		old, ok := running.Gateways[name]
		switch {
		case !ok:
			g.Added = append(g.Added, name)
		case reflect.DeepEqual(old, next.Gateways[name]):
			g.Unchanged = append(g.Unchanged, name)
		default:
			g.Changed = append(g.Changed, name)
		}
	}
	for _, name := range running.GatewayNames {
		if _, ok := next.Gateways[name]; !ok {
			g.Removed = append(g.Removed, name)
		}
	}
	ch.Routes = !reflect.DeepEqual(running.Routes, next.Routes)
	ch.Fallbacks = running.Fallbacks != next.Fallbacks
	ch.Auth = !reflect.DeepEqual(running.Auth, next.Auth)
	ch.Limits = running.Limits != next.Limits
	ch.Webhooks = !reflect.DeepEqual(running.Webhooks, next.Webhooks)
	ch.RestartNeeded = []string{}
	for _, f := range []struct {
		key  string
		same bool
	}{
		{"listen", running.Listen == next.Listen},
		{"admin_listen", running.AdminListen == next.AdminListen},
		{"request_timeout", running.RequestTimeout == next.RequestTimeout},
		{"state", running.State == next.State},
		{"idempotency", running.Idempotency == next.Idempotency},
		// A reload re-reads the TLS files, and takes new file names or min_version; turning TLS
		// on or off changes what the listener is.
		{"tls", (running.TLS == nil) == (next.TLS == nil)},
		{"max_connections", running.MaxConnections == next.MaxConnections},
		{"max_connections_per_address", running.MaxConnectionsPerAddress == next.MaxConnectionsPerAddress},
		{"idle_timeout", running.IdleTimeout == next.IdleTimeout},
		{"admin_tls", (running.AdminTLS == nil) == (next.AdminTLS == nil)},
		{"admin_max_connections", running.AdminMaxConnections == next.AdminMaxConnections},
		{"admin_max_connections_per_address", running.AdminMaxConnectionsPerAddress == next.AdminMaxConnectionsPerAddress},
		{"admin_idle_timeout", running.AdminIdleTimeout == next.AdminIdleTimeout},
	} {
		if !f.same {
			ch.RestartNeeded = append(ch.RestartNeeded, f.key)
		}
	}
	return ch
}

// Reloadable returns next with the settings that need a restart taken from running: what a
// reload puts in place.
func Reloadable(running, next *Config) *Config {
	out := *next
	out.Listen, out.AdminListen, out.RequestTimeout = running.Listen, running.AdminListen, running.RequestTimeout
	out.State, out.Idempotency = running.State, running.Idempotency
	out.MaxConnections, out.MaxConnectionsPerAddress, out.IdleTimeout = running.MaxConnections, running.MaxConnectionsPerAddress, running.IdleTimeout
	out.AdminMaxConnections, out.AdminMaxConnectionsPerAddress, out.AdminIdleTimeout = running.AdminMaxConnections, running.AdminMaxConnectionsPerAddress, running.AdminIdleTimeout
	if (running.TLS == nil) != (next.TLS == nil) {
		out.TLS = running.TLS
	}
	if (running.AdminTLS == nil) != (next.AdminTLS == nil) {
		out.AdminTLS = running.AdminTLS
	}
	return &out
}
