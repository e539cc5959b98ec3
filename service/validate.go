package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/gateways"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
	"github.com/payrouter/payrouter/pgstore"
	"github.com/payrouter/payrouter/redisstore"
	"github.com/payrouter/payrouter/telemetry"
)

// Validate is every refusal New can make of a configuration and its
// environment before it opens a store, binds a port or calls a gateway, beyond what config.Load
// refuses: the tracing settings, each gateway's TLS files and its adapter's own requirements (a
// credentials.api_key that expanded to nothing), and the state URLs as their clients parse them.
// `payrouter check` runs exactly this after config.Load, so a configuration check passes is one
// serve starts on, short of what only the network can say (a database that does not answer, a
// port in use). It dials nothing.
func Validate(ctx context.Context, cfg *config.Config, getenv func(string) string) error {
	if err := telemetry.CheckTracing(ctx, getenv, telemetry.BuildVersion()); err != nil {
		return refused(err)
	}
	if _, err := cfg.GatewaySettings(); err != nil {
		return refused(err)
	}
	if err := dryRunAdapters(cfg); err != nil {
		return refused(err)
	}
	if url := cfg.State.DatabaseURL; url != "" {
		if err := pgstore.CheckURL(url); err != nil {
			return refused(fmt.Errorf("state.database_url: %w", err))
		}
	}
	if url := cfg.State.RedisURL; url != "" {
		if err := redisstore.CheckURL(url); err != nil {
			return refused(err)
		}
	}
	return nil
}

// dryRunAdapters refuses a configuration whose adapters could not be built (a missing
// credential, say), before anything changes: validateStart at start, reload before it applies a
// file. The adapters it builds are thrown away unused.
func dryRunAdapters(cfg *config.Config) error {
	for _, name := range cfg.GatewayNames {
		g := cfg.Gateways[name]
		gw, err := gateways.NewWith(g.Kind, adapterSettings(g), gatewayhttp.NewClient(refuseAll{}))
		if err != nil {
			return fmt.Errorf("gateways.%s: %w", name, err)
		}
		if _, ok := gw.(payrouter.WebhookVerifier); g.Webhook != nil && !ok {
			return fmt.Errorf("gateways.%s.webhook: the %s adapter has no webhooks (ding, tranglo and stripe have); remove the section", name, g.Kind)
		}
	}
	return nil
}

// refuseAll is the transport of adapters built only to be checked: they never send.
type refuseAll struct{}

func (refuseAll) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("payrouter: an adapter built to check the configuration sent a request")
}

// Load reads the configuration file at path (config.Load) and makes every other check New relies
// on (Validate): what it returns is a configuration New starts on, short of what only the
// network can say. Every refusal is a ConfigError naming the file.
func Load(ctx context.Context, path string, getenv func(string) string) (*config.Config, error) {
	cfg, err := config.Load(path, getenv, gateways.Kinds())
	if err == nil {
		err = Validate(ctx, cfg, getenv)
	}
	if err != nil {
		return nil, &ConfigError{Err: fmt.Errorf("%s: %w", path, err)}
	}
	return cfg, nil
}
