package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrouter/payrouter/pgstore/pgtest"
)

// How the database benchmarks count: each load runs as long as a measured round, then settle
// passes before the statistics are read, so that the last requests' statements are in them. The
// idle instance is counted over the same length of time, for its background statements.
const (
	countTime = 2 * time.Second
	// settle is short with pg_stat_statements, which counts a statement as it ends, before its
	// answer reaches the client: nothing is late but what a server sends after its answer.
	settle = 300 * time.Millisecond
	// xactSettle is the settle without it: a backend reports its transactions to
	// pg_stat_database at most once a second, and one that then goes idle only 10 s later
	// (PostgreSQL's PGSTAT_IDLE_INTERVAL).
	xactSettle = 11 * time.Second
)

// statementsExtension is PostgreSQL's own statement statistics (contrib, in Debian's postgresql
// package): calls and WAL of every statement, by database, counted as each one ends.
const statementsExtension = "pg_stat_statements"

// statementCounter counts what a PostgreSQL server ran in one database, from the server's own
// statistics: black-box, whatever client sent it. It reads them over a connection of its own to
// another database of the same server, so that its own queries fall in no count.
type statementCounter struct {
	conn *pgx.Conn
	// db is the name of the database counted.
	db string
	// perStatement is true when pg_stat_statements is loaded: counts are of statements, by
	// statement, with their WAL. Otherwise they are transactions (pg_stat_database), which for
	// payrouter's single-statement calls is the same number, but read less promptly (xactSettle)
	// and with nothing to say which statements they were.
	perStatement bool
	settle       time.Duration
}

// countedDatabase creates a database of the test's own on pgtest's server and returns its URL and
// a counter of it. It loads pg_stat_statements into the server when the server has the extension
// but not loaded: pgtest starts PostgreSQL without shared_preload_libraries, so the first time
// this sets it with ALTER SYSTEM and restarts the server (pgtest.Stop, pgtest.Start), before any
// instance is connected. Without the extension it counts transactions.
func countedDatabase(t *testing.T) (string, *statementCounter) {
	t.Helper()
	admin := pgtest.Start(t)
	conn := connect(t, admin)
	perStatement, err := loadStatements(t.Context(), conn)
	if err != nil {
		t.Fatal(err)
	}
	if perStatement == restartNeeded {
		conn.Close(t.Context())
		pgtest.Stop(t)
		pgtest.Start(t)
		conn = connect(t, admin)
		if perStatement, err = loadStatements(t.Context(), conn); err != nil {
			t.Fatal(err)
		}
		if perStatement == restartNeeded {
			t.Fatalf("%s still not loaded after setting shared_preload_libraries and restarting PostgreSQL", statementsExtension)
		}
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	dbURL := pgtest.NewDatabase(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest's database URL %q: %v", dbURL, err)
	}
	c := &statementCounter{conn: conn, db: strings.TrimPrefix(u.Path, "/"), perStatement: perStatement == loaded, settle: settle}
	if !c.perStatement {
		c.settle = xactSettle
		t.Logf("%s is not installed: counting transactions (pg_stat_database), each count waiting %s", statementsExtension, xactSettle)
	}
	return dbURL, c
}

// What loadStatements found.
const (
	loaded = iota
	notInstalled
	restartNeeded
)

// loadStatements creates pg_stat_statements in conn's database when the server has it loaded;
// when the server has it but has not loaded it, it adds it to shared_preload_libraries, which
// takes a restart.
func loadStatements(ctx context.Context, conn *pgx.Conn) (int, error) {
	var available bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = $1)`, statementsExtension).Scan(&available); err != nil {
		return 0, fmt.Errorf("looking for %s: %w", statementsExtension, err)
	}
	if !available {
		return notInstalled, nil
	}
	var preload string
	if err := conn.QueryRow(ctx, `SELECT current_setting('shared_preload_libraries')`).Scan(&preload); err != nil {
		return 0, fmt.Errorf("reading shared_preload_libraries: %w", err)
	}
	var libs []string
	for l := range strings.SplitSeq(preload, ",") {
		if l = strings.Trim(strings.TrimSpace(l), `"`); l != "" {
			libs = append(libs, l)
		}
	}
	if !slices.Contains(libs, statementsExtension) {
		libs = append(libs, statementsExtension)
		var quoted []string
		for _, l := range libs {
			quoted = append(quoted, "'"+strings.ReplaceAll(l, "'", "''")+"'")
		}
		if _, err := conn.Exec(ctx, "ALTER SYSTEM SET shared_preload_libraries = "+strings.Join(quoted, ", ")); err != nil {
			return 0, fmt.Errorf("setting shared_preload_libraries: %w", err)
		}
		return restartNeeded, nil
	}
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS "+statementsExtension); err != nil {
		return 0, fmt.Errorf("creating %s: %w", statementsExtension, err)
	}
	return loaded, nil
}

// connect opens one connection to url, failing the test if it cannot.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connecting to the test's PostgreSQL: %v", err)
	}
	return conn
}

// statementCount is what the database ran over some time, by statement (statementName).
type statementCount struct {
	calls    map[string]int64
	walBytes map[string]int64
	elapsed  time.Duration
	// commits is the transactions that wrote (were given a transaction id: each writes a commit
	// record, and with synchronous_commit on waits until the WAL holding it is flushed);
	// serverWAL the WAL the whole server wrote (its insert position moved by), checkpoints' full
	// page images included. Both are read at once from the server's shared state, unlike
	// pg_stat_database and pg_stat_wal, which a busy backend reports at most once a second and
	// an idle one up to 10 s late.
	commits, serverWAL int64
}

// serverSnapshot reads the next transaction id the server will hand out and its WAL insert
// position. Reading them assigns no id and writes nothing.
func (c *statementCounter) serverSnapshot(t *testing.T) (nextXid, walPos int64) {
	t.Helper()
	if err := c.conn.QueryRow(t.Context(), `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&nextXid, &walPos); err != nil {
		t.Fatalf("reading the next transaction id and the WAL position: %v", err)
	}
	return nextXid, walPos
}

// snapshot reads the calls and WAL bytes of every statement the database has run so far.
func (c *statementCounter) snapshot(t *testing.T) (calls, walBytes map[string]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	calls, walBytes = map[string]int64{}, map[string]int64{}
	if !c.perStatement {
		var n int64
		if err := c.conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, c.db).Scan(&n); err != nil {
			t.Fatalf("reading pg_stat_database: %v", err)
		}
		calls[transactions] = n
		return calls, walBytes
	}
	rows, err := c.conn.Query(ctx, `
SELECT s.query, s.calls, s.wal_bytes::bigint
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = $1`, c.db)
	if err != nil {
		t.Fatalf("reading pg_stat_statements: %v", err)
	}
	var query string
	var n, wal int64
	if _, err := pgx.ForEachRow(rows, []any{&query, &n, &wal}, func() error {
		name := statementName(query)
		calls[name] += n
		walBytes[name] += wal
		return nil
	}); err != nil {
		t.Fatalf("reading pg_stat_statements: %v", err)
	}
	return calls, walBytes
}

// transactions names the one count there is without pg_stat_statements.
const transactions = "transactions (pg_stat_database: pg_stat_statements not installed)"

// during counts what the database runs while fn runs and for the settle after it.
func (c *statementCounter) during(t *testing.T, fn func()) statementCount {
	t.Helper()
	calls0, wal0 := c.snapshot(t)
	xid0, pos0 := c.serverSnapshot(t)
	start := time.Now()
	fn()
	time.Sleep(c.settle)
	elapsed := time.Since(start)
	xid1, pos1 := c.serverSnapshot(t)
	calls1, wal1 := c.snapshot(t)
	sc := statementCount{calls: map[string]int64{}, walBytes: map[string]int64{}, elapsed: elapsed,
		commits: xid1 - xid0, serverWAL: pos1 - pos0}
	for n, v := range calls1 {
		if d := v - calls0[n]; d != 0 {
			sc.calls[n] = d
		}
		if d := wal1[n] - wal0[n]; d != 0 {
			sc.walBytes[n] = d
		}
	}
	return sc
}

// setting is the server's value of a setting (SHOW).
func (c *statementCounter) setting(t *testing.T, name string) string {
	t.Helper()
	var v string
	if err := c.conn.QueryRow(t.Context(), `SELECT current_setting($1)`, name).Scan(&v); err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	return v
}

// durability says how durable the server's commits are: its fsync, synchronous_commit and
// full_page_writes.
func (c *statementCounter) durability(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("fsync %s, synchronous_commit %s, full_page_writes %s", c.setting(t, "fsync"), c.setting(t, "synchronous_commit"), c.setting(t, "full_page_writes"))
}

// connections is how many connections the database has now (pg_stat_activity).
func (c *statementCounter) connections(t *testing.T) int {
	t.Helper()
	var n int
	if err := c.conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, c.db).Scan(&n); err != nil {
		t.Fatalf("reading pg_stat_activity: %v", err)
	}
	return n
}

// roundTrips times n statements (SELECT 1) one after the other on the counter's connection, to
// read the counts against; they fall in no count (another database).
func (c *statementCounter) roundTrips(t *testing.T, n int) Sample {
	t.Helper()
	var s Sample
	var one int
	for range n {
		start := time.Now()
		if err := c.conn.QueryRow(t.Context(), `SELECT 1`).Scan(&one); err != nil {
			t.Fatalf("SELECT 1: %v", err)
		}
		s.Latencies = append(s.Latencies, time.Since(start))
	}
	slices.Sort(s.Latencies)
	return s
}

// statementNames name the statements of pgstore by a piece of their SQL, checked in order (the
// first that the statement's text, its white space collapsed, contains): what a reader of the
// counts needs is which store call a statement is. A statement none names is shown by its text.
var statementNames = []struct{ contains, name string }{
	{"WITH was AS", "claim the key and store the charge (ClaimCharge)"},
	{"WITH claimed AS", "claim the key (Claim)"},
	{"), done AS (", "complete the key and save the charge, with its events (CompleteCharge)"},
	{"WITH hold AS", "save the charge at its version, fenced by the hold, with its events (SaveCharge)"},
	{"WITH lc AS", "move a refund with its charge, task and events (ChangeRefund)"},
	{"SELECT charge, version FROM charges WHERE id", "read the charge (Charge)"},
	{"SELECT refund FROM refunds WHERE id", "read the refund (Refund)"},
	{"held_until > now() FROM idempotency_keys WHERE key = $1", "look the key up (Peek)"},
	{"DELETE FROM idempotency_keys WHERE key = $1 AND token", "release the key (Release)"},
	{"UPDATE idempotency_keys SET held_until", "renew the hold (Renew)"},
	{"UPDATE idempotency_keys", "complete the key (Complete)"},
	{"SELECT id, charge, version FROM charges WHERE status", "charges in a status (ChargesByStatus: the reconciler)"},
	{"UPDATE tasks t SET taken_by", "take tasks (Take: the worker)"},
	{"SELECT count(*) FROM tasks", "queue depth (QueueDepth: the worker)"},
	{"INSERT INTO tasks", "enqueue a task (Enqueue)"},
	{"DELETE FROM tasks", "acknowledge a task (Ack)"},
	{"FROM events e WHERE", "list events (Events)"},
	{"FROM events WHERE id", "find an event (Events, starting_after)"},
	{"DELETE FROM idempotency_keys", "retention sweep: expired keys"},
	{"DELETE FROM charges", "retention sweep: charges"},
	{"DELETE FROM refunds", "retention sweep: refunds"},
	{"DELETE FROM events", "retention sweep: events"},
}

// statementName is the name of a statement of pg_stat_statements by its text.
func statementName(query string) string {
	q := strings.Join(strings.Fields(query), " ")
	for _, n := range statementNames {
		if strings.Contains(q, n.contains) {
			return n.name
		}
	}
	if r := []rune(q); len(r) > 60 {
		q = string(r[:60]) + "..."
	}
	return "other: " + q
}

// statementCase is one load whose statements are counted.
type statementCase struct {
	name   string
	target Target
	// queues says that each request leaves a task in the durable queue, due later (a refund's:
	// once its request's budget and the gateway's timeout have passed), which the worker comes
	// back to then. Such a case is warmed up right before its own counts rather than with the
	// others, and must come after every case that does not queue, so that no count of another
	// case sees its warm-up's tasks come due (countStatements refuses another order). Its own
	// counts end before its warm-up's tasks are due: what the worker later does with them is
	// not in them (countLater).
	queues bool
}

// statementRun is what one counted load sent and what the database ran meanwhile.
type statementRun struct {
	name     string
	workers  int
	requests int
	count    statementCount
}

// countStatements counts the statements each case costs at each concurrency: first every case
// is warmed up at the highest concurrency (the instance's connection pool grows to what the
// loads need, and each connection prepares the statements, now rather than while counting),
// then the idle instance is counted for as long as a load, then each load. A case that queues is
// warmed up later, right before its own loads (statementCase.queues). sent is the requests of
// each case, warm-up included, for the caller's like-for-like checks.
func countStatements(t *testing.T, c *statementCounter, cases []statementCase) (idle statementCount, runs []statementRun, sent map[string]int) {
	t.Helper()
	sent = map[string]int{}
	warm := func(cs statementCase) {
		l := NewLoad(cs.target, slices.Max(concurrencies))
		sm := l.Run(t.Context(), warmUp)
		l.Close()
		checkSamples(t, cs.target, sm)
		sent[cs.name] += sm.Requests
	}
	for i, cs := range cases {
		if i > 0 && cases[i-1].queues && !cs.queues {
			t.Fatalf("case %q comes after %q, which queues tasks: a case that queues must come last", cs.name, cases[i-1].name)
		}
		if !cs.queues {
			warm(cs)
		}
	}
	idle = c.during(t, func() { time.Sleep(countTime) })
	for _, cs := range cases {
		if cs.queues {
			warm(cs)
		}
		for _, workers := range concurrencies {
			l := NewLoad(cs.target, workers)
			var sm Sample
			count := c.during(t, func() { sm = l.Run(t.Context(), countTime) })
			l.Close()
			checkSamples(t, cs.target, sm)
			sent[cs.name] += sm.Requests
			runs = append(runs, statementRun{name: cs.name, workers: workers, requests: sm.Requests, count: count})
		}
	}
	return idle, runs, sent
}

// ackStatement is the statement that removes a task the worker is done with.
const ackStatement = "acknowledge a task (Ack)"

// countLater counts what the worker does with the tasks a case that queues left (statementCase.queues),
// once they are due: it waits up to wait for the first acknowledgement (taken as the worker's
// tasks coming due), then counts for as long as a load. The run returned is named name, with a
// request for each task acknowledged (one worker: the instance's queue consumer), to print
// beside the loads; false when no task was acknowledged.
func countLater(t *testing.T, c *statementCounter, name string, wait time.Duration) (statementRun, bool) {
	t.Helper()
	acked := func() int64 {
		calls, _ := c.snapshot(t)
		return calls[ackStatement]
	}
	for start, deadline := acked(), time.Now().Add(wait); acked() == start; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			return statementRun{}, false
		}
	}
	count := c.during(t, func() { time.Sleep(countTime) })
	n := count.calls[ackStatement]
	return statementRun{name: name, workers: 1, requests: int(n), count: count}, n > 0
}

// background is what the idle instance ran of statement name (every statement: "") at its rate,
// over d.
func (idle statementCount) background(name string, d time.Duration) float64 {
	var n int64
	if name == "" {
		for _, v := range idle.calls {
			n += v
		}
	} else {
		n = idle.calls[name]
	}
	return float64(n) / idle.elapsed.Seconds() * d.Seconds()
}

// perRequest is the calls of statement name (every statement: "") in r, less the idle
// instance's at its rate over the same time, per request.
func (r statementRun) perRequest(idle statementCount, name string) float64 {
	var n int64
	if name == "" {
		for _, v := range r.count.calls {
			n += v
		}
	} else {
		n = r.count.calls[name]
	}
	return (float64(n) - idle.background(name, r.count.elapsed)) / float64(r.requests)
}

// walPerRequest is the WAL bytes statement name (every statement: "") wrote in r, less the idle
// instance's at its rate over the same time, per request.
func (r statementRun) walPerRequest(idle statementCount, name string) float64 {
	var loaded, background int64
	for n, v := range r.count.walBytes {
		if name == "" || n == name {
			loaded += v
		}
	}
	for n, v := range idle.walBytes {
		if name == "" || n == name {
			background += v
		}
	}
	return (float64(loaded) - float64(background)/idle.elapsed.Seconds()*r.count.elapsed.Seconds()) / float64(r.requests)
}

// commitsPerRequest and serverWALPerRequest are the run's writing commits and the server's WAL,
// less the idle instance's at their rate over the same time, per request.
func (r statementRun) commitsPerRequest(idle statementCount) float64 {
	return (float64(r.count.commits) - float64(idle.commits)/idle.elapsed.Seconds()*r.count.elapsed.Seconds()) / float64(r.requests)
}

func (r statementRun) serverWALPerRequest(idle statementCount) float64 {
	return (float64(r.count.serverWAL) - float64(idle.serverWAL)/idle.elapsed.Seconds()*r.count.elapsed.Seconds()) / float64(r.requests)
}

// formatCount prints a count per request with two decimals, and one that the background's
// subtraction left a hair below zero as 0.00.
func formatCount(v float64) string {
	if v > -0.005 && v < 0.005 {
		v = 0
	}
	return fmt.Sprintf("%.2f", v)
}

// printStatements writes the counts: a line per load with its statements per request, then a
// line per statement with its calls per request in every load.
func (c *statementCounter) printStatements(t *testing.T, w io.Writer, title string, idle statementCount, runs []statementRun) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, title)
	source := "pg_stat_statements (calls and WAL bytes of each statement in the instance's database)"
	if !c.perStatement {
		source = "pg_stat_database (transactions; pg_stat_statements is not installed)"
	}
	fmt.Fprintf(w, "counted from %s before and after each %s load (+%s settle), less the idle instance's background statements at their rate over the same time\n",
		source, countTime, c.settle)
	var rates []string
	for _, n := range slices.Sorted(maps.Keys(idle.calls)) {
		rates = append(rates, fmt.Sprintf("%s %.2f/s", n, float64(idle.calls[n])/idle.elapsed.Seconds()))
	}
	if len(rates) == 0 {
		rates = []string{"none"}
	}
	fmt.Fprintf(w, "idle instance (no traffic, %s): %s\n", idle.elapsed.Round(time.Millisecond), strings.Join(rates, ", "))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "load\tworkers\trequests\tstatements\tof them background\tstatements per request\tround trips per request\tcommits that wrote, per request"
	if c.perStatement {
		header += "\tWAL bytes per request (statements)"
	}
	header += "\tWAL bytes per request (server)"
	fmt.Fprintln(tw, header)
	for _, r := range runs {
		var total int64
		for _, v := range r.count.calls {
			total += v
		}
		per := formatCount(r.perRequest(idle, ""))
		row := fmt.Sprintf("%s\t%d\t%d\t%d\t%.0f\t%s\t%s\t%s", r.name, r.workers, r.requests, total, idle.background("", r.count.elapsed), per, per, formatCount(r.commitsPerRequest(idle)))
		if c.perStatement {
			row += fmt.Sprintf("\t%.0f", r.walPerRequest(idle, ""))
		}
		row += fmt.Sprintf("\t%.0f", r.serverWALPerRequest(idle))
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
	fmt.Fprintf(w, "commits that wrote: transaction ids the server handed out (each such commit flushed, synchronous_commit %s); WAL (server): how far its WAL insert position moved, checkpoints' full page images included; both less the idle instance's at their rate\n", c.setting(t, "synchronous_commit"))
	if !c.perStatement {
		fmt.Fprintln(w, "round trips per request are its transactions: pgstore sends each statement alone (no batch, no pipeline) in a transaction of its own (no BEGIN)")
		return
	}
	header = "statement\tidle/s"
	for _, r := range runs {
		header += fmt.Sprintf("\t%s, %s", r.name, workersText(r.workers))
	}
	fmt.Fprintln(tw, header)
	names := maps.Clone(idle.calls)
	for _, r := range runs {
		maps.Copy(names, r.count.calls)
	}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		row := fmt.Sprintf("%s\t%.2f", n, float64(idle.calls[n])/idle.elapsed.Seconds())
		for _, r := range runs {
			row += "\t" + formatCount(r.perRequest(idle, n))
			if wal := r.walPerRequest(idle, n); wal >= 1 {
				row += fmt.Sprintf(" (%.0f B)", wal)
			}
		}
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
	fmt.Fprintln(w, "(in parentheses: the WAL the statement wrote, per request)")
	fmt.Fprintln(w, "round trips per request are its statements: pgx sends a statement it has prepared on the connection as one Bind/Execute/Sync, one round trip, and pgstore sends each statement alone (no batch, no pipeline, whose statements would share a round trip unseen by pg_stat_statements) in a transaction of its own (no BEGIN: one would show as a statement, and a round trip, of its own, as would its COMMIT), so statements, round trips and transactions are one number; not seen here: the Parse of a statement new to a connection (done during the warm-up) and pgx's ping of a pooled connection idle for over a second (an empty query)")
}

// The naming runs always: a statement put under the wrong name would silently misstate which
// store calls a request costs.
func TestStatementName(t *testing.T) {
	tests := []struct{ query, want string }{
		{"\nWITH claimed AS (\n\tINSERT INTO idempotency_keys AS k (key) VALUES ($1)", "claim the key (Claim)"},
		{"\nWITH was AS (\n\tSELECT fingerprint FROM idempotency_keys WHERE key = $1\n), claimed AS (\n\tINSERT INTO idempotency_keys", "claim the key and store the charge (ClaimCharge)"},
		{"SELECT charge, version FROM charges WHERE id = $1", "read the charge (Charge)"},
		{"\nWITH lc AS (\n\tSELECT 1 FROM charges WHERE id = $6::text AND version = $9::bigint FOR UPDATE\n), lr AS (", "move a refund with its charge, task and events (ChangeRefund)"},
		{"\nWITH hold AS (\n\tSELECT 1 FROM idempotency_keys WHERE key = $1 AND token = $2 AND expires_at > now() FOR UPDATE\n), saved AS (\n\tINSERT INTO charges AS c\n), done AS (\nUPDATE idempotency_keys k SET", "complete the key and save the charge, with its events (CompleteCharge)"},
		{"\nWITH hold AS (\n\tSELECT 1 FROM idempotency_keys\n), fenced AS (\n), saved AS (\n\tINSERT INTO charges AS c", "save the charge at its version, fenced by the hold, with its events (SaveCharge)"},
		{"SELECT refund FROM refunds WHERE id = $1", "read the refund (Refund)"},
		{"DELETE FROM tasks WHERE id = $1", "acknowledge a task (Ack)"},
		{"\nSELECT fingerprint, status, header, body, created_at, expires_at > now(), status IS NULL AND held_until > now()\nFROM idempotency_keys WHERE key = $1", "look the key up (Peek)"},
		{"\nDELETE FROM idempotency_keys\nWHERE key = $1 AND token = $2 AND (status IS NULL)", "release the key (Release)"},
		{"\nDELETE FROM idempotency_keys WHERE key IN (\n\tSELECT key FROM idempotency_keys WHERE expires_at <= now()", "retention sweep: expired keys"},
		{"\nDELETE FROM charges WHERE id IN (\n\tSELECT id FROM charges\n\tWHERE status <> $2", "retention sweep: charges"},
		{"SELECT id, charge, version FROM charges WHERE status = $1 ORDER BY created_at, id LIMIT $2", "charges in a status (ChargesByStatus: the reconciler)"},
		{"\nSELECT e.id, e.type, e.created_at, e.object, e.txid::text, e.seq\nFROM events e\nWHERE e.owner = $1", "list events (Events)"},
		{"\nUPDATE idempotency_keys\nSET held_until = now()", "renew the hold (Renew)"},
		{"begin", "other: begin"},
		{"SELECT " + strings.Repeat("x, ", 30) + "y", "other: SELECT " + strings.Repeat("x, ", 30)[:53] + "..."},
	}
	for _, tc := range tests {
		if got := statementName(tc.query); got != tc.want {
			t.Errorf("statementName(%q) = %q, want %q", tc.query, got, tc.want)
		}
	}
}
