package service

import (
	"fmt"
	"net/http"
	"time"

	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/httpapi"
	"github.com/payrouter/payrouter/listener"
	"github.com/payrouter/payrouter/telemetry"
)

// handshakeTimeout bounds a client's TLS handshake, as ReadHeaderTimeout bounds its request
// headers: a slow client must not hold a connection.
const handshakeTimeout = 5 * time.Second

// listenerSettings are one listener's settings in the configuration.
type listenerSettings struct {
	name     string // the configuration key: "listen" or "admin_listen"
	label    string // its metrics' listener label: "storefront" or "admin"
	addr     string
	tls      *config.ListenerTLS // nil: plain HTTP
	maxConns int
	perAddr  int // 0: no limit per client address
	idle     time.Duration
}

// listenerSettingsOf lists the storefront's and the admin listener's settings, in that order.
func listenerSettingsOf(cfg *config.Config) []listenerSettings {
	return []listenerSettings{
		{"listen", telemetry.ListenerStorefront, cfg.Listen, cfg.TLS, cfg.MaxConnections, cfg.MaxConnectionsPerAddress, cfg.IdleTimeout},
		{"admin_listen", telemetry.ListenerAdmin, cfg.AdminListen, cfg.AdminTLS, cfg.AdminMaxConnections, cfg.AdminMaxConnectionsPerAddress, cfg.AdminIdleTimeout},
	}
}

// openListeners binds one listener per server, in listenerSettingsOf's order, prepares each
// server for its listener (TLS, connection cap and per-address share, idle timeout, the framing
// guard) and exports its open connections. On an error the listeners bound so far are closed.
func (s *Service) openListeners(cfg *config.Config, servers []*http.Server) ([]*listener.Listener, error) {
	settings := listenerSettingsOf(cfg)
	out := make([]*listener.Listener, 0, len(servers))
	for i, srv := range servers {
		ls := settings[i]
		l, err := listener.Listen("tcp", ls.addr, listener.Options{
			Name: ls.name, TLS: ls.tls.ServerConfig(), MaxConnections: ls.maxConns, MaxConnectionsPerAddress: ls.perAddr,
			HandshakeTimeout: handshakeTimeout, Refuse: httpapi.RefuseFraming, Log: s.log,
			Observer: s.metrics.Connections(ls.label),
		})
		if err != nil {
			for _, l := range out {
				l.Close()
			}
			return nil, fmt.Errorf("listening on %s: %w", ls.addr, err)
		}
		srv.IdleTimeout = ls.idle
		l.Attach(srv)
		s.metrics.WatchConnections(ls.label, l.Open)
		out = append(out, l)
	}
	return out, nil
}

// reloadCertificates hands the listeners serving TLS the certificates next's files held when it
// loaded, for the handshakes from now on, and returns the names of those listeners. A listener
// that started without TLS stays without it (config.Reloadable keeps that for a restart).
func (s *Service) reloadCertificates(next *config.Config) []string {
	var renewed []string
	for i, ls := range listenerSettingsOf(next) {
		if i >= len(s.listeners) || !s.listeners[i].TLS() || ls.tls.ServerConfig() == nil {
			continue
		}
		if err := s.listeners[i].SetTLS(ls.tls.ServerConfig()); err != nil {
			s.log.Error("tls.reload_failed", "listener", ls.name, "err", err.Error())
			continue
		}
		renewed = append(renewed, ls.name)
	}
	return renewed
}
