package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// reloadGateway is the settings every gateway of the reload test has.
var reloadGateway = gatewayConfig{Timeout: 2 * time.Second, MaxConcurrent: 32, ConsecutiveFailures: 5, Cooldown: 30 * time.Second}

// rewriteConfig replaces in's configuration file with cfg on the same ports, as ops would (a new
// file renamed over the old one, so a reload never reads half a file).
func rewriteConfig(t *testing.T, in *instance, s *sims, text string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(in.configPath), "next.yaml")
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, in.configPath); err != nil {
		t.Fatal(err)
	}
}

// adminPost sends an admin POST with the admin token.
func (in *instance) adminPost(t *testing.T, path string) reply {
	t.Helper()
	r, err := send(in.probeClient, http.MethodPost, in.adminURL+path, nil, "Authorization", "Bearer "+adminToken)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// adminGateways lists the gateways GET /admin/gateways shows.
func (in *instance) adminGateways(t *testing.T) []string {
	t.Helper()
	r, err := send(in.probeClient, http.MethodGet, in.adminURL+"/admin/gateways", nil, "Authorization", "Bearer "+adminToken)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Gateways []struct {
			Name string `json:"name"`
		} `json:"gateways"`
	}
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatalf("%v: %s", err, r)
	}
	var names []string
	for _, g := range out.Gateways {
		names = append(names, g.Name)
	}
	return names
}

// A reload under load: ops take paywell out of the USD route and put a new gateway, tranglo,
// first (SIGHUP), then remove paywell altogether and add an API key (POST /admin/reload), then
// send a broken file.
// No charge fails because of a reload; each charge started after a reload goes where the new
// routes say; ding, unchanged, keeps its forced breaker; a charge paywell holds can still be
// captured after paywell is gone; the broken file is refused with its problems and changes
// nothing; each reload shows in the metrics and the log.
func TestReloadUnderLoad(t *testing.T) {
	skipIfShort(t)
	s := startSims(t)
	cfg := routerConfig{
		RequestTimeout: 5 * time.Second,
		Gateways:       map[string]gatewayConfig{"paywell": reloadGateway, "ding": reloadGateway},
		Routes:         []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell", "ding"}}},
	}
	in := startPayrouter(t, s, cfg)
	listen, admin := strings.TrimPrefix(in.url, "http://"), strings.TrimPrefix(in.adminURL, "http://")

	// Before any reload: a charge authorized at paywell (to capture after paywell is gone), and
	// ding's refund breaker forced open by ops.
	held := holdAuthorization(t, in)
	if r := in.adminPost(t, "/admin/breakers/ding/refund/force-open"); r.status != http.StatusOK {
		t.Fatalf("force-open ding/refund: %s", r)
	}

	// The load: 8 clients charging USD all along, each charge remembered with when it was sent.
	type sent struct {
		at      time.Time
		status  int
		gateway string
		body    string
	}
	var (
		mu    sync.Mutex
		all   []sent
		stop  atomic.Bool
		wg    sync.WaitGroup
		sends atomic.Int64
	)
	for range 8 {
		wg.Go(func() {
			for !stop.Load() {
				at := time.Now()
				r, err := in.charge(1000, "USD", "tok_visa")
				sends.Add(1)
				one := sent{at: at, status: r.status, body: excerpt(r.body)}
				if err != nil {
					one.body = err.Error()
				}
				if a, err := decodeAnswer(r); err == nil {
					one.gateway = a.Gateway
				}
				mu.Lock()
				all = append(all, one)
				mu.Unlock()
			}
		})
	}
	waitSends := func(n int64) {
		start := sends.Load()
		eventually(t, 10*time.Second, "charges flowing", func() (bool, string) {
			return sends.Load() >= start+n, fmt.Sprint(sends.Load()-start, " charges")
		})
	}
	waitSends(200)

	// Reload 1, SIGHUP: tranglo is new and goes first; paywell leaves the route.
	cfg.Gateways["tranglo"] = reloadGateway
	cfg.Routes[0].Gateways = []string{"tranglo", "ding"}
	rewriteConfig(t, in, s, cfg.yaml(listen, admin, s))
	if err := in.proc.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the SIGHUP reload logged", func() (bool, string) {
		return strings.Contains(in.proc.out.String(), `"msg":"config.reloaded"`), in.proc.out.tail(3)
	})
	firstReloaded := time.Now()
	if got := in.adminGateways(t); !slices.Equal(got, []string{"paywell", "ding", "tranglo"}) {
		t.Errorf("after the SIGHUP reload, /admin/gateways lists %v", got)
	}
	waitSends(200)

	// Reload 2, POST /admin/reload: paywell is no longer configured at all, and a second API key
	// starts a key rotation.
	delete(cfg.Gateways, "paywell")
	const nextKey = "sk_e2e_rotated_in"
	withKey := strings.Replace(cfg.yaml(listen, admin, s), fmt.Sprintf("api_keys: [%q, %q]", apiKey, otherAPIKey), fmt.Sprintf("api_keys: [%q, %q, %q]", apiKey, otherAPIKey, nextKey), 1)
	if !strings.Contains(withKey, nextKey) {
		t.Fatal("test bug: the configuration's api_keys line is not where the test looks")
	}
	rewriteConfig(t, in, s, withKey)
	r := in.adminPost(t, "/admin/reload")
	if r.status != http.StatusOK {
		t.Fatalf("POST /admin/reload: %s", r)
	}
	var answer struct {
		Reloaded bool `json:"reloaded"`
		Changes  struct {
			Gateways struct {
				Added, Changed, Removed, Unchanged []string
			} `json:"gateways"`
			RoutesChanged bool     `json:"routes_changed"`
			AuthChanged   bool     `json:"auth_changed"`
			RestartNeeded []string `json:"restart_needed"`
		} `json:"changes"`
	}
	if err := json.Unmarshal(r.body, &answer); err != nil {
		t.Fatalf("%v: %s", err, r)
	}
	ch := answer.Changes.Gateways
	if !answer.Reloaded || !slices.Equal(ch.Removed, []string{"paywell"}) || !slices.Equal(ch.Unchanged, []string{"ding", "tranglo"}) ||
		len(ch.Added)+len(ch.Changed) != 0 || answer.Changes.RoutesChanged || !answer.Changes.AuthChanged || len(answer.Changes.RestartNeeded) != 0 {
		t.Errorf("the second reload's answer: %s", r.body)
	}
	if got := in.adminGateways(t); !slices.Equal(got, []string{"ding", "tranglo"}) {
		t.Errorf("after paywell was removed, /admin/gateways lists %v", got)
	}
	rotated, err := send(in.client, http.MethodPost, in.url+"/charge", chargeBody(1500, "USD", "tok_visa", ""),
		"Authorization", "Bearer "+nextKey, "Content-Type", "application/json", "Idempotency-Key", "e2e-rotated-key")
	if err != nil || rotated.status != http.StatusCreated {
		t.Errorf("a charge with the API key the reload added: %v %s", err, rotated)
	}
	waitSends(200)

	// A broken file: refused with every problem, nothing changes.
	rewriteConfig(t, in, s, strings.Replace(cfg.yaml(listen, admin, s), "timeout: 2s", "timeout: -2s", 1)+"routez: []\n")
	r = in.adminPost(t, "/admin/reload")
	var refused struct {
		Type   string `json:"type"`
		Errors []struct{ Field, Message string }
	}
	if err := json.Unmarshal(r.body, &refused); err != nil || r.status != http.StatusUnprocessableEntity ||
		refused.Type != "/problems/invalid-config" || len(refused.Errors) < 2 {
		t.Errorf("POST /admin/reload of a broken file: %s", r)
	}
	t.Logf("the broken file's problems: %+v", refused.Errors)
	waitSends(100)
	stop.Store(true)
	wg.Wait()

	// No charge failed, and each went where the routes said when it was sent.
	mu.Lock()
	defer mu.Unlock()
	byGateway := map[string]int{}
	for _, c := range all {
		if c.status != http.StatusCreated {
			t.Errorf("a charge sent at %s answered %d: %s", c.at.Format("15:04:05.000"), c.status, c.body)
			continue
		}
		byGateway[c.gateway]++
		if c.at.After(firstReloaded) && c.gateway != "tranglo" {
			t.Errorf("a charge sent after the first reload went to %s, not tranglo", c.gateway)
		}
	}
	t.Logf("%d charges through three reloads: %v", len(all), byGateway)
	if byGateway["paywell"] == 0 || byGateway["tranglo"] == 0 {
		t.Errorf("charges by gateway %v: want paywell before the reload and tranglo after", byGateway)
	}

	// ding was never changed: its forced breaker is as ops left it.
	if b := in.breaker(t, "ding/refund"); b.State != "open" || b.Forced == nil || *b.Forced != "open" {
		t.Errorf("ding/refund after three reloads: %s, want still forced open", b)
	}
	// The charge paywell holds is captured there, though paywell is no longer configured.
	rep, err := send(in.client, http.MethodPost, in.url+"/charge/"+held+"/capture", nil,
		"Authorization", "Bearer "+apiKey, "Idempotency-Key", "e2e-capture-"+held)
	if err != nil || rep.status != http.StatusOK || !strings.Contains(string(rep.body), `"succeeded"`) {
		t.Errorf("capturing at the removed paywell: %v %s", err, rep)
	}

	m, err := in.metrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		name   string
		labels []string
		value  float64
	}{
		{"payrouter_config_reloads_total", []string{"result", "applied"}, 2},
		{"payrouter_config_reloads_total", []string{"result", "refused"}, 1},
		{"payrouter_config_last_reload_successful", nil, 0},
	} {
		if got, ok := m.value(want.name, want.labels...); !ok || got != want.value {
			t.Errorf("%s%v = %v (found %v), want %v", want.name, want.labels, got, ok, want.value)
		}
	}
	if _, ok := m.value("circuit_breaker_state", "gateway", "paywell"); ok {
		t.Error("circuit_breaker_state still has paywell series after paywell was removed")
	}
	if _, ok := m.value("circuit_breaker_state", "gateway", "tranglo"); !ok {
		t.Error("circuit_breaker_state has no tranglo series after tranglo was added")
	}
	in.proc.waitLogged(`"msg":"config.reloaded"`, 2)
	log := in.proc.out.String()
	if n := strings.Count(log, `"msg":"config.reloaded"`); n != 2 {
		t.Errorf("%d config.reloaded lines, want 2", n)
	}
	if !strings.Contains(log, `"msg":"config.reload_refused"`) {
		t.Error("no config.reload_refused line for the broken file")
	}
	for _, secret := range []string{apiKey, nextKey, adminToken, "paywell_e2e_key", "ding_e2e_key", "tranglo_e2e_key"} {
		if strings.Contains(log, secret) {
			t.Errorf("payrouter's log holds a credential (%d characters) after three reloads", len(secret))
		}
	}
}

// holdAuthorization makes a USD charge with capture: false, authorized at the route's first
// gateway, and returns its id.
func holdAuthorization(t *testing.T, in *instance) string {
	t.Helper()
	body := []byte(`{"amount": 2500, "currency": "USD", "capture": false, "payment_method": {"type": "card", "token": "tok_visa"}}`)
	r, err := in.chargeKeyed("e2e-held", body)
	if err != nil {
		t.Fatal(err)
	}
	a, err := decodeAnswer(r)
	if err != nil || a.ChargeStatus != "requires_capture" || a.Gateway != "paywell" {
		t.Fatalf("an authorization at paywell: %v %s", err, r)
	}
	return a.ID
}
