package gatewaytest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/gateways/gatewayhttp"
	"github.com/payrouter/payrouter/gateways/sim"
)

// ResultOf is an adapter's one mapping from a wire answer (HTTP status, Content-Type and body)
// to a Result, for an operation.
type ResultOf func(op payrouter.Operation, status int, contentType string, body []byte) payrouter.Result

// Content types for the rows of mapping tables.
const (
	JSON = "application/json"
	Text = "text/plain; charset=utf-8"
	HTML = "text/html; charset=utf-8"
)

// Want is what one row of an adapter's mapping table expects of the Result. Adapters' tests
// declare `type want gatewaytest.Want` to write their rows positionally.
type Want struct {
	Outcome payrouter.Outcome
	State   payrouter.TxState
	Ref     string // GatewayReference
	Decline string // DeclineCode
	Detail  string // a part of Detail, when it matters
}

// CheckMapping checks one row of an adapter's mapping table: exactly the wanted outcome, state,
// reference and decline code, a Detail containing w.Detail, and a valid Result.
func CheckMapping(t *testing.T, resultOf ResultOf, op payrouter.Operation, status int, contentType, body string, w Want) {
	t.Helper()
	r := resultOf(op, status, contentType, []byte(body))
	got := Want{r.Outcome, r.State, r.GatewayReference, r.DeclineCode, w.Detail}
	if got != w || !strings.Contains(r.Detail, w.Detail) {
		t.Errorf("resultOf(%s, %d, %q, %s) = %+v; want %+v", op, status, contentType, body, r, w)
	}
	if err := checkResult(op, status, contentType, r); err != nil {
		t.Errorf("resultOf(%s, %d, %q, %s) = %+v: %v", op, status, contentType, body, r, err)
	}
}

// ForeignAnswer is an answer that is not a gateway's own: what a proxy, a load balancer or a
// redirect puts in its place. It may come after the request was forwarded to the gateway and
// processed there (the fault-injection run: Envoy forwarded a charge, the gateway captured it,
// the connection dropped before the answer, and Envoy answered its own 503), so it never proves
// that nothing was processed.
type ForeignAnswer struct {
	Name        string
	Status      int
	ContentType string
	Body        string
}

// ForeignAnswers are answers every adapter must map to unknown, under every operation: a look-up
// may tell what became of the request, nothing in the answer can.
var ForeignAnswers = []ForeignAnswer{
	{"envoy 503 reset before headers", 503, "text/plain", sim.EnvoyResetBody},
	{"envoy 503 no healthy upstream", 503, "text/plain", "no healthy upstream"},
	{"nginx 502 page", 502, HTML, "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"},
	{"nginx 504 page", 504, HTML, "<html>\r\n<head><title>504 Gateway Time-out</title></head>\r\n<body>\r\n<center><h1>504 Gateway Time-out</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"},
	{"503 HTML page", 503, HTML, "<html><body><h1>503 Service Unavailable</h1>No server is available to handle this request.</body></html>"},
	{"503 empty", 503, "", ""},
	{"503 empty JSON object", 503, JSON, "{}"},
	{"503 a proxy's JSON", 503, JSON, `{"message":"no healthy upstream","code":503}`},
	{"429 empty", 429, "", ""},
	{"429 a proxy's rate limit", 429, "text/plain", "local_rate_limited"},
	{"429 empty JSON object", 429, JSON, "{}"},
	{"500 plain", 500, Text, "Internal Server Error\n"},
	{"502 empty", 502, "", ""},
	{"504 empty", 504, "", ""},
	{"200 HTML page", 200, HTML, "<html><body>Please log in to the corporate proxy</body></html>"},
	{"301 redirect", 301, HTML, `<a href="https://elsewhere.example/">Moved Permanently</a>.`},
	{"302 redirect", 302, "", ""},
	{"303 redirect", 303, "", ""},
	{"307 redirect", 307, HTML, `<a href="/v2/">Temporary Redirect</a>.`},
	{"308 redirect", 308, JSON, `{}`},
}

// CheckForeignAnswers checks that resultOf maps every one of ForeignAnswers to unknown, under
// every operation, saying which status it got.
func CheckForeignAnswers(t *testing.T, resultOf ResultOf) {
	t.Helper()
	for _, a := range ForeignAnswers {
		for _, op := range payrouter.Operations {
			t.Run(a.Name+"/"+string(op), func(t *testing.T) {
				CheckMapping(t, resultOf, op, a.Status, a.ContentType, a.Body,
					Want{Outcome: payrouter.OutcomeUnknown, Detail: strconv.Itoa(a.Status)})
			})
		}
	}
}

// AddSeed adds one wire answer to a mapping fuzz test's corpus, under every operation.
func AddSeed(f *testing.F, status int, contentType, body string) {
	for op := range len(payrouter.Operations) {
		f.Add(uint8(op), status, contentType, []byte(body))
	}
}

// FuzzMapping fuzzes an adapter's mapping from the seeds added with AddSeed, and ForeignAnswers:
// whatever the gateway (or anything in its place) answers, the mapping neither panics nor gives
// an invalid Result, nor calls unavailable what cannot be a gateway's own not-processed form.
func FuzzMapping(f *testing.F, resultOf ResultOf) {
	for _, a := range ForeignAnswers {
		AddSeed(f, a.Status, a.ContentType, a.Body)
	}
	f.Fuzz(func(t *testing.T, op uint8, status int, contentType string, body []byte) {
		o := payrouter.Operations[int(op)%len(payrouter.Operations)]
		r := resultOf(o, status, contentType, body)
		if err := checkResult(o, status, contentType, r); err != nil {
			t.Fatalf("resultOf(%s, %d, %q, %q) = %+v: %v", o, status, contentType, body, r, err)
		}
	})
}

// checkResult is ValidResult, and the rules of the contract that hold whatever the gateway: a
// redirect is never read as an answer (it is unknown), and unavailable (failover with no
// look-up) comes only from a gateway's own not-processed form, which is JSON and never a 3xx nor
// a 5xx other than 503.
func checkResult(op payrouter.Operation, status int, contentType string, r payrouter.Result) error {
	if err := ValidResult(op, r); err != nil {
		return err
	}
	if status/100 == 3 && r.Outcome != payrouter.OutcomeUnknown {
		return fmt.Errorf("a %d redirect mapped to %s: it is not the gateway's answer, so unknown", status, r.Outcome)
	}
	if r.Outcome != payrouter.OutcomeUnavailable {
		return nil
	}
	switch {
	case !gatewayhttp.IsJSON(contentType):
		return fmt.Errorf("unavailable for an answer served as %q: no gateway's own not-processed form is anything but JSON", contentType)
	case status/100 == 5 && status != 503:
		return fmt.Errorf("unavailable for an HTTP %d: no gateway's own not-processed form uses it", status)
	}
	return nil
}
