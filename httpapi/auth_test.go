package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/internal/testlog"
	"github.com/payrouter/payrouter/telemetry"
)

const chargeJSON = `{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"},"capture":%t}`

// TestAPIKeyRights: every storefront route needs its right; a key without it gets 403
// forbidden, naming the right, and a key with it goes through.
func TestAPIKeyRights(t *testing.T) {
	st := newStack(t, "admin-token")
	// One scope, three keys with different rights: each sees the charges the others made.
	st.creds.SetAuth(config.Auth{APIKeys: []config.APIKey{
		{Name: "shop", Key: "key-all"},
		{Name: "shop", Key: "key-read", Rights: []string{config.RightRead}},
		{Name: "shop", Key: "key-till", Rights: []string{config.RightCharge, config.RightCapture, config.RightVoid}},
	}})
	bearer := func(k string) []string { return []string{"Authorization", "Bearer " + k} }
	newCharge := func(key string, capture bool) string {
		r := do(st.api, "POST", "/charge", fmt.Sprintf(chargeJSON, capture), append(bearer("key-all"), "Idempotency-Key", key)...)
		var ch struct{ ID string }
		if err := json.Unmarshal([]byte(r.body), &ch); r.status != 201 || err != nil {
			t.Fatalf("charge: %d %s", r.status, r.body)
		}
		return ch.ID
	}
	captured := newCharge("c-1", true)
	refund := do(st.api, "POST", "/charge/"+captured+"/refund", `{"amount":100}`, append(bearer("key-all"), "Idempotency-Key", "r-1")...)
	var re struct{ ID string }
	if err := json.Unmarshal([]byte(refund.body), &re); refund.status != 201 || err != nil {
		t.Fatalf("refund: %d %s", refund.status, refund.body)
	}

	type call struct{ method, path, body string }
	routes := []struct {
		right string
		call  func() call // a fresh call: each POST acts on a charge of its own
		ok    int
	}{
		{config.RightCharge, func() call { return call{"POST", "/charge", fmt.Sprintf(chargeJSON, true)} }, 201},
		{config.RightCapture, func() call { return call{"POST", "/charge/" + newCharge(freshKey(), false) + "/capture", ""} }, 200},
		{config.RightVoid, func() call { return call{"POST", "/charge/" + newCharge(freshKey(), false) + "/void", ""} }, 200},
		{config.RightRefund, func() call {
			return call{"POST", "/charge/" + newCharge(freshKey(), true) + "/refund", `{"amount":100}`}
		}, 201},
		{config.RightRead, func() call { return call{"GET", "/charge/" + captured, ""} }, 200},
		{config.RightRead, func() call { return call{"GET", "/refund/" + re.ID, ""} }, 200},
	}
	keys := map[string][]string{"key-all": config.Rights, "key-read": {config.RightRead}, "key-till": {config.RightCharge, config.RightCapture, config.RightVoid}}
	for _, rt := range routes {
		for key, rights := range keys {
			c := rt.call()
			t.Run(c.method+" "+strings.SplitN(c.path, "/", 3)[1]+" "+rt.right+" with "+key, func(t *testing.T) {
				r := do(st.api, c.method, c.path, c.body, append(bearer(key), "Idempotency-Key", freshKey())...)
				allowed := false
				for _, have := range rights {
					allowed = allowed || have == rt.right
				}
				switch {
				case allowed && r.status != rt.ok:
					t.Errorf("%s %s: %d %s, want %d", c.method, c.path, r.status, r.body, rt.ok)
				case !allowed && (r.status != 403 || problemType(t, r) != "/problems/forbidden"):
					t.Errorf("%s %s without the right %s: %d %s, want 403 forbidden", c.method, c.path, rt.right, r.status, r.body)
				case !allowed && !strings.Contains(r.body, "no right to "+rt.right):
					t.Errorf("the 403 does not name the right %s: %s", rt.right, r.body)
				}
			})
		}
	}
}

var randMu sync.Mutex
var randN int

// freshKey returns a fresh idempotency key.
func freshKey() string {
	randMu.Lock()
	defer randMu.Unlock()
	randN++
	return fmt.Sprintf("k-%d", randN)
}

// TestNamedKeysShareTheirScope: during a rotation the old and the new key, listed under one
// name, see the same idempotency keys; a plain key keeps the scope of its digest, as before
// names existed, so charges stored before stay with it.
func TestNamedKeysShareTheirScope(t *testing.T) {
	st := newStack(t, "admin-token")
	st.creds.SetAuth(config.Auth{APIKeys: []config.APIKey{
		{Name: "shop-eu", Key: "key-eu-old"}, {Name: "shop-eu", Key: "key-eu-new"}, {Key: "key-plain"},
	}})
	charge := func(key string) reply {
		return do(st.api, "POST", "/charge", fmt.Sprintf(chargeJSON, true), "Authorization", "Bearer "+key, "Idempotency-Key", "rotation-1")
	}
	first, again, plain := charge("key-eu-old"), charge("key-eu-new"), charge("key-plain")
	if first.status != 201 || again.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("the new key of shop-eu with the old one's Idempotency-Key: %d %s (replayed %q), want the stored answer %s",
			again.status, again.body, again.header.Get("Idempotent-Replayed"), first.body)
	}
	if plain.status != 201 || plain.header.Get("Idempotent-Replayed") != "" || plain.body == first.body {
		t.Errorf("another key with the same Idempotency-Key: %d %s, want a charge of its own", plain.status, plain.body)
	}
	var ch struct{ ID string }
	if err := json.Unmarshal([]byte(first.body), &ch); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]int{"key-eu-old": 200, "key-eu-new": 200, "key-plain": 404} {
		if r := do(st.api, "GET", "/charge/"+ch.ID, "", "Authorization", "Bearer "+key); r.status != want {
			t.Errorf("GET shop-eu's charge with %s: %d, want %d", key, r.status, want)
		}
	}

	who := whoAmI(t, st.creds, nil)
	sum := sha256.Sum256([]byte("key-plain"))
	for key, want := range map[string]string{
		"key-eu-old": "name:shop-eu", "key-eu-new": "name:shop-eu", "key-plain": hex.EncodeToString(sum[:8]),
	} {
		r := do(who.api, "GET", "/whoami", "", "Authorization", "Bearer "+key)
		if r.body != "key:"+want+" "+want {
			t.Errorf("%s: actor and scope %q, want %q", key, r.body, "key:"+want+" "+want)
		}
	}
}

// whoami is a storefront and an admin handler whose one route answers "<actor> <key scope>".
type whoami struct{ api, admin http.Handler }

func whoAmI(t *testing.T, creds *Credentials, log *slog.Logger) whoami {
	t.Helper()
	metrics := telemetry.NewMetrics()
	answer := func(c *echo.Context) error {
		scope := scopeOf(c)
		return c.String(http.StatusOK, strings.TrimSpace(actorOf(c)+" "+scope))
	}
	api, s := newEcho(Deps{Credentials: creds, Metrics: metrics, Log: log})
	api.GET("/whoami", answer, s.requireAPIKey(config.RightRead))
	api.POST("/charge", answer, s.requireAPIKey(config.RightCharge))
	admin, s := newEcho(Deps{Credentials: creds, Metrics: metrics, Log: log})
	admin.GET("/admin/whoami", answer, s.requireAdmin)
	admin.GET("/metrics", echo.WrapHandler(metrics.Handler()))
	return whoami{api, admin}
}

// TestAdminTokens: every admin token lets its holder in under its name; anything else is 401.
func TestAdminTokens(t *testing.T) {
	const alice = "alice-token-0123456789abcdef"
	creds := NewAuthCredentials(config.Auth{
		APIKeys:     []config.APIKey{{Key: "key-1"}},
		AdminToken:  "admin-token",
		AdminTokens: []config.AdminToken{{Name: "alice", Token: alice}, {Name: "deploy-bot", Token: "bot-token"}},
	})
	w := whoAmI(t, creds, nil)
	for _, tc := range []struct {
		auth   string
		status int
		actor  string
	}{
		{"Bearer admin-token", 200, "admin:admin"},
		{"Bearer " + alice, 200, "admin:alice"},
		{"bearer " + alice, 200, "admin:alice"},
		{"Bearer bot-token", 200, "admin:deploy-bot"},
		{"Bearer " + alice[:len(alice)-1], 401, ""},
		{"Bearer " + alice + "x", 401, ""},
		{"Bearer " + strings.ToUpper(alice), 401, ""},
		{"Bearer key-1", 401, ""},
		{"Bearer ", 401, ""},
		{"Basic " + alice, 401, ""},
		{"", 401, ""},
	} {
		var headers []string
		if tc.auth != "" {
			headers = []string{"Authorization", tc.auth}
		}
		r := do(w.admin, "GET", "/admin/whoami", "", headers...)
		if r.status != tc.status || (tc.status == 200 && r.body != tc.actor) {
			t.Errorf("Authorization %q: %d %q, want %d %q", tc.auth, r.status, r.body, tc.status, tc.actor)
		}
		if tc.status == 401 && problemType(t, r) != "/problems/unauthorized" {
			t.Errorf("Authorization %q: want an unauthorized problem: %s", tc.auth, r.body)
		}
	}

	// Only digests are kept: no key or token is in the credentials in clear.
	held := fmt.Sprintf("%#v %#v", *creds.load(), creds.load().admins)
	for _, secret := range []string{"admin-token", alice, "bot-token", "key-1"} {
		if strings.Contains(held, secret) {
			t.Errorf("the credentials hold %q in clear: %s", secret, held)
		}
	}

	// A reload swaps the tokens whole: bob is in, alice out.
	creds.SetAuth(config.Auth{APIKeys: []config.APIKey{{Key: "key-1"}}, AdminTokens: []config.AdminToken{{Name: "bob", Token: "bob-token"}}})
	if r := do(w.admin, "GET", "/admin/whoami", "", "Authorization", "Bearer bob-token"); r.status != 200 || r.body != "admin:bob" {
		t.Errorf("bob after the swap: %d %s", r.status, r.body)
	}
	for _, old := range []string{alice, "admin-token"} {
		if r := do(w.admin, "GET", "/admin/whoami", "", "Authorization", "Bearer "+old); r.status != 401 {
			t.Errorf("%s after the swap: %d, want 401", old, r.status)
		}
	}
	creds.SetAuth(config.Auth{APIKeys: []config.APIKey{{Key: "key-1"}}})
	if r := do(w.admin, "GET", "/admin/whoami", "", "Authorization", "Bearer bob-token"); r.status != 403 {
		t.Errorf("with no admin token left: %d, want 403", r.status)
	}
}

// TestAuthFailedCountsAndLogs: every failed authentication, of either listener, is counted by
// listener and reason and logged once with the client address, listener, route, reason and
// request id, never the token.
func TestAuthFailedCountsAndLogs(t *testing.T) {
	creds := NewAuthCredentials(config.Auth{APIKeys: []config.APIKey{{Key: "key-good"}}, AdminToken: "admin-good"})
	var logs testlog.Buffer
	w := whoAmI(t, creds, slog.New(slog.NewJSONHandler(&logs, nil)))
	sends := []struct {
		h                       http.Handler
		method, path, auth      string
		listener, route, reason string
	}{
		{w.api, "POST", "/charge", "", "storefront", "POST /charge", "missing"},
		{w.api, "GET", "/whoami", "Bearer key-wrong-Secret1", "storefront", "GET /whoami", "wrong"},
		{w.api, "GET", "/whoami", "Bearer admin-good", "storefront", "GET /whoami", "wrong"},
		{w.admin, "GET", "/admin/whoami", "Basic admin-Secret2", "admin", "GET /admin/whoami", "missing"},
		{w.admin, "GET", "/admin/whoami", "Bearer key-good", "admin", "GET /admin/whoami", "wrong"},
		{w.admin, "GET", "/admin/whoami", "Bearer admin-wrong-Secret3", "admin", "GET /admin/whoami", "wrong"},
	}
	for i, s := range sends {
		headers := []string{"X-Request-Id", fmt.Sprintf("req-auth-%d", i)}
		if s.auth != "" {
			headers = append(headers, "Authorization", s.auth)
		}
		if r := do(s.h, s.method, s.path, "", headers...); r.status != 401 {
			t.Fatalf("%s %s with %q: %d, want 401", s.method, s.path, s.auth, r.status)
		}
	}
	// Those that pass are neither counted nor logged.
	do(w.api, "GET", "/whoami", "", "Authorization", "Bearer key-good")
	do(w.admin, "GET", "/admin/whoami", "", "Authorization", "Bearer admin-good")

	lines := logs.Named(t, "auth.failed")
	if len(lines) != len(sends) {
		t.Fatalf("%d auth.failed lines, want %d:\n%s", len(lines), len(sends), logs.String())
	}
	for i, s := range sends {
		l := lines[i]
		want := map[string]any{"level": "WARN", "client_address": "192.0.2.1", "listener": s.listener, "route": s.route,
			"reason": s.reason, "request_id": fmt.Sprintf("req-auth-%d", i)}
		for k, v := range want {
			if l[k] != v {
				t.Errorf("line %d: %s = %v, want %v (%v)", i, k, l[k], v, l)
			}
		}
		if _, ok := l["suppressed"]; ok {
			t.Errorf("line %d says lines were suppressed: %v", i, l)
		}
	}
	for _, secret := range []string{"Secret1", "Secret2", "Secret3", "admin-good", "key-good"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log shows %q:\n%s", secret, logs.String())
		}
	}
	metrics := do(w.admin, "GET", "/metrics", "").body
	for series, n := range map[string]int{
		`payrouter_auth_failures_total{listener="storefront",reason="missing"}`: 1,
		`payrouter_auth_failures_total{listener="storefront",reason="wrong"}`:   2,
		`payrouter_auth_failures_total{listener="admin",reason="missing"}`:      1,
		`payrouter_auth_failures_total{listener="admin",reason="wrong"}`:        2,
	} {
		if !strings.Contains(metrics, fmt.Sprintf("%s %d\n", series, n)) {
			t.Errorf("metrics lack %s %d:\n%s", series, n, grepLines(metrics, "payrouter_auth_failures_total"))
		}
	}
}

func grepLines(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestAuthFailedFloodIsSampled: a flood of wrong keys is counted in full but logged at most
// authLogBurst lines at once and authLogRate a second after; the next line logged says how
// many were not.
func TestAuthFailedFloodIsSampled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		creds := NewCredentials([]string{"key-good"}, "")
		var logs testlog.Buffer
		w := whoAmI(t, creds, slog.New(slog.NewJSONHandler(&logs, nil)))
		const flood = 1000
		for range flood {
			do(w.api, "GET", "/whoami", "", "Authorization", "Bearer key-wrong")
		}
		if n := len(logs.Named(t, "auth.failed")); n != authLogBurst {
			t.Errorf("%d lines for a flood of %d at once, want %d", n, flood, authLogBurst)
		}
		time.Sleep(time.Second / authLogRate)
		do(w.api, "GET", "/whoami", "", "Authorization", "Bearer key-wrong")
		lines := logs.Named(t, "auth.failed")
		if last := lines[len(lines)-1]; len(lines) != authLogBurst+1 || last["suppressed"] != float64(flood-authLogBurst) {
			t.Errorf("after a pause: %d lines, the last %v; want %d lines, the last with suppressed %d", len(lines), last, authLogBurst+1, flood-authLogBurst)
		}
		if m := do(w.admin, "GET", "/metrics", "").body; !strings.Contains(m, fmt.Sprintf(`payrouter_auth_failures_total{listener="storefront",reason="wrong"} %d`+"\n", flood+1)) {
			t.Errorf("the metric does not count every failure:\n%s", grepLines(m, "payrouter_auth_failures_total"))
		}
	})
}

// The one check both middlewares and both kinds of address use: every configured key and
// admin token matches itself and nothing else, whichever position it holds.
func TestCredentialsCheck(t *testing.T) {
	creds := NewAuthCredentials(config.Auth{
		APIKeys:     []config.APIKey{{Key: "key-a"}, {Name: "shop", Key: "key-b"}, {Name: "shop", Key: "key-c"}},
		AdminToken:  "admin-x",
		AdminTokens: []config.AdminToken{{Name: "ops", Token: "admin-y"}},
	}).load()
	for _, tc := range []struct{ token, scope, admin string }{
		{"key-a", digestScope(sha256.Sum256([]byte("key-a"))), ""},
		{"key-b", "name:shop", ""},
		{"key-c", "name:shop", ""},
		{"admin-x", "", "admin"},
		{"admin-y", "", "ops"},
		{"key-", "", ""},
		{"key-bb", "", ""},
		{"", "", ""},
	} {
		scope := ""
		if k := creds.apiKey(tc.token); k != nil {
			scope = k.scope
		}
		if scope != tc.scope {
			t.Errorf("apiKey(%q) has scope %q, want %q", tc.token, scope, tc.scope)
		}
		if got := creds.admin(tc.token); got != tc.admin {
			t.Errorf("admin(%q) = %q, want %q", tc.token, got, tc.admin)
		}
	}
}
