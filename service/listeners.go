package service

import (
	"fmt"
	"net/http"
	"time"

	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/httpapi"
	"github.com/payrouter/payrouter/listener"
)

// handshakeTimeout bounds a client's TLS handshake, as ReadHeaderTimeout bounds its request
// headers: a slow client must not hold a connection.
const handshakeTimeout = 5 * time.Second

// listenerSettings are one listener's settings in the configuration.
type listenerSettings struct {
	name     string // the configuration key: "listen" or "admin_listen"
	addr     string
	tls      *config.ListenerTLS // nil: plain HTTP
	maxConns int
	idle     time.Duration
}

// listenerSettingsOf lists the storefront's and the admin listener's settings, in that order.
func listenerSettingsOf(cfg *config.Config) []listenerSettings {
	return []listenerSettings{
		{"listen", cfg.Listen, cfg.TLS, cfg.MaxConnections, cfg.IdleTimeout},
		{"admin_listen", cfg.AdminListen, cfg.AdminTLS, cfg.AdminMaxConnections, cfg.AdminIdleTimeout},
	}
}

// openListeners binds one listener per server, in listenerSettingsOf's order, and prepares each
// server for its listener (TLS, connection cap, idle timeout, the framing guard). On an error
// the listeners bound so far are closed.
func (s *Service) openListeners(cfg *config.Config, servers []*http.Server) ([]*listener.Listener, error) {
	settings := listenerSettingsOf(cfg)
	out := make([]*listener.Listener, 0, len(servers))
	for i, srv := range servers {
		ls := settings[i]
		l, err := listener.Listen("tcp", ls.addr, listener.Options{
			Name: ls.name, TLS: ls.tls.ServerConfig(), MaxConnections: ls.maxConns,
			HandshakeTimeout: handshakeTimeout, Refuse: httpapi.RefuseFraming, Log: s.log,
		})
		if err != nil {
			for _, l := range out {
				l.Close()
			}
			return nil, fmt.Errorf("listening on %s: %w", ls.addr, err)
		}
		srv.IdleTimeout = ls.idle
		l.Attach(srv)
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
