package gatewayhttp

import (
	"net/http"
	"strings"
	"testing"

	"github.com/payrouter/payrouter"
)

func TestRedactURL(t *testing.T) {
	cases := map[string]string{
		"http://127.0.0.1:9101/v1/charges":                      "http://127.0.0.1:9101/v1/charges",
		"http://user:s3cret@gw.example/v1/charges?api_key=k#f":  "http://gw.example/v1/charges",
		"https://tok_user@gw.example/base?idempotency_key=ch_1": "https://gw.example/base",
		"http://gw.example/?":                                   "http://gw.example/",
		"http://[::1]:namedport":                                "(a URL that does not parse)",
	}
	for in, want := range cases {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRedact: whatever form a gateway quotes a credential in, it does not survive in a Result.
func TestRedact(t *testing.T) {
	const (
		key   = "PW-Live-Key-0a1b2c3d4e"
		token = "tok_Live_9f8e7d6c5b4a39281706f5e4d3c2b1a0"
		quote = `tok_"odd"_9f8e7d6c5b4a39281706`
	)
	a := Account{APIKey: key}
	cases := []struct {
		name   string
		in     payrouter.Result
		tokens []string
		gone   []string
		kept   string
	}{
		{"the key as sent", payrouter.Result{Detail: "paywell: HTTP 401: \"Invalid API Key provided: " + key + "\""},
			nil, []string{key}, "Invalid API Key provided: [redacted]"},
		{"the token as sent", payrouter.Result{Detail: "tranglo: HTTP 400, code 201 \"cardToken " + token + " unknown\""},
			[]string{token}, []string{token}, "cardToken tok_...b1a0 unknown"},
		{"the token form-encoded and snake-cased", payrouter.Result{
			Detail:      "echo: source=" + strings.ReplaceAll(quote, `"`, "%22") + " " + SnakeCase(token),
			DeclineCode: SnakeCase(token)},
			[]string{token, quote}, []string{token, SnakeCase(token), "%22odd%22"}, "echo: source=tok_..."},
		{"the token quoted", payrouter.Result{Detail: `ding: ResultCode 2, X ("tok_\"odd\"_9f8e7d6c5b4a39281706")`},
			[]string{quote}, []string{`tok_\"odd\"_9f8e7d6c5b4a39281706`}, "ding: ResultCode 2"},
		{"nothing to hide", payrouter.Result{Detail: "paywell: HTTP 402 card_error card_declined", DeclineCode: "card_declined"},
			[]string{token}, nil, "paywell: HTTP 402 card_error card_declined"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := a.Redact(c.in, c.tokens...)
			for _, s := range c.gone {
				if strings.Contains(got.Detail, s) || strings.Contains(got.DeclineCode, s) {
					t.Errorf("Redact left %q in %+v", s, got)
				}
			}
			if !strings.Contains(got.Detail, c.kept) {
				t.Errorf("Redact: Detail %q, want it to keep %q", got.Detail, c.kept)
			}
			if c.in.DeclineCode != "" && got.DeclineCode == "" {
				t.Errorf("Redact emptied the decline code %q", c.in.DeclineCode)
			}
			if c.name == "nothing to hide" && got != c.in {
				t.Errorf("Redact changed a Result without secrets: %+v, want %+v", got, c.in)
			}
		})
	}
}

// TestRedactBody: a secret is masked in the answer before an adapter quotes and cuts it, so no
// prefix of it survives a cut; the JSON stays JSON.
func TestRedactBody(t *testing.T) {
	const token = "tok_live_9f8e7d6c5b4a39281706f5e4d3c2b1a0"
	a := Account{APIKey: "k-0123456789"}
	body := []byte(`{"error":{"message":"No such token: ` + token + ` (key k-0123456789)"}}`)
	got := string(a.RedactBody(body, token))
	want := `{"error":{"message":"No such token: tok_...b1a0 (key [redacted])"}}`
	if got != want {
		t.Errorf("RedactBody = %s, want %s", got, want)
	}
	plain := []byte(`{"id":"ch_1","object":"charge"}`)
	if out := a.RedactBody(plain, token); &out[0] != &plain[0] {
		t.Error("RedactBody copied an answer without secrets")
	}
}

// TestDoRedactsTheURL: a transport error quotes the URL; a credential in its user info or query
// must not come along into the Result.Detail that is logged.
func TestDoRedactsTheURL(t *testing.T) {
	target := strings.Replace(closedPort(t), "http://", "http://tokuser:pa55word@", 1) + "/v1/charges?api_key=qs-secret"
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Do(freshClient(t), req)
	if err == nil {
		t.Fatal("Do to a closed port: no error")
	}
	detail := ResultOf(err).Detail
	for _, s := range []string{"tokuser", "pa55word", "qs-secret", "api_key"} {
		if strings.Contains(detail, s) {
			t.Errorf("Detail %q shows %q", detail, s)
		}
	}
	if !strings.Contains(detail, "/v1/charges") {
		t.Errorf("Detail %q: want the path kept", detail)
	}
}

func TestParseBaseURLNeverEchoesSecrets(t *testing.T) {
	for _, raw := range []string{
		"http://u:pa55word@gw.example/?api_key=qs-secret",
		"ftp://u:pa55word@gw.example/?api_key=qs-secret",
		"http://u:pa55word@/?api_key=qs-secret",
		"http://u:pa55word@gw.example:port?api_key=qs-secret",
	} {
		_, err := ParseBaseURL(raw)
		if err == nil {
			t.Errorf("ParseBaseURL(%q): no error", raw)
			continue
		}
		if strings.Contains(err.Error(), "pa55word") || strings.Contains(err.Error(), "qs-secret") {
			t.Errorf("ParseBaseURL(%q) = %v: shows a secret", raw, err)
		}
	}
}
