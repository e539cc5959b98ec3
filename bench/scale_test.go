package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/payrouter/payrouter/memstore"
	"github.com/payrouter/payrouter/pgstore/pgtest"
	"github.com/payrouter/payrouter/service"
)

// scaleWorkers is the concurrency of TestBenchScale's loads: a busy storefront, so that what it
// measures is throughput (charges/s).
const scaleWorkers = 16

// scaleRow is one line of TestBenchScale's table: the same charges at the smallest size of a
// measure (the baseline) and at a larger one, alternated.
type scaleRow struct {
	measure, small, large string
	c                     Comparison
}

// TestBenchScale measures whether a charge costs the same as the work grows (issue 21, item 4):
// POST /charge on the healthy path (paywell approves) at scaleWorkers workers, each size against
// the smallest of its measure, in the same run, alternated (Alternate):
//
//   - routes: 1 against 100 and 10,000, the charge matching the last (every route before it
//     names a country the charge is not from: the linear scan's worst case);
//   - gateways: 3 against 100 configured (97 more of kind paywell on the paywell simulator), every
//     one on the route, the charge approved by the first;
//   - memstore: empty against holding PAYROUTER_BENCH_MEMSTORE_CHARGES charges (each with its key
//     and events, as a 201 leaves them), each server the test binary itself in a process of its
//     own (TestBenchScaleMemstoreServer), so that neither's heap is the other's;
//   - PostgreSQL: a database of its own (pgtest's server) empty against one holding
//     PAYROUTER_BENCH_ROWS charges and as many events (fillDatabase), two payrouter processes.
//
// and the memory one stored charge takes in each store: memstore's live heap grown per charge,
// PostgreSQL's pg_total_relation_size per row of charges and of events.
func TestBenchScale(t *testing.T) {
	requireBench(t)
	memCharges := benchSize(t, memstoreChargesEnv, memstoreChargesDefault)
	rows := benchSize(t, rowsEnv, rowsDefault)
	s := startSims(t)
	charge := func(t *testing.T, in *instance, name string) Target {
		tg := in.payrouterCharge(http.StatusCreated)
		tg.Name = name
		checkSucceededAtPaywell(t, tg)
		return tg
	}
	var table []scaleRow
	measure := func(t *testing.T, measure, small, large string, base, subject Target) {
		c := compareAt(t, base, subject, scaleWorkers)
		table = append(table, scaleRow{measure, small, large, c})
	}

	// Routes and gateways: processes on the in-memory store, each pair started, measured and
	// stopped before the next, so that idle ones take nothing from the measured.
	t.Run("routes", func(t *testing.T) {
		one := charge(t, s.startPayrouter(t, "payrouter-1-route", instanceOptions{}), "1 route")
		for _, n := range []int{100, 10_000} {
			t.Run(fmt.Sprint(n), func(t *testing.T) {
				many := charge(t, s.startPayrouter(t, fmt.Sprintf("payrouter-%d-routes", n), instanceOptions{edit: withRoutes(n)}), fmt.Sprintf("%d routes", n))
				measure(t, "routes", "1", fmt.Sprint(n), one, many)
			})
		}
	})
	t.Run("gateways", func(t *testing.T) {
		few := charge(t, s.startPayrouter(t, "payrouter-3-gateways", instanceOptions{}), "3 gateways")
		many := charge(t, s.startPayrouter(t, "payrouter-100-gateways", instanceOptions{edit: withGateways(s.sims, 100)}), "100 gateways")
		measure(t, "gateways", "3", "100", few, many)
	})
	var memHeap float64
	var memRuntime string
	t.Run("memstore", func(t *testing.T) {
		empty, _ := s.startMemstoreServer(t, "memstore-empty", 0)
		full, ready := s.startMemstoreServer(t, "memstore-full", memCharges)
		memHeap = ready.HeapPerCharge
		t.Logf("filled the memstore with %d charges in %s", memCharges, time.Duration(ready.FillSeconds*float64(time.Second)).Round(time.Second))
		emptyTarget, fullTarget := charge(t, empty, "memstore empty"), charge(t, full, "memstore full")
		e0, f0 := empty.runtimeStats(t), full.runtimeStats(t)
		measure(t, "memstore charges", "0", fmt.Sprint(memCharges), emptyTarget, fullTarget)
		r := table[len(table)-1].c
		memRuntime = fmt.Sprintf("memstore servers over the comparison (warm-ups included): empty %s, full %s",
			empty.runtimeStats(t).minus(e0).per(Merge(append(r.Base, r.WarmBase)...).Requests),
			full.runtimeStats(t).minus(f0).per(Merge(append(r.Subject, r.WarmSubject)...).Requests))
	})
	var pgBytes map[string]float64
	t.Run("postgresql", func(t *testing.T) {
		emptyURL, fullURL := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
		empty := charge(t, s.startPayrouter(t, "payrouter-database-empty", instanceOptions{databaseURL: emptyURL}), "database empty")
		full := charge(t, s.startPayrouter(t, "payrouter-database-full", instanceOptions{databaseURL: fullURL}), "database full")
		took := fillDatabase(t, fullURL, rows)
		t.Logf("filled the database with %d charges and %d events in %s", rows, rows, took.Round(time.Second))
		measure(t, "PostgreSQL charges and events", "0", fmt.Sprint(rows), empty, full)
		pgBytes = bytesPerRow(t, fullURL, "charges", "events")
	})
	if t.Failed() {
		return
	}

	w := t.Output()
	fmt.Fprintln(w)
	fmt.Fprintf(w, "(h) cost as the work grows (issue 21, item 4): POST /charge on the healthy path at %d workers, each size against the smallest of its measure, %d alternating pairs of %s after %s of warm-up each; goal: flat (1.00x within noise)\n",
		scaleWorkers, pairs, roundTime, warmUp)
	fmt.Fprintf(w, "sizes of this run: memstore %d charges (%s, default %d), PostgreSQL %d charges and %d events (%s, default %d); PostgreSQL is pgtest's, without fsync or synchronous commit, on the same CPUs\n",
		memCharges, memstoreChargesEnv, memstoreChargesDefault, rows, rows, rowsEnv, rowsDefault)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\tsmallest\tlarger\tcharges/s smallest\tcharges/s larger\tlarger / smallest\t(each pair)\tp50 ratio\tp99 ratio")
	for _, r := range table {
		b, sj := Merge(r.c.Base...), Merge(r.c.Subject...)
		var each []string
		for i := range r.c.Base {
			each = append(each, fmt.Sprintf("%.2f", r.c.Subject[i].Rate()/r.c.Base[i].Rate()))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.0f\t%.2fx\t%s\t%.2fx\t%.2fx\n", r.measure, r.small, r.large, b.Rate(), sj.Rate(), sj.Rate()/b.Rate(),
			strings.Join(each, " "), ratio(sj.Quantile(0.5), b.Quantile(0.5)), ratio(sj.Quantile(0.99), b.Quantile(0.99)))
	}
	tw.Flush()
	if memRuntime != "" {
		fmt.Fprintln(w, memRuntime)
	}
	if memHeap > 0 {
		fmt.Fprintf(w, "memory per stored charge in memstore: %.0f bytes of live heap (the charge, its key and its event; %d charges, the store unbounded: state.max_memory counts more per charge than the heap holds, docs/limits.md)\n",
			memHeap, memCharges)
	}
	if len(pgBytes) > 0 {
		fmt.Fprintf(w, "memory per stored charge in PostgreSQL: %.0f bytes per charge row and %.0f per event row (pg_total_relation_size: table, TOAST and indexes; %d rows each)\n",
			pgBytes["charges"], pgBytes["events"], rows)
	}
}

// withRoutes returns a configuration edit putting n-1 routes before the benchmark's own, each
// matching USD charges from a country the benchmark's charge is not from (it names none), so
// that its charge matches the last route of n.
func withRoutes(n int) func(string) string {
	return func(config string) string {
		var b strings.Builder
		b.WriteString("routes:\n")
		for i := range n - 1 {
			fmt.Fprintf(&b, "  - {name: r%05d, match: {currency: [USD], country: [%s]}, gateways: [paywell]}\n", i, twoLetters(i))
		}
		return strings.Replace(config, "routes:\n", b.String(), 1)
	}
}

// twoLetters is the i-th of AA, AB, ..., ZZ, round again after ZZ.
func twoLetters(i int) string {
	i %= 26 * 26
	return string([]byte{byte('A' + i/26), byte('A' + i%26)})
}

// withGateways returns a configuration edit adding gateways gw003 ... up to n in all, of kind
// paywell on the paywell simulator, with the benchmark's settings, and putting them on the
// route after its own three.
func withGateways(sims map[string]string, n int) func(string) string {
	return func(config string) string {
		var b strings.Builder
		b.WriteString("gateways:\n")
		var names []string
		for i := len(gatewayNames); i < n; i++ {
			name := fmt.Sprintf("gw%03d", i)
			names = append(names, name)
			fmt.Fprintf(&b, "  %s:\n    kind: paywell\n    base_url: %q\n    credentials: {api_key: %q}\n", name, "http://"+sims["paywell"], gatewayKey("paywell"))
			b.WriteString("    timeout: 2s\n    max_concurrent: 1000\n    max_wait: 0s\n")
			fmt.Fprintf(&b, "    breaker: {consecutive_failures: %d, cooldown: 1h}\n", tripAfter)
		}
		config = strings.Replace(config, "gateways:\n", b.String(), 1)
		route := "gateways: [" + strings.Join(gatewayNames, ", ")
		return strings.Replace(config, route, route+", "+strings.Join(names, ", "), 1)
	}
}

// The flags of TestBenchScaleMemstoreServer, set only when TestBenchScale starts the test binary
// as a memstore server.
var (
	scaleServe = flag.String("scale-serve", "", "TestBenchScaleMemstoreServer: serve payrouter on this configuration file, its money state in a memstore")
	scaleFill  = flag.Int("scale-fill", 0, "TestBenchScaleMemstoreServer: charges to fill the memstore with before it is ready")
	scaleReady = flag.String("scale-ready", "", "TestBenchScaleMemstoreServer: the file to write the fill's figures to (memstoreReady) once ready")
)

// memstoreReady is what TestBenchScaleMemstoreServer writes once its store is filled.
type memstoreReady struct {
	HeapPerCharge float64 `json:"heap_per_charge"`
	FillSeconds   float64 `json:"fill_seconds"`
}

// TestBenchScaleMemstoreServer is not a test: TestBenchScale runs the test binary with it, and
// -scale-serve, as a payrouter server whose memstore it fills itself (service.Options.Store),
// each store in a process of its own. It serves on the configuration's listeners, makes one charge
// through its own API as the template of the fill (fillMemstore), fills, writes -scale-ready, and
// serves until SIGTERM (the end of TestBenchScale).
func TestBenchScaleMemstoreServer(t *testing.T) {
	if *scaleServe == "" {
		t.Skip("run by TestBenchScale only, with -scale-serve")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	cfg, err := service.Load(ctx, *scaleServe, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	mem := memstore.New(memstore.WithBounds(cfg.State.Retention, 0))
	defer mem.Close()
	svc, err := service.New(ctx, cfg, service.Options{Store: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	served := make(chan error, 1)
	go func() { served <- svc.Serve(ctx, nil) }()
	in := &instance{api: cfg.Listen, admin: cfg.AdminListen}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get("http://" + in.api + "/healthz"); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("not healthy after 10 s")
		}
	}
	var ready memstoreReady
	if *scaleFill > 0 {
		_, body := one(t, in.payrouterCharge(http.StatusCreated))
		var answer struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(body, &answer); err != nil {
			t.Fatal(err)
		}
		template, err := mem.Charge(ctx, answer.ID)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ready.HeapPerCharge = fillMemstore(t, mem, template, *scaleFill)
		ready.FillSeconds = time.Since(start).Seconds()
	}
	b, _ := json.Marshal(ready)
	if err := os.WriteFile(*scaleReady+".tmp", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(*scaleReady+".tmp", *scaleReady); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
}

// startMemstoreServer starts the test binary as a payrouter server with its money state in a
// memstore filled with fill charges (TestBenchScaleMemstoreServer), on the stack's simulators,
// and waits until it is filled and serving.
func (s *stack) startMemstoreServer(t *testing.T, name string, fill int) (*instance, memstoreReady) {
	t.Helper()
	addrs := freeAddrs(t, 2)
	in := &instance{api: addrs[0], admin: addrs[1]}
	dir := t.TempDir()
	cfg, readyFile := filepath.Join(dir, name+".yaml"), filepath.Join(dir, name+".ready")
	if err := os.WriteFile(cfg, []byte(benchConfig(in, s.sims, instanceOptions{})), 0o644); err != nil {
		t.Fatal(err)
	}
	in.payrouter = startProcess(t, name, os.Args[0], "-test.run=^TestBenchScaleMemstoreServer$", "-test.timeout=0",
		"-scale-serve="+cfg, fmt.Sprintf("-scale-fill=%d", fill), "-scale-ready="+readyFile)
	for deadline := time.Now().Add(10*time.Minute + time.Duration(fill/1000)*time.Second); ; time.Sleep(200 * time.Millisecond) {
		if b, err := os.ReadFile(readyFile); err == nil {
			var ready memstoreReady
			if err := json.Unmarshal(b, &ready); err != nil {
				t.Fatalf("%s: %s: %v", name, readyFile, err)
			}
			return in, ready
		}
		select {
		case <-in.payrouter.done:
			t.Fatalf("%s exited before it was ready: %v\n%s", name, in.payrouter.cmd.ProcessState, in.payrouter.logTail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready in time\n%s", name, in.payrouter.logTail())
		}
	}
}

// runtimeStats is what a payrouter process used so far: CPU seconds in user and kernel mode and
// minor page faults (Linux's /proc/<pid>/stat), and garbage collections run (its Go collector on
// the admin listener's GET /metrics).
type runtimeStats struct{ user, system, minorFaults, gcCycles float64 }

func (in *instance) runtimeStats(t *testing.T) runtimeStats {
	t.Helper()
	var st runtimeStats
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", in.payrouter.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("%s: %v", in.payrouter.name, err)
	}
	// The fields after the command's name, which is in parentheses and may hold spaces: the
	// 8th of them is minflt, the 12th utime, the 13th stime (proc(5)), in clock ticks of 1/100 s.
	_, rest, _ := strings.Cut(string(stat), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		t.Fatalf("%s: /proc/<pid>/stat: %q", in.payrouter.name, stat)
	}
	for dst, i := range map[*float64]int{&st.minorFaults: 7, &st.user: 11, &st.system: 12} {
		if _, err := fmt.Sscan(f[i], dst); err != nil {
			t.Fatalf("%s: /proc/<pid>/stat field %d: %v", in.payrouter.name, i, err)
		}
	}
	st.user, st.system = st.user/100, st.system/100

	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+in.admin+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := adminClient.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "go_gc_duration_seconds_count "); ok {
			if _, err := fmt.Sscan(v, &st.gcCycles); err == nil {
				return st
			}
		}
	}
	t.Fatalf("GET /metrics: status %d, no go_gc_duration_seconds_count", resp.StatusCode)
	return st
}

func (a runtimeStats) minus(b runtimeStats) runtimeStats {
	return runtimeStats{user: a.user - b.user, system: a.system - b.system, minorFaults: a.minorFaults - b.minorFaults, gcCycles: a.gcCycles - b.gcCycles}
}

// per prints the CPU, page faults and collections over n charges.
func (a runtimeStats) per(n int) string {
	return fmt.Sprintf("%.0f µs of CPU per charge (%.0f user, %.0f kernel), %.1f minor page faults per charge, %.0f collections (%d charges)",
		(a.user+a.system)/float64(n)*1e6, a.user/float64(n)*1e6, a.system/float64(n)*1e6, a.minorFaults/float64(n), a.gcCycles, n)
}
