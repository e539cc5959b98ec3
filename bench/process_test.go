package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// benchEnv turns the measurements on. They take a minute of a whole machine, so `go test ./...`
// (make test) must not run them by accident.
const benchEnv = "PAYROUTER_BENCH"

// requireBench skips t unless benchEnv is set to 1.
func requireBench(t *testing.T) {
	t.Helper()
	if os.Getenv(benchEnv) != "1" {
		t.Skip(benchEnv + "=1 not set: the benchmarks run with `make bench`")
	}
}

// binaries are the programs a benchmark starts, built for this run.
type binaries struct {
	payrouter, gatewaysim, bare503 string
}

// buildBinaries builds payrouter, gatewaysim and bare503 into a temporary directory, in one go
// command so that they link in parallel.
func buildBinaries(t *testing.T) binaries {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the binaries: %v", err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", dir+string(filepath.Separator),
		"github.com/payrouter/payrouter/cmd/payrouter",
		"github.com/payrouter/payrouter/cmd/gatewaysim",
		"github.com/payrouter/payrouter/bench/bare503")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return binaries{
		payrouter:  filepath.Join(dir, "payrouter"),
		gatewaysim: filepath.Join(dir, "gatewaysim"),
		bare503:    filepath.Join(dir, "bare503"),
	}
}

// reservedPort reports ports other tools on the machine expect to own: the demo's (8080, 9090,
// 9101-9104) and 27000-27999.
func reservedPort(p int) bool {
	return p == 8080 || p == 9090 || (p >= 9101 && p <= 9104) || (p >= 27000 && p <= 27999)
}

// freeAddrs returns n distinct free loopback addresses. They are all held open until all are
// found, so that they differ, then released for the processes to take; another program could
// take one in between, which start-up would then report as a listen error.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	var addrs []string
	for len(addrs) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("finding a free port: %v", err)
		}
		held = append(held, ln)
		if reservedPort(ln.Addr().(*net.TCPAddr).Port) {
			continue // keep it held, so it is not offered again
		}
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs
}

// process is a program started by a benchmark, stopped when the test ends.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string // its stdout and stderr
	done chan struct{}
}

// startProcess starts bin with args, its output going to a file (a file, not a pipe, so that
// nothing in the test process spends CPU copying its log lines during a measurement). The
// process gets SIGTERM at the end of the test, and SIGKILL if it has not exited 10 s later.
func startProcess(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // the child has its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		// The log goes with the test's directory: what it said went wrong is shown first.
		if t.Failed() {
			if lines := p.problems(10); lines != "" {
				t.Logf("%s logged:\n%s", name, lines)
			}
		}
	})
	return p
}

// problems lists the warnings and errors of the process's log by message, with how often each
// was logged and its first line, for at most n messages.
func (p *process) problems(n int) string {
	b, _ := os.ReadFile(p.log)
	var msgs []string
	first, count := map[string]string{}, map[string]int{}
	for line := range strings.Lines(string(b)) {
		var l struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &l) != nil || (l.Level != "WARN" && l.Level != "ERROR") {
			continue
		}
		if count[l.Msg] == 0 {
			msgs = append(msgs, l.Msg)
			first[l.Msg] = strings.TrimSpace(line)
		}
		count[l.Msg]++
	}
	var out []string
	for i, m := range msgs {
		if i == n {
			out = append(out, fmt.Sprintf("(and %d more messages)", len(msgs)-n))
			break
		}
		out = append(out, fmt.Sprintf("%d x %s", count[m], first[m]))
	}
	return strings.Join(out, "\n")
}

// logTail is the end of the process's log, for failure messages.
func (p *process) logTail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// waitHealthy polls url until it answers 200, and fails the test if the process exits first or
// 10 s go by.
func (p *process) waitHealthy(t *testing.T, url string) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-p.done:
			t.Fatalf("%s exited during start-up: %v\n%s", p.name, p.cmd.ProcessState, p.logTail())
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not healthy after 10 s (last error %v)\n%s", p.name, url, err, p.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Credentials of the benchmark's configuration.
const (
	apiKey     = "sk_bench"
	adminToken = "admin_bench"
)

// gatewayKey is the API key payrouter sends to the simulated gateway name (the simulators
// accept any non-empty one).
func gatewayKey(name string) string { return name + "_bench" }

// stack is gatewaysim and the payrouter instances started on it, running.
type stack struct {
	bins binaries
	// sims holds each simulated gateway's address by name.
	sims map[string]string
	// instance is the first payrouter (startStack's); the others are the tests' own.
	*instance
}

// instance is one payrouter serve process.
type instance struct {
	// api and admin are its listeners.
	api, admin string
	payrouter  *process
}

// gatewayNames are the simulated gateways, in the order of the benchmark's single route.
var gatewayNames = []string{"paywell", "ding", "tranglo"}

// startStack builds the binaries and starts gatewaysim and one payrouter, on the in-memory store,
// on free loopback ports.
func startStack(t *testing.T) *stack {
	t.Helper()
	s := startSims(t)
	s.instance = s.startPayrouter(t, "payrouter", instanceOptions{})
	return s
}

// startSims builds the binaries and starts gatewaysim alone, on free loopback ports.
func startSims(t *testing.T) *stack {
	t.Helper()
	s := &stack{bins: buildBinaries(t), sims: map[string]string{}}
	addrs := freeAddrs(t, len(gatewayNames))
	for i, name := range gatewayNames {
		s.sims[name] = addrs[i]
	}
	sim := startProcess(t, "gatewaysim", s.bins.gatewaysim,
		"-paywell", s.sims["paywell"], "-ding", s.sims["ding"], "-tranglo", s.sims["tranglo"])
	for _, name := range gatewayNames {
		sim.waitHealthy(t, "http://"+s.sims[name]+"/health")
	}
	return s
}

// instanceOptions change an instance's configuration from benchConfig's; the zero value changes
// nothing.
type instanceOptions struct {
	// databaseURL, when not "", is state.database_url: the instance keeps its money state
	// (charges, refunds, idempotency keys, queued tasks) in that PostgreSQL, shared with every
	// instance pointed at it, and migrates it at start. "": in memory.
	databaseURL string
	// redisURL, when not "", is state.redis_url: the instance shares its breakers, forced states
	// and leases through that Redis (never money: it needs databaseURL too, or config refuses it).
	redisURL string
	// route is the gateways of the single route, in order; nil: gatewayNames.
	route []string
	// edit, when set, rewrites the configuration benchConfig wrote (scale_test.go's extra routes
	// and gateways).
	edit func(config string) string
}

// startPayrouter starts a payrouter serve process named name (its log file's name) on the
// stack's simulators, on free loopback ports.
func (s *stack) startPayrouter(t *testing.T, name string, o instanceOptions) *instance {
	t.Helper()
	addrs := freeAddrs(t, 2)
	in := &instance{api: addrs[0], admin: addrs[1]}
	cfg := filepath.Join(t.TempDir(), name+".yaml")
	text := benchConfig(in, s.sims, o)
	if o.edit != nil {
		text = o.edit(text)
	}
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	in.payrouter = startProcess(t, name, s.bins.payrouter, "serve", "-config", cfg)
	in.payrouter.waitHealthy(t, "http://"+in.api+"/healthz")
	in.payrouter.waitHealthy(t, "http://"+in.admin+"/healthz")
	return in
}

// tripAfter is the benchmarks' breaker rule: this many failures in a row open it.
const tripAfter = 5

// benchConfig is payrouter's configuration for the benchmarks. The bulkheads are far larger than
// any load here, so that what is measured is payrouter's work, not its refusals; the cooldown is
// long, so that no breaker changes state in the middle of a measurement; one route tries every
// gateway in turn (unless o says otherwise), so that the fast-fail path passes all three open
// breakers; the rate limit is out of reach. The database and Redis get the timeouts configs/payrouter-redis.yaml gives them.
func benchConfig(in *instance, sims map[string]string, o instanceOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %q\nadmin_listen: %q\nrequest_timeout: 10s\n", in.api, in.admin)
	fmt.Fprintf(&b, "auth:\n  api_keys: [%q]\n  admin_token: %q\n", apiKey, adminToken)
	if o.databaseURL != "" || o.redisURL != "" {
		b.WriteString("state:\n")
	}
	if o.databaseURL != "" {
		fmt.Fprintf(&b, "  database_url: %q\n  database_timeout: 800ms\n", o.databaseURL)
	}
	if o.redisURL != "" {
		fmt.Fprintf(&b, "  redis_url: %q\n  redis_timeout: 100ms\n", o.redisURL)
	}
	b.WriteString("gateways:\n")
	for _, name := range gatewayNames {
		fmt.Fprintf(&b, "  %s:\n    kind: %s\n    base_url: %q\n    credentials: {api_key: %q}\n",
			name, name, "http://"+sims[name], gatewayKey(name))
		b.WriteString("    timeout: 2s\n    max_concurrent: 1000\n    max_wait: 0s\n")
		fmt.Fprintf(&b, "    breaker: {consecutive_failures: %d, cooldown: 1h}\n", tripAfter)
	}
	route := o.route
	if route == nil {
		route = gatewayNames
	}
	// The load generator is one key sending far more than a shop does: its rate limit is set
	// out of reach, so what is measured includes the limiter's work but none of its refusals.
	b.WriteString("limits: {requests_per_second: 1000000, burst: 1000000}\n")
	// The routes come last: a caller may append lines of the route (startRouteStack's hedge).
	fmt.Fprintf(&b, "routes:\n  - name: default\n    gateways: [%s]\n", strings.Join(route, ", "))
	return b.String()
}

// forceOpen forces every gateway's charge breaker open through the admin API.
func (in *instance) forceOpen(t *testing.T) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	for _, name := range gatewayNames {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost,
			"http://"+in.admin+"/admin/breakers/"+name+"/charge/force-open", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("forcing %s/charge open: %v", name, err)
		}
		var b struct {
			State  string  `json:"state"`
			Forced *string `json:"forced"`
		}
		err = json.NewDecoder(resp.Body).Decode(&b)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || b.State != "open" || b.Forced == nil || *b.Forced != "open" {
			t.Fatalf("forcing %s/charge open: status %d, state %q, decode error %v", name, resp.StatusCode, b.State, err)
		}
	}
}

// simRequests is how many API calls (charges and the like, not health or control calls) the
// simulated gateway name has received since it started.
func (s *stack) simRequests(t *testing.T, name string) int {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + s.sims[name] + "/_sim/stats")
	if err != nil {
		t.Fatalf("%s stats: %v", name, err)
	}
	defer resp.Body.Close()
	var st struct {
		Requests *int `json:"requests"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Requests == nil {
		t.Fatalf("%s stats: no requests count (%v)", name, err)
	}
	return *st.Requests
}

// chargeBody is the charge every benchmark sends to payrouter.
var chargeBody = []byte(`{"amount":1999,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"},"description":"bench"}`)

// payrouterCharge is POST /charge on payrouter, expecting want.
func (in *instance) payrouterCharge(want int) Target {
	return Target{
		Name: "payrouter", URL: "http://" + in.api + "/charge", Body: chargeBody, Want: want,
		Header: http.Header{
			"Authorization": {"Bearer " + apiKey},
			"Content-Type":  {"application/json"},
		},
	}
}

// one sends t's request once, with its own client and key, and returns the whole answer.
func one(t *testing.T, target Target) (*http.Response, []byte) {
	t.Helper()
	return send(t, target, keyPrefix+"probe-"+strconv.FormatUint(keySeq.Add(1), 10))
}

// send sends t's request once with Idempotency-Key key, with its own client, and returns the
// whole answer, failing the test unless its status is target.Want.
func send(t *testing.T, target Target, key string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, target.URL, bytes.NewReader(target.Body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = target.Header.Clone()
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s: %v", target.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: reading the answer: %v", target.Name, err)
	}
	if resp.StatusCode != target.Want {
		t.Fatalf("%s: status %d, want %d: %s", target.Name, resp.StatusCode, target.Want, body)
	}
	return resp, body
}

// checkSamples fails the test if any request of the samples got an unexpected answer or none.
func checkSamples(t *testing.T, target Target, samples ...Sample) {
	t.Helper()
	m := Merge(samples...)
	if m.Unexpected > 0 || m.Errors > 0 {
		t.Errorf("%s: %d of %d requests answered another status than %d and %d failed; first: %s",
			target.Name, m.Unexpected, m.Requests, target.Want, m.Errors, m.FirstProblem)
	}
	if m.Requests == 0 {
		t.Errorf("%s: no request completed", target.Name)
	}
}

// adminClient is the client of the admin and simulator control calls: short timeouts, its own
// connections, never the Loads'.
var adminClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}}

// breakerState is the state GET /admin/breakers shows for gateway/op on in.
func (in *instance) breakerState(ctx context.Context, gateway, op string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+in.admin+"/admin/breakers", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := adminClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var list struct {
		Breakers []struct {
			Gateway   string `json:"gateway"`
			Operation string `json:"operation"`
			State     string `json:"state"`
		} `json:"breakers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return "", fmt.Errorf("GET /admin/breakers: status %d: %w", resp.StatusCode, err)
	}
	for _, b := range list.Breakers {
		if b.Gateway == gateway && b.Operation == op {
			return b.State, nil
		}
	}
	return "", fmt.Errorf("GET /admin/breakers: no %s/%s", gateway, op)
}

// breakerAction is POST /admin/breakers/{gateway}/{op}/{action} on in (force-open, force-close,
// reset); it fails the test unless answered 200.
func (in *instance) breakerAction(t *testing.T, gateway, op, action string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost,
		"http://"+in.admin+"/admin/breakers/"+gateway+"/"+op+"/"+action, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := adminClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s/%s: %v", action, gateway, op, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Warning") != "" {
		t.Fatalf("%s %s/%s: status %d, Warning %q: %s", action, gateway, op, resp.StatusCode, resp.Header.Get("Warning"), body)
	}
}

// simControl calls the control API of the simulated gateway name (POST /_sim/reset, PUT
// /_sim/behavior) and fails the test unless answered 200.
func (s *stack) simControl(t *testing.T, name, method, path, body string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, "http://"+s.sims[name]+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := adminClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s %s: %v", name, method, path, err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s %s: status %d: %s", name, method, path, resp.StatusCode, answer)
	}
}

// payrouterRefund is POST /charge/{id}/refund on payrouter with an empty body (a full refund),
// each request of the next of the charges ids, expecting 201.
func (in *instance) payrouterRefund(ids []string) Target {
	urls := make([]string, len(ids))
	for i, id := range ids {
		urls[i] = "http://" + in.api + "/charge/" + id + "/refund"
	}
	return Target{
		Name: "payrouter", URLs: NewURLs(urls), Want: http.StatusCreated,
		Header: http.Header{"Authorization": {"Bearer " + apiKey}},
	}
}
