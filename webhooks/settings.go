package webhooks

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/payrouter/payrouter"
)

// Defaults of Settings and Endpoint (docs/configuration.md, webhooks). A key the file leaves out
// gets the default named here; package config fills them in.
const (
	// DefaultTimeout bounds one delivery attempt, from connecting to the last byte of the
	// answer. Standard Webhooks asks consumers to answer within 15 s; 10 s keeps a hanging
	// endpoint's slots turning over sooner.
	DefaultTimeout = 10 * time.Second
	// MaxTimeout is the longest timeout an endpoint may have: an attempt must end well within
	// the time the queue waits before handing its task to another instance.
	MaxTimeout = time.Minute
	// DefaultMaxConcurrent is an endpoint's bulkhead on each instance: the attempts in flight
	// to it at once.
	DefaultMaxConcurrent = 10
	// DefaultPollInterval is how often each instance reads the event feed for new events.
	DefaultPollInterval = time.Second
	// MaxPollInterval bounds poll_interval: events wait for up to one interval.
	MaxPollInterval = time.Minute
	// AllEvents, as an endpoint's only event type, subscribes it to every type, those added
	// later included.
	AllEvents = "*"
	// SecretPrefix starts every signing secret (Standard Webhooks' whsec_ and the base64 of
	// the key).
	SecretPrefix = "whsec_"
	// MinSecretBytes is the shortest key a secret may hold: Standard Webhooks asks for 24 to 64
	// random bytes.
	MinSecretBytes = 24
	// MaxSecretBytes is the longest.
	MaxSecretBytes = 64
)

// Settings is the webhooks section of a configuration file: the storefront endpoints that
// payrouter pushes its events to (docs/webhooks.md). Package config embeds it as it is.
type Settings struct {
	// Endpoints are the storefront's endpoints, each with its own client, bulkhead, cursor in
	// the event feed and secrets; none: no webhooks are sent.
	Endpoints []Endpoint `yaml:"endpoints"`
	// AllowPrivate lets endpoints resolve to loopback, private, link-local and other
	// non-public addresses; false (the default) refuses to connect to them, so that a URL
	// (or a DNS answer) cannot point payrouter at its own network.
	AllowPrivate bool `yaml:"allow_private"`
	// PollInterval is how often each instance reads the event feed for events not yet
	// dispatched; 0: DefaultPollInterval.
	PollInterval time.Duration `yaml:"poll_interval"`
}

// Endpoint is one storefront endpoint (webhooks.endpoints[] in the file).
type Endpoint struct {
	// Name identifies the endpoint: in metrics, logs, admin paths, and the durable cursor of
	// the events dispatched to it (a renamed endpoint starts afresh). Letters, digits, '-', '_'.
	Name string `yaml:"name"`
	// URL receives a POST per event: an absolute https:// URL (plain http:// only to loopback,
	// or with Insecure).
	URL string `yaml:"url"`
	// KeyName is the name of the API key (auth.api_keys[].name) whose events the endpoint
	// receives: the events of the charges and refunds that key's scope made.
	KeyName string `yaml:"key_name"`
	// Events lists the event types sent (charge.succeeded, ...), or "*" for all of them;
	// absent: all of them.
	Events []string `yaml:"events"`
	// Secrets sign every delivery, whsec_ and the base64 of 24 to 64 random bytes. Each one
	// adds a signature to webhook-signature: list the new secret beside the old one while the
	// storefront moves to it. At least one.
	Secrets []string `yaml:"secrets"`
	// Timeout bounds one attempt; 0 is refused. Default DefaultTimeout.
	Timeout time.Duration `yaml:"timeout"`
	// MaxConcurrent is the endpoint's bulkhead on each instance; at least 1. Default
	// DefaultMaxConcurrent.
	MaxConcurrent int `yaml:"max_concurrent"`
	// Insecure allows a plain http:// URL to a host that is not loopback. default false
	Insecure bool `yaml:"insecure"`
}

// DefaultSettings are the defaults of the webhooks section.
func DefaultSettings() Settings { return Settings{PollInterval: DefaultPollInterval} }

// DefaultEndpoint holds the defaults of an endpoint's keys.
func DefaultEndpoint() Endpoint {
	return Endpoint{Events: []string{AllEvents}, Timeout: DefaultTimeout, MaxConcurrent: DefaultMaxConcurrent}
}

// Wants reports whether the endpoint subscribes to events of type t.
func (e Endpoint) Wants(t payrouter.EventType) bool {
	for _, want := range e.Events {
		if want == AllEvents || want == string(t) {
			return true
		}
	}
	return false
}

// ErrSecret is wrapped by every error of ParseSecret.
var ErrSecret = errors.New("not a signing secret")

// ParseSecret returns the key a whsec_ secret holds, or an error saying what is wrong with it
// that never quotes it.
func ParseSecret(s string) ([]byte, error) {
	rest, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: must start with %s, then the base64 of %d to %d random bytes (echo %s$(openssl rand -base64 32))",
			ErrSecret, SecretPrefix, MinSecretBytes, MaxSecretBytes, SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("%w: what follows %s is not standard base64 (echo %s$(openssl rand -base64 32))", ErrSecret, SecretPrefix, SecretPrefix)
	}
	if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return nil, fmt.Errorf("%w: holds %d bytes; it must hold %d to %d random bytes (echo %s$(openssl rand -base64 32))",
			ErrSecret, len(key), MinSecretBytes, MaxSecretBytes, SecretPrefix)
	}
	return key, nil
}

// Secrets must never reach a log line, a debug page or an error message, whatever prints them:
// an Endpoint formats, logs and marshals as a copy with its secrets masked and its URL's user
// information and query values hidden (a storefront may put a token there). The copy is of a
// method-less type, so printing it cannot recurse.

type endpointView Endpoint

const redacted = "[redacted]"

func (e Endpoint) redacted() endpointView {
	v := endpointView(e)
	v.URL = RedactURL(e.URL)
	if e.Secrets != nil {
		v.Secrets = make([]string, len(e.Secrets))
		for i := range e.Secrets {
			v.Secrets[i] = redacted
		}
	}
	return v
}

// Format prints the endpoint with its secrets masked, for every fmt verb.
func (e Endpoint) Format(f fmt.State, verb rune) {
	fmt.Fprintf(f, fmt.FormatString(f, verb), e.redacted())
}

// LogValue logs the endpoint with its secrets masked.
func (e Endpoint) LogValue() slog.Value { return slog.AnyValue(e.redacted()) }

// MarshalJSON encodes the endpoint with its secrets masked.
func (e Endpoint) MarshalJSON() ([]byte, error) { return json.Marshal(e.redacted()) }

// MarshalYAML encodes the endpoint with its secrets masked.
func (e Endpoint) MarshalYAML() (any, error) { return e.redacted(), nil }

// RedactURL returns u with any password and every query value masked, for logs and the admin
// API; a URL that does not parse is masked whole.
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return redacted
	}
	if p.User != nil {
		if _, has := p.User.Password(); has {
			p.User = url.UserPassword(p.User.Username(), "xxxxx")
		}
	}
	if p.RawQuery != "" {
		q := p.Query()
		for k := range q {
			q[k] = []string{"xxxxx"}
		}
		p.RawQuery = q.Encode()
	}
	return p.String()
}
