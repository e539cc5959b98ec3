// Package gatewayhttp is the one place where the adapters' HTTP exchanges with their gateways are
// made and where transport failures become outcomes: what failed before the request could reach
// the gateway is unavailable (safe to send elsewhere); what failed after it may have reached it is
// timeout or unknown (a status look-up must say whether it was processed). Every adapter uses it,
// so the three gateways cannot disagree about what a reset or a deadline means. A complete answer
// is the adapter's to map (Parse), with one exception made here for all of them: an answer cut at
// MaxBody is unknown.
package gatewayhttp

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/payrouter/payrouter"
)

// MaxBody is the most of an answer that is read. A gateway's answers are a few hundred bytes; a
// bigger one is cut (and will not parse), so a misbehaving gateway cannot make us buffer without
// bound.
const MaxBody = 1 << 20

// Answer is a gateway's HTTP answer, read whole (up to MaxBody) and closed.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
	// Truncated reports that the body was longer than MaxBody and was cut.
	Truncated bool
}

// TransportError is an exchange that produced no complete answer, already classified.
type TransportError struct {
	// Outcome is unavailable (not sent), timeout (sent, no answer before the deadline) or unknown
	// (sent, the answer was lost).
	Outcome payrouter.Outcome
	// Stage says how far the exchange got: "connect", "write", "answer" or "body".
	Stage string
	Err   error
}

// Error says the outcome, how far the exchange got, and the transport's error.
func (e *TransportError) Error() string {
	return fmt.Sprintf("%s (%s failed): %v", e.Outcome, e.Stage, e.Err)
}

// Unwrap returns the transport's error, so errors.Is sees context.DeadlineExceeded and the like.
func (e *TransportError) Unwrap() error { return e.Err }

// Result is the attempt result the failure stands for.
func (e *TransportError) Result() payrouter.Result {
	return payrouter.Result{Outcome: e.Outcome, Detail: e.Error()}
}

// progress records, from the transport's own callbacks, how far a request got. The callbacks run
// on the transport's goroutines, hence the atomics.
type progress struct {
	gotConn    atomic.Bool  // a connection was handed to this request: bytes may follow
	fresh      atomic.Bool  // ... and it was dialed for this request, not reused
	h2         atomic.Bool  // ... and it speaks HTTP/2
	wrote      atomic.Bool  // WroteRequest was called: the request is in the connection's buffer
	writeError atomic.Value // the error WroteRequest reported, when it did
}

// Do sends req, whose context carries the deadline, with client and reads the whole answer. The
// error is nil or a *TransportError.
func Do(client *http.Client, req *http.Request) (*Answer, error) {
	p := &progress{}
	trace := &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			p.fresh.Store(!info.Reused)
			if tc, ok := info.Conn.(*tls.Conn); ok {
				p.h2.Store(tc.ConnectionState().NegotiatedProtocol == "h2")
			}
			p.gotConn.Store(true)
		},
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err != nil {
				p.writeError.Store(info.Err)
			}
			p.wrote.Store(true)
		},
	}
	ctx := req.Context()
	req = req.WithContext(httptrace.WithClientTrace(ctx, trace))
	resp, err := client.Do(req)
	if err != nil {
		return nil, classify(ctx, p, redactURLError(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody+1))
	if err != nil {
		// The status line arrived, so the gateway had the request: whatever the body would have
		// said is lost.
		out := payrouter.OutcomeUnknown
		if ctx.Err() != nil || isTimeout(err) {
			out = payrouter.OutcomeTimeout
		}
		return nil, &TransportError{Outcome: out, Stage: "body", Err: err}
	}
	a := &Answer{Status: resp.StatusCode, Header: resp.Header, Body: body}
	if len(body) > MaxBody {
		a.Body, a.Truncated = body[:MaxBody], true
	}
	return a, nil
}

// classify maps a failed client.Do to an outcome by how far the request got. Only two things
// prove a request did not reach the gateway: no connection was ever handed to it, or writing it
// failed. WroteRequest without an error means the request went into the connection's buffer,
// which the transport flushes afterwards, so it is not proof of delivery either way; and a
// connection handed over without WroteRequest may have lost a race with the connection closing,
// or not: from outside it cannot be told, so it counts as possibly sent. Calling a request that
// was not sent "unknown" costs a status look-up; calling one that was sent "unavailable" may
// charge a card twice.
func classify(ctx context.Context, p *progress, err error) *TransportError {
	writeErr, _ := p.writeError.Load().(error)
	switch {
	case !p.gotConn.Load():
		// No connection was ever handed to the request (refused, DNS, dial timeout, a deadline
		// that passed while dialing): not one byte reached the gateway.
		return &TransportError{Outcome: payrouter.OutcomeUnavailable, Stage: "connect", Err: err}
	case h2NotEstablished(err):
		// HTTP/2 gave up on a new connection before opening the request's stream: closed before
		// the first request was written (typically a handshake the gateway refused, as above,
		// seen through the HTTP/2 client).
		return &TransportError{Outcome: payrouter.OutcomeUnavailable, Stage: "connect", Err: err}
	case p.fresh.Load() && handshakeRefused(err):
		// The gateway refused our side of the TLS handshake (no client certificate, or one it
		// does not trust). With TLS 1.3 the client's handshake ends before the server has judged
		// its certificate, so the request may already be written when the refusal arrives; but a
		// server that refused the handshake never read it.
		return &TransportError{Outcome: payrouter.OutcomeUnavailable, Stage: "handshake", Err: err}
	case p.h2.Load() && !p.wrote.Load() && isWriteError(err):
		// HTTP/2 reports WroteRequest once the request's headers (and body) are written; a
		// write that failed before it is the request's HEADERS frame, or a connection that had
		// already failed to write: the gateway never received a whole request header block.
		// (With TLS 1.3 this is also how a refused client certificate often shows: the gateway's
		// alert and close arrive while the request is being written.)
		return &TransportError{Outcome: payrouter.OutcomeUnavailable, Stage: "write", Err: err}
	case p.wrote.Load() && writeErr != nil:
		// The request could not be written whole; a gateway cannot act on half a request.
		// (Small requests fail in the transport's flush instead, which is not reported here:
		// they land below, as possibly sent.)
		return &TransportError{Outcome: payrouter.OutcomeUnavailable, Stage: "write", Err: err}
	case ctx.Err() != nil || isTimeout(err):
		// Sent (or, with a connection in hand, possibly being sent) and the deadline passed first:
		// the gateway may be processing it right now.
		return &TransportError{Outcome: payrouter.OutcomeTimeout, Stage: "answer", Err: err}
	default:
		// Reset, EOF, a malformed answer after the request went out: it may have been processed.
		return &TransportError{Outcome: payrouter.OutcomeUnknown, Stage: "answer", Err: err}
	}
}

// redactURLError strips the URL a client error quotes (a *url.Error's message is
// `Post "<the whole URL>": ...`) down to RedactURL's form: the error becomes a Result.Detail, which
// is logged and shown in API answers, and a URL's user info or query may hold a credential.
// net/http masks only the password, not a user name used as a token, nor the query.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = RedactURL(ue.URL) // the client made this error for this call alone: nobody else holds it
	}
	return err
}

// handshakeAlerts are the TLS alerts a server sends when it refuses the client's part of the
// handshake (RFC 8446 section 6.2), as crypto/tls spells them. Go reports a received alert as a
// *net.OpError with Op "remote error" around an unexported type, so its text is what can be read.
var handshakeAlerts = []string{
	"tls: handshake failure",             // 40
	"tls: bad certificate",               // 42
	"tls: unsupported certificate",       // 43
	"tls: revoked certificate",           // 44
	"tls: expired certificate",           // 45
	"tls: unknown certificate",           // 46
	"tls: unknown certificate authority", // 48
	"tls: access denied",                 // 49
	"tls: certificate required",          // 116
}

// handshakeRefused reports whether err is a TLS alert from the gateway refusing our handshake.
func handshakeRefused(err error) bool {
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "remote error" || oe.Err == nil {
		return false
	}
	return slices.Contains(handshakeAlerts, oe.Err.Error())
}

// h2NotEstablishedText is net/http's HTTP/2 error for a connection that closed before its first
// request was given a stream (errClientConnNotEstablished in h2_bundle.go): that request was
// never written. The error is unexported, so its text is what can be compared.
const h2NotEstablishedText = "http2: client conn could not be established"

// h2NotEstablished reports whether err is, or wraps, that error.
func h2NotEstablished(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == h2NotEstablishedText {
			return true
		}
	}
	return false
}

// isWriteError reports whether err is a failed write to the connection (a reset, a broken pipe).
func isWriteError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "write"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// ResultOf is the attempt result of an error Do returned.
func ResultOf(err error) payrouter.Result {
	var te *TransportError
	if errors.As(err, &te) {
		return te.Result()
	}
	// Do returns nothing else; should that change, not knowing is the safe answer.
	return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: err.Error()}
}

// CheckHealth calls a gateway's health endpoint with GET and reports an error unless it answers
// 2xx. It is what an out-of-band probe sees.
func CheckHealth(ctx context.Context, client *http.Client, healthURL string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, healthURL, nil)
	if err != nil {
		return err
	}
	a, err := Do(client, req)
	if err != nil {
		return err
	}
	if a.Status/100 != 2 {
		return fmt.Errorf("health %s: HTTP %d", RedactURL(healthURL), a.Status)
	}
	return nil
}

// Account is how an adapter reaches one gateway account: the validated base URL, the API key and
// the gateway's own *http.Client (its bulkhead's transport). Each adapter's Client embeds one.
type Account struct {
	Base   *url.URL
	APIKey string
	HTTP   *http.Client
}

// NewAccount validates what every adapter needs and names the gateway kind in its errors, which
// never contain the key. The deadline comes with each call's context, so no timeout is set here.
// The account sends through client's transport but never follows a redirect, whatever client's
// CheckRedirect says (NewClient): a 3xx is the answer the adapter maps.
func NewAccount(kind, baseURL string, credentials map[string]string, client *http.Client) (Account, error) {
	base, err := ParseBaseURL(baseURL)
	if err != nil {
		return Account{}, fmt.Errorf("%s: %w", kind, err)
	}
	key, err := APIKey(credentials)
	if err != nil {
		return Account{}, fmt.Errorf("%s: %w", kind, err)
	}
	if client == nil {
		return Account{}, fmt.Errorf("%s: an *http.Client is required", kind)
	}
	return Account{Base: base, APIKey: key, HTTP: neverRedirects(client)}, nil
}

// NewJSONRequest is a POST of body, encoded as JSON, to the account's path, accepting JSON.
func (a Account) NewJSONRequest(ctx context.Context, path string, body any) (*http.Request, error) {
	buf, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encoding the request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.URL(path), bytes.NewReader(buf))
	if err != nil {
		return nil, fmt.Errorf("building the request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	return req, nil
}

// Parse is an adapter's one mapping from a gateway's answer to a Result: the HTTP status, the
// answer's Content-Type header as sent (a gateway's own "not processed" form is recognised by
// its media type as well as its body: a proxy's error page is not JSON) and the body.
type Parse func(status int, contentType string, body []byte) payrouter.Result

// Exchange sends req through the account's client and maps the answer with parse. What comes
// back is masked (Redact: the API key, and tokens, the card tokens the request carries): the
// answer's body before parse, so that no cut leaves part of a secret, and the Result after, as
// gateways quote what they were sent in their error texts. A transport failure is ResultOf's,
// its Detail prefixed with the gateway's kind. An answer longer than MaxBody is unknown without
// being parsed: no gateway's own answer is that long, and what its unread rest said is lost, so
// a cut that happened to parse (trailing padding) must not pass for the gateway's own form.
func (a Account) Exchange(kind string, req *http.Request, parse Parse, tokens ...string) payrouter.Result {
	ans, err := Do(a.HTTP, req)
	if err != nil {
		r := ResultOf(err)
		r.Detail = kind + ": " + r.Detail
		return a.Redact(r, tokens...)
	}
	if ans.Truncated {
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown,
			Detail: fmt.Sprintf("%s: HTTP %d with an answer longer than %d bytes, not read: it may have been processed", kind, ans.Status, MaxBody)}
	}
	return a.Redact(parse(ans.Status, ans.Header.Get("Content-Type"), a.RedactBody(ans.Body, tokens...)), tokens...)
}

// IsJSON reports whether a Content-Type header names JSON (application/json, with or without
// parameters such as charset). Every gateway's own "not processed, retry later" form is JSON;
// the answers a proxy makes up in a gateway's place (Envoy's text/plain "upstream connect
// error", nginx's HTML "502 Bad Gateway") are not, and may follow a forwarded request.
func IsJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

// maxMediaType bounds the media type quoted in a Detail: it comes from whatever answered.
const maxMediaType = 64

// MediaType names an answer's Content-Type for a Result.Detail: its media type ("text/plain"),
// "no Content-Type" or "an unreadable Content-Type". Parameters are left out and the result is
// bounded, as it comes from whatever answered in the gateway's place.
func MediaType(contentType string) string {
	if strings.TrimSpace(contentType) == "" {
		return "no Content-Type"
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return "an unreadable Content-Type"
	}
	if len(mt) > maxMediaType {
		mt = mt[:maxMediaType] + "..."
	}
	return mt
}

// URL is the address of an API path (which starts with "/") of the account.
func (a Account) URL(path string) string { return Endpoint(a.Base, path) }

// Health calls the gateway's own GET /health, what an out-of-band probe asks. Every adapter's
// Client gets it from the embedded Account.
func (a Account) Health(ctx context.Context) error {
	return CheckHealth(ctx, a.HTTP, a.URL("/health"))
}

// ParseBaseURL validates a gateway's base URL: absolute http or https, a host, no query or
// fragment. The path, if any, is kept and the API paths are appended to it.
func ParseBaseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("base_url is required")
	}
	// The errors quote the URL only as RedactURL shows it: a base URL given with user info or a
	// query (api_key=...) carries a credential, and these errors are printed at start-up.
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message would quote raw whole
		}
		return nil, fmt.Errorf("base_url is not a URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("base_url %q: scheme must be http or https", RedactURL(raw))
	}
	if u.Host == "" {
		return nil, fmt.Errorf("base_url %q: no host", RedactURL(raw))
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("base_url %q: must have no query or fragment", RedactURL(raw))
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// APIKey returns credentials["api_key"], or an error naming what is missing. It never puts the
// key in the error.
func APIKey(credentials map[string]string) (string, error) {
	k := credentials["api_key"]
	if strings.TrimSpace(k) == "" {
		return "", errors.New("credentials.api_key is required")
	}
	return k, nil
}

// RedactURL is raw without what may carry a secret: user info (a password, or a token as the
// user name), query and fragment. A string that does not parse is replaced whole.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	u.User = nil
	u.RawQuery, u.ForceQuery = "", false
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// Redact returns r with the account's API key and each of tokens (card tokens the request
// carried) masked wherever they appear in Detail or DeclineCode. Both come from the gateway's
// answer, which may quote what it was sent (a reflected token, an echoed header), and both end up
// in log lines and API answers. A DeclineCode that held one is replaced whole by "declined".
func (a Account) Redact(r payrouter.Result, tokens ...string) payrouter.Result {
	if r.Detail == "" && r.DeclineCode == "" {
		return r // most approvals: nothing to look through
	}
	for _, s := range a.secrets(tokens) {
		r.Detail = strings.ReplaceAll(r.Detail, s.value, s.mask)
		if strings.Contains(r.DeclineCode, s.value) {
			r.DeclineCode = "declined"
		}
	}
	return r
}

// RedactBody returns a gateway's answer with the account's API key and each of tokens masked, for
// the adapter to parse instead of the answer itself: masked before the adapter quotes and cuts the
// gateway's messages, no part of a secret survives at the cut. The masks hold no quote or
// backslash, so a JSON answer stays JSON. body is not modified; it is returned as is when it holds
// no secret.
func (a Account) RedactBody(body []byte, tokens ...string) []byte {
	out := body
	for _, s := range a.secrets(tokens) {
		if bytes.Contains(out, []byte(s.value)) {
			out = bytes.ReplaceAll(out, []byte(s.value), []byte(s.mask))
		}
	}
	return out
}

// secret is one form of a credential and what it is masked with.
type secret struct{ value, mask string }

// secrets lists the forms of the API key and tokens to mask, the longest first, so that a secret
// holding another is masked whole.
func (a Account) secrets(tokens []string) []secret {
	var out []secret
	add := func(s, mask string) {
		// The forms a gateway's text may hold it in: as sent, quoted (%q, JSON), form-encoded,
		// and normalised as a decline code is. A form shorter than 4 bytes is not worth hunting
		// for: it would mask ordinary words.
		for _, v := range []string{s, strings.Trim(strconv.Quote(s), `"`), url.QueryEscape(s), SnakeCase(s)} {
			if len(v) >= 4 && !slices.ContainsFunc(out, func(x secret) bool { return x.value == v }) {
				out = append(out, secret{v, mask})
			}
		}
	}
	add(a.APIKey, payrouter.Redacted)
	for _, t := range tokens {
		add(t, payrouter.MaskToken(t))
	}
	slices.SortFunc(out, func(x, y secret) int { return len(y.value) - len(x.value) })
	return out
}

// Endpoint joins a validated base URL and an API path (which starts with "/").
func Endpoint(base *url.URL, path string) string {
	u := *base
	u.Path = base.Path + path
	return u.String()
}

// maxCode bounds a normalised code: it comes from the gateway's answer and ends up in logs,
// metrics-adjacent fields and API answers.
const maxCode = 64

// SnakeCase normalises a gateway's reason ("DoNotHonour", "card-declined", "Do not honour") to
// the lower snake case payrouter reports decline codes in, at most 64 bytes of [a-z0-9_].
func SnakeCase(s string) string {
	var b strings.Builder
	prevLower := false
	pendingSep := false
	for _, r := range strings.TrimSpace(s) {
		switch {
		case r >= 'A' && r <= 'Z':
			if prevLower || pendingSep {
				if b.Len() > 0 {
					b.WriteByte('_')
				}
			}
			b.WriteRune(r + ('a' - 'A'))
			prevLower, pendingSep = false, false
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			if pendingSep && b.Len() > 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r)
			prevLower, pendingSep = true, false
		default:
			pendingSep = true
			prevLower = false
		}
		if b.Len() >= maxCode {
			break
		}
	}
	return strings.TrimRight(b.String()[:min(b.Len(), maxCode)], "_")
}
