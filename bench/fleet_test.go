package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/payrouter/payrouter/pgstore"
	"github.com/payrouter/payrouter/pgstore/pgtest"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

// fleetLoad is Loads run together, on different instances, as one load: its Sample pools their
// requests and latencies over the time the slowest took.
type fleetLoad []*Load

// Run runs every Load of f at once for about d.
func (f fleetLoad) Run(ctx context.Context, d time.Duration) Sample {
	samples := make([]Sample, len(f))
	var wg sync.WaitGroup
	for i, l := range f {
		wg.Go(func() { samples[i] = l.Run(ctx, d) })
	}
	wg.Wait()
	m := Merge(samples...)
	m.Elapsed = 0
	for _, s := range samples {
		m.Elapsed = max(m.Elapsed, s.Elapsed)
	}
	return m
}

// Close closes every Load of f.
func (f fleetLoad) Close() {
	for _, l := range f {
		l.Close()
	}
}

// TestBenchFleet measures two instances against one (issue 21, item 5): payrouter processes A and
// B sharing one PostgreSQL database (pgtest's) and one Redis (breakers), as a fleet runs; the same
// scaleWorkers workers of POST /charge on the healthy path all sent to A, against half to A and
// half to B, alternated in one run. Then, with half the workers on each, what a charge costs the
// shared parts, from their own statistics less the idle fleet's background at its rate:
// transactions committed per charge (pg_stat_database.xact_commit of the fleet's database), WAL
// bytes per charge (pg_stat_wal, the whole server's), Redis commands per charge (INFO
// commandstats, every command but INFO itself), and each instance's connections to the database
// (pg_stat_activity, by the application_name each instance's URL sets). A fleet of twenty is
// read from these figures in (docs/postgresql.md, Twenty instances, on paper).
func TestBenchFleet(t *testing.T) {
	requireBench(t)
	rs := redistest.Start(t)
	adminURL := pgtest.Start(t)
	dbURL := pgtest.NewDatabase(t)
	s := startSims(t)
	in := map[string]*instance{}
	for _, name := range []string{"a", "b"} {
		o := instanceOptions{databaseURL: withApplicationName(t, dbURL, "payrouter-"+name), redisURL: rs.URL()}
		in[name] = s.startPayrouter(t, "payrouter-"+name, o)
	}
	target := func(name string) Target {
		tg := in[name].payrouterCharge(http.StatusCreated)
		tg.Name = "payrouter " + strings.ToUpper(name)
		checkSucceededAtPaywell(t, tg)
		return tg
	}
	a, b := target("a"), target("b")

	one := fleetLoad{NewLoad(a, scaleWorkers)}
	two := fleetLoad{NewLoad(a, scaleWorkers/2), NewLoad(b, scaleWorkers/2)}
	c := Alternate(t.Context(), one, two, warmUp, roundTime, pairs)
	one.Close()
	two.Close()
	checkSamples(t, a, append(c.Base, c.WarmBase)...)
	checkSamples(t, a, append(c.Subject, c.WarmSubject)...)

	// What a charge costs the shared parts, counted over a load of the two against the idle
	// fleet over the same time.
	db := strings.TrimPrefix(mustParseURL(t, dbURL).Path, "/")
	stats := connect(t, adminURL)
	defer stats.Close(context.Background())
	ropts, err := redis.ParseURL(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(ropts)
	defer rc.Close()
	snap := func() fleetCounts { return readFleetCounts(t, stats, rc, db) }
	// A backend reports its transactions to pg_stat_database at most once a second, and one
	// that then goes idle only 10 s later (xactSettle): each count waits that long after its
	// run, and the first waits as long before, for the comparison's transactions, so that each
	// count holds only its own. The settle is background time too: each count's span is from
	// snapshot to snapshot.
	time.Sleep(xactSettle)
	count := func(run func() int) (fleetCounts, int, time.Duration) {
		before, start := snap(), time.Now()
		n := run()
		time.Sleep(xactSettle)
		return snap().minus(before), n, time.Since(start)
	}
	idle, _, idleTime := count(func() int { time.Sleep(countTime); return 0 })
	counts := fleetLoad{NewLoad(a, scaleWorkers/2), NewLoad(b, scaleWorkers/2)}
	var sm Sample
	loaded, charges, loadTime := count(func() int { sm = counts.Run(t.Context(), countTime); return sm.Requests })
	counts.Close()
	checkSamples(t, a, sm)
	conns := connectionsByApplication(t, stats, db)
	if t.Failed() {
		return
	}

	w := t.Output()
	tab := newTable(w, fmt.Sprintf("(i) two instances against one: POST /charge on the healthy path, %d workers all on A vs half on A and half on B, both on one PostgreSQL database (pgtest's: no fsync, no synchronous commit) and one Redis, all on the same %d CPUs", scaleWorkers, runtime.NumCPU()), false)
	tab.add(scaleWorkers, "one instance", "two instances", c)
	tab.flush()
	fmt.Fprintf(w, "two / one instance charges/s: %.2fx\n", Merge(c.Subject...).Rate()/Merge(c.Base...).Rate())
	per := func(v func(fleetCounts) float64) float64 {
		return (v(loaded) - v(idle)/idleTime.Seconds()*loadTime.Seconds()) / float64(charges)
	}
	fmt.Fprintf(w, "per charge (%d charges in %s through both, %d workers each; counted over %s, less the idle fleet's background at its rate): %.2f transactions committed (pg_stat_database.xact_commit), %.0f WAL bytes (pg_stat_wal, the server's), %.2f Redis commands (INFO commandstats, with the background: %s)\n",
		charges, sm.Elapsed.Round(time.Millisecond), scaleWorkers/2, loadTime.Round(time.Millisecond),
		per(func(f fleetCounts) float64 { return float64(f.commits) }),
		per(func(f fleetCounts) float64 { return float64(f.walBytes) }),
		per(func(f fleetCounts) float64 { return float64(f.redisCalls()) }), loaded.redisSummary())
	fmt.Fprintf(w, "idle fleet of two, per second (over %s): %.1f transactions committed, %.1f Redis commands (in all: %s)\n",
		idleTime.Round(time.Millisecond), float64(idle.commits)/idleTime.Seconds(), float64(idle.redisCalls())/idleTime.Seconds(), idle.redisSummary())
	var cs []string
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range conns {
			if !yield(k) {
				return
			}
		}
	}) {
		cs = append(cs, fmt.Sprintf("%s %d", name, conns[name]))
	}
	fmt.Fprintf(w, "connections to the database after the loads (pg_stat_activity): %s; each instance's pool may grow to %d (pool_max_conns' default)\n",
		strings.Join(cs, ", "), pgstore.DefaultMaxConns)
}

// fleetCounts is what the shared parts had counted at one moment, or between two.
type fleetCounts struct {
	commits, walBytes int64
	// redis is the calls of each command, by name.
	redis map[string]int64
}

func (f fleetCounts) minus(g fleetCounts) fleetCounts {
	d := fleetCounts{commits: f.commits - g.commits, walBytes: f.walBytes - g.walBytes, redis: map[string]int64{}}
	for k, v := range f.redis {
		if n := v - g.redis[k]; n != 0 {
			d.redis[k] = n
		}
	}
	return d
}

// redisCalls is every command counted but INFO, the counter's own.
func (f fleetCounts) redisCalls() int64 {
	var n int64
	for k, v := range f.redis {
		if k != "info" {
			n += v
		}
	}
	return n
}

// redisSummary lists the commands counted, by name, most first.
func (f fleetCounts) redisSummary() string {
	var names []string
	for k := range f.redis {
		if k != "info" {
			names = append(names, k)
		}
	}
	slices.SortFunc(names, func(x, y string) int { return int(f.redis[y] - f.redis[x]) })
	var out []string
	for _, k := range names {
		out = append(out, fmt.Sprintf("%s %d", k, f.redis[k]))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// readFleetCounts reads the transactions committed in database db and the server's WAL bytes
// (over stats, a connection to another database), and Redis's calls by command (rc).
func readFleetCounts(t *testing.T, stats *pgx.Conn, rc *redis.Client, db string) fleetCounts {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	f := fleetCounts{redis: map[string]int64{}}
	if err := stats.QueryRow(ctx, `SELECT xact_commit, (SELECT wal_bytes::bigint FROM pg_stat_wal) FROM pg_stat_database WHERE datname = $1`, db).Scan(&f.commits, &f.walBytes); err != nil {
		t.Fatalf("reading pg_stat_database: %v", err)
	}
	info, err := rc.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	// Lines of the form cmdstat_get:calls=12,usec=...
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for field := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				f.redis[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return f
}

// connectionsByApplication counts database db's connections by application_name.
func connectionsByApplication(t *testing.T, stats *pgx.Conn, db string) map[string]int {
	t.Helper()
	rows, err := stats.Query(t.Context(), `SELECT application_name, count(*)::int FROM pg_stat_activity WHERE datname = $1 GROUP BY 1`, db)
	if err != nil {
		t.Fatalf("reading pg_stat_activity: %v", err)
	}
	out := map[string]int{}
	var name string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&name, &n}, func() error { out[name] = n; return nil }); err != nil {
		t.Fatalf("reading pg_stat_activity: %v", err)
	}
	return out
}

// withApplicationName is the database URL u with application_name set to name: the instance's
// connections are told apart by it in pg_stat_activity.
func withApplicationName(t *testing.T, u, name string) string {
	t.Helper()
	p := mustParseURL(t, u)
	q := p.Query()
	q.Set("application_name", name)
	p.RawQuery = q.Encode()
	return p.String()
}

func mustParseURL(t *testing.T, u string) *url.URL {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatalf("the database URL %q: %v", u, err)
	}
	return p
}
