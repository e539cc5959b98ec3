// Command payrouter routes a storefront's payments across several gateways and keeps the shop
// standing when one of them gets slow or fails.
//
//	payrouter serve -config FILE   the service
//	payrouter check -config FILE   validate, and print each gateway's capacity arithmetic
//	payrouter probe -config FILE   the out-of-band prober alone (needs shared state)
//	payrouter migrate -config FILE apply the database's migrations (serve applies them too)
//	payrouter version              the module version, commit and Go version of this build
//	payrouter healthcheck -url URL one GET of a health endpoint: exit 0 on 200 (for a container)
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/payrouter/payrouter/internal/buildinfo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		code := 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(os.Stderr, "payrouter:", msg)
		}
		os.Exit(code)
	}
}

// exitError asks main for a particular exit code: 2 for a bad command line or configuration.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

const usage = `usage:
  payrouter serve -config FILE   run the service
  payrouter check -config FILE   validate a configuration and print each gateway's capacity
  payrouter probe -config FILE   run only the out-of-band prober (needs state.redis_url)
  payrouter migrate -config FILE apply the migrations of state.database_url, then exit (serve applies them at start too)
  payrouter version [-json]      print the module version, commit and Go version of this build (also --version)
  payrouter healthcheck -url URL GET URL once: exit 0 when it answers 200, else 1 (a container's health check)`

// run is the whole program, with its environment passed in so that tests can call it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError("no command given\n%s", usage)
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], getenv, stdout, stderr)
	case "check":
		return check(args[1:], getenv, stdout, stderr)
	case "probe":
		return probe(ctx, args[1:], getenv, stdout, stderr)
	case "migrate":
		return migrate(ctx, args[1:], getenv, stdout, stderr)
	case "version":
		return version(args[1:], stdout, stderr)
	case "healthcheck":
		return healthcheck(ctx, args[1:], stdout, stderr)
	case "-version", "--version":
		// The one line most tools print for --version.
		_, err := fmt.Fprintln(stdout, "payrouter", buildinfo.Read())
		return err
	case "help", "-h", "-help", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	default:
		return usageError("unknown command %q\n%s", args[0], usage)
	}
}
