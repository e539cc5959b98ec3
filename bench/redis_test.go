package bench

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payrouter/payrouter/redisstore"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

// TestBenchRedisHealthyPath measures what sharing the state through Redis costs a charge when all
// is well: two payrouter processes side by side on the same simulators, with the same
// configuration but for state.redis_url, one keeping its state in memory (the embedded default)
// and one in a redis-server the test starts. They do the same work but for where the idempotency
// key and the charge are kept (and the fleet's background sync, which the Redis instance runs
// whether it is measured or not), so the ratio is the price of running more than one instance.
// The target is at least 0.9x the requests per second; it is printed, never asserted, since the
// machine is shared.
func TestBenchRedisHealthyPath(t *testing.T) {
	requireBench(t)
	rs := redistest.Start(t)
	s := startSims(t)
	memory := s.startPayrouter(t, "payrouter-memory", instanceOptions{}).payrouterCharge(http.StatusCreated)
	memory.Name = "memory"
	shared := s.startPayrouter(t, "payrouter-redis", instanceOptions{redisURL: rs.URL()}).payrouterCharge(http.StatusCreated)
	shared.Name = "redis"

	// One answer of each looked at in full; the measured ones are checked by status only.
	checkSucceededAtPaywell(t, memory)
	checkSucceededAtPaywell(t, shared)
	sent, sentShared := 2, 1

	tab := newTable(t.Output(), "(c) healthy path on the shared store: POST /charge through payrouter with state.redis_url (a local redis-server) vs the same payrouter keeping its state in memory", true)
	var rates []string
	for _, workers := range concurrencies {
		base, subject := NewLoad(memory, workers), NewLoad(shared, workers)
		c := Alternate(t.Context(), base, subject, warmUp, roundTime, pairs)
		base.Close()
		subject.Close()
		checkSamples(t, memory, append(c.Base, c.WarmBase)...)
		checkSamples(t, shared, append(c.Subject, c.WarmSubject)...)
		sent += Merge(append(append(append(c.Base, c.Subject...), c.WarmBase), c.WarmSubject)...).Requests
		sentShared += Merge(append(c.Subject, c.WarmSubject)...).Requests
		tab.add(workers, "memory", "redis", c)
		rates = append(rates, fmt.Sprintf("%.2fx with %s", Merge(c.Subject...).Rate()/Merge(c.Base...).Rate(), workersText(workers)))
	}
	tab.flush()
	fmt.Fprintf(t.Output(), "target: redis / memory req/s at least 0.90x; measured %s\n", strings.Join(rates, ", "))

	if t.Failed() {
		return
	}
	// Like for like: every charge was one call to paywell, and the Redis instance's charges are
	// in Redis, not in a local fallback it would have switched to had Redis failed it.
	if n := s.simRequests(t, "paywell"); n != sent {
		t.Errorf("paywell received %d API calls for %d charges; want one each", n, sent)
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rdb.Close()
	stored := 0
	iter := rdb.Scan(t.Context(), 0, redisstore.DefaultPrefix+"charge:*", 1000).Iterator()
	for iter.Next(t.Context()) {
		stored++
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("counting the charges in Redis: %v", err)
	}
	if stored != sentShared {
		t.Errorf("Redis holds %d charges; the Redis instance took %d", stored, sentShared)
	}
}

// How long TestBenchRedisCommands counts: idle for long enough that the once-a-second background
// calls average out; loaded as long as a measured round; settle covers the fleet's report of
// successes, sent every 100 ms, so that the last charges' share of it is counted.
const (
	idleTime  = 4 * time.Second
	countTime = 2 * time.Second
	settle    = 300 * time.Millisecond
)

// TestBenchRedisCommands counts the Redis commands a charge costs on the healthy path, by
// command, from the server's own INFO commandstats read before and after a load. An instance
// also calls Redis when nothing happens (the state store's health ping, the fleet's refresh of
// every breaker, the subscription's keep-alive ping), so those are counted first, on the idle
// instance, and their rate over the loaded interval is taken off, so that they do not inflate the
// per-charge figure. The counter's own INFO calls are left out (payrouter sends none). Last, the
// time of one round trip (PING) to the same server, to read the counts against.
func TestBenchRedisCommands(t *testing.T) {
	requireBench(t)
	rs := redistest.Start(t)
	s := startSims(t)
	target := s.startPayrouter(t, "payrouter-redis", instanceOptions{redisURL: rs.URL()}).payrouterCharge(http.StatusCreated)
	target.Name = "redis"
	checkSucceededAtPaywell(t, target)
	counter := newCommandCounter(t, rs.Addr())

	// Warm up at the highest concurrency: the instance's connection pool grows to what the loads
	// need, and its scripts get loaded, now rather than while counting.
	warm := NewLoad(target, slices.Max(concurrencies))
	checkSamples(t, target, warm.Run(t.Context(), warmUp))
	warm.Close()

	idle := counter.during(t, func() { time.Sleep(idleTime) })
	type loaded struct {
		workers  int
		charges  int
		commands commandCount
	}
	var runs []loaded
	for _, workers := range concurrencies {
		l := NewLoad(target, workers)
		var sm Sample
		cmds := counter.during(t, func() {
			sm = l.Run(t.Context(), countTime)
			time.Sleep(settle)
		})
		l.Close()
		checkSamples(t, target, sm)
		runs = append(runs, loaded{workers, sm.Requests, cmds})
	}
	if t.Failed() {
		return
	}

	w := t.Output()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "(d) Redis commands per charge on the healthy path: INFO commandstats of the redis-server before and after each load, less the idle instance's background commands over the same time")
	fmt.Fprintf(w, "idle instance (no traffic, %s): %.1f commands/s: %s\n", idle.elapsed.Round(time.Millisecond), idle.total()/idle.elapsed.Seconds(), idle.rates())
	fmt.Fprintln(w, "Redis counts each command a script or a transaction (multi ... exec) runs, so there are more commands than round trips: a script sent alone (evalsha) or a transaction, which may hold a script (eval), is one round trip")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "workers\tcharges\tcommands\tof them background\tper charge\tround trips per charge")
	for _, r := range runs {
		background := idle.total() / idle.elapsed.Seconds() * r.commands.elapsed.Seconds()
		// payrouter sends scripts alone with EVALSHA, and EVAL only inside transactions.
		batches := perCharge(idle, r.commands, r.charges, "evalsha") + perCharge(idle, r.commands, r.charges, "exec")
		fmt.Fprintf(tw, "%d\t%d\t%.0f\t%.0f\t%.2f\t%.2f\n", r.workers, r.charges, r.commands.total(), background,
			(r.commands.total()-background)/float64(r.charges), batches)
	}
	tw.Flush()
	header := "command\tidle/s"
	for _, r := range runs {
		header += fmt.Sprintf("\tper charge (%s)", workersText(r.workers))
	}
	fmt.Fprintln(tw, header)
	names := maps.Clone(idle.calls)
	for _, r := range runs {
		maps.Copy(names, r.commands.calls)
	}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		row := fmt.Sprintf("%s\t%.1f", n, float64(idle.calls[n])/idle.elapsed.Seconds())
		for _, r := range runs {
			row += fmt.Sprintf("\t%.2f", perCharge(idle, r.commands, r.charges, n))
		}
		fmt.Fprintln(tw, row)
	}
	tw.Flush()

	// What one round trip costs on this machine, to read the figures above against: measured
	// last, so that its PINGs fall in no count.
	rtt := counter.roundTrips(t, 1000)
	fmt.Fprintf(w, "one round trip to this redis-server (PING from Go, one connection, %d in a row): p50 %s, p99 %s\n",
		len(rtt.Latencies), formatDuration(rtt.Quantile(0.5)), formatDuration(rtt.Quantile(0.99)))
}

// perCharge is the calls of command name in loaded, less what the idle instance ran at its rate
// over the same time, per charge.
func perCharge(idle, loaded commandCount, charges int, name string) float64 {
	background := float64(idle.calls[name]) / idle.elapsed.Seconds() * loaded.elapsed.Seconds()
	return (float64(loaded.calls[name]) - background) / float64(charges)
}

// workersText is "1 worker" or "16 workers".
func workersText(n int) string {
	if n == 1 {
		return "1 worker"
	}
	return strconv.Itoa(n) + " workers"
}

// commandCounter reads a redis-server's INFO commandstats over a connection of its own.
type commandCounter struct {
	rdb *redis.Client
}

func newCommandCounter(t *testing.T, addr string) *commandCounter {
	t.Helper()
	// One connection, opened now: its hand-shake commands (HELLO, CLIENT SETINFO) must not fall
	// inside a count.
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	c := &commandCounter{rdb: rdb}
	c.snapshot(t)
	return c
}

// snapshot reads the calls of every command so far, the counter's own INFO calls left out.
func (c *commandCounter) snapshot(t *testing.T) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	info, err := c.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	calls, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	delete(calls, "info")
	return calls
}

// roundTrips times n PINGs one after the other.
func (c *commandCounter) roundTrips(t *testing.T, n int) Sample {
	t.Helper()
	var s Sample
	for range n {
		start := time.Now()
		if err := c.rdb.Ping(t.Context()).Err(); err != nil {
			t.Fatalf("PING: %v", err)
		}
		s.Latencies = append(s.Latencies, time.Since(start))
	}
	slices.Sort(s.Latencies)
	return s
}

// commandCount is the commands a redis-server ran over some time, by command.
type commandCount struct {
	calls   map[string]int64
	elapsed time.Duration
}

// during counts the commands the server runs while fn runs.
func (c *commandCounter) during(t *testing.T, fn func()) commandCount {
	t.Helper()
	before := c.snapshot(t)
	start := time.Now()
	fn()
	elapsed := time.Since(start)
	after := c.snapshot(t)
	cc := commandCount{calls: map[string]int64{}, elapsed: elapsed}
	for n, v := range after {
		if d := v - before[n]; d != 0 {
			cc.calls[n] = d
		}
	}
	return cc
}

func (cc commandCount) total() float64 {
	var n int64
	for _, v := range cc.calls {
		n += v
	}
	return float64(n)
}

// rates lists the commands per second, most frequent first.
func (cc commandCount) rates() string {
	names := slices.Collect(maps.Keys(cc.calls))
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(cc.calls[b], cc.calls[a]), strings.Compare(a, b))
	})
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.1f/s", n, float64(cc.calls[n])/cc.elapsed.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// parseCommandStats reads the calls of each command from INFO commandstats, whose lines are
// "cmdstat_<command>:calls=<n>,usec=...". A subcommand is named as Redis names it
// ("client|setinfo").
func parseCommandStats(info string) (map[string]int64, error) {
	calls := map[string]int64{}
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		name, stats, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		found := false
		for field := range strings.SplitSeq(stats, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("INFO commandstats: %q: %v", line, err)
				}
				calls[name] = n
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("INFO commandstats: no calls= in %q", line)
		}
	}
	return calls, nil
}

// The parser runs always: a wrong count would silently falsify (d).
func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=12,usec=340,usec_per_call=28.33,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setinfo:calls=2,usec=3,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_set:calls=7,usec=9,usec_per_call=1.29,rejected_calls=0,failed_calls=0\r\n"
	got, err := parseCommandStats(info)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"evalsha": 12, "client|setinfo": 2, "set": 7}
	if !maps.Equal(got, want) {
		t.Errorf("parseCommandStats = %v, want %v", got, want)
	}
	if _, err := parseCommandStats("cmdstat_get:usec=1\r\n"); err == nil {
		t.Error("a line without calls= was accepted")
	}
}
