package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// healthcheck is `payrouter healthcheck`: one GET of a health endpoint, exit 0 when it answers
// 200 and 1 otherwise. The container image has no shell and no curl, so a container runtime's
// health check (deploy/compose.yaml) runs the binary itself.
func healthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("url", "http://127.0.0.1:8080/healthz", "the endpoint to GET")
	timeout := fs.Duration("timeout", 2*time.Second, "the most the answer may take")
	if err := fs.Parse(args); err != nil {
		return &exitError{code: 2}
	}
	if fs.NArg() > 0 {
		return usageError("healthcheck: unexpected argument %q", fs.Arg(0))
	}
	u, err := url.Parse(*target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError("healthcheck: -url %q: want an http:// or https:// URL with a host", *target)
	}
	if *timeout <= 0 {
		return usageError("healthcheck: -timeout %s: want more than 0", *timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return usageError("healthcheck: -url %q: %v", *target, err)
	}
	client := &http.Client{
		// Its own transport: no proxy from the environment stands between a container and itself.
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
		// A health endpoint answers itself; a redirect would be someone else's answer.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("healthcheck: %s did not answer within %s", u.Redacted(), *timeout)
		}
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	line := fmt.Sprintf("%s answered %d %s", u.Redacted(), resp.StatusCode, strings.TrimSpace(string(body)))
	if resp.StatusCode != http.StatusOK {
		return errors.New("healthcheck: " + line)
	}
	_, err = fmt.Fprintln(stdout, line)
	return err
}
