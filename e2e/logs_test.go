package e2e

// The log audit (docs/architecture.md, Observability: "never a credential or a card token in
// full"): a payrouter configured with distinctive secrets is driven through everything that logs,
// and every line it wrote is read back.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrouter/payrouter/pgstore/pgtest"
)

// logSecret is a value no log line may hold, with the name a failure prints instead of it.
type logSecret struct{ name, value string }

// logFinding is one problem of one line of a log: its number (1-based), its msg when it has one,
// and what is wrong, naming a secret by its name, never by its value.
type logFinding struct {
	line int
	msg  string
	what string
}

func (f logFinding) String() string {
	return fmt.Sprintf("line %d (msg %q): %s", f.line, f.msg, f.what)
}

// scanLog reads a process's output as payrouter's log: every line one JSON object with time
// (RFC 3339), level and msg, and none of the secrets in any form a line could carry them in (as
// given, lower case, JSON-escaped). It returns the parsed lines and what is wrong with them.
func scanLog(out string, secrets []logSecret) (lines []map[string]any, findings []logFinding) {
	type form struct{ name, value string }
	var forms []form
	for _, s := range secrets {
		if s.value == "" {
			continue
		}
		escaped, _ := json.Marshal(s.value)
		for _, v := range []string{s.value, strings.ToLower(s.value), strings.Trim(string(escaped), `"`)} {
			if !slices.Contains(forms, form{s.name, v}) {
				forms = append(forms, form{s.name, v})
			}
		}
	}
	n := 0
	for text := range strings.Lines(out) {
		n++
		text = strings.TrimSuffix(text, "\n")
		var line map[string]any
		msg := ""
		if err := json.Unmarshal([]byte(text), &line); err != nil {
			// Its start says who wrote it; the secrets masked first, so that the cut cannot
			// leave part of one.
			shown := text
			for _, f := range forms {
				shown = strings.ReplaceAll(shown, f.value, "<"+f.name+">")
			}
			if len(shown) > 100 {
				shown = shown[:100] + "..."
			}
			findings = append(findings, logFinding{n, "", fmt.Sprintf("not one JSON object: %q", shown)})
		} else {
			lines = append(lines, line)
			msg, _ = line["msg"].(string)
			if msg == "" {
				findings = append(findings, logFinding{n, "", "no msg"})
			}
			if lv, _ := line["level"].(string); !slices.Contains([]string{"DEBUG", "INFO", "WARN", "ERROR"}, lv) {
				findings = append(findings, logFinding{n, msg, fmt.Sprintf("level %q, want DEBUG, INFO, WARN or ERROR", lv)})
			}
			if ts, _ := line["time"].(string); ts == "" {
				findings = append(findings, logFinding{n, msg, "no time"})
			} else if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
				findings = append(findings, logFinding{n, msg, "time is not RFC 3339"})
			}
		}
		var held []string
		for _, f := range forms {
			if strings.Contains(text, f.value) && !slices.Contains(held, f.name) {
				held = append(held, f.name)
			}
		}
		if len(held) > 0 {
			findings = append(findings, logFinding{n, msg, "holds " + strings.Join(held, ", ")})
		}
	}
	return lines, findings
}

// TestLogScannerCatchesALeak proves the scanner TestLogsHoldNoSecrets relies on: a line holding a
// secret, in any form, is flagged by the secret's name and the line's msg, and the finding does
// not repeat the secret; so are lines that are not JSON or lack time, level or msg.
func TestLogScannerCatchesALeak(t *testing.T) {
	secrets := []logSecret{{"the API key", "pk_live_Scanner_0123456789"}, {"a quoted secret", `pa"ss\word_0123`}}
	log := strings.Join([]string{
		`{"time":"2026-11-30T12:00:00.123Z","level":"INFO","msg":"http.request","request_id":"r1","status":201}`,
		`{"time":"2026-11-30T12:00:00.124Z","level":"INFO","msg":"charge.attempt","detail":"Bearer pk_live_Scanner_0123456789"}`,
		`{"time":"2026-11-30T12:00:00.125Z","level":"WARN","msg":"state_store.down","err":"pk_live_scanner_0123456789"}`,
		`{"time":"2026-11-30T12:00:00.126Z","level":"WARN","msg":"fleet.sync_failed","err":"pa\"ss\\word_0123"}`,
		`redis: 2026/11/30 12:00:00 pool.go:1: dial redis://:pk_live_Scanner_0123456789@127.0.0.1:1 refused`,
		`{"level":"INFO","msg":"no.time"}`,
		`{"time":"2026-11-30T12:00:00.127Z","level":"INFO"}`,
	}, "\n") + "\n"
	lines, findings := scanLog(log, secrets)
	if len(lines) != 6 {
		t.Errorf("scanLog parsed %d lines, want 6", len(lines))
	}
	want := []string{
		`line 2 (msg "charge.attempt"): holds the API key`,
		`line 3 (msg "state_store.down"): holds the API key`,
		`line 4 (msg "fleet.sync_failed"): holds a quoted secret`,
		`line 5 (msg ""): not one JSON object: "redis: 2026/11/30 12:00:00 pool.go:1: dial redis://:<the API key>@127.0.0.1:1 refused"`,
		`line 5 (msg ""): holds the API key`,
		`line 6 (msg "no.time"): no time`,
		`line 7 (msg ""): no msg`,
	}
	var got []string
	for _, f := range findings {
		got = append(got, f.String())
		for _, s := range secrets {
			if strings.Contains(f.String(), s.value) {
				t.Errorf("the finding %q repeats the secret it found", f)
			}
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("scanLog findings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The secrets of TestLogsHoldNoSecrets: each distinctive, so that any form of it in a line is a
// leak and nothing else.
const (
	auditAPIKey        = "pk_live_LogAudit_2f9c4e81b7d3a6"
	auditWrongAPIKey   = "pk_live_WrongKey_8a1e5c3f9b70d4"
	auditAdminToken    = "adm_LogAudit_6d2b9f4a1c8e57"
	auditWrongAdmin    = "adm_WrongToken_3c7e1a9d5b2f68"
	auditRedisPassword = "redispass_LogAudit_8d3f6b1e4a"
	// auditDatabasePassword is in state.database_url; the test server trusts every connection,
	// so it is sent and ignored, and must not reach a line either.
	auditDatabasePassword = "dbpass_LogAudit_5c2e9a7f1b"
	auditURLUser          = "urluser_LogAudit_5e9a7c3b"
	auditURLPassword      = "urlpass_LogAudit_2c8f4d6a"
	// auditCardNumber looks like a card number (Luhn): docs/api.md says it is never logged.
	auditCardNumber = "4242424242424242"
)

// Card tokens, long enough to be shown masked as their first and last 4 characters.
var (
	tokApprove   = "tok_live_9f8e7d6c5b4a39281706f5e4d3c2b1a0"
	tokDecline   = "tok_live_declined_5a4b3c2d1e0f9a8b7c6d"
	tokReflected = "tok_live_reflected_0a9b8c7d6e5f4a3b2c"
	tokMalformed = "tok_live_malformed_1f2e3d4c5b6a79800a"
)

// auditGateway is one gateway of the audit's configuration.
type auditGateway struct {
	name, kind, baseURL, key string
	timeout                  time.Duration
}

// TestLogsHoldNoSecrets: payrouter, on a Redis that wants a password and with distinctive API
// key, admin token and gateway credentials, is driven through everything that logs: approvals,
// declines, pinned gateways, authorize/capture/void, refunds (one queued), idempotency replays,
// mismatches and conflicts, a hedge, malformed bodies carrying a card token, the API key and a
// card number, wrong API keys and admin tokens, the admin API (force-open, reset), every
// simulator fault (unavailable, error500, reset, latency over the timeout) until breakers open and
// close again, gateways that quote back everything they were sent (headers and body) in their
// decline, error and unreadable answers, a gateway whose base URL carries user info behind a
// closed port, a Redis outage and the drain on SIGTERM. Then every line payrouter wrote must be
// one JSON object with time, level and msg; every request sent must have its http.request line;
// circuit.opened lines must carry the counts and cooldown_ms; and no line may hold any of the
// secrets, the wrong ones included, nor a card token in full, nor the card number.
func TestLogsHoldNoSecrets(t *testing.T) {
	skipIfShort(t)
	start := time.Now()
	rds := startLockedRedis(t, auditRedisPassword)
	s := startSims(t)
	reflectors := map[string]*reflectingGateway{}
	for _, kind := range []string{"paywell", "ding", "tranglo"} {
		reflectors[kind] = newReflectingGateway(t, kind)
	}
	closed := freePorts(t, 1)[0] // nothing listens there: every call is refused
	gws := []auditGateway{
		{"paywell", "paywell", s.paywell.url, "pw_sk_live_LogAudit_91c3e7a5f2", 2 * time.Second},
		{"ding", "ding", s.ding.url, "ding_key_LogAudit_4b8f2d6a0c", 500 * time.Millisecond},
		{"tranglo", "tranglo", s.tranglo.url, "tgl_key_LogAudit_7e3a9c1f5d", time.Second},
		{"echo_paywell", "paywell", reflectors["paywell"].url, "echo_pw_key_LogAudit_0d9e8f7a", time.Second},
		{"echo_ding", "ding", reflectors["ding"].url, "echo_ding_key_LogAudit_6c5b4a3d", time.Second},
		{"echo_tranglo", "tranglo", reflectors["tranglo"].url, "echo_tgl_key_LogAudit_2e1f0a9b", time.Second},
		{"vault", "ding", "http://" + auditURLUser + ":" + auditURLPassword + "@" + loopback(closed), "vault_key_LogAudit_8b7c6d5e", time.Second},
	}
	secrets := []logSecret{
		{"the API key", auditAPIKey}, {"the wrong API key", auditWrongAPIKey},
		{"the admin token", auditAdminToken}, {"the wrong admin token", auditWrongAdmin},
		{"the Redis password", auditRedisPassword}, {"the database password", auditDatabasePassword},
		{"the user name in vault's base_url", auditURLUser}, {"the password in vault's base_url", auditURLPassword},
		{"the card number", auditCardNumber},
	}
	for _, g := range gws {
		secrets = append(secrets, logSecret{g.name + "'s credentials.api_key", g.key})
	}
	for i, tok := range []string{tokApprove, tokDecline, tokReflected, tokMalformed} {
		// What lies between the 4 characters a mask may show at each end: the token in full,
		// or cut anywhere short of those ends, holds it.
		secrets = append(secrets, logSecret{fmt.Sprintf("card token %d (in full or nearly)", i+1), tok[4 : len(tok)-4]})
	}
	hide := strings.NewReplacer(func() []string {
		var pairs []string
		for _, sc := range secrets {
			pairs = append(pairs, sc.value, "<"+sc.name+">")
		}
		return pairs
	}()...).Replace

	db := strings.Replace(pgtest.NewDatabase(t), "://"+pgtest.User+"@", "://"+pgtest.User+":"+auditDatabasePassword+"@", 1)
	if !strings.Contains(db, auditDatabasePassword) {
		t.Fatalf("test bug: no password put in the database URL %q", db)
	}
	in := startAuditPayrouter(t, gws, rds.url(), db, hide)
	a := &auditClient{t: t, in: in, hide: hide}

	a.driveStorefront(s)
	a.driveMalformed()
	a.driveAdmin(gws)
	a.driveConcurrency(s)
	a.driveReflectors(reflectors)
	a.driveFaults(s)
	a.driveRedisOutage(rds)

	if err := in.proc.stop(); err != nil {
		t.Errorf("payrouter on SIGTERM: %v", err)
	}
	out := in.proc.out.String()
	lines, findings := scanLog(out, secrets)
	for _, f := range findings {
		t.Errorf("payrouter's log, %s", f)
	}
	in.proc.out.mask(hide)

	// One http.request line per request sent, found by the X-Request-Id each one carried. Every
	// line names the instance that wrote it, "<host>/serve/<pid>".
	logged := map[string]bool{}
	opened := map[string]bool{}
	instance, unnamed := fmt.Sprintf("/serve/%d", in.proc.cmd.Process.Pid), 0
	for _, l := range lines {
		if name, _ := l["instance"].(string); !strings.HasSuffix(name, instance) || strings.HasPrefix(name, "/") {
			if unnamed++; unnamed <= 3 {
				t.Errorf("a line whose instance is %q, want <host>%s: %v", name, instance, l)
			}
		}
		switch l["msg"] {
		case "http.request":
			id, _ := l["request_id"].(string)
			logged[id] = true
		case "circuit.opened":
			b, _ := l["breaker"].(string)
			for _, field := range []string{"requests", "failures", "consecutive_failures", "cooldown_ms"} {
				if _, ok := l[field].(float64); !ok {
					t.Errorf("circuit.opened for %s: no number %s", b, field)
				}
			}
			if ms, _ := l["cooldown_ms"].(float64); ms != 1000 {
				t.Errorf("circuit.opened for %s: cooldown_ms %v, want 1000 (the configured 1s)", b, l["cooldown_ms"])
			}
			// Tripped by its failures (not forced open, nor a failed trial): the counts say why.
			if n, _ := l["consecutive_failures"].(float64); l["from"] == "closed" && n >= 2 {
				opened[b] = true
			}
		}
	}
	var missing []string
	for _, id := range a.sent() {
		if !logged[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d requests sent have no http.request line: %v", len(missing), len(a.sent()), missing)
	}
	for _, b := range []string{"paywell/charge", "tranglo/charge", "ding/charge", "vault/charge"} {
		if !opened[b] {
			t.Errorf("no circuit.opened line for %s from closed with consecutive_failures >= 2; tripped: %v", b, opened)
		}
	}
	t.Logf("%d requests, %d log lines read, %d secrets looked for, breakers opened: %v; %v in all",
		len(a.sent()), len(lines), len(secrets), opened, time.Since(start).Round(time.Millisecond))
}

// --- the requests ------------------------------------------------------------------------------

// auditClient sends the audit's requests, each with its own X-Request-Id, and keeps the ids.
type auditClient struct {
	t    *testing.T
	in   *instance
	hide func(string) string // masks the secrets in what a failure prints

	mu  sync.Mutex
	ids []string
	seq atomic.Int64
	key atomic.Int64
}

func (a *auditClient) sent() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.ids)
}

// try sends one request through client with header pairs, carrying an X-Request-Id of its own.
func (a *auditClient) try(client *http.Client, method, url string, body []byte, header ...string) (reply, error) {
	id := fmt.Sprintf("logaudit-%03d", a.seq.Add(1))
	a.mu.Lock()
	a.ids = append(a.ids, id)
	a.mu.Unlock()
	r, err := send(client, method, url, body, append([]string{"X-Request-Id", id}, header...)...)
	if err != nil {
		return r, errors.New(a.hide(err.Error()))
	}
	return r, nil
}

// do is try for the test goroutine: a request that gets no answer ends the test.
func (a *auditClient) do(client *http.Client, method, url string, body []byte, header ...string) reply {
	a.t.Helper()
	r, err := a.try(client, method, url, body, header...)
	if err != nil {
		a.t.Fatal(err)
	}
	return r
}

// expect reports an answer whose status is not one of want.
func (a *auditClient) expect(what string, r reply, want ...int) reply {
	a.t.Helper()
	if !slices.Contains(want, r.status) {
		a.t.Errorf("%s: want status %v; got %s", what, want, a.hide(r.String()))
	}
	return r
}

func (a *auditClient) newKey() string { return "logaudit-key-" + strconv.FormatInt(a.key.Add(1), 10) }

// post sends an authenticated storefront POST with an Idempotency-Key.
func (a *auditClient) post(path, key string, body []byte) reply {
	a.t.Helper()
	return a.do(a.in.client, "POST", a.in.url+path, body,
		"Authorization", "Bearer "+auditAPIKey, "Content-Type", "application/json", "Idempotency-Key", key)
}

// charge sends POST /charge; gateway "" leaves it to the routes.
func (a *auditClient) charge(key string, amount int64, currency, token, gateway string, capture bool) reply {
	a.t.Helper()
	return a.post("/charge", key, auditChargeBody(amount, currency, token, gateway, capture))
}

// auditChargeBody is a POST /charge body with every optional field set.
func auditChargeBody(amount int64, currency, token, gateway string, capture bool) []byte {
	body := map[string]any{
		"amount": amount, "currency": currency, "capture": capture,
		"payment_method": map[string]string{"type": "card", "token": token},
		"description":    "log audit", "customer_id": "cus_audit", "metadata": map[string]string{"order": "42"},
	}
	if gateway != "" {
		body["gateway"] = gateway
	}
	b, _ := json.Marshal(body)
	return b
}

func (a *auditClient) get(path string) reply {
	a.t.Helper()
	return a.do(a.in.client, "GET", a.in.url+path, nil, "Authorization", "Bearer "+auditAPIKey)
}

func (a *auditClient) admin(method, path, token string) reply {
	a.t.Helper()
	return a.do(a.in.probeClient, method, a.in.adminURL+path, nil, "Authorization", "Bearer "+token)
}

// idOf is the charge or refund id of an answer.
func (a *auditClient) idOf(r reply) string {
	a.t.Helper()
	var v struct {
		ID       string `json:"id"`
		ChargeID string `json:"charge_id"`
	}
	_ = json.Unmarshal(r.body, &v)
	if v.ID == "" {
		v.ID = v.ChargeID
	}
	if v.ID == "" {
		a.t.Fatalf("no id in %s", a.hide(r.String()))
	}
	return v.ID
}

// behave is PUT /_sim/behavior with decline_all, which the harness's sim.behave leaves false.
func (a *auditClient) behave(g *sim, mode string, latency time.Duration, declineAll bool) {
	a.t.Helper()
	body, _ := json.Marshal(map[string]any{"mode": mode, "latency": latency.String(), "decline_all": declineAll})
	g.control(a.t, "PUT", "/_sim/behavior", body, nil)
}

// driveStorefront: approvals through the route and pinned, authorize/capture/void, a refund, the
// look-ups, a replay, a mismatch and declines at each gateway.
func (a *auditClient) driveStorefront(s *sims) {
	t := a.t
	t.Helper()
	key := a.newKey()
	first := a.expect("an approval", a.charge(key, 5000, "USD", tokApprove, "", true), http.StatusCreated)
	id := a.idOf(first)
	replay := a.expect("a replay", a.charge(key, 5000, "USD", tokApprove, "", true), http.StatusCreated)
	if replay.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the same key and body again: want Idempotent-Replayed: true; got %s", a.hide(replay.String()))
	}
	a.expect("the same key with another body", a.charge(key, 5000, "USD", tokDecline, "", true), http.StatusUnprocessableEntity)
	for _, g := range []string{"ding", "tranglo"} {
		a.expect("an approval pinned to "+g, a.charge(a.newKey(), 1200, "USD", tokApprove, g, true), http.StatusCreated)
	}

	auth := a.expect("an authorization", a.charge(a.newKey(), 700, "USD", tokApprove, "", false), http.StatusCreated)
	a.expect("a capture", a.post("/charge/"+a.idOf(auth)+"/capture", a.newKey(), nil), http.StatusOK)
	auth = a.expect("an authorization", a.charge(a.newKey(), 800, "USD", tokApprove, "tranglo", false), http.StatusCreated)
	a.expect("a void", a.post("/charge/"+a.idOf(auth)+"/void", a.newKey(), nil), http.StatusOK)

	rf := a.expect("a refund", a.post("/charge/"+id+"/refund", a.newKey(), []byte(`{"amount": 500}`)), http.StatusCreated)
	a.expect("GET /refund", a.get("/refund/"+a.idOf(rf)), http.StatusOK)
	a.expect("GET /charge", a.get("/charge/"+id), http.StatusOK)
	a.expect("GET /charge of no charge", a.get("/charge/ch_none"), http.StatusNotFound)

	for _, g := range []*sim{s.paywell, s.ding, s.tranglo} {
		a.behave(g, "normal", 0, true)
		a.expect("a decline at "+g.name, a.charge(a.newKey(), 900, "USD", tokDecline, g.name, true), http.StatusPaymentRequired)
		a.behave(g, "normal", 0, false)
	}
	a.expect("a decline through the route", a.charge(a.newKey(), 900, "USD", "tok_decline", "", true), http.StatusPaymentRequired)
}

// driveMalformed: requests refused before anything is charged, carrying what must not be logged.
func (a *auditClient) driveMalformed() {
	a.t.Helper()
	url := a.in.url + "/charge"
	bad := []struct {
		what   string
		body   string
		header []string
		want   int
	}{
		{"truncated JSON with a token and the API key",
			`{"amount": 100, "currency": "USD", "payment_method": {"type": "card", "token": "` + tokMalformed + `"}, "note": "Bearer ` + auditAPIKey,
			nil, http.StatusBadRequest},
		{"wrong types and an unknown field named after the API key",
			`{"amount": "100", "currency": "USD", "payment_method": {"type": "card", "token": "` + tokMalformed + `"}, "` + auditAPIKey + `": true}`,
			nil, http.StatusBadRequest},
		{"a card number",
			`{"amount": 100, "currency": "USD", "payment_method": {"type": "card", "number": "` + auditCardNumber + `"}}`,
			nil, http.StatusBadRequest},
		{"a card number in the description",
			`{"amount": 100, "currency": "USD", "payment_method": {"type": "card", "token": "` + tokMalformed + `"}, "description": "card ` + auditCardNumber + `"}`,
			nil, http.StatusBadRequest},
		{"trailing data", `{"amount": 100, "currency": "USD", "payment_method": {"type": "card", "token": "` + tokMalformed + `"}} {"token": "` + tokMalformed + `"}`,
			nil, http.StatusBadRequest},
		{"a body too large", `{"description": "` + strings.Repeat(tokMalformed, 2000) + `"}`, nil, http.StatusRequestEntityTooLarge},
		{"not JSON", "token=" + tokMalformed + "&key=" + auditAPIKey, []string{"Content-Type", "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
		{"no Idempotency-Key", `{"amount": 100, "currency": "USD", "payment_method": {"type": "card", "token": "` + tokMalformed + `"}}`,
			[]string{"Idempotency-Key", ""}, http.StatusBadRequest},
		{"the wrong API key", `{"token": "` + tokMalformed + `"}`, []string{"Authorization", "Bearer " + auditWrongAPIKey}, http.StatusUnauthorized},
		{"the API key in a Basic header", `{}`, []string{"Authorization", "Basic " + auditAPIKey}, http.StatusUnauthorized},
		{"the admin token as API key", `{}`, []string{"Authorization", "Bearer " + auditAdminToken}, http.StatusUnauthorized},
	}
	for _, b := range bad {
		header := []string{"Authorization", "Bearer " + auditAPIKey, "Content-Type", "application/json", "Idempotency-Key", a.newKey()}
		for i := 0; i+1 < len(b.header); i += 2 {
			for j := 0; j+1 < len(header); j += 2 {
				if header[j] == b.header[i] {
					header[j+1] = b.header[i+1]
				}
			}
		}
		a.expect(b.what, a.do(a.in.client, "POST", url, []byte(b.body), header...), b.want)
	}
	a.expect("GET /charge with the wrong API key", a.do(a.in.client, "GET", url+"/ch_x", nil, "Authorization", "Bearer "+auditWrongAPIKey), http.StatusUnauthorized)
	a.expect("GET /charge with no key", a.do(a.in.client, "GET", url+"/ch_x", nil), http.StatusUnauthorized)
	a.expect("a path that is no route", a.do(a.in.client, "GET", a.in.url+"/charge/"+tokMalformed+"/x/"+auditAPIKey, nil), http.StatusNotFound, http.StatusUnauthorized, http.StatusMethodNotAllowed)
}

// driveAdmin: the admin API with the right token, the wrong one and the API key, and a breaker
// forced open (a charge passes it) and reset.
func (a *auditClient) driveAdmin(gws []auditGateway) {
	a.t.Helper()
	a.expect("GET /admin/breakers", a.admin("GET", "/admin/breakers", auditAdminToken), http.StatusOK)
	listing := a.expect("GET /admin/gateways", a.admin("GET", "/admin/gateways", auditAdminToken), http.StatusOK)
	for _, g := range gws {
		for what, s := range map[string]string{"credentials.api_key": g.key, "user name": auditURLUser, "password": auditURLPassword} {
			if strings.Contains(string(listing.body), s) {
				a.t.Errorf("GET /admin/gateways shows %s's %s", g.name, what)
			}
		}
	}
	a.expect("GET /admin/charges", a.admin("GET", "/admin/charges?status=processing", auditAdminToken), http.StatusOK)
	a.expect("the wrong admin token", a.admin("GET", "/admin/breakers", auditWrongAdmin), http.StatusUnauthorized)
	a.expect("the API key as admin token", a.admin("POST", "/admin/breakers/paywell/charge/force-open", auditAPIKey), http.StatusUnauthorized)
	a.expect("no admin token", a.do(a.in.probeClient, "GET", a.in.adminURL+"/admin/gateways", nil), http.StatusUnauthorized)
	a.expect("GET /metrics", a.do(a.in.probeClient, "GET", a.in.adminURL+"/metrics", nil), http.StatusOK)

	a.expect("force-open", a.admin("POST", "/admin/breakers/paywell/charge/force-open", auditAdminToken), http.StatusOK)
	r := a.expect("a charge past a forced-open breaker", a.charge(a.newKey(), 1500, "USD", tokApprove, "", true), http.StatusCreated)
	if ans, err := decodeAnswer(r); err != nil || len(ans.Attempts) == 0 || ans.Attempts[0].Outcome != "breaker_open" {
		a.t.Errorf("a charge with paywell/charge forced open: want its first attempt breaker_open; got %s", a.hide(r.String()))
	}
	a.expect("force-close", a.admin("POST", "/admin/breakers/ding/refund/force-close", auditAdminToken), http.StatusOK)
	a.expect("reset", a.admin("POST", "/admin/breakers/paywell/charge/reset", auditAdminToken), http.StatusOK)
	a.expect("reset", a.admin("POST", "/admin/breakers/ding/refund/reset", auditAdminToken), http.StatusOK)
	a.expect("no such breaker", a.admin("POST", "/admin/breakers/"+auditAPIKey+"/charge/reset", auditAdminToken), http.StatusNotFound)
}

// driveConcurrency: an idempotency conflict (the same key while the first is in flight) and a
// hedge answered first, settled after its slow sale.
func (a *auditClient) driveConcurrency(s *sims) {
	a.t.Helper()
	a.behave(s.paywell, "normal", 800*time.Millisecond, false) // under its 2s timeout
	key := a.newKey()
	type result struct {
		r   reply
		err error
	}
	first := make(chan result, 1)
	go func() {
		r, err := a.try(a.in.client, "POST", a.in.url+"/charge", auditChargeBody(2500, "USD", tokApprove, "paywell", true),
			"Authorization", "Bearer "+auditAPIKey, "Content-Type", "application/json", "Idempotency-Key", key)
		first <- result{r, err}
	}()
	eventually(a.t, 700*time.Millisecond, "the first charge is at paywell", func() (bool, string) {
		st := s.paywell.stats(a.t)
		return st.InFlight > 0, fmt.Sprintf("paywell in flight: %d", st.InFlight)
	})
	a.expect("the same key while the first is in flight", a.charge(key, 2500, "USD", tokApprove, "paywell", true), http.StatusConflict)
	if res := <-first; res.err != nil {
		a.t.Fatal(res.err)
	} else {
		a.expect("the first of two with one key", res.r, http.StatusCreated)
	}
	a.behave(s.paywell, "normal", 0, false)

	// The EUR route hedges to paywell after 100ms: paywell's authorization answers first, ding's
	// sale at 300ms captures after it and keeps the charge, and paywell's authorization is voided.
	a.behave(s.ding, "normal", 300*time.Millisecond, false)
	a.expect("a hedged charge", a.charge(a.newKey(), 3100, "EUR", tokApprove, "", true), http.StatusCreated)
	a.behave(s.ding, "normal", 0, false)
}

// driveReflectors: gateways that quote back every header and the whole body they got, as a
// decline, as an error and as an unreadable answer (which leaves the charge processing after a
// look-up that is just as unreadable).
func (a *auditClient) driveReflectors(reflectors map[string]*reflectingGateway) {
	a.t.Helper()
	for _, kind := range []string{"paywell", "ding", "tranglo"} {
		g := reflectors[kind]
		for _, c := range []struct {
			form string
			want int
		}{{"decline", http.StatusPaymentRequired}, {"error", http.StatusBadGateway}, {"garbage", http.StatusAccepted}} {
			g.form.Store(c.form)
			a.expect(fmt.Sprintf("a charge at echo_%s answering %s", kind, c.form),
				a.charge(a.newKey(), 4100, "USD", tokReflected, "echo_"+kind, true), c.want)
		}
		if n := g.calls.Load(); n == 0 {
			a.t.Errorf("echo_%s was never called", kind)
		}
	}
}

// driveFaults: every simulator fault until breakers open, a refund queued, then the gateways
// healthy again and the breakers closing after their cooldown.
func (a *auditClient) driveFaults(s *sims) {
	a.t.Helper()
	any := []int{http.StatusCreated, http.StatusAccepted, http.StatusPaymentRequired, http.StatusBadGateway, http.StatusServiceUnavailable}
	for range 2 {
		a.expect("a charge at vault's closed port", a.charge(a.newKey(), 600, "USD", tokApprove, "vault", true), http.StatusServiceUnavailable)
	}

	refundable := a.idOf(a.expect("an approval to refund later", a.charge(a.newKey(), 6000, "USD", tokApprove, "paywell", true), http.StatusCreated))
	a.behave(s.paywell, "unavailable", 0, false)
	for range 2 {
		a.expect("a charge with paywell unavailable", a.charge(a.newKey(), 1700, "USD", tokApprove, "", true), http.StatusCreated)
	}
	a.expect("a refund with paywell unavailable", a.post("/charge/"+refundable+"/refund", a.newKey(), nil), http.StatusAccepted, http.StatusCreated)

	a.behave(s.tranglo, "error500", 0, false)
	for range 2 {
		a.expect("a charge with tranglo failing", a.charge(a.newKey(), 1800, "USD", tokApprove, "tranglo", true), any...)
	}
	a.behave(s.ding, "reset", 0, false)
	a.expect("a charge with ding resetting", a.charge(a.newKey(), 1900, "USD", tokApprove, "ding", true), any...)
	a.behave(s.ding, "normal", 800*time.Millisecond, false) // over its 500ms timeout
	a.expect("a charge with ding slower than its timeout", a.charge(a.newKey(), 2000, "USD", tokApprove, "ding", true), any...)
	a.expect("a charge with every gateway failing", a.charge(a.newKey(), 2100, "USD", tokApprove, "", true), any...)

	for _, g := range []*sim{s.paywell, s.ding, s.tranglo} {
		a.behave(g, "normal", 0, false)
	}
	time.Sleep(1100 * time.Millisecond) // the breakers' 1s cooldown: the next calls are trials
	for _, g := range []string{"paywell", "ding", "tranglo"} {
		a.expect("a trial charge at "+g, a.charge(a.newKey(), 2200, "USD", tokApprove, g, true), http.StatusCreated)
	}
}

// driveRedisOutage: Redis dies under payrouter and comes back.
func (a *auditClient) driveRedisOutage(rds *lockedRedis) {
	t := a.t
	t.Helper()
	rds.stop()
	a.expect("a charge with Redis down", a.charge(a.newKey(), 2300, "USD", tokApprove, "", true), http.StatusCreated)
	eventually(t, 5*time.Second, "payrouter logs state_store.down", logged(a.in.proc, "state_store.down"))
	// Asked while Redis is away, the state store dials it and fails: what the Redis client itself
	// has to say about that must come out as payrouter's JSON too.
	a.expect("/readyz with Redis down", a.do(a.in.probeClient, "GET", a.in.url+"/readyz", nil), http.StatusServiceUnavailable)
	a.expect("a charge with Redis down", a.charge(a.newKey(), 2300, "USD", tokApprove, "", true), http.StatusCreated)
	// An outage, not a blip: held over two of the state store's 250ms checks while down, each a
	// dial that fails, so the Redis client has its say every time, not only when a race lets it.
	time.Sleep(600 * time.Millisecond)
	if err := rds.start(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "payrouter logs state_store.up", logged(a.in.proc, "state_store.up"))
	a.expect("a charge with Redis back", a.charge(a.newKey(), 2400, "USD", tokApprove, "", true), http.StatusCreated)
}

// --- the processes -------------------------------------------------------------------------------

// startAuditPayrouter starts payrouter with the audit's secrets: its API key and admin token, the
// gateways' credentials, redisURL (with its password) as the coordination store and databaseURL
// (with its password) as the money store. The harness prints
// a failed test's payrouter output; hide masks the secrets in it first (t.Cleanup runs the masking
// before the harness's stop-and-print, which was registered earlier).
func startAuditPayrouter(t *testing.T, gws []auditGateway, redisURL, databaseURL string, hide func(string) string) *instance {
	t.Helper()
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		ports := freePorts(t, 2)
		var b strings.Builder
		fmt.Fprintf(&b, "listen: %q\nadmin_listen: %q\nrequest_timeout: 3s\n", loopback(ports[0]), loopback(ports[1]))
		fmt.Fprintf(&b, "auth:\n  api_keys: [%q]\n  admin_token: %q\n", auditAPIKey, auditAdminToken)
		fmt.Fprintf(&b, "state:\n  redis_url: %q\n  redis_timeout: 200ms\n  database_url: %q\n", redisURL, databaseURL)
		b.WriteString("gateways:\n")
		for _, g := range gws {
			fmt.Fprintf(&b, "  %s:\n    kind: %s\n    base_url: %q\n    credentials: {api_key: %q}\n", g.name, g.kind, g.baseURL, g.key)
			fmt.Fprintf(&b, "    timeout: %s\n    max_concurrent: 8\n    max_wait: 0s\n", g.timeout)
			b.WriteString("    breaker:\n      consecutive_failures: 2\n      failures_in_window: 0\n      failure_rate: 0\n")
			b.WriteString("      cooldown: 1s\n      half_open_requests: 1\n      probe: in_band\n")
		}
		b.WriteString("routes:\n")
		b.WriteString("  - name: eur-hedged\n    match: {currency: [EUR]}\n    gateways: [ding, paywell]\n    hedge: {after: 100ms}\n")
		b.WriteString("  - name: default\n    gateways: [paywell, ding, tranglo]\n")
		b.WriteString("fallbacks:\n  charge: fail\n  refund: queue\n  status: degrade\n")
		path := filepath.Join(dir, fmt.Sprintf("payrouter-%d.yaml", attempt))
		if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		in, err := servePayrouter(t, "payrouter", path, ports[0], ports[1])
		t.Cleanup(func() { in.proc.out.mask(hide) })
		if err == nil {
			return in
		}
		if attempt < startAttempts && in.proc.clashed() {
			in.proc.expected.Store(true)
			continue
		}
		// Neither the configuration nor the output is printed here: both hold the secrets.
		in.proc.expected.Store(true)
		t.Fatalf("payrouter did not come up on the audit's configuration: %v", err)
	}
}

// mask rewrites what the process wrote so far with hide: the harness prints it when a test fails.
func (o *output) mask(hide func(string) string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := hide(o.buf.String())
	o.buf.Reset()
	o.buf.WriteString(s)
}

// lockedRedis is a redis-server that wants a password (requirepass), on a free port, stopped when
// the test ends; redistest starts none.
type lockedRedis struct {
	t        *testing.T
	port     int
	password string
	dir      string
	cmd      *exec.Cmd
}

func startLockedRedis(t *testing.T, password string) *lockedRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal("redis-server is not on PATH; the log audit runs payrouter on a Redis with a password: apt-get install redis-server")
	}
	r := &lockedRedis{t: t, port: freePorts(t, 1)[0], password: password, dir: t.TempDir()}
	// The password goes in a file, not on the command line, where ps would show it.
	conf := fmt.Sprintf("port %d\nbind 127.0.0.1\nsave \"\"\nappendonly no\ndir %s\nrequirepass %s\n", r.port, r.dir, password)
	if err := os.WriteFile(filepath.Join(r.dir, "redis.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.stop)
	return r
}

// url is state.redis_url, password included.
func (r *lockedRedis) url() string {
	return "redis://:" + r.password + "@" + loopback(r.port) + "/0"
}

// start runs the server (again, on the same port, empty) and waits until it answers AUTH.
func (r *lockedRedis) start() error {
	cmd := exec.Command("redis-server", filepath.Join(r.dir, "redis.conf"))
	log, err := os.Create(filepath.Join(r.dir, "redis.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	r.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		out, err := exec.Command("redis-cli", "-p", strconv.Itoa(r.port), "--no-auth-warning", "-a", r.password, "ping").CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) == "PONG" {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.stop()
	return fmt.Errorf("redis-server with requirepass does not answer PING on port %d after 10s", r.port)
}

// stop kills the server (a crash, not a shutdown); harmless when it is not running.
func (r *lockedRedis) stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// reflectingGateway is a gateway of one kind that quotes back, in that kind's own answer forms,
// every header and the whole body it was sent: what a careless gateway's error messages do.
type reflectingGateway struct {
	url   string
	form  atomic.Value // "decline", "error" or "garbage" (a 200 that is not JSON)
	calls atomic.Int64
}

func newReflectingGateway(t *testing.T, kind string) *reflectingGateway {
	g := &reflectingGateway{}
	g.form.Store("error")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		echo := string(body) + " " + r.URL.String()
		var names []string
		for name := range r.Header {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			echo += " " + name + ": " + strings.Join(r.Header[name], ",")
		}
		form := g.form.Load().(string)
		if form == "garbage" {
			fmt.Fprintf(w, "<html><body>%s</body></html>", echo)
			return
		}
		answer := func(status int, v any) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(v)
		}
		decline := form == "decline"
		switch kind {
		case "paywell":
			if decline {
				answer(http.StatusPaymentRequired, map[string]any{"error": map[string]string{
					"type": "card_error", "code": "card_declined", "decline_code": echo, "message": "Declined: " + echo}})
			} else {
				answer(http.StatusBadRequest, map[string]any{"error": map[string]string{
					"type": "invalid_request_error", "code": "parameter_invalid", "message": "Invalid request: " + echo}})
			}
		case "ding":
			code := "InvalidParameter"
			if decline {
				code = "ProviderRefusedRequest"
			}
			answer(http.StatusOK, map[string]any{"ResultCode": 2, "ErrorCodes": []map[string]string{{"Code": code, "Context": echo}}})
		case "tranglo":
			code, status := "201", http.StatusBadRequest
			if decline {
				code, status = "103", http.StatusForbidden
			}
			answer(status, map[string]string{"responseCode": code, "responseDesc": echo})
		}
	}))
	t.Cleanup(srv.Close)
	g.url = srv.URL
	return g
}
