// Command gatewaysim runs the simulated gateways (paywell, ding, tranglo, and stripe when asked
// for) as real HTTP servers, each on its own address, each with its control API under /_sim/
// (docs/simulator.md; its flags: docs/cli.md):
//
//	gatewaysim -paywell 127.0.0.1:9101 -ding 127.0.0.1:9102 -tranglo 127.0.0.1:9103 -stripe 127.0.0.1:9104
//
// The defaults are the addresses the demo configuration uses; the simulated Stripe is served only
// with -stripe, so that a run naming the three others' ports (the tests, the benchmarks) binds
// nothing more. It logs one JSON line per listener
// when it starts and one per control call; SIGINT or SIGTERM stops it, hung calls included.
//
// With -tls-cert and -tls-key every gateway is served over HTTPS (TLS 1.2 at least) with that
// certificate, which must hold every name or address the gateways are reached by; with
// -tls-client-ca too, each gateway requires a client certificate signed by a CA of that PEM file
// and refuses the handshake without one, as a gateway requiring mutual TLS does:
//
//	gatewaysim -tls-cert gw.pem -tls-key gw-key.pem -tls-client-ca clients-ca.pem
//
// The control API under /_sim/ is on the same listeners, so it needs the client certificate too.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/payrouter/payrouter/gateways/ding/dingsim"
	"github.com/payrouter/payrouter/gateways/paywell/paywellsim"
	"github.com/payrouter/payrouter/gateways/sim"
	"github.com/payrouter/payrouter/gateways/stripe/stripesim"
	"github.com/payrouter/payrouter/gateways/tranglo/tranglosim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	var usage usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.As(err, &usage):
		fmt.Fprintln(os.Stderr, "gatewaysim:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "gatewaysim:", err)
		os.Exit(1)
	}
}

// usageError is a command line that cannot be run.
type usageError struct{ error }

// shutdownGrace bounds how long a stop waits for calls in progress. Hung and delayed calls are let
// go at once (sim.Server.Close), so only ordinary ones can take this long.
const shutdownGrace = 5 * time.Second

// gateway is one simulated gateway and its server.
type gateway struct {
	name string
	sim  *sim.Server
	ln   net.Listener
	srv  *http.Server
}

// run serves the fakes until ctx is done or one server fails.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gatewaysim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: gatewaysim [-paywell ADDR] [-ding ADDR] [-tranglo ADDR] [-stripe ADDR] [-tls-cert FILE -tls-key FILE [-tls-client-ca FILE]]")
		fmt.Fprintln(fs.Output(), "Serves the simulated gateways (stripe only with -stripe), over HTTPS when -tls-cert and -tls-key are given (one certificate for all), requiring a client certificate when -tls-client-ca is given too.")
		fs.PrintDefaults()
	}
	addrs := []struct {
		name string
		addr *string
		new  func() *sim.Server
	}{
		{"paywell", fs.String("paywell", "127.0.0.1:9101", "listen address of the simulated Paywell (Stripe-like)"), paywellsim.New},
		{"ding", fs.String("ding", "127.0.0.1:9102", "listen address of the simulated Ding (DingConnect-like)"), dingsim.New},
		{"tranglo", fs.String("tranglo", "127.0.0.1:9103", "listen address of the simulated Tranglo (GloRemit-like)"), tranglosim.New},
		{"stripe", fs.String("stripe", "", "listen address of the simulated Stripe (PaymentIntents API), such as 127.0.0.1:9104; empty: not served"), stripesim.New},
	}
	certFile := fs.String("tls-cert", "", "PEM certificate to serve every gateway over HTTPS with (needs -tls-key); empty: plain HTTP")
	keyFile := fs.String("tls-key", "", "PEM private key of -tls-cert")
	clientCA := fs.String("tls-client-ca", "", "PEM file of the CAs a client certificate must be signed by; given, every gateway requires one (mutual TLS)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	tlsConfig, err := serverTLS(*certFile, *keyFile, *clientCA)
	if err != nil {
		return usageError{err}
	}
	scheme := "http://"
	if tlsConfig != nil {
		scheme = "https://"
	}
	logger := slog.New(slog.NewJSONHandler(stdout, nil))

	var gws []*gateway
	closeAll := func() {
		for _, g := range gws {
			g.ln.Close()
		}
	}
	for _, a := range addrs {
		if *a.addr == "" {
			continue // not asked for
		}
		// Every address is bound before any is served, so a taken port fails the start-up as a
		// whole rather than leaving a partial set running.
		ln, err := net.Listen("tcp", *a.addr)
		if err != nil {
			closeAll()
			return fmt.Errorf("%s: %w", a.name, err)
		}
		s := a.new()
		s.SetLogger(logger)
		if tlsConfig != nil {
			ln = tls.NewListener(ln, tlsConfig)
		}
		gws = append(gws, &gateway{name: a.name, sim: s, ln: ln, srv: &http.Server{
			Handler:           s,
			ReadHeaderTimeout: 5 * time.Second,
			IdleTimeout:       time.Minute,
			// No WriteTimeout: a latency of 20s must be answered after 20s.
			ErrorLog: slog.NewLogLogger(logger.Handler().WithAttrs([]slog.Attr{slog.String("gateway", a.name)}), slog.LevelWarn),
		}})
	}

	errc := make(chan error, len(gws))
	for _, g := range gws {
		logger.Info("listening", "gateway", g.name, "url", scheme+g.ln.Addr().String(), "client_certificate_required", *clientCA != "")
		go func() {
			err := g.srv.Serve(g.ln)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			if err != nil {
				err = fmt.Errorf("%s: %w", g.name, err)
			}
			errc <- err
		}()
	}

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	logger.Info("shutting down")
	shutdown(gws, logger)
	return err
}

// serverTLS is the gateways' TLS configuration: nil (plain HTTP) without a certificate; with
// clientCA, a client certificate signed by one of its CAs is required.
func serverTLS(certFile, keyFile, clientCA string) (*tls.Config, error) {
	switch {
	case certFile == "" && keyFile == "" && clientCA == "":
		return nil, nil
	case certFile == "" && keyFile == "":
		return nil, errors.New("-tls-client-ca needs -tls-cert and -tls-key: a client certificate is asked for in a TLS handshake")
	case certFile == "" || keyFile == "":
		return nil, errors.New("-tls-cert and -tls-key go together")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("-tls-cert %s, -tls-key %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("-tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-tls-client-ca %s: no PEM certificate in it", clientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// shutdown stops the servers: hung and delayed calls are let go first, then each server drains
// what is left for up to shutdownGrace, then closes whatever remains.
func shutdown(gws []*gateway, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	var wg sync.WaitGroup
	for _, g := range gws {
		g.sim.Close()
		wg.Go(func() {
			if err := g.srv.Shutdown(ctx); err != nil {
				logger.Warn("forced close", "gateway", g.name, "err", err.Error())
				_ = g.srv.Close()
			}
		})
	}
	wg.Wait()
}
