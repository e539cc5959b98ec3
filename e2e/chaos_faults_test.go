package e2e

// The chaos test's faults beyond the gateways' behaviours: its own dependencies failing under it
// (an instance stalled past its holds or killed, every instance killed at once, Redis stalled or
// restarted empty, PostgreSQL stalled, crashed or restarted), a real proxy in front of paywell
// that answers 503 after forwarding a charge, and the timeline of every fault, which bounds how
// long a 202 may take to become final.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrouter/payrouter/pgstore/pgtest"
)

const (
	// chaosStallFor is how long an instance is stopped (SIGSTOP): longer than the 5 s hold on
	// the keys it holds, so that they are taken over while it sleeps and its writes are refused
	// once it wakes.
	chaosStallFor = 8 * time.Second
	// chaosLongStall is how long the long run's instance-stop-long stops an instance: long
	// enough for its refunds in flight to be taken over and completed by the other instance,
	// their keys' holds and the queue's idle time run out many times, before it resumes and
	// finishes them too (which must count none of them twice).
	chaosLongStall = 40 * time.Second
	// chaosStopRaces is how many charges' refunds race when an instance is stopped; the stop
	// waits up to chaosStopRefundWait for one of their requests to be under way at it.
	chaosStopRaces      = 3
	chaosStopRefundWait = 3 * time.Second
	// chaosStoreStall is how long Redis or PostgreSQL is stopped (SIGSTOP).
	chaosStoreStall = 3 * time.Second
	// chaosStoreDown is how long Redis or PostgreSQL is away between its kill and its restart.
	chaosStoreDown = time.Second
	// chaosFaultGap is the calm between two faults of the schedule (plus up to as much again).
	chaosFaultGap = 1500 * time.Millisecond
	// chaosTwinShare is the share of new charges sent to both instances at once with one key
	// while a stall lasts (an instance, Redis or PostgreSQL stopped, a gateway hanging), and
	// chaosTwinCalm the share otherwise.
	chaosTwinShare = 0.25
	chaosTwinCalm  = 0.02
	// chaosProxyShare is the share of paywell's charges whose answer the proxy replaces with its
	// own 503 after paywell processed them.
	chaosProxyShare = 0.10
	// envoyResetBody is what Envoy answers (503 text/plain) when the upstream's connection drops
	// after the request was forwarded and before any answer header came back.
	envoyResetBody = "upstream connect error or disconnect/reset before headers. reset reason: connection termination"
)

// chaosFault is one fault of the schedule. nominal is what it takes, for planning the rounds;
// stall marks those during which keys are sent to both instances at once.
type chaosFault struct {
	name    string
	nominal time.Duration
	stall   bool
	what    string
}

// chaosFaults is the fault schedule's repertoire: each round runs every one of them once, in a
// seeded random order, with chaosFaultGap of calm between.
var chaosFaults = []chaosFault{
	{"instance-kill", 3 * time.Second, false, "SIGKILL of one instance, restarted on its ports a second later"},
	{"instance-stop", chaosStallFor, true, "SIGSTOP of one instance for " + chaosStallFor.String() +
		" (its holds run out) once a refund is under way at it, refunds of a few charges racing through both instances, then SIGCONT"},
	{"kill-all", 5 * time.Second, false, "SIGKILL of both instances with charges and refunds outstanding, restarted a second later"},
	{"redis-stop", chaosStoreStall, true, "SIGSTOP of redis-server for " + chaosStoreStall.String()},
	{"redis-restart-empty", 2 * time.Second, false, "redis-server killed and started again empty on its port"},
	{"pg-pause", chaosStoreStall, true, "SIGSTOP of every PostgreSQL process for " + chaosStoreStall.String() + " (pgtest.Pause)"},
	{"pg-crash", 2 * time.Second, false, "SIGKILL of every PostgreSQL server process but the postmaster, which resets every connection and recovers"},
	{"pg-restart", 3 * time.Second, false, "PostgreSQL stopped (fast shutdown), away a second, started again (pgtest.Stop, Start)"},
}

// chaosLongFaults are added to the schedule of a long run (CHAOS_CHARGES at least chaosLongRun):
// a short one has no time for them.
var chaosLongFaults = []chaosFault{
	{"instance-stop-long", chaosLongStall, true, "SIGSTOP of one instance for " + chaosLongStall.String() +
		" once a refund is under way at it, refunds of a few charges racing through both instances, then SIGCONT"},
}

// chaosRound is the nominal time of one round of the schedule's faults, gaps included.
func chaosRound(schedule []chaosFault) time.Duration {
	d := time.Duration(0)
	for _, f := range schedule {
		d += f.nominal + chaosFaultGap*3/2
	}
	return d
}

// --- the timeline ----------------------------------------------------------------------------------

// interval is one fault, from its start to its end (zero while it lasts).
type interval struct {
	name     string
	from, to time.Time
}

// chaosTimeline is every fault of the run: the schedule's (global: they touch every charge) and
// each gateway's behaviour other than normal.
type chaosTimeline struct {
	mu     sync.Mutex
	global []interval
	gw     map[string][]interval
	open   map[string]int // gateway: the index of its interval still open
	counts map[string]int
	took   map[string]time.Duration
	notes  map[string][]string
}

func newChaosTimeline() *chaosTimeline {
	return &chaosTimeline{gw: map[string][]interval{}, open: map[string]int{}, counts: map[string]int{},
		took: map[string]time.Duration{}, notes: map[string][]string{}}
}

// begin records a global fault starting now; the returned func ends it.
func (tl *chaosTimeline) begin(name string) (end func()) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.global = append(tl.global, interval{name: name, from: time.Now()})
	i := len(tl.global) - 1
	tl.counts[name]++
	return func() {
		tl.mu.Lock()
		defer tl.mu.Unlock()
		tl.global[i].to = time.Now()
		tl.took[name] += tl.global[i].to.Sub(tl.global[i].from)
	}
}

// note keeps a line about one fault for the report.
func (tl *chaosTimeline) note(name, format string, args ...any) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.notes[name] = append(tl.notes[name], fmt.Sprintf(format, args...))
}

// gateway records a gateway's behaviour: any but normal opens (or continues) an interval, normal
// closes it. from is when the change was asked for, to when it was answered: the interval is
// the widest it can have been.
func (tl *chaosTimeline) gateway(name, behaviour string, from, to time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	i, open := tl.open[name]
	switch {
	case behaviour == "normal" && open:
		tl.gw[name][i].to = to
		delete(tl.open, name)
	case behaviour != "normal" && !open:
		tl.gw[name] = append(tl.gw[name], interval{name: name + " " + behaviour, from: from})
		tl.open[name] = len(tl.gw[name]) - 1
	case behaviour != "normal":
		tl.gw[name][i].name += "," + behaviour
	}
}

// lastEnd is the latest end, before at, of a fault that began before at: a global one or one of
// the gateways'. A fault still on at that time ends at it. zero when there was none.
func (tl *chaosTimeline) lastEnd(gateways []string, at time.Time) (time.Time, string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var end time.Time
	var name string
	consider := func(iv interval) {
		if !iv.from.Before(at) {
			return
		}
		e := iv.to
		if e.IsZero() || e.After(at) {
			e = at
		}
		if e.After(end) {
			end, name = e, iv.name
		}
	}
	for _, iv := range tl.global {
		consider(iv)
	}
	for _, g := range gateways {
		for _, iv := range tl.gw[g] {
			consider(iv)
		}
	}
	return end, name
}

// globalDuring reports whether a global fault overlapped [from, to].
func (tl *chaosTimeline) globalDuring(from, to time.Time) bool {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, iv := range tl.global {
		end := iv.to
		if end.IsZero() {
			end = to
		}
		if iv.from.Before(to) && end.After(from) {
			return true
		}
	}
	return false
}

// lastGlobalEnd is when the last global fault ended.
func (tl *chaosTimeline) lastGlobalEnd() time.Time {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var end time.Time
	for _, iv := range tl.global {
		end = later(end, iv.to)
	}
	return end
}

// report is one line per fault of the schedule: how often, when (after began), how long in all,
// and its notes.
func (tl *chaosTimeline) report(began time.Time, schedule []chaosFault) string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var lines []string
	for _, f := range schedule {
		var at []string
		for _, iv := range tl.global {
			if iv.name == f.name {
				at = append(at, fmt.Sprintf("+%v", iv.from.Sub(began).Round(100*time.Millisecond)))
			}
		}
		line := fmt.Sprintf("%s: %d (at %s; %v in all): %s", f.name, tl.counts[f.name], strings.Join(at, ", "),
			tl.took[f.name].Round(100*time.Millisecond), f.what)
		if n := tl.notes[f.name]; len(n) > 0 {
			line += "\n      " + strings.Join(n, "\n      ")
		}
		lines = append(lines, line)
	}
	var gws []string
	for _, g := range []string{"paywell", "ding", "tranglo"} {
		var d time.Duration
		for _, iv := range tl.gw[g] {
			d += iv.to.Sub(iv.from)
		}
		gws = append(gws, fmt.Sprintf("%s %d spells (%v)", g, len(tl.gw[g]), d.Round(100*time.Millisecond)))
	}
	lines = append(lines, "gateways not normal: "+strings.Join(gws, ", "))
	return strings.Join(lines, "\n    ")
}

// --- the schedule ----------------------------------------------------------------------------------

// faults runs the fault schedule on the test goroutine (pgtest and the restarts may end the
// test): rounds of every fault in a seeded order for as long as the clients run, the first round
// whole whatever they do (they go on until it is over). It returns when the last fault is over.
func (r *chaosRun) faults(t *testing.T, rng *rand.Rand, loadDone <-chan struct{}) {
	t.Helper()
	wait := func(d time.Duration, round int) bool {
		timer := time.NewTimer(d)
		defer timer.Stop()
		if round == 0 {
			<-timer.C
			return true
		}
		select {
		case <-timer.C:
			return true
		case <-loadDone:
			return false
		}
	}
	for round := 0; ; round++ {
		for _, k := range rng.Perm(len(r.schedule)) {
			f := r.schedule[k]
			gap := chaosFaultGap + time.Duration(rng.Int64N(int64(chaosFaultGap)))
			if !wait(gap, round) {
				return
			}
			r.runFault(t, rng, f.name, f.stall)
		}
		if round == 0 {
			r.faultsRoundDone.Store(true)
			t.Logf("chaos: every fault ran once %v into the load", time.Since(r.began).Round(100*time.Millisecond))
		}
	}
}

// runFault runs one fault and returns once it is over.
func (r *chaosRun) runFault(t *testing.T, rng *rand.Rand, name string, stall bool) {
	t.Helper()
	if stall && !strings.HasPrefix(name, "instance-stop") { // those say when their stall begins
		r.stall.Store(&name)
	}
	defer r.stall.Store(nil)
	switch name {
	case "instance-kill":
		r.killAndRestart(t, name, rng.IntN(2))
	case "kill-all":
		r.killAll(t)
	case "instance-stop":
		r.stopInstance(t, name, rng.IntN(2), chaosStallFor)
	case "instance-stop-long":
		r.stopInstance(t, name, rng.IntN(2), chaosLongStall)
	case "redis-stop":
		end := r.tl.begin(name)
		pid, err := redisPid(r.rds.Port)
		if err != nil {
			t.Fatalf("redis-stop: %v", err)
		}
		stopFor(t, name, pid, chaosStoreStall)
		end()
	case "redis-restart-empty":
		end := r.tl.begin(name)
		r.rds.Stop()
		time.Sleep(chaosStoreDown)
		if err := r.rds.Restart(); err != nil {
			t.Fatalf("redis-restart-empty: %v", err)
		}
		end()
	case "pg-pause":
		end := r.tl.begin(name)
		pgtest.Pause(t)
		time.Sleep(chaosStoreStall)
		pgtest.Resume(t)
		end()
	case "pg-crash":
		end := r.tl.begin(name)
		killed, err := crashPostgres(r.dbURL)
		if err != nil {
			t.Fatalf("pg-crash: %v", err)
		}
		took, err := waitForDatabase(r.dbURL, 60*time.Second)
		if err != nil {
			t.Fatalf("pg-crash: PostgreSQL did not recover within %v of SIGKILL of %d of its processes: %v", took, len(killed), err)
		}
		end()
		u, _ := url.Parse(r.dbURL)
		r.tl.note(name, "%v into the load, SIGKILL of %s; connections taken again %v later",
			(time.Since(r.began) - took).Round(100*time.Millisecond), describeKilled(killed, strings.TrimPrefix(u.Path, "/")), took.Round(10*time.Millisecond))
	case "pg-restart":
		end := r.tl.begin(name)
		pgtest.Stop(t)
		time.Sleep(chaosStoreDown)
		pgtest.Start(t)
		end()
	default:
		t.Fatalf("the fault schedule names a fault it has no code for: %q", name)
	}
}

// stopFor stops pid with SIGSTOP for d, then lets it go on (SIGCONT), whatever happens between.
func stopFor(t *testing.T, what string, pid int, d time.Duration) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("%s: SIGSTOP of %d: %v", what, pid, err)
	}
	defer func() {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s: SIGCONT of %d: %v", what, pid, err)
		}
	}()
	time.Sleep(d)
}

// busy waits up to chaosBusyWait for a client request to be under way at instance i, so that
// a fault of the instance lands on keys it holds, and returns how many are.
func (r *chaosRun) busy(i int) int64 {
	const chaosBusyWait = 3 * time.Second
	until := time.Now().Add(chaosBusyWait)
	for r.at[i].Load() == 0 && time.Now().Before(until) {
		time.Sleep(2 * time.Millisecond)
	}
	return r.at[i].Load()
}

// stopInstance stops instance i for d, longer than the hold on every key it holds, in the middle
// of refunds: it starts refund races of a few succeeded charges through both instances and
// stops i once one of them is under way at it (or after chaosStopRefundWait).
func (r *chaosRun) stopInstance(t *testing.T, name string, i int, d time.Duration) {
	t.Helper()
	in := r.fleet.get(i)
	races := r.book.unrefunded(chaosStopRaces)
	for k, ch := range races {
		r.refunders.Go(func() { r.refundRace(r.loadCtx, ch, (i+k)%2) })
	}
	until := time.Now().Add(chaosStopRefundWait)
	for r.refundsAt[i].Load() == 0 && time.Now().Before(until) {
		time.Sleep(time.Millisecond)
	}
	refunds := r.refundsAt[i].Load()
	inFlight := r.busy(i)
	r.stall.Store(&name)
	end := r.tl.begin(name)
	stopFor(t, name, in.proc.cmd.Process.Pid, d)
	end()
	r.tl.note(name, "%s stopped %v into the load for %v with %d client requests in flight at it, %d of them refunds; %d charges' refunds racing",
		in.proc.name, (time.Since(r.began) - d).Round(100*time.Millisecond), d, inFlight, refunds, len(races))
}

// kill ends the instance with SIGKILL: no drain, nothing stored that was not already; what it
// had in flight is lost as a crash loses it.
func (in *instance) kill(t *testing.T) {
	t.Helper()
	if err := in.proc.signal(syscall.SIGKILL); err != nil {
		t.Fatalf("killing %s: %v", in.proc.name, err)
	}
	if !in.proc.wait(stopGrace) {
		t.Fatalf("%s still running %v after SIGKILL", in.proc.name, stopGrace)
	}
	in.client.CloseIdleConnections()
	in.probeClient.CloseIdleConnections()
}

// restartKilled starts instance i again on its own configuration file, so on its own ports.
func (r *chaosRun) restartKilled(t *testing.T, i int, in *instance) {
	t.Helper()
	n := r.restarts.Add(1)
	name := fmt.Sprintf("%s-%d", chaosNames[i], n+1)
	again, err := servePayrouter(t, name, in.configPath, portOf(t, in.url), portOf(t, in.adminURL))
	if err != nil {
		t.Fatalf("%s restarted on its own ports after SIGKILL: %v", name, err)
	}
	chaosClient(again)
	r.fleet.set(i, again)
}

// killAndRestart kills instance i and, after chaosDowntime, starts it again.
func (r *chaosRun) killAndRestart(t *testing.T, fault string, i int) {
	t.Helper()
	in := r.fleet.get(i)
	inFlight := r.busy(i)
	end := r.tl.begin(fault)
	in.kill(t)
	killed := time.Now()
	time.Sleep(chaosDowntime)
	r.restartKilled(t, i, in)
	end()
	r.tl.note(fault, "%s killed %v into the load with %d client requests in flight at it; serving again %v later",
		in.proc.name, killed.Sub(r.began).Round(100*time.Millisecond), inFlight, time.Since(killed).Round(100*time.Millisecond))
}

// killAll kills both instances at once, once a refund is outstanding (a refund request in flight
// or one told queued and not yet seen applied) and a charge request is in flight, or after
// chaosOutstandingWait; then starts both again.
func (r *chaosRun) killAll(t *testing.T) {
	t.Helper()
	const chaosOutstandingWait = 5 * time.Second
	waitUntil := time.Now().Add(chaosOutstandingWait)
	for time.Now().Before(waitUntil) {
		if r.chargesInFlight.Load() > 0 && (r.refundsInFlight.Load() > 0 || r.book.refundsQueuedOpen() > 0) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	charges, refunds, queued, processing := r.chargesInFlight.Load(), r.refundsInFlight.Load(), r.book.refundsQueuedOpen(), len(r.book.processing())
	ins := []*instance{r.fleet.get(0), r.fleet.get(1)}
	end := r.tl.begin("kill-all")
	for _, in := range ins {
		if err := in.proc.signal(syscall.SIGKILL); err != nil {
			t.Fatalf("kill-all: killing %s: %v", in.proc.name, err)
		}
	}
	for _, in := range ins {
		if !in.proc.wait(stopGrace) {
			t.Fatalf("kill-all: %s still running %v after SIGKILL", in.proc.name, stopGrace)
		}
		in.client.CloseIdleConnections()
		in.probeClient.CloseIdleConnections()
	}
	killed := time.Now()
	time.Sleep(chaosDowntime)
	for i, in := range ins {
		r.restartKilled(t, i, in)
	}
	end()
	r.tl.note("kill-all", "killed %v into the load with %d charge and %d refund requests in flight, %d refunds told queued not yet applied, %d charges processing; both serving again %v later",
		killed.Sub(r.began).Round(100*time.Millisecond), charges, refunds, queued, processing, time.Since(killed).Round(100*time.Millisecond))
	if charges+refunds+int64(queued) == 0 {
		t.Logf("kill-all: nothing was outstanding when both instances were killed")
	}
}

// --- the processes behind the stores -------------------------------------------------------------

// procStat is what /proc/<pid>/stat says of a process: its parent and its command's name.
func procStat(pid int) (ppid int, comm string, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, "", err
	}
	s := string(b)
	open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || close < open {
		return 0, "", fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	fields := strings.Fields(s[close+1:])
	if len(fields) < 2 {
		return 0, "", fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	ppid, err = strconv.Atoi(fields[1])
	return ppid, s[open+1 : close], err
}

// pids lists every process's id.
func pids() []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []int
	for _, d := range dirs {
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// cmdline is a process's arguments.
func cmdline(pid int) []string {
	b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// redisPid finds the redis-server this test binary started on port (redistest starts it as a
// child of ours, and its process title names the port).
func redisPid(port int) (int, error) {
	me := os.Getpid()
	for _, pid := range pids() {
		ppid, comm, err := procStat(pid)
		if err != nil || ppid != me || comm != "redis-server" {
			continue
		}
		if strings.Contains(strings.Join(cmdline(pid), " "), strconv.Itoa(port)) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no redis-server child of pid %d on port %d", me, port)
}

// dbPort is the port of a postgres:// URL.
func dbPort(dbURL string) (int, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(u.Port())
}

// crashPostgres kills with SIGKILL every process of the PostgreSQL server on dbURL's port but its
// postmaster: the backends (mid-transaction, some), the checkpointer, the WAL writer. The
// postmaster takes that as a crash, as it does any server process dying by a signal: it ends
// every connection, reinitialises shared memory and replays the WAL before it takes
// connections again. What was committed (synchronous_commit on, see chaosDatabase) is kept.
func crashPostgres(dbURL string) (killed []string, err error) {
	port, err := dbPort(dbURL)
	if err != nil {
		return nil, err
	}
	// Another fault of the round may have the server starting or stopping (pg-restart), when its
	// postmaster has no server process yet or any more: ask again until one is there.
	deadline := time.Now().Add(15 * time.Second)
	for {
		postmasters := postmastersOn(port)
		if len(postmasters) > 0 {
			for _, pid := range pids() {
				if ppid, _, err := procStat(pid); err == nil && slices.Contains(postmasters, ppid) {
					title := strings.Join(cmdline(pid), " ")
					if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
						killed = append(killed, title)
					}
				}
			}
			if len(killed) > 0 {
				return killed, nil
			}
		}
		if time.Now().After(deadline) {
			if len(postmasters) == 0 {
				return nil, fmt.Errorf("no postmaster listening on port %d", port)
			}
			return nil, fmt.Errorf("the postmaster %v on port %d has no server process to kill", postmasters, port)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// postmastersOn are the pids of the PostgreSQL postmasters started with -p port: one, unless
// one of an earlier server of that port is still on its way out.
func postmastersOn(port int) (found []int) {
	for _, pid := range pids() {
		args := cmdline(pid)
		if len(args) == 0 || filepath.Base(args[0]) != "postgres" {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-p" && args[i+1] == strconv.Itoa(port) {
				found = append(found, pid)
			}
		}
	}
	return found
}

// describeKilled counts PostgreSQL's processes by what they were: the backends of the chaos
// database (payrouter's connections), and the server's own by name.
func describeKilled(titles []string, db string) string {
	backends := 0
	others := map[string]int{}
	for _, title := range titles {
		switch name := strings.TrimPrefix(title, "postgres: "); {
		case strings.Contains(name, " "+db+" "):
			backends++
		default:
			others[strings.Fields(name + " (no-title-yet)")[0]]++
		}
	}
	var parts []string
	for name, n := range others {
		parts = append(parts, fmt.Sprintf("%s %d", name, n))
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d backends of payrouter's database, %s", backends, strings.Join(parts, ", "))
}

// waitForDatabase waits until dbURL takes a connection and answers a query again.
func waitForDatabase(dbURL string, within time.Duration) (time.Duration, error) {
	began := time.Now()
	time.Sleep(50 * time.Millisecond) // the postmaster notices its children's deaths first
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, dbURL)
		if err == nil {
			var one int
			err = conn.QueryRow(ctx, "SELECT 1").Scan(&one)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return time.Since(began), nil
		}
		if time.Since(began) > within {
			return time.Since(began), err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// chaosDatabase is a database of its own for the chaos fleet, committing synchronously as
// docs/postgresql.md asks of production: pgtest's server runs with synchronous_commit off for
// speed, which after a crash may lose the last commits it acknowledged, and losing acknowledged
// writes is a fault of the set-up, not of payrouter. (The server's fsync stays off: the machine
// does not crash, only PostgreSQL's processes, and what they wrote is in the kernel's page cache.)
func chaosDatabase(t *testing.T) string {
	t.Helper()
	dbURL := pgtest.NewDatabase(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("chaos database: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" SET synchronous_commit = on"); err != nil {
		t.Fatalf("chaos database: synchronous_commit on: %v", err)
	}
	return dbURL
}

// --- the proxy -----------------------------------------------------------------------------------

// chaosProxy is a reverse proxy in the test process between payrouter and one simulated gateway,
// as a service mesh's sidecar or an API gateway would be: it forwards every call, and replaces
// the gateway's answer to a share of the charges with its own 503 text/plain, after the gateway
// processed them; when the gateway's connection fails it answers that 503 too, as Envoy does.
type chaosProxy struct {
	srv      *httptest.Server
	share    float64
	isCharge func(*http.Request) bool

	mu  sync.Mutex
	rng *rand.Rand

	forwarded, replaced, upstreamFailed atomic.Int64
	replacedBy                          sync.Map // upstream status → *atomic.Int64
}

// startChaosProxy starts a proxy to g; isCharge tells its charge calls.
func startChaosProxy(t *testing.T, g *sim, share float64, seed uint64, isCharge func(*http.Request) bool) *chaosProxy {
	t.Helper()
	target, err := url.Parse(g.url)
	if err != nil {
		t.Fatal(err)
	}
	p := &chaosProxy{share: share, isCharge: isCharge, rng: rand.New(rand.NewPCG(seed, 3000))}
	transport := newTransport(128)
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: transport,
		ModifyResponse: func(resp *http.Response) error {
			if !p.isCharge(resp.Request) {
				return nil
			}
			p.forwarded.Add(1)
			if !p.draw() {
				return nil
			}
			// The gateway answered, so it processed the call (or said why not): its answer is
			// read and dropped, as a proxy whose downstream half failed would.
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			p.replaced.Add(1)
			n, _ := p.replacedBy.LoadOrStore(resp.StatusCode, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			resp.StatusCode, resp.Status = http.StatusServiceUnavailable, "503 Service Unavailable"
			resp.Header = http.Header{"Content-Type": {"text/plain"}, "Content-Length": {strconv.Itoa(len(envoyResetBody))}}
			resp.ContentLength = int64(len(envoyResetBody))
			resp.Body = io.NopCloser(strings.NewReader(envoyResetBody))
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if req.Context().Err() != nil {
				return // payrouter gave up on the call first
			}
			p.upstreamFailed.Add(1)
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, envoyResetBody)
		},
	}
	p.srv = httptest.NewServer(rp)
	t.Cleanup(func() {
		p.srv.CloseClientConnections()
		p.srv.Close()
		transport.CloseIdleConnections()
	})
	return p
}

func (p *chaosProxy) draw() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rng.Float64() < p.share
}

func (p *chaosProxy) report() string {
	var by []string
	p.replacedBy.Range(func(k, v any) bool {
		by = append(by, fmt.Sprintf("%d: %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	sort.Strings(by)
	return fmt.Sprintf("%d paywell charges forwarded, %d answers replaced by its 503 (the gateway had answered %s), %d upstream failures answered 503",
		p.forwarded.Load(), p.replaced.Load(), strings.Join(by, ", "), p.upstreamFailed.Load())
}

// paywellCharge tells paywell's charge calls (POST /v1/charges) from its look-ups and operations.
func paywellCharge(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Path == "/v1/charges"
}
