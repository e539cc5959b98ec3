package config

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/payrouter/payrouter"
)

// GatewaySummary is what may be shown of a gateway's configuration, for GET /admin/gateways:
// everything but its credentials. Durations are Go duration strings ("3s").
type GatewaySummary struct {
	Name              string            `json:"name"`
	Kind              string            `json:"kind"`
	BaseURL           string            `json:"base_url"`              // user info and query values masked
	APIVersion        string            `json:"api_version,omitempty"` // gateways.<name>.api_version, the version the adapter pins
	Timeout           string            `json:"timeout"`
	OperationTimeouts map[string]string `json:"operation_timeouts,omitempty"` // overrides only
	MaxConcurrent     int               `json:"max_concurrent"`
	MaxWait           string            `json:"max_wait"`
	Breaker           BreakerSummary    `json:"breaker"`
	// TLS names the files and settings of the gateway's TLS connections (never their
	// contents); absent for a plain http:// gateway.
	TLS *TLSSummary `json:"tls,omitempty"`
	// Insecure is true when plain http:// to a non-loopback host is allowed (gateways.<name>.insecure).
	Insecure bool `json:"insecure"`
}

// TLSSummary is a gateway's tls section as GatewaySummary shows it: paths, not contents. An empty
// path is the default (the system CA pool; no client certificate).
type TLSSummary struct {
	CAFile     string `json:"ca_file"`
	CertFile   string `json:"cert_file"`
	KeyFile    string `json:"key_file"`
	ServerName string `json:"server_name"`
	MinVersion string `json:"min_version"`
}

// BreakerSummary is a gateway's breaker settings as GatewaySummary shows them.
type BreakerSummary struct {
	ConsecutiveFailures int     `json:"consecutive_failures"`
	FailuresInWindow    int     `json:"failures_in_window"`
	FailureRate         float64 `json:"failure_rate"`
	MinRequests         int     `json:"min_requests"`
	Window              string  `json:"window"`
	Cooldown            string  `json:"cooldown"`
	HalfOpenRequests    int     `json:"half_open_requests"`
	Probe               string  `json:"probe"`
	ProbeInterval       string  `json:"probe_interval"`
	ProbeTimeout        string  `json:"probe_timeout"`
}

// Summary describes every gateway in file order, without credentials. It is built field by
// field rather than by copying Gateway, so a field added to Gateway later (a new secret, say)
// is not shown until someone decides it may be.
func (c *Config) Summary() []GatewaySummary {
	out := make([]GatewaySummary, 0, len(c.Gateways))
	for _, name := range c.GatewayOrder() {
		g := c.Gateways[name]
		s := GatewaySummary{
			Name:          name,
			Kind:          g.Kind,
			BaseURL:       redactURL(g.BaseURL),
			APIVersion:    g.APIVersion,
			Timeout:       fmtDuration(g.Timeout),
			MaxConcurrent: g.MaxConcurrent,
			MaxWait:       fmtDuration(g.MaxWait),
			Breaker: BreakerSummary{
				ConsecutiveFailures: g.Breaker.ConsecutiveFailures,
				FailuresInWindow:    g.Breaker.FailuresInWindow,
				FailureRate:         g.Breaker.FailureRate,
				MinRequests:         g.Breaker.MinRequests,
				Window:              fmtDuration(g.Breaker.Window),
				Cooldown:            fmtDuration(g.Breaker.Cooldown),
				HalfOpenRequests:    g.Breaker.HalfOpenRequests,
				Probe:               string(g.Breaker.Probe),
				ProbeInterval:       fmtDuration(g.Breaker.ProbeInterval),
				ProbeTimeout:        fmtDuration(g.Breaker.ProbeTimeout),
			},
		}
		s.Insecure = g.Insecure
		if u, err := url.Parse(g.BaseURL); err == nil && u.Scheme == "https" {
			s.TLS = &TLSSummary{CAFile: g.TLS.CAFile, CertFile: g.TLS.CertFile, KeyFile: g.TLS.KeyFile,
				ServerName: g.TLS.ServerName, MinVersion: g.TLS.MinVersion}
		}
		for _, op := range payrouter.Operations {
			if o, ok := g.Operations[op]; ok && o.Timeout > 0 {
				if s.OperationTimeouts == nil {
					s.OperationTimeouts = map[string]string{}
				}
				s.OperationTimeouts[string(op)] = fmtDuration(o.Timeout)
			}
		}
		out = append(out, s)
	}
	return out
}

// Secrets in Gateway (credentials, webhook secrets), Auth (API keys, admin token) and State (a password in
// redis_url) must never reach a log line, a debug page or an error message, whatever verb or
// encoder prints them. Each of these types therefore formats, logs and marshals as a copy with
// the secrets masked. The copies are of method-less types, so printing them cannot recurse.

const redactedValue = "[redacted]"

type (
	gatewayView    Gateway
	authView       Auth
	apiKeyView     APIKey
	adminTokenView AdminToken
	stateView      State
)

func (g Gateway) redacted() gatewayView {
	v := gatewayView(g)
	v.BaseURL = redactURL(g.BaseURL)
	if g.Credentials != nil {
		v.Credentials = make(map[string]string, len(g.Credentials))
		for k := range g.Credentials {
			v.Credentials[k] = redactedValue
		}
	}
	if g.Webhook != nil {
		w := *g.Webhook
		w.Secrets = make([]string, len(g.Webhook.Secrets))
		for i := range w.Secrets {
			w.Secrets[i] = redactedValue
		}
		v.Webhook = &w
	}
	return v
}

// Format prints the gateway with its credentials masked, for every fmt verb.
func (g Gateway) Format(f fmt.State, verb rune) {
	fmt.Fprintf(f, fmt.FormatString(f, verb), g.redacted())
}

// LogValue logs the gateway with its credentials masked.
func (g Gateway) LogValue() slog.Value { return slog.AnyValue(g.redacted()) }

// MarshalJSON encodes the gateway with its credentials masked.
func (g Gateway) MarshalJSON() ([]byte, error) { return json.Marshal(g.redacted()) }

// MarshalYAML encodes the gateway with its credentials masked.
func (g Gateway) MarshalYAML() (any, error) { return g.redacted(), nil }

func (a Auth) redacted() authView {
	v := authView{AdminToken: maskSecret(a.AdminToken)}
	if a.APIKeys != nil {
		v.APIKeys = make([]APIKey, len(a.APIKeys))
		for i, k := range a.APIKeys {
			v.APIKeys[i] = k.masked()
		}
	}
	if a.AdminTokens != nil {
		v.AdminTokens = make([]AdminToken, len(a.AdminTokens))
		for i, t := range a.AdminTokens {
			v.AdminTokens[i] = t.masked()
		}
	}
	return v
}

// masked is the key with the key itself masked: its name and rights may be shown.
func (k APIKey) masked() APIKey {
	k.Key = maskSecret(k.Key)
	return k
}

func (k APIKey) redacted() apiKeyView { return apiKeyView(k.masked()) }

// Format prints the key masked, for every fmt verb.
func (k APIKey) Format(f fmt.State, verb rune) {
	fmt.Fprintf(f, fmt.FormatString(f, verb), k.redacted())
}

// LogValue logs the key masked.
func (k APIKey) LogValue() slog.Value { return slog.AnyValue(k.redacted()) }

// MarshalJSON encodes the key masked.
func (k APIKey) MarshalJSON() ([]byte, error) { return json.Marshal(k.redacted()) }

// MarshalYAML encodes the key masked.
func (k APIKey) MarshalYAML() (any, error) { return k.redacted(), nil }

// masked is the admin token with the token masked: its name may be shown.
func (t AdminToken) masked() AdminToken {
	t.Token = maskSecret(t.Token)
	return t
}

func (t AdminToken) redacted() adminTokenView { return adminTokenView(t.masked()) }

// Format prints the admin token masked, for every fmt verb.
func (t AdminToken) Format(f fmt.State, verb rune) {
	fmt.Fprintf(f, fmt.FormatString(f, verb), t.redacted())
}

// LogValue logs the admin token masked.
func (t AdminToken) LogValue() slog.Value { return slog.AnyValue(t.redacted()) }

// MarshalJSON encodes the admin token masked.
func (t AdminToken) MarshalJSON() ([]byte, error) { return json.Marshal(t.redacted()) }

// MarshalYAML encodes the admin token masked.
func (t AdminToken) MarshalYAML() (any, error) { return t.redacted(), nil }

// Format prints the API keys and admin token masked, for every fmt verb.
func (a Auth) Format(f fmt.State, verb rune) { fmt.Fprintf(f, fmt.FormatString(f, verb), a.redacted()) }

// LogValue logs the API keys and admin token masked.
func (a Auth) LogValue() slog.Value { return slog.AnyValue(a.redacted()) }

// MarshalJSON encodes the API keys and admin token masked.
func (a Auth) MarshalJSON() ([]byte, error) { return json.Marshal(a.redacted()) }

// MarshalYAML encodes the API keys and admin token masked.
func (a Auth) MarshalYAML() (any, error) { return a.redacted(), nil }

func (s State) redacted() stateView {
	v := stateView(s)
	v.RedisURL, v.DatabaseURL = redactURL(s.RedisURL), redactURL(s.DatabaseURL)
	return v
}

// Format prints the state settings with any password in redis_url or database_url masked, for every fmt verb.
func (s State) Format(f fmt.State, verb rune) {
	fmt.Fprintf(f, fmt.FormatString(f, verb), s.redacted())
}

// LogValue logs the state settings with any password in redis_url or database_url masked.
func (s State) LogValue() slog.Value { return slog.AnyValue(s.redacted()) }

// MarshalJSON encodes the state settings with any password in redis_url or database_url masked.
func (s State) MarshalJSON() ([]byte, error) { return json.Marshal(s.redacted()) }

// MarshalYAML encodes the state settings with any password in redis_url or database_url masked.
func (s State) MarshalYAML() (any, error) { return s.redacted(), nil }

// maskSecret hides a secret but keeps an empty one visible: "no admin token" is worth seeing.
func maskSecret(s string) string {
	if s == "" {
		return ""
	}
	return redactedValue
}

// redactURL masks the parts of a URL that carry secrets: user info (a password, or a token as
// the user name) and query values (api_key=...). A string that does not parse is masked whole.
func redactURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		return redactedValue
	}
	if u.User != nil {
		u.User = url.User("redacted")
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"redacted"}
		}
		u.RawQuery = q.Encode()
	}
	return u.String()
}
