package e2e

// A real Prometheus server (Debian's prometheus package) scraping two payrouter instances that
// share a redis-server, with configs/prometheus/alerts.yml loaded: during an outage of a gateway,
// PromQL through Prometheus's HTTP API sees circuit_breaker_state at 1 on both instances, and
// PayrouterBreakerOpenTooLong goes pending for that breaker.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrouter/payrouter/pgstore/pgtest"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

// promServer is one running `prometheus`.
type promServer struct {
	proc   *process
	url    string
	client *http.Client
}

// startPrometheus writes a prometheus.yml scraping targets (host:port of admin listeners, job
// payrouter, every second) with configs/prometheus/alerts.yml as its rule file (a copy), starts
// prometheus on a free port with its TSDB in a temporary directory, and waits for /-/ready. It
// skips the test when prometheus is not on PATH.
func startPrometheus(t *testing.T, promBin string, targets ...string) *promServer {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	rules, err := os.ReadFile(filepath.Join(root, "configs", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "alerts.yml")
	if err := os.WriteFile(rulesPath, rules, 0o600); err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = fmt.Sprintf("%q", tg)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: payrouter
    metrics_path: /metrics
    static_configs:
      - targets: [%s]
`, rulesPath, strings.Join(quoted, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		port := freePorts(t, 1)[0]
		data := filepath.Join(dir, fmt.Sprintf("data-%d", attempt))
		ps := &promServer{url: "http://" + loopback(port), client: &http.Client{Timeout: 5 * time.Second, Transport: newTransport(2)}}
		ps.proc = startProcess(t, "prometheus", promBin,
			"--config.file="+cfgPath,
			"--storage.tsdb.path="+data,
			"--web.listen-address="+loopback(port),
		)
		err := waitReady(ps.proc, ps.url+"/-/ready")
		if err == nil {
			t.Cleanup(ps.client.CloseIdleConnections)
			return ps
		}
		if attempt < startAttempts && ps.proc.clashed() {
			ps.proc.expected.Store(true)
			t.Logf("prometheus: a port was taken before it could bind (%v); retrying on another", err)
			continue
		}
		t.Fatalf("prometheus did not come up: %v\nconfiguration:\n%s", err, cfg)
	}
}

// promVector is one series of an instant query's answer.
type promVector struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"` // [unix time, "value"]
}

func (v promVector) String() string {
	return fmt.Sprintf("%s=%v", v.Metric["instance"], v.Value[1])
}

// query is GET /api/v1/query?query=q, an instant query at the server's now.
func (ps *promServer) query(q string) ([]promVector, error) {
	r, err := send(ps.client, "GET", ps.url+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return nil, err
	}
	var ans struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string       `json:"resultType"`
			Result     []promVector `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.body, &ans); err != nil {
		return nil, fmt.Errorf("query %s: %v: %s", q, err, r)
	}
	if r.status != http.StatusOK || ans.Status != "success" || ans.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: want 200, success, a vector: %s", q, r)
	}
	return ans.Data.Result, nil
}

// promAlert is one alert of GET /api/v1/alerts.
type promAlert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
	Value    string            `json:"value"`
}

// alerts is GET /api/v1/alerts: the pending and firing alerts.
func (ps *promServer) alerts() ([]promAlert, error) {
	r, err := send(ps.client, "GET", ps.url+"/api/v1/alerts", nil)
	if err != nil {
		return nil, err
	}
	var ans struct {
		Status string `json:"status"`
		Data   struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.body, &ans); err != nil {
		return nil, fmt.Errorf("alerts: %v: %s", err, r)
	}
	if r.status != http.StatusOK || ans.Status != "success" {
		return nil, fmt.Errorf("alerts: want 200 and success: %s", r)
	}
	return ans.Data.Alerts, nil
}

// ruleHealth is GET /api/v1/rules reduced to the rules that are not healthy, so that a rule file
// Prometheus loaded but cannot evaluate is reported rather than waited on.
func (ps *promServer) ruleHealth() (loaded int, bad []string, err error) {
	r, err := send(ps.client, "GET", ps.url+"/api/v1/rules", nil)
	if err != nil {
		return 0, nil, err
	}
	var ans struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.body, &ans); err != nil || r.status != http.StatusOK {
		return 0, nil, fmt.Errorf("rules: %v: %s", err, r)
	}
	for _, g := range ans.Data.Groups {
		for _, rule := range g.Rules {
			loaded++
			if rule.Health == "err" {
				bad = append(bad, rule.Name+": "+rule.LastError)
			}
		}
	}
	return loaded, bad, nil
}

// TestPrometheusSeesTheOutage: Prometheus scrapes two instances sharing a Redis every second and
// evaluates configs/prometheus/alerts.yml every second. paywell becomes unavailable; charges
// through A open paywell/charge (consecutive_failures 3, cooldown 2s), and a charge every 200ms
// through A and B in turn keeps the breaker refusing calls (and failing its half-open trials).
//   - `circuit_breaker_state{gateway="paywell",operation="charge"}` through the HTTP API reads 1
//     for both instances.
//   - PayrouterBreakerOpenTooLong goes pending for paywell/charge once the breaker has kept
//     paywell out for more than two cooldowns while refusing calls, then fires once its `for: 1m`
//     has passed (the shipped rule, unchanged: this test takes a minute longer for it).
func TestPrometheusSeesTheOutage(t *testing.T) {
	skipIfShort(t)
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not on PATH; this test runs a real Prometheus server: apt-get install prometheus (Debian's package provides /usr/bin/prometheus)")
	}
	const (
		failuresToOpen = 3
		cooldown       = 2 * time.Second
		pace           = 200 * time.Millisecond
		stateDeadline  = 20 * time.Second
		alertDeadline  = 30 * time.Second
		alertName      = "PayrouterBreakerOpenTooLong"
	)
	rds := redistest.Start(t)
	s := startSims(t)
	gw := gatewayConfig{Timeout: time.Second, MaxConcurrent: 10, ConsecutiveFailures: failuresToOpen, Cooldown: cooldown}
	cfg := routerConfig{
		RequestTimeout: 3 * time.Second,
		RedisURL:       rds.URL(), DatabaseURL: pgtest.NewDatabase(t),
		Gateways: map[string]gatewayConfig{"paywell": gw, "ding": gw},
		Routes:   []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell", "ding"}}},
	}
	a, b := startFleet(t, s, cfg)
	targetA, targetB := strings.TrimPrefix(a.adminURL, "http://"), strings.TrimPrefix(b.adminURL, "http://")
	ps := startPrometheus(t, promBin, targetA, targetB)
	who := map[string]string{targetA: "A", targetB: "B"}

	// Both targets up and the rules loaded before the outage starts: what follows is then about
	// the outage, not about start-up.
	eventually(t, stateDeadline, "Prometheus scrapes both instances (up == 1)", func() (bool, string) {
		up, err := ps.query(`up{job="payrouter"}`)
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, v := range up {
			if v.Value[1] == "1" {
				n++
			}
		}
		return n == 2, fmt.Sprint(up)
	})
	loaded, bad, err := ps.ruleHealth()
	if err != nil {
		t.Fatal(err)
	}
	if loaded == 0 || len(bad) > 0 {
		t.Fatalf("configs/prometheus/alerts.yml in Prometheus: want its rules loaded and healthy; %d loaded, in error: %v", loaded, bad)
	}

	// The outage: A sees paywell fail until paywell/charge opens.
	s.paywell.behave(t, "unavailable", 0)
	outage := time.Now()
	for i := 1; i <= failuresToOpen; i++ {
		r, ans := a.mustCharge(t, int64(4000+i), "USD", "tok_visa")
		if r.status != http.StatusCreated || describe(ans.Attempts) != "[paywell/unavailable ding/succeeded]" {
			t.Errorf("charge %d through A while paywell is unavailable: want 201 with attempts [paywell/unavailable ding/succeeded]; got %s", i, r)
		}
	}
	if onA := a.breaker(t, "paywell/charge"); onA.State != "open" {
		t.Fatalf("after %d failures in a row through A (consecutive_failures %d): want paywell/charge open; got %s", failuresToOpen, failuresToOpen, onA)
	}
	opened := time.Now()
	since := func() time.Duration { return time.Since(opened).Round(10 * time.Millisecond) }
	t.Logf("paywell unavailable at %s; paywell/charge open on A %v later (%s)",
		outage.Format("15:04:05.000"), opened.Sub(outage).Round(time.Millisecond), opened.Format("15:04:05.000"))

	// Storefront traffic for the rest of the test, through A and B in turn: the breaker refuses
	// it (circuit_breaker_rejections_total grows) and its half-open trials keep failing.
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var sent, created atomic.Int64
	var trafficErr atomic.Value
	wg.Go(func() {
		tick := time.NewTicker(pace)
		defer tick.Stop()
		for i := 0; ; i++ {
			in := a
			if i%2 == 1 {
				in = b
			}
			r, err := in.charge(int64(5000+i), "USD", "tok_visa")
			sent.Add(1)
			switch {
			case err != nil:
				if ctx.Err() == nil {
					trafficErr.CompareAndSwap(nil, err.Error())
				}
			case r.status == http.StatusCreated:
				created.Add(1)
			default:
				trafficErr.CompareAndSwap(nil, r.String())
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	defer func() {
		stop()
		wg.Wait()
		t.Logf("traffic: %d charges sent through A and B during the outage, %d answered 201 (by ding)", sent.Load(), created.Load())
		if e := trafficErr.Load(); e != nil {
			t.Errorf("a charge during the outage got no 201 (ding serves them all): %v", e)
		}
	}()

	// PromQL sees the breaker open on both instances.
	const stateQuery = `circuit_breaker_state{gateway="paywell",operation="charge"}`
	seenOpen := map[string]time.Duration{}
	eventually(t, stateDeadline, "Prometheus: "+stateQuery+" == 1 for both instances", func() (bool, string) {
		res, err := ps.query(stateQuery)
		if err != nil {
			return false, err.Error()
		}
		for _, v := range res {
			if name, ok := who[v.Metric["instance"]]; ok && v.Value[1] == "1" {
				if _, seen := seenOpen[name]; !seen {
					seenOpen[name] = since()
				}
			}
		}
		return len(seenOpen) == 2, fmt.Sprintf("%v (seen at 1 so far: %v)", res, seenOpen)
	})
	t.Logf("Prometheus HTTP API, %s: 1 on A %v and on B %v after the opening (scrape and evaluation every 1s)",
		stateQuery, seenOpen["A"], seenOpen["B"])

	// The alert rule goes pending (or firing) for paywell/charge.
	var found promAlert
	var seenAt time.Duration
	eventually(t, alertDeadline, alertName+" pending or firing for paywell/charge", func() (bool, string) {
		list, err := ps.alerts()
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, al := range list {
			names = append(names, fmt.Sprintf("%s{%s/%s} %s", al.Labels["alertname"], al.Labels["gateway"], al.Labels["operation"], al.State))
			if al.Labels["alertname"] == alertName && al.Labels["gateway"] == "paywell" && al.Labels["operation"] == "charge" &&
				(al.State == "pending" || al.State == "firing") {
				found, seenAt = al, since()
				return true, ""
			}
		}
		return false, fmt.Sprintf("alerts: %v", names)
	})
	keptOut, err := strconv.ParseFloat(found.Value, 64)
	if err != nil {
		t.Errorf("%s: value %q is not a number: %v", alertName, found.Value, err)
	}
	if keptOut <= (2 * cooldown).Seconds() {
		t.Errorf("%s for paywell/charge: want its value (seconds kept out) above 2 x cooldown = %v; got %v", alertName, 2*cooldown, keptOut)
	}
	t.Logf("Prometheus /api/v1/alerts: %s{gateway=%q, operation=%q, job=%q, severity=%q} %s, seen %v after the opening; activeAt %v after it, value %.2fs kept out (threshold 2 x cooldown = %v)",
		alertName, found.Labels["gateway"], found.Labels["operation"], found.Labels["job"], found.Labels["severity"],
		found.State, seenAt, found.ActiveAt.Sub(opened).Round(10*time.Millisecond), keptOut, 2*cooldown)

	// The shipped rule's `for: 1m` passes with the outage still on: it fires, and Prometheus's
	// ALERTS series says so through PromQL.
	var firingAt time.Duration
	eventually(t, 90*time.Second, alertName+" firing for paywell/charge", func() (bool, string) {
		res, err := ps.query(`ALERTS{alertname="` + alertName + `",gateway="paywell",operation="charge",alertstate="firing"}`)
		if err != nil {
			return false, err.Error()
		}
		if len(res) == 0 {
			return false, "no firing ALERTS series yet"
		}
		firingAt = since()
		return true, ""
	})
	t.Logf("PromQL ALERTS{alertname=%q, gateway=\"paywell\", operation=\"charge\", alertstate=\"firing\"}: present %v after the opening (pending was seen at %v; for: 1m)",
		alertName, firingAt, seenAt)
	if firingAt < seenAt+50*time.Second {
		t.Errorf("%s fired %v after the opening, only %v after it was pending: want its for: 1m waited out", alertName, firingAt, firingAt-seenAt)
	}

	// The value behind it, through PromQL, for the note.
	for _, q := range []string{
		`time() - circuit_breaker_opened_timestamp_seconds{gateway="paywell",operation="charge"}`,
		`circuit_breaker_cooldown_seconds{gateway="paywell",operation="charge"}`,
		`sum(increase(circuit_breaker_rejections_total{gateway="paywell",operation="charge"}[10m]))`,
	} {
		res, err := ps.query(q)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		var parts []string
		for _, v := range res {
			name := who[v.Metric["instance"]]
			if name == "" {
				name = "sum"
			}
			parts = append(parts, fmt.Sprintf("%s=%v", name, v.Value[1]))
		}
		t.Logf("  %s: %s", q, strings.Join(parts, " "))
	}
}
