// Package config is payrouter's configuration: the YAML schema of docs/configuration.md, its defaults,
// ${VAR} expansion, validation with one clear line per problem, and the capacity arithmetic that
// `payrouter check` prints.
package config

import (
	"fmt"
	"slices"
	"time"

	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/routing"
	"github.com/payrouter/payrouter/webhooks"
)

// Config is one payrouter configuration file, with defaults applied and validated.
type Config struct {
	Listen         string             `yaml:"listen"`          // storefront listener; default "127.0.0.1:8080"
	AdminListen    string             `yaml:"admin_listen"`    // admin listener; default "127.0.0.1:9090"
	RequestTimeout time.Duration      `yaml:"request_timeout"` // budget of one API request, failover included; default 10s
	Auth           Auth               `yaml:"auth"`
	State          State              `yaml:"state"`
	Idempotency    Idempotency        `yaml:"idempotency"`
	Gateways       map[string]Gateway `yaml:"gateways"` // keyed by name; the name labels metrics and admin paths
	// GatewayNames lists the keys of Gateways in the order the file gives them.
	GatewayNames []string `yaml:"-"`
	// file is the path Load read, and literalSecrets the paths of the secrets written in it
	// rather than taken from ${...}: Check warns when others may read them.
	file           string
	literalSecrets []string
	// Routes are package routing's own (routing.Route); the first matching route wins.
	Routes    []routing.Route `yaml:"routes"`
	Fallbacks Fallbacks       `yaml:"fallbacks"`

	// The listeners' own settings (docs/tls.md): HTTPS (nil: plain HTTP), the most connections
	// open at once, the most of them one client address may hold (0: no limit but
	// max_connections; docs/limits.md, Connections), and how long a keep-alive connection may
	// sit idle. The admin_ keys are the admin listener's.
	TLS                           *ListenerTLS  `yaml:"tls"`
	MaxConnections                int           `yaml:"max_connections"`                   // default 4096
	MaxConnectionsPerAddress      int           `yaml:"max_connections_per_address"`       // default a quarter of max_connections
	IdleTimeout                   time.Duration `yaml:"idle_timeout"`                      // default 75s
	AdminTLS                      *ListenerTLS  `yaml:"admin_tls"`                         //
	AdminMaxConnections           int           `yaml:"admin_max_connections"`             // default 64
	AdminMaxConnectionsPerAddress int           `yaml:"admin_max_connections_per_address"` // default a quarter of admin_max_connections
	AdminIdleTimeout              time.Duration `yaml:"admin_idle_timeout"`                // default 75s

	Limits Limits `yaml:"limits"` // per API key and per client address (limits.go)

	// Webhooks are package webhooks' own (webhooks.Settings): the storefront endpoints the
	// events are pushed to (docs/webhooks.md).
	Webhooks webhooks.Settings `yaml:"webhooks"`
}

// Auth holds the storefront's API keys and the admin tokens (docs/keys-and-secrets.md).
type Auth struct {
	APIKeys []APIKey `yaml:"api_keys"` // at least one, none empty
	// AdminToken is the admin token named "admin" (AdminTokenName). Empty, with no AdminTokens
	// either: /admin/ answers 403 to everyone.
	AdminToken string `yaml:"admin_token"`
	// AdminTokens are more admin tokens, each with a name that audit and failed-auth lines show.
	AdminTokens []AdminToken `yaml:"admin_tokens"`
}

// APIKey is one storefront API key. In the file it is either a plain string, the key itself
// (every right; its scope is derived from the key's digest, as before names existed), or a
// mapping {name, key, rights}. A named key's scope is derived from its name, so entries sharing
// a name (the old and the new key during a rotation) see the same charges and idempotency keys.
type APIKey struct {
	// Name names the key's scope (letters, digits, '-', '_'); empty: the scope comes from the
	// key's SHA-256 digest.
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
	// Rights lists what the key may do (Rights); nil (absent in the file): every right.
	Rights []string `yaml:"rights"`
}

// Rights of an API key: each storefront route needs one.
const (
	RightCharge  = "charge"  // POST /charge
	RightCapture = "capture" // POST /charge/{id}/capture
	RightVoid    = "void"    // POST /charge/{id}/void
	RightRefund  = "refund"  // POST /charge/{id}/refund
	RightRead    = "read"    // GET /charge/{id}, GET /refund/{id}
)

// Rights lists every right, in the order documentation shows them.
var Rights = []string{RightCharge, RightCapture, RightVoid, RightRefund, RightRead}

// Allows reports whether the key has right; a key with nil Rights has them all.
func (k APIKey) Allows(right string) bool {
	return k.Rights == nil || slices.Contains(k.Rights, right)
}

// AdminToken is one named admin token.
type AdminToken struct {
	Name  string `yaml:"name"` // unique, letters, digits, '-', '_'; the actor is "admin:<name>"
	Token string `yaml:"token"`
}

// AdminTokenName is the name of auth.admin_token among the admin tokens.
const AdminTokenName = "admin"

// Admins returns every admin token: auth.admin_token first (named "admin") when set, then
// auth.admin_tokens in file order.
func (a Auth) Admins() []AdminToken {
	var out []AdminToken
	if a.AdminToken != "" {
		out = append(out, AdminToken{Name: AdminTokenName, Token: a.AdminToken})
	}
	return append(out, a.AdminTokens...)
}

// State chooses the stores (docs/architecture.md, State stores): where money state lives, and where
// the fleet's breakers are shared.
type State struct {
	// DatabaseURL is PostgreSQL holding the money state (charges, refunds, idempotency keys,
	// queued tasks) for a fleet: postgres://user@host:5432/payrouter. Empty: in memory, one
	// instance only; required with RedisURL.
	DatabaseURL string `yaml:"database_url"`
	// DatabaseTimeout bounds every database call: a database that does not answer turns into
	// 503 state-unavailable within it. default 800ms
	DatabaseTimeout time.Duration `yaml:"database_timeout"`
	// DatabaseMigrate: serve applies the schema's migrations at start (true, the default), or
	// only checks the schema is current and refuses to start otherwise (false: for a database
	// reached through a transaction-mode pooler, with `payrouter migrate` run beforehand).
	DatabaseMigrate bool `yaml:"database_migrate"`
	// RedisURL is Redis shared by the fleet for breakers, forced states, fleet events and leases:
	// ephemeral, never money. Empty: breakers are this instance's own.
	RedisURL string `yaml:"redis_url"`
	// RedisTimeout bounds every Redis call; a request never waits on Redis longer. default 100ms
	RedisTimeout time.Duration `yaml:"redis_timeout"`
	// Retention is how long a final charge (and a final refund) is kept after it was last
	// written, in memory and in the database; the database deletes older rows in the
	// background. default 9480h (395 days)
	Retention time.Duration `yaml:"retention"`
	// MaxMemory bounds the money state held in memory (ignored with database_url), in bytes as
	// the store counts them (docs/limits.md, Memory): charges with their refunds and events, and
	// idempotency keys with their answers. Each API key scope that may write (MemoryPerKey) has
	// an equal share of its own that no other key can take: a key holding its share loses its
	// own oldest settled charges holding no money, and when none may go its new charges and
	// keys are answered 503 state-unavailable; other keys are untouched. 0: no bound. default
	// 512MiB
	MaxMemory Bytes `yaml:"max_memory"`
}

// Idempotency configures idempotency keys.
type Idempotency struct {
	TTL time.Duration `yaml:"ttl"` // how long a completed answer is kept; default 24h
}

// Gateway is one configured gateway: its adapter and connections here, and the settings of the
// policies its calls go through, each owned by package resilience (the timeout, the bulkhead and
// the breaker), with their defaults and zero values documented there.
type Gateway struct {
	Kind        string            `yaml:"kind"`     // adapter: paywell | ding | tranglo | stripe
	BaseURL     string            `yaml:"base_url"` // absolute http(s) URL
	Credentials map[string]string `yaml:"credentials"`
	// APIVersion is the version of the gateway's API its adapter pins in every request: for kind
	// stripe (required), the Stripe-Version header, so the account's default version in Stripe's
	// dashboard never changes what payrouter reads. The other kinds refuse it. No default.
	APIVersion string `yaml:"api_version"`
	// TimeoutSettings are timeout and operations.<op>.timeout.
	resilience.TimeoutSettings `yaml:",inline"`
	// BulkheadSettings are max_concurrent and max_wait.
	resilience.BulkheadSettings `yaml:",inline"`
	Breaker                     resilience.BreakerSettings `yaml:"breaker"`
	// TLS configures the connections to an https:// gateway; the zero value is the system's CA
	// pool, no client certificate, TLS 1.2 at least.
	TLS GatewayTLS `yaml:"tls"`
	// Insecure allows a plain http:// base_url whose host is not loopback (127.0.0.0/8, ::1,
	// localhost); without it such a gateway is refused, as card tokens and credentials would
	// cross the network unencrypted. default false
	Insecure bool `yaml:"insecure"`
	// Webhook turns on POST /webhooks/<name>, where the gateway calls back when a transaction
	// changes (docs/webhooks.md, Gateway webhooks in); nil: none, the route answers 404.
	Webhook *GatewayWebhook `yaml:"webhook"`
}

// GatewayTLS is gateways.<name>.tls. The files are read and checked when the configuration is
// loaded, and read again on every reload (a rotated certificate under the same path is used from
// the reload on).
type GatewayTLS struct {
	// CAFile is a PEM file of the CAs that may sign the gateway's certificate; it replaces the
	// system pool for this gateway only. Empty: the system pool.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a PEM client certificate and its key, for a gateway that
	// requires mutual TLS. Both or neither; empty: no client certificate.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the gateway's certificate must hold (and the SNI sent); empty: the
	// host of base_url.
	ServerName string `yaml:"server_name"`
	// MinVersion is the lowest TLS version accepted: "1.2" (the default and the minimum) or "1.3".
	MinVersion string `yaml:"min_version"`
}

// ClientTLS is t as gatewayhttp builds connections from it.
func (t GatewayTLS) ClientTLS() gatewayhttp.ClientTLS {
	return gatewayhttp.ClientTLS{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName, MinVersion: t.MinVersion}
}

// configured reports whether t says anything beyond the default minimum version.
func (t GatewayTLS) configured() bool {
	return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != "" || (t.MinVersion != "" && t.MinVersion != gatewayhttp.TLS12)
}

// Fallbacks chooses what each operation does when no gateway can take it: fallback.Settings,
// whose package says what each policy does (charge: fail; refund: queue | fail; status:
// degrade | fail).
type Fallbacks = fallback.Settings

// GatewaySettings returns the failure-domain settings of every gateway, in file order: the
// policies' settings as the file gives them, the endpoint their breakers and connections
// measure, and the TLS configuration. It reads each gateway's TLS files again (Parse checked
// them; a reload must see a rotated certificate), so it fails when one has become unreadable
// since.
func (c *Config) GatewaySettings() ([]resilience.GatewaySettings, error) {
	var out []resilience.GatewaySettings
	for _, name := range c.GatewayOrder() {
		g := c.Gateways[name]
		tlsConfig, fingerprint, err := g.TLS.ClientTLS().Load()
		if err != nil {
			return nil, fmt.Errorf("gateways.%s.tls: %w", name, err)
		}
		out = append(out, resilience.GatewaySettings{
			Name: name, Endpoint: g.Kind + " " + g.BaseURL,
			TimeoutSettings: g.TimeoutSettings, BulkheadSettings: g.BulkheadSettings, Breaker: g.Breaker,
			TLS: tlsConfig, TLSFingerprint: fingerprint,
		})
	}
	return out, nil
}
