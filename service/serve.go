package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/payrouter/payrouter/httpapi"
	"github.com/payrouter/payrouter/telemetry"
)

// Serve runs both listeners until ctx ends, then drains them: charges under way finish (each
// within request_timeout), new connections are refused. It starts the background work (Start)
// first. Each SIGHUP on hup re-reads the configuration, as POST /admin/reload does. Close the
// service once Serve returns.
func (s *Service) Serve(ctx context.Context, hup <-chan os.Signal) error {
	s.Start()
	deps := s.Deps()
	servers := []*http.Server{
		newHTTPServer(s.cfg.Listen, httpapi.NewServer(deps), s.cfg.RequestTimeout, s.log),
		newHTTPServer(s.cfg.AdminListen, httpapi.NewAdminServer(deps), s.cfg.RequestTimeout, s.log),
	}
	listeners, err := s.openListeners(s.cfg, servers)
	if err != nil {
		return err
	}
	s.listeners = listeners
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func() {
			if err := srv.Serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	s.log.Info("payrouter.serving", "listen", listeners[0].Addr().String(), "admin_listen", listeners[1].Addr().String(),
		"tls", listeners[0].TLS(), "admin_tls", listeners[1].TLS(),
		"gateways", s.cfg.GatewayNames, "state", s.stateName(), "origin", s.origin)
	if err := s.serving(ctx, hup, errc); err != nil {
		for _, srv := range servers {
			srv.Close()
		}
		return err
	}
	s.log.Info("payrouter.draining")
	drainCtx, cancel := context.WithTimeout(context.Background(), s.cfg.RequestTimeout+5*time.Second)
	defer cancel()
	var firstErr error
	for _, srv := range servers {
		if err := srv.Shutdown(drainCtx); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("draining %s: %w", srv.Addr, err)
		}
	}
	s.log.Info("payrouter.stopped")
	return firstErr
}

// serving waits for ctx to end, reloading on every signal, and returns a listener's failure.
func (s *Service) serving(ctx context.Context, hup <-chan os.Signal, errc <-chan error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-hup:
			// Logged and counted either way; audited as POST /admin/reload is, the actor being
			// whoever may signal the process on its host.
			result := "ok"
			if _, err := s.reload("SIGHUP"); errors.Is(err, httpapi.ErrConfigRefused) {
				result = "invalid-config"
			} else if err != nil {
				result = "internal"
			}
			s.log.Info(telemetry.AuditMessage, "action", "reload", "actor", "signal:SIGHUP", "client_address", "local", "result", result)
		}
	}
}

// ServeProbe runs a Probe service until ctx ends: the prober and the fleet's sync (Start), and,
// when listen is not empty, GET /metrics and /healthz there. A SIGHUP on hup is answered with
// a warning: a prober reads its configuration only at start, and a fleet-wide `kill -HUP` must
// not stop it.
func (s *Service) ServeProbe(ctx context.Context, listen string, hup <-chan os.Signal) error {
	if len(s.prober.Gateways()) == 0 {
		s.log.Warn("probe.nothing_to_probe", "why", "no gateway has breaker.probe: out_of_band")
	}
	if listen != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", s.metrics.Handler())
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"status":"ok"}`) })
		srv := newHTTPServer(listen, mux, 5*time.Second, s.log)
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", listen, err)
		}
		go func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("probe.listen_failed", "listen", listen, "err", err.Error(),
					"then", "probing goes on without /metrics and /healthz")
			}
		}()
		defer srv.Close()
	}
	s.log.Info("probe.running", "gateways", s.prober.Gateways(), "holder", s.origin)
	s.Start()
	for {
		select {
		case <-ctx.Done():
			s.log.Info("probe.stopped")
			return nil
		case <-hup:
			s.log.Warn("probe.reload_unsupported", "then", "restart `payrouter probe` to read the configuration again")
		}
	}
}

// newHTTPServer sets every timeout: a slow client must not hold a connection open for ever. What
// net/http itself has to say (a TLS handshake error, a panic it recovered) goes to log as JSON.
func newHTTPServer(addr string, h http.Handler, budget time.Duration, log *slog.Logger) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      budget + 15*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    32 << 10,
	}
}
