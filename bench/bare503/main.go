// Command bare503 is the baseline of payrouter's fast-fail benchmark: an echo server whose
// POST /charge does only what any HTTP service must do to answer at all. It reads the body the
// way payrouter does and answers the bytes it was given, with the headers payrouter's 503
// gateways-unavailable carries. Nothing is decoded, authenticated, routed or logged, so payrouter
// divided by bare503 is the price of all of that.
//
//	bare503 -listen 127.0.0.1:PORT -body FILE [-retry-after 1] [-request-id ID]
//
// It runs as its own process, as payrouter does, so that neither side shares a runtime (its
// scheduler, its garbage collector) with the load generator. SIGINT or SIGTERM stops it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/labstack/echo/v5"
)

// maxBodyBytes is payrouter's limit (httpapi.MaxBodyBytes), repeated so that the baseline reads
// what payrouter reads without importing payrouter.
const maxBodyBytes = 64 << 10

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bare503:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bare503", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "listen address")
	bodyFile := fs.String("body", "", "file holding the problem document to answer")
	retryAfter := fs.String("retry-after", "1", "value of the Retry-After header")
	// A constant in place of payrouter's generated X-Request-Id: the same bytes on the wire,
	// while generating one is part of what payrouter is measured doing.
	requestID := fs.String("request-id", "req_BARE503BASELINE", "value of the X-Request-Id header")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *bodyFile == "" {
		return errors.New("-body FILE is required")
	}
	body, err := os.ReadFile(*bodyFile)
	if err != nil {
		return err
	}

	e := echo.New()
	e.POST("/charge", func(c *echo.Context) error {
		// The same read as payrouter's readJSONBody: the whole body, bounded by the limit.
		if _, err := io.ReadAll(io.LimitReader(c.Request().Body, maxBodyBytes+1)); err != nil {
			return err
		}
		h := c.Response().Header()
		h.Set(echo.HeaderXRequestID, *requestID)
		h.Set("Retry-After", *retryAfter)
		return c.Blob(http.StatusServiceUnavailable, "application/problem+json", body)
	})
	e.GET("/healthz", func(c *echo.Context) error { return c.String(http.StatusOK, "ok") })

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	// The same timeouts as payrouter's listeners (service.newHTTPServer): they cost a timer
	// per connection and read, which the comparison should not count against payrouter.
	srv := &http.Server{
		Handler:           e,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      25 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    32 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Println("bare503 listening on", ln.Addr())
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}
