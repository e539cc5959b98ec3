package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The headers of Standard Webhooks.
const (
	HeaderID        = standardwebhooks.HeaderWebhookID
	HeaderTimestamp = standardwebhooks.HeaderWebhookTimestamp
	HeaderSignature = standardwebhooks.HeaderWebhookSignature
)

// UserAgent is sent with every delivery.
const UserAgent = "payrouter-webhooks/1"

// drainLimit is how much of an answer's body is read (and dropped) so that its connection can
// carry the next delivery; a longer body closes the connection instead.
const drainLimit = 64 << 10

// Target is one configured endpoint ready to send to: its own HTTP client and connection pool,
// its bulkhead and its signers. A slow endpoint holds only its own slots and connections.
type Target struct {
	Endpoint Endpoint
	// Owner is the API key scope whose events the endpoint receives.
	Owner string

	client       *http.Client
	signers      []*standardwebhooks.Webhook
	slots        chan struct{}
	allowPrivate bool
}

// NewTarget builds the endpoint's client and signers. owner is the scope of its key_name;
// allowPrivate is webhooks.allow_private. An endpoint that configuration validated never
// fails here.
func NewTarget(e Endpoint, owner string, allowPrivate bool) (*Target, error) {
	if e.MaxConcurrent < 1 || e.Timeout <= 0 {
		return nil, fmt.Errorf("webhooks: endpoint %s: max_concurrent and timeout must be > 0", e.Name)
	}
	t := &Target{Endpoint: e, Owner: owner, slots: make(chan struct{}, e.MaxConcurrent), allowPrivate: allowPrivate}
	for i, s := range e.Secrets {
		key, err := ParseSecret(s)
		if err != nil {
			return nil, fmt.Errorf("webhooks: endpoint %s: secrets[%d]: %w", e.Name, i, err)
		}
		w, err := standardwebhooks.NewWebhookRaw(key)
		if err != nil {
			return nil, fmt.Errorf("webhooks: endpoint %s: secrets[%d]: %w", e.Name, i, err)
		}
		t.signers = append(t.signers, w)
	}
	if len(t.signers) == 0 {
		return nil, fmt.Errorf("webhooks: endpoint %s: no secret to sign with", e.Name)
	}
	dialer := &net.Dialer{Timeout: e.Timeout, KeepAlive: 30 * time.Second, Control: dialControl(allowPrivate)}
	t.client = &http.Client{
		Transport: &http.Transport{
			// Reached directly: a proxy from the environment would be the address connected to,
			// and the endpoint's own address would go unchecked.
			Proxy:               nil,
			DialContext:         dialer.DialContext,
			ForceAttemptHTTP2:   true,
			MaxConnsPerHost:     e.MaxConcurrent,
			MaxIdleConns:        e.MaxConcurrent,
			MaxIdleConnsPerHost: e.MaxConcurrent,
			IdleConnTimeout:     90 * time.Second,
			TLSHandshakeTimeout: e.Timeout,
		},
		// The whole attempt, connecting and reading the answer included.
		Timeout: e.Timeout,
		// A redirect is the endpoint's answer, a failed attempt: following it would send the
		// signed event wherever a Location header says.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return t, nil
}

// sameEndpoint reports whether two endpoints' settings are the same.
func sameEndpoint(a, b Endpoint) bool { return reflect.DeepEqual(a, b) }

// Close closes the endpoint's idle connections (a reload replaced it, or payrouter stops).
func (t *Target) Close() { t.client.CloseIdleConnections() }

// Acquire takes one of the endpoint's bulkhead slots without waiting: ok is false when every
// slot is held. release gives it back and must be called once.
func (t *Target) Acquire() (release func(), ok bool) {
	select {
	case t.slots <- struct{}{}:
		var once atomic.Bool
		return func() {
			if once.CompareAndSwap(false, true) {
				<-t.slots
			}
		}, true
	default:
		return nil, false
	}
}

// InFlight is how many of the endpoint's slots are held now.
func (t *Target) InFlight() int { return len(t.slots) }

// Signature is the webhook-signature header of a message with id, sent at ts: one
// "v1,<base64 of HMAC-SHA256 of id.ts.body>" per secret, separated by spaces, so that the
// storefront accepts it with either secret while it rotates them.
func (t *Target) Signature(id string, ts time.Time, body []byte) (string, error) {
	sigs := make([]string, len(t.signers))
	for i, w := range t.signers {
		s, err := w.Sign(id, ts, body)
		if err != nil {
			return "", err
		}
		sigs[i] = s
	}
	return strings.Join(sigs, " "), nil
}

// Result is what one attempt got.
type Result struct {
	// Status is the HTTP status answered; 0 when there was no answer (Err says why).
	Status int
	// RetryAfter is the wait the answer asked for (Retry-After), 0 when none.
	RetryAfter time.Duration
	// Err says why the attempt failed; nil when the endpoint answered 2xx.
	Err error
	// Took is how long the attempt took.
	Took time.Duration
}

// Delivered reports whether the endpoint took the message (2xx).
func (r Result) Delivered() bool { return r.Status >= 200 && r.Status < 300 }

// Gone reports whether the endpoint answered 410 Gone: it wants no more deliveries, and is
// disabled.
func (r Result) Gone() bool { return r.Status == http.StatusGone }

// Send makes one attempt to deliver the message with id and body, signed at now (its
// webhook-timestamp). It never retries and never follows a redirect.
func (t *Target) Send(ctx context.Context, id string, body []byte, now time.Time) Result {
	start := time.Now()
	res := t.send(ctx, id, body, now)
	res.Took = time.Since(start)
	return res
}

func (t *Target) send(ctx context.Context, id string, body []byte, now time.Time) Result {
	sig, err := t.Signature(id, now, body)
	if err != nil {
		return Result{Err: fmt.Errorf("signing: %w", err)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.Endpoint.URL, bytes.NewReader(body))
	if err != nil {
		return Result{Err: fmt.Errorf("request to %s: %w", RedactURL(t.Endpoint.URL), err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", UserAgent)
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, sig)
	resp, err := t.client.Do(req)
	if err != nil {
		return Result{Err: t.transportError(err)}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	_ = resp.Body.Close()
	res := Result{Status: resp.StatusCode, RetryAfter: RetryAfter(resp.Header, time.Now())}
	switch {
	case res.Delivered():
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		res.Err = fmt.Errorf("answered %d %s: redirects are not followed (configure the URL it redirects to)",
			resp.StatusCode, http.StatusText(resp.StatusCode))
	default:
		res.Err = fmt.Errorf("answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	return res
}

// transportError says why an attempt got no answer, without the URL's secrets (url.Error
// quotes the whole URL).
func (t *Target) transportError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("no answer within %s (timeout): %w", t.Endpoint.Timeout, context.DeadlineExceeded)
		}
		err = ue.Err
	}
	return fmt.Errorf("POST %s: %w", RedactURL(t.Endpoint.URL), err)
}
