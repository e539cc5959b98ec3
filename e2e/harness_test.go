package e2e

// The harness: TestMain builds the two commands once; each test starts its own gatewaysim and
// payrouter on fresh loopback ports, with a configuration file it writes, and t.Cleanup stops
// them. The fleet tests add their own redis-server (redisstore/redistest), two instances sharing
// it and, where asked, a `payrouter probe`. Nothing is shared between tests, so a test can
// neither see nor disturb another's state.

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/payrouter/payrouter/pgstore/pgtest"
)

// Credentials of every payrouter the tests start; the tests write them into the configuration.
const (
	apiKey     = "e2e-api-key"
	adminToken = "e2e-admin-token"
	// otherAPIKey is a second storefront's key: it must never see apiKey's charges.
	otherAPIKey = "e2e-other-api-key"
)

const (
	// startDeadline bounds how long a process may take to answer its health checks; generous,
	// because `go test -race ./...` runs other packages beside this one on small machines.
	startDeadline = 20 * time.Second
	// stopGrace is how long a process has to exit after SIGTERM before it is killed. payrouter
	// drains in-flight requests first, but the tests stop it only once they are answered.
	stopGrace = 5 * time.Second
	// startAttempts bounds retries when a port picked as free was taken before the process bound it.
	startAttempts = 3
)

// bin holds the paths of the binaries TestMain built.
var bin struct{ payrouter, gatewaysim string }

func TestMain(m *testing.M) {
	flag.Parse() // testing.Short needs the flags parsed
	if testing.Short() {
		// Every test skips itself under -short; building would only cost time.
		os.Exit(m.Run())
	}
	os.Exit(buildAndRun(m))
}

// buildAndRun builds the binaries into a temporary directory, runs the tests and removes the
// directory. A failed build fails the package loudly: the e2e never skips silently.
func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "payrouter-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return pgtest.Run(m) // the fleet tests' PostgreSQL is stopped and removed after them
}

// build compiles cmd/payrouter and cmd/gatewaysim of the module this package is in, so the tests
// always run the code of this checkout.
func build(dir string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A trailing separator makes -o a directory: one go invocation builds both.
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(filepath.Separator), "./cmd/payrouter", "./cmd/gatewaysim")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/payrouter ./cmd/gatewaysim in %s: %v\n%s", root, err, out)
	}
	bin.payrouter = filepath.Join(dir, "payrouter")
	bin.gatewaysim = filepath.Join(dir, "gatewaysim")
	return nil
}

// moduleRoot is the nearest directory at or above the package directory (go test's working
// directory) holding a go.mod.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.mod in %s or above", wd)
		}
	}
}

// skipIfShort is the only way these tests skip: they start processes and take seconds each.
func skipIfShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e: starts real processes and takes tens of seconds; skipped with -short")
	}
}

// --- processes -----------------------------------------------------------------------------

// output collects what a process writes on stdout and stderr.
type output struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// tail returns the last n lines.
func (o *output) tail(n int) string {
	lines := strings.SplitAfter(o.String(), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// process is one started binary.
type process struct {
	name   string
	cmd    *exec.Cmd
	out    *output
	exited chan struct{} // closed once the process has exited and its output is read
	// waitErr is cmd.Wait's result; read it only after exited is closed.
	waitErr error
	// expected is set once the test stopped the process or means it to exit, so that cleanup
	// does not report the exit as a crash.
	expected atomic.Bool
}

// startProcess starts path with args. t.Cleanup stops it (SIGTERM, then SIGKILL after
// stopGrace), reports an exit the test did not ask for or an unclean one, and, when the test
// failed, prints the end of the process's output and keeps the whole of it in a file.
func startProcess(t *testing.T, name, path string, args ...string) *process {
	t.Helper()
	return startProcessEnv(t, nil, name, path, args...)
}

// startProcessEnv is startProcess with env ("NAME=value" each) added to the process's
// environment.
func startProcessEnv(t *testing.T, env []string, name, path string, args ...string) *process {
	t.Helper()
	p := &process{name: name, out: &output{}, exited: make(chan struct{})}
	p.cmd = exec.Command(path, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.Env = append(processEnv(), env...)
	p.cmd.WaitDelay = 2 * time.Second // a pipe held open by anything else must not hang Wait
	setProcAttr(p.cmd)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
			if !p.expected.Load() {
				t.Errorf("%s (pid %d) exited during the test without being asked to: %v", p.name, p.cmd.Process.Pid, p.waitErr)
			}
		default:
			if err := p.stop(); err != nil {
				t.Errorf("stopping %s: %v", p.name, err)
			}
		}
		if t.Failed() {
			p.dump(t)
		}
	})
	return p
}

// processEnv is the test's environment without the variables that change how payrouter runs:
// a developer's shell must not change what the tests start.
func processEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PAYROUTER_") || strings.HasPrefix(kv, "OTEL_")
	})
}

// signal sends sig and marks the exit that follows as asked for.
func (p *process) signal(sig os.Signal) error {
	p.expected.Store(true)
	return p.cmd.Process.Signal(sig)
}

// wait waits up to d for the process to exit and reports whether it did.
func (p *process) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
		return false
	}
}

// exitCode is the process's exit code, -1 if a signal ended it; call it after exited.
func (p *process) exitCode() int { return p.cmd.ProcessState.ExitCode() }

// stop sends SIGTERM, waits up to stopGrace, then kills. Both commands promise a clean exit 0
// on SIGTERM, so anything else is reported.
func (p *process) stop() error {
	if err := p.signal(syscall.SIGTERM); err != nil {
		if p.wait(stopGrace) {
			return nil // it had just exited: nothing to stop
		}
		return err
	}
	if !p.wait(stopGrace) {
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("did not exit within %v of SIGTERM; killed", stopGrace)
	}
	if code := p.exitCode(); code != 0 {
		return fmt.Errorf("exit code %d after SIGTERM, want 0 (%v)", code, p.waitErr)
	}
	return nil
}

// clashed reports whether the process exited because an address it was given was taken.
func (p *process) clashed() bool {
	select {
	case <-p.exited:
		return strings.Contains(p.out.String(), "address already in use")
	default:
		return false
	}
}

// dump prints the end of the output and keeps all of it in a file: payrouter writes a line per
// request, and a failing load test needs the whole story.
func (p *process) dump(t *testing.T) {
	const lines = 80
	where := "not kept"
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()) + "-" + p.name + "-*.log"
	if f, err := os.CreateTemp("", name); err == nil {
		_, _ = f.WriteString(p.out.String())
		_ = f.Close()
		where = f.Name()
	}
	t.Logf("----- %s: last %d lines of its output (all of it: %s) -----\n%s", p.name, lines, where, p.out.tail(lines))
}

// --- ports and readiness ---------------------------------------------------------------------

// reservedPort reports whether port may be in use beside these tests: the contract suite's
// (27xxx) and the demo's (8080, 9090, 9101-9104).
func reservedPort(port int) bool {
	return port/1000 == 27 || port == 8080 || port == 9090 || (port >= 9101 && port <= 9104)
}

// freePorts returns n distinct loopback ports that were free a moment ago: the kernel picks each,
// and the listener is closed for the process to take. Another process may take one first; the
// starters retry on that.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for len(ports) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("finding a free port: %v", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !reservedPort(port) && !slices.Contains(ports, port) {
			ports = append(ports, port)
		}
	}
	return ports
}

func loopback(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// waitReady polls every url until each answers 200, within startDeadline. It gives up at once
// when the process exits.
func waitReady(p *process, urls ...string) error {
	client := &http.Client{Timeout: time.Second, Transport: newTransport(1)}
	defer client.CloseIdleConnections()
	return waitReadyWith(p, client, urls...)
}

// waitReadyWith is waitReady through client.
func waitReadyWith(p *process, client *http.Client, urls ...string) error {
	deadline := time.Now().Add(startDeadline)
	for _, u := range urls {
		for {
			resp, err := client.Get(u)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			select {
			case <-p.exited:
				return fmt.Errorf("%s exited during start-up (%v) before %s answered", p.name, p.waitErr, u)
			default:
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %s did not answer 200 within %v: %v", p.name, u, startDeadline, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// --- gatewaysim ------------------------------------------------------------------------------

// sims is one running gatewaysim: the three simulated gateways.
type sims struct {
	proc                   *process
	paywell, ding, tranglo *sim
}

func (s *sims) byName(name string) *sim {
	for _, g := range []*sim{s.paywell, s.ding, s.tranglo} {
		if g.name == name {
			return g
		}
	}
	panic("e2e: no simulated gateway " + name)
}

// startSims starts gatewaysim on three free ports and waits for each gateway's /health.
func startSims(t *testing.T) *sims {
	t.Helper()
	for attempt := 1; ; attempt++ {
		ports := freePorts(t, 3)
		s := &sims{
			paywell: newSim("paywell", ports[0]),
			ding:    newSim("ding", ports[1]),
			tranglo: newSim("tranglo", ports[2]),
		}
		s.proc = startProcess(t, "gatewaysim", bin.gatewaysim,
			"-paywell", loopback(ports[0]), "-ding", loopback(ports[1]), "-tranglo", loopback(ports[2]))
		err := waitReady(s.proc, s.paywell.url+"/health", s.ding.url+"/health", s.tranglo.url+"/health")
		if err == nil {
			return s
		}
		if attempt < startAttempts && s.proc.clashed() {
			s.proc.expected.Store(true)
			t.Logf("gatewaysim: a port was taken before it could bind (%v); retrying on others", err)
			continue
		}
		t.Fatalf("gatewaysim did not come up: %v", err)
	}
}

// --- payrouter ---------------------------------------------------------------------------------

// gatewayConfig is one gateway's settings in the configuration a test writes.
type gatewayConfig struct {
	Timeout             time.Duration
	MaxConcurrent       int
	ConsecutiveFailures int
	Cooldown            time.Duration
	// OutOfBand sets breaker.probe: out_of_band (a prober's health probe, not a customer's
	// call, tests recovery); false is in_band.
	OutOfBand bool
	// ProbeInterval and ProbeTimeout are breaker.probe_interval and probe_timeout; 0 leaves
	// them out (the defaults, 5s and 2s).
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
}

// routeConfig is one route: charges in Currencies go to Gateways, in order.
type routeConfig struct {
	Name       string
	Currencies []string
	Gateways   []string
}

// routerConfig is what a test chooses of payrouter's configuration (docs/configuration.md);
// the rest is written as the defaults or fixed below.
type routerConfig struct {
	RequestTimeout time.Duration
	// DatabaseURL is state.database_url: "" keeps the money state in memory; instances given
	// one URL share their charges, refunds, idempotency keys and tasks. RedisURL is
	// state.redis_url: instances given one URL share their breakers (it needs DatabaseURL).
	DatabaseURL string
	RedisURL    string
	// RedisTimeout is state.redis_timeout; 0 leaves it out (the default, 100ms).
	RedisTimeout time.Duration
	// DatabaseTimeout is state.database_timeout; 0 leaves it out (the default, 800ms).
	DatabaseTimeout time.Duration
	// Gateways are keyed by simulated gateway (paywell, ding, tranglo); each one's kind is its
	// name and its base_url the simulator's.
	Gateways map[string]gatewayConfig
	Routes   []routeConfig
}

// yaml renders the configuration file for listeners on listen and admin.
func (c routerConfig) yaml(listen, admin string, s *sims) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %q\nadmin_listen: %q\nrequest_timeout: %s\n", listen, admin, c.RequestTimeout)
	fmt.Fprintf(&b, "auth:\n  api_keys: [%q, %q]\n  admin_token: %q\n", apiKey, otherAPIKey, adminToken)
	fmt.Fprintf(&b, "state:\n  redis_url: %q\n  database_url: %q\n", c.RedisURL, c.DatabaseURL)
	if c.RedisTimeout > 0 {
		fmt.Fprintf(&b, "  redis_timeout: %s\n", c.RedisTimeout)
	}
	if c.DatabaseTimeout > 0 {
		fmt.Fprintf(&b, "  database_timeout: %s\n", c.DatabaseTimeout)
	}
	b.WriteString("gateways:\n")
	for _, name := range []string{"paywell", "ding", "tranglo"} { // the file's order is the listing order
		g, ok := c.Gateways[name]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "  %s:\n    kind: %s\n    base_url: %q\n    credentials: {api_key: \"%s_e2e_key\"}\n",
			name, name, s.byName(name).url, name)
		fmt.Fprintf(&b, "    timeout: %s\n    max_concurrent: %d\n    max_wait: 0s\n", g.Timeout, g.MaxConcurrent)
		// Only the consecutive-failures rule trips, so a test knows exactly what opens a breaker.
		fmt.Fprintf(&b, "    breaker:\n      consecutive_failures: %d\n      failures_in_window: 0\n      failure_rate: 0\n",
			g.ConsecutiveFailures)
		probe := "in_band"
		if g.OutOfBand {
			probe = "out_of_band"
		}
		fmt.Fprintf(&b, "      cooldown: %s\n      half_open_requests: 1\n      probe: %s\n", g.Cooldown, probe)
		if g.ProbeInterval > 0 {
			fmt.Fprintf(&b, "      probe_interval: %s\n", g.ProbeInterval)
		}
		if g.ProbeTimeout > 0 {
			fmt.Fprintf(&b, "      probe_timeout: %s\n", g.ProbeTimeout)
		}
	}
	b.WriteString("routes:\n")
	for _, r := range c.Routes {
		fmt.Fprintf(&b, "  - name: %s\n    match: {currency: [%s]}\n    gateways: [%s]\n",
			r.Name, strings.Join(r.Currencies, ", "), strings.Join(r.Gateways, ", "))
	}
	b.WriteString("fallbacks:\n  charge: fail\n")
	// The load these tests send from one key is far above a shop's rate, so the rate limit is
	// off; the key share is left at its default (0.5 with the two keys listed above), as a user
	// has it: a key alone uses every slot of a bulkhead, so the incidents play out as with one
	// key. The limits have tests of their own (docs/limits.md; limits_test.go).
	b.WriteString("limits:\n  requests_per_second: 0\n")
	return b.String()
}

// instance is one running payrouter.
type instance struct {
	proc       *process
	url        string // storefront listener
	adminURL   string
	configPath string // the file it was started on, which holds its ports
	// client carries the tests' API traffic; its pool is sized for the load tests' clients so
	// that connections are reused rather than churned through TIME_WAIT.
	client *http.Client
	// probeClient has its own connection pool, so that a health probe never queues behind the
	// load it is measuring.
	probeClient *http.Client
}

// startPayrouter writes cfg for free ports and starts `payrouter serve` on it, waiting for
// /healthz on both listeners.
func startPayrouter(t *testing.T, s *sims, cfg routerConfig) *instance {
	t.Helper()
	return startPayrouterEdited(t, s, cfg, nil)
}

// startPayrouterEdited is startPayrouter with the configuration file changed by edit before it
// is written (for settings routerConfig does not have); nil changes nothing.
func startPayrouterEdited(t *testing.T, s *sims, cfg routerConfig, edit func(string) string) *instance {
	t.Helper()
	return startConfigured(t, launch{}, func(listen, admin string) string {
		text := cfg.yaml(listen, admin, s)
		if edit != nil {
			text = edit(text)
		}
		return text
	})
}

// launch says how startConfigured starts a payrouter and reaches it.
type launch struct {
	name string // labels its output and file; "" is "payrouter"
	// storefrontTLS and adminTLS are the tests' clients' TLS to each listener; nil: plain HTTP.
	storefrontTLS, adminTLS *tls.Config
	// env is added to the process's environment ("NAME=value" each), such as OTEL_* variables.
	env []string
}

// startConfigured starts `payrouter serve` on the file text writes for two free ports, and waits
// for /healthz on both listeners. When a port was taken before payrouter could bind it, it tries
// again on others.
func startConfigured(t *testing.T, l launch, text func(listen, admin string) string) *instance {
	t.Helper()
	if l.name == "" {
		l.name = "payrouter"
	}
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		ports := freePorts(t, 2)
		path := filepath.Join(dir, fmt.Sprintf("%s-%d.yaml", l.name, attempt))
		if err := os.WriteFile(path, []byte(text(loopback(ports[0]), loopback(ports[1]))), 0o600); err != nil {
			t.Fatal(err)
		}
		in, err := serveLaunched(t, l, path, ports[0], ports[1])
		if err == nil {
			return in
		}
		if attempt < startAttempts && in.proc.clashed() {
			in.proc.expected.Store(true)
			t.Logf("%s: a port was taken before it could bind (%v); retrying on others", l.name, err)
			continue
		}
		cfgText, _ := os.ReadFile(path)
		t.Fatalf("%s did not come up: %v\nconfiguration:\n%s", l.name, err, cfgText)
	}
}

// servePayrouter starts `payrouter serve -config path`, whose listeners are on the two ports,
// and waits for /healthz on both; name labels its output.
func servePayrouter(t *testing.T, name, path string, listen, admin int) (*instance, error) {
	t.Helper()
	return serveLaunched(t, launch{name: name}, path, listen, admin)
}

// serveLaunched is servePayrouter reached as l says.
func serveLaunched(t *testing.T, l launch, path string, listen, admin int) (*instance, error) {
	t.Helper()
	scheme := func(c *tls.Config) string {
		if c != nil {
			return "https://"
		}
		return "http://"
	}
	in := &instance{
		url:         scheme(l.storefrontTLS) + loopback(listen),
		adminURL:    scheme(l.adminTLS) + loopback(admin),
		configPath:  path,
		client:      &http.Client{Timeout: 30 * time.Second, Transport: tlsTransport(l.storefrontTLS, 128)},
		probeClient: &http.Client{Timeout: 10 * time.Second, Transport: tlsTransport(l.adminTLS, 4)},
	}
	in.proc = startProcessEnv(t, l.env, l.name, bin.payrouter, "serve", "-config", path)
	for _, w := range []struct {
		url string
		cfg *tls.Config
	}{{in.url, l.storefrontTLS}, {in.adminURL, l.adminTLS}} {
		// A client of its own with a short timeout: one health check never hangs the start.
		client := &http.Client{Timeout: time.Second, Transport: tlsTransport(w.cfg, 1)}
		err := waitReadyWith(in.proc, client, w.url+"/healthz")
		client.CloseIdleConnections()
		if err != nil {
			return in, err
		}
	}
	t.Cleanup(func() {
		in.client.CloseIdleConnections()
		in.probeClient.CloseIdleConnections()
	})
	return in, nil
}

// restart is a deploy of one instance: SIGTERM, a clean exit, then a new `payrouter serve` on
// the same configuration file, so on the same ports. It returns the new instance.
func (in *instance) restart(t *testing.T) *instance {
	t.Helper()
	if err := in.proc.stop(); err != nil {
		t.Fatalf("stopping %s for its restart: %v", in.proc.name, err)
	}
	in.client.CloseIdleConnections()
	in.probeClient.CloseIdleConnections()
	listen, admin := portOf(t, in.url), portOf(t, in.adminURL)
	again, err := servePayrouter(t, in.proc.name+"-restarted", in.configPath, listen, admin)
	if err != nil {
		t.Fatalf("%s restarted on its own ports: %v", in.proc.name, err)
	}
	return again
}

// portOf is the port of a http://host:port URL.
func portOf(t *testing.T, url string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// proberProcess is one running `payrouter probe`: the out-of-band prober alone, beside the
// instances, sharing their breakers through state.redis_url.
type proberProcess struct {
	proc   *process
	url    string // its -listen address: GET /metrics and /healthz
	client *http.Client
}

// startProber writes cfg (which must name a Redis) and starts `payrouter probe` on it, with
// -listen on a free port, waiting for its /healthz. The listeners cfg names are not bound by a
// prober; they are free ports all the same, so that a mistake could not reach anything.
func startProber(t *testing.T, s *sims, cfg routerConfig) *proberProcess {
	t.Helper()
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		ports := freePorts(t, 3)
		path := filepath.Join(dir, fmt.Sprintf("prober-%d.yaml", attempt))
		if err := os.WriteFile(path, []byte(cfg.yaml(loopback(ports[0]), loopback(ports[1]), s)), 0o600); err != nil {
			t.Fatal(err)
		}
		pp := &proberProcess{url: "http://" + loopback(ports[2]), client: &http.Client{Timeout: 10 * time.Second, Transport: newTransport(2)}}
		pp.proc = startProcess(t, "payrouter-probe", bin.payrouter, "probe", "-config", path, "-listen", loopback(ports[2]))
		err := waitReady(pp.proc, pp.url+"/healthz")
		if err == nil {
			t.Cleanup(pp.client.CloseIdleConnections)
			return pp
		}
		if attempt < startAttempts && pp.proc.clashed() {
			pp.proc.expected.Store(true)
			t.Logf("payrouter probe: a port was taken before it could bind (%v); retrying on others", err)
			continue
		}
		cfgText, _ := os.ReadFile(path)
		t.Fatalf("payrouter probe did not come up: %v\nconfiguration:\n%s", err, cfgText)
	}
}

// metrics scrapes the prober's GET /metrics.
func (pp *proberProcess) metrics() (scrape, error) {
	return scrapeMetrics(pp.client, pp.url+"/metrics")
}

// newTransport is a loopback transport keeping up to idle connections per host.
func newTransport(idle int) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        idle,
		MaxIdleConnsPerHost: idle,
		IdleConnTimeout:     30 * time.Second,
	}
}

// tlsTransport is newTransport with cfg for HTTPS (nil: plain).
func tlsTransport(cfg *tls.Config, idle int) *http.Transport {
	tr := newTransport(idle)
	tr.TLSClientConfig = cfg
	return tr
}

// --- waiting -----------------------------------------------------------------------------------

// waitLogged waits up to 5 s for the process to have written n lines holding substr, and
// returns either way: the check that follows says what was missing. payrouter writes its log
// from a queue (telemetry.LogSink), so a line may reach its output a moment after the answer
// of the request that logged it.
func (p *process) waitLogged(substr string, n int) {
	deadline := time.Now().Add(5 * time.Second)
	for strings.Count(p.out.String(), substr) < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// eventually polls cond until it holds, failing the test after d with what cond last said.
func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last seen: %s", what, d, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
