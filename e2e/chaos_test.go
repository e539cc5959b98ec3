package e2e

// The chaos money check: a fleet of two instances on one Redis takes thousands of charges,
// refunds and repeated Idempotency-Keys while the three simulated gateways flip between every
// way of failing and one instance is killed; afterwards the simulators' ledgers must agree, to
// the minor unit, with what every client was told.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/payrouter/payrouter/pgstore/pgtest"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

const (
	// chaosDefaultCharges is the length of the `go test` run; `make chaos` sets CHAOS_CHARGES.
	chaosDefaultCharges = 400
	chaosClients        = 12
	// chaosRate is the pace of new charges (all clients together), and chaosMinLoad the least
	// time the load lasts, so that even a short run sees many behaviour flips and the kill.
	chaosRate    = 100 // charges per second
	chaosMinLoad = 10 * time.Second
	chaosFlip    = 300 * time.Millisecond // how often a gateway's behaviour changes

	chaosGatewayTimeout = 400 * time.Millisecond
	chaosRequestTimeout = 2 * time.Second
	chaosCooldown       = 2 * time.Second
	chaosSlow           = 800 * time.Millisecond // "latency": over the gateway timeout

	chaosRepeatShare  = 0.10 // of requests: an earlier Idempotency-Key again, same body
	chaosDeclineShare = 0.10
	chaosAuthShare    = 0.15 // capture: false
	chaosRefundShare  = 0.15 // of succeeded charges: refunded (some twice, in part)

	// chaosKillAt is when instance A is killed, as a share of the load's duration.
	chaosKillAt   = 0.3
	chaosDowntime = time.Second
	// chaosConflictWait is how long a client keeps re-sending a key answered 409 while the load
	// runs before leaving it for the final pass.
	chaosConflictWait = 5 * time.Second
	// chaosKeyLease is how long payrouter keeps a key claimed by a request that never completed
	// (an instance killed under it): request_timeout + 30s (httpapi.Server.InFlightTTL). The
	// final pass waits that out, and a little more.
	chaosKeyLease = chaosRequestTimeout + 30*time.Second + 5*time.Second
	// chaosSettle bounds how long, once every gateway is normal again, processing charges may
	// take to become final and the refund queue to drain.
	chaosSettle = 60 * time.Second
)

// chaosBehaviors are the faults the chaos goroutine sets, besides normal.
var chaosBehaviors = []struct{ name, body string }{
	{"latency", `{"mode":"normal","latency":"` + chaosSlow.String() + `"}`},
	{"unavailable", `{"mode":"unavailable"}`},
	{"error500", `{"mode":"error500"}`},
	{"hang", `{"mode":"hang"}`},
	{"reset", `{"mode":"reset"}`},
	{"process_then_hang", `{"mode":"process_then_hang"}`},
	{"tail", `{"mode":"normal","slow_share":0.2,"slow_latency":"` + chaosSlow.String() + `"}`},
}

// TestChaosMoney: two instances on one Redis, gatewaysim, failover routes over the three
// gateways and a hedged EUR route, refunds queued when a gateway cannot take them. Clients
// charge (USD, EUR, MYR; a tenth declined; some authorize only), repeat earlier keys, refund
// some charges, through either instance; every 300ms a gateway changes behaviour (latency over
// the timeout, unavailable, 500, hang, reset, process then hang, a heavy tail, normal); instance A
// is killed with SIGKILL mid-run and restarted a second later. Then every gateway is normal, and
// within a bound nothing is processing and the refund queue is empty. The ledgers must show:
//   - a charge told succeeded captured exactly once, at its gateway, holding its amount less its
//     accepted refunds; every other transaction of it voided or refunded in full;
//   - a charge told declined or failed holding nothing anywhere;
//   - a charge told requires_capture holding exactly one authorization;
//   - a charge told processing final (GET /charge/{id}) within the bound, agreeing with the ledger;
//   - every accepted refund applied exactly once, and GET /refund/{id} succeeded;
//   - no money held for a charge no client was told about.
func TestChaosMoney(t *testing.T) {
	skipIfShort(t)
	charges := chaosDefaultCharges
	if v := os.Getenv("CHAOS_CHARGES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("CHAOS_CHARGES=%q: want a positive number of charges", v)
		}
		charges = n
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: want a number", v)
		}
		seed = n
	}
	load := max(chaosMinLoad, time.Duration(charges)*time.Second/chaosRate)
	t.Logf("chaos: %d charges over about %v by %d clients, seed %d (CHAOS_SEED=%d repeats the draws)", charges, load, chaosClients, seed, seed)

	rds := redistest.Start(t)
	s := startSims(t)
	gw := gatewayConfig{Timeout: chaosGatewayTimeout, MaxConcurrent: 32, ConsecutiveFailures: 3, Cooldown: chaosCooldown}
	cfg := routerConfig{
		RequestTimeout: chaosRequestTimeout,
		RedisURL:       rds.URL(), DatabaseURL: pgtest.NewDatabase(t),
		Gateways: map[string]gatewayConfig{"paywell": gw, "ding": gw, "tranglo": gw},
		Routes: []routeConfig{
			{Name: "eur-hedged", Currencies: []string{"EUR"}, Gateways: []string{"paywell", "ding"}},
			{Name: "asia", Currencies: []string{"MYR"}, Gateways: []string{"tranglo", "paywell", "ding"}},
			{Name: "default", Currencies: []string{"USD"}, Gateways: []string{"paywell", "ding", "tranglo"}},
		},
	}
	fleet := &chaosFleet{}
	fleet.ins[0] = startChaosInstance(t, s, cfg, "payrouter-A")
	fleet.ins[1] = startChaosInstance(t, s, cfg, "payrouter-B")

	run := &chaosRun{fleet: fleet, book: newChaosBook(), seed: seed, began: time.Now()}
	run.remaining.Store(int64(charges))
	loadCtx, stopLoad := context.WithCancel(t.Context())
	var clients, background sync.WaitGroup
	defer func() { // also on t.Fatal: no goroutine outlives the test
		stopLoad()
		clients.Wait()
		background.Wait()
	}()

	watchCtx, stopWatching := context.WithCancel(t.Context())
	defer stopWatching()
	background.Go(func() { run.watchProcessing(watchCtx) })
	// The storm has its own group: it must be over, its last PUT answered, before the gateways are
	// set normal, or a fault set in flight lands after the reset and stays for the rest of the test.
	chaosCtx, stopChaos := context.WithCancel(loadCtx)
	var storm sync.WaitGroup
	defer func() { stopChaos(); storm.Wait() }()
	storm.Go(func() { run.chaos(chaosCtx, s, rand.New(rand.NewPCG(seed, 1000))) })

	pace := load * chaosClients / time.Duration(charges)
	for i := range chaosClients {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		clients.Go(func() { run.client(loadCtx, rng, pace) })
	}

	// Mid-run, A dies without a word and comes back on its own ports a second later.
	killTimer := time.NewTimer(time.Duration(float64(load) * chaosKillAt))
	loadDone := make(chan struct{})
	go func() { clients.Wait(); close(loadDone) }()
	select {
	case <-killTimer.C:
		run.killAndRestart(t, 0)
	case <-loadDone:
		t.Errorf("the load ended before instance A was to be killed (%v in)", time.Duration(float64(load)*chaosKillAt))
	}
	<-loadDone
	stopChaos()
	storm.Wait()
	loadTook := time.Since(run.began)

	// The storm is over: every gateway normal, keys left in flight answered.
	for _, g := range []*sim{s.paywell, s.ding, s.tranglo} {
		g.behave(t, "normal", 0)
	}
	calm := time.Now()
	run.finalPass(t)

	// Within the bound, nothing processing on either instance and the refund queue drained. The
	// final pass may have waited out a key lease: what it answered gets some time of its own.
	settleBy := later(calm.Add(chaosSettle), time.Now().Add(20*time.Second))
	settled, ok := run.settle(t, settleBy)
	stopWatching()
	background.Wait()

	finals := run.readFinals(t)
	refundsFinal := run.readRefunds(t, settleBy)
	money, err := run.waitForStrays(t, s, finals, later(settleBy, time.Now().Add(chaosSettle)))
	if err != nil {
		t.Fatalf("reading the ledgers: %v", err)
	}
	sum := run.check(t, money, finals, refundsFinal)
	sum.loadTook, sum.settled, sum.settledOK = loadTook, settled, ok
	sum.hedges = run.hedges()
	run.book.report(t)
	t.Log(sum.String(run))
}

// --- the fleet -----------------------------------------------------------------------------------

// chaosFleet is the two instances; one may be replaced by its restart while clients use it.
type chaosFleet struct {
	mu  sync.RWMutex
	ins [2]*instance
}

func (f *chaosFleet) get(i int) *instance {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.ins[i]
}

func (f *chaosFleet) set(i int, in *instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ins[i] = in
}

// chaosYAML is the harness's configuration for cfg with what the chaos test adds: a hedge on the
// eur-hedged route (after the gateway's p95) and the fallbacks spelled out (refunds queued).
func chaosYAML(t *testing.T, cfg routerConfig, listen, admin string, s *sims) string {
	t.Helper()
	y := cfg.yaml(listen, admin, s)
	route := "  - name: eur-hedged\n    match: {currency: [EUR]}\n    gateways: [paywell, ding]\n"
	fallbacks := "fallbacks:\n  charge: fail\n"
	if !strings.Contains(y, route) || !strings.HasSuffix(y, fallbacks) {
		t.Fatalf("the harness's configuration no longer has the shape the chaos test edits (route %q, fallbacks %q):\n%s", route, fallbacks, y)
	}
	y = strings.Replace(y, route, route+"    hedge: {after: p95}\n", 1)
	return strings.TrimSuffix(y, fallbacks) + "fallbacks:\n  charge: fail\n  refund: queue\n  status: degrade\n"
}

// startChaosInstance is startPayrouter with chaosYAML.
func startChaosInstance(t *testing.T, s *sims, cfg routerConfig, name string) *instance {
	t.Helper()
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		ports := freePorts(t, 2)
		path := filepath.Join(dir, fmt.Sprintf("%s-%d.yaml", name, attempt))
		if err := os.WriteFile(path, []byte(chaosYAML(t, cfg, loopback(ports[0]), loopback(ports[1]), s)), 0o600); err != nil {
			t.Fatal(err)
		}
		in, err := servePayrouter(t, name, path, ports[0], ports[1])
		if err == nil {
			return in
		}
		if attempt < startAttempts && in.proc.clashed() {
			in.proc.expected.Store(true)
			t.Logf("%s: a port was taken before it could bind (%v); retrying on others", name, err)
			continue
		}
		cfgText, _ := os.ReadFile(path)
		t.Fatalf("%s did not come up: %v\nconfiguration:\n%s", name, err, cfgText)
	}
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

// killAndRestart kills instance i and, after chaosDowntime, starts it again on its own
// configuration file, so on its own ports.
func (r *chaosRun) killAndRestart(t *testing.T, i int) {
	t.Helper()
	in := r.fleet.get(i)
	in.kill(t)
	r.killedAt = time.Since(r.began)
	r.killedName = in.proc.name
	r.killedWall = time.Now()
	down := time.NewTimer(chaosDowntime)
	defer down.Stop()
	<-down.C
	again, err := servePayrouter(t, in.proc.name+"-restarted", in.configPath, portOf(t, in.url), portOf(t, in.adminURL))
	if err != nil {
		t.Fatalf("%s restarted on its own ports after SIGKILL: %v", in.proc.name, err)
	}
	r.fleet.set(i, again)
	r.restartedAfter = time.Since(r.killedWall)
}

// --- the run -------------------------------------------------------------------------------------

// chaosRun is one chaos run: the fleet, what the clients were told, and when things happened.
type chaosRun struct {
	fleet     *chaosFleet
	book      *chaosBook
	seed      uint64
	began     time.Time
	remaining atomic.Int64 // new charges still to send
	keys      atomic.Int64

	// Set by the test goroutine while the clients run; read after they end.
	killedAt, restartedAfter time.Duration
	killedName               string
	killedWall               time.Time

	// adminChargesMissing is set once GET /admin/charges answered 404: settling then relies on
	// watching the charges told processing.
	adminChargesMissing atomic.Bool

	flipsMu sync.Mutex
	flips   map[string]int // behaviour set, by name
}

// client sends new charges (and repeats, and refunds) at its pace until none are left.
func (r *chaosRun) client(ctx context.Context, rng *rand.Rand, pace time.Duration) {
	tick := time.NewTicker(pace)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if rng.Float64() < chaosRepeatShare {
			if o := r.book.randomOrder(rng); o != nil {
				r.repeat(ctx, rng, o)
				continue
			}
		}
		if r.remaining.Add(-1) < 0 {
			return
		}
		r.newCharge(ctx, rng)
	}
}

// newCharge sends one new charge and, now and then, refunds it once it succeeded.
func (r *chaosRun) newCharge(ctx context.Context, rng *rand.Rand) {
	o := &chaosOrder{key: fmt.Sprintf("chaos-%d-%d", r.seed, r.keys.Add(1)), amount: 100 + rng.Int64N(99_900), capture: true, token: "tok_visa"}
	switch x := rng.Float64(); {
	case x < 0.5:
		o.currency = "USD"
	case x < 0.8:
		o.currency = "EUR"
	default:
		o.currency = "MYR"
	}
	if rng.Float64() < chaosDeclineShare {
		o.token = "tok_decline"
	}
	if rng.Float64() < chaosAuthShare {
		o.capture = false
	}
	body := map[string]any{
		"amount": o.amount, "currency": o.currency, "capture": o.capture,
		"payment_method": map[string]string{"type": "card", "token": o.token},
	}
	o.body, _ = json.Marshal(body)
	r.book.addOrder(o)

	rep, ok := r.untilAnswered(ctx, rng, "/charge", o.body, o.key, time.Now().Add(chaosConflictWait))
	if !ok {
		r.book.leaveForLater(o)
		return
	}
	ch := r.book.answered(o, rep)
	if ch == nil || ch.told != "succeeded" || rng.Float64() >= chaosRefundShare {
		return
	}
	// A full refund, or one or two partial ones.
	if rng.IntN(2) == 0 {
		r.refund(ctx, rng, ch, 0)
		return
	}
	first := 1 + rng.Int64N(o.amount-1)
	r.refund(ctx, rng, ch, first)
	if rng.IntN(2) == 0 && o.amount-first > 0 {
		r.refund(ctx, rng, ch, 1+rng.Int64N(o.amount-first))
	}
}

// repeat sends an earlier order's key and body again, and judges the answer against the first.
func (r *chaosRun) repeat(ctx context.Context, rng *rand.Rand, o *chaosOrder) {
	before := o.snapshot()
	rep, ok := r.sendOnce(ctx, rng, "/charge", o.body, o.key, time.Now().Add(chaosConflictWait))
	if !ok {
		r.book.count("repeat unanswered")
		return
	}
	a, _ := decodeAnswer(rep)
	switch {
	case rep.status == http.StatusConflict:
		r.book.count("repeat 409 (first still in flight)")
		if before.done && storedStatus(before.status) {
			r.book.problem("a repeated key whose first request was answered got 409", "%s answered %d (%s) and later 409: %s", o.key, before.status, before.id, rep)
		}
	case before.done && storedStatus(before.status):
		if rep.status != before.status || a.chargeID() != before.id || rep.header.Get("Idempotent-Replayed") != "true" {
			r.book.problem("a repeated key did not replay its stored answer", "%s first answered %d %s; the repeat: Idempotent-Replayed %q, %s",
				o.key, before.status, before.id, rep.header.Get("Idempotent-Replayed"), rep)
		} else {
			r.book.count("repeat replayed")
		}
	default:
		// The first request is still running, or its answer (a 503) was not stored: this answer is
		// as much the key's as the first one.
		r.book.count("repeat answered anew")
		r.book.answered(o, rep)
	}
}

// refund asks for a refund of amount (0: the whole charge) with its own key.
func (r *chaosRun) refund(ctx context.Context, rng *rand.Rand, ch *chaosCharge, amount int64) {
	rf := &chaosRefund{key: fmt.Sprintf("chaos-re-%d-%d", r.seed, r.keys.Add(1)), charge: ch, amount: amount}
	body := []byte(`{}`)
	if amount > 0 {
		body = []byte(fmt.Sprintf(`{"amount":%d}`, amount))
	} else {
		rf.amount = ch.order.amount
	}
	rf.body = body
	r.book.addRefund(rf)
	rep, ok := r.untilAnswered(ctx, rng, "/charge/"+ch.id+"/refund", body, rf.key, time.Now().Add(chaosConflictWait))
	if !ok {
		r.book.leaveRefundForLater(rf)
		return
	}
	r.book.refundAnswered(rf, rep)
}

// sendOnce sends a request to a random instance, and to the other one after a connection error
// (the instance may be down), until an answer or the deadline.
func (r *chaosRun) sendOnce(ctx context.Context, rng *rand.Rand, path string, body []byte, key string, deadline time.Time) (reply, bool) {
	i := rng.IntN(2)
	for ctx.Err() == nil {
		in := r.fleet.get(i)
		rep, err := send(in.client, http.MethodPost, in.url+path, body,
			"Authorization", "Bearer "+apiKey, "Content-Type", "application/json", "Idempotency-Key", key)
		if err == nil {
			return rep, true
		}
		r.book.count("connection errors (retried on the other instance)")
		if time.Now().After(deadline) {
			return rep, false
		}
		i = 1 - i
		pause(ctx, 50*time.Millisecond)
	}
	return reply{}, false
}

// untilAnswered is sendOnce that also re-sends a key answered 409 (its first request still in
// flight) until another answer or the deadline.
func (r *chaosRun) untilAnswered(ctx context.Context, rng *rand.Rand, path string, body []byte, key string, deadline time.Time) (reply, bool) {
	for {
		rep, ok := r.sendOnce(ctx, rng, path, body, key, deadline)
		if !ok || rep.status != http.StatusConflict {
			return rep, ok
		}
		r.book.count("409 for a key of ours in flight (re-sent)")
		if time.Now().After(deadline) || ctx.Err() != nil {
			return rep, false
		}
		pause(ctx, 100*time.Millisecond+time.Duration(rng.IntN(100))*time.Millisecond)
	}
}

// pause is a back-off between two tries, cut short when ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// chaos flips a random gateway's behaviour every chaosFlip until ctx ends, never leaving all
// three failing at once.
func (r *chaosRun) chaos(ctx context.Context, s *sims, rng *rand.Rand) {
	gws := []*sim{s.paywell, s.ding, s.tranglo}
	state := map[string]string{"paywell": "normal", "ding": "normal", "tranglo": "normal"}
	r.flipsMu.Lock()
	r.flips = map[string]int{}
	r.flipsMu.Unlock()
	tick := time.NewTicker(chaosFlip)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		g := gws[rng.IntN(len(gws))]
		othersFailing := 0
		for name, st := range state {
			if name != g.name && st != "normal" {
				othersFailing++
			}
		}
		name, body := "normal", `{"mode":"normal"}`
		if othersFailing < 2 && (state[g.name] == "normal" || rng.IntN(2) == 0) {
			b := chaosBehaviors[rng.IntN(len(chaosBehaviors))]
			name, body = b.name, b.body
		}
		rep, err := send(g.client, http.MethodPut, g.url+"/_sim/behavior", []byte(body), "Content-Type", "application/json")
		if err != nil || rep.status != http.StatusOK {
			r.book.problem("the chaos goroutine could not set a behaviour", "%s %s: %v %s", g.name, body, err, rep)
			continue
		}
		state[g.name] = name
		r.flipsMu.Lock()
		r.flips[name]++
		r.flipsMu.Unlock()
	}
}

// finalPass answers what the load left open: keys still in flight when their client gave up
// (an instance killed under them keeps them claimed for its lease), and refunds likewise.
func (r *chaosRun) finalPass(t *testing.T) {
	t.Helper()
	orders, refunds := r.book.takeLeftOpen()
	if len(orders)+len(refunds) == 0 {
		return
	}
	deadline := time.Now().Add(chaosKeyLease)
	if !r.killedWall.IsZero() {
		deadline = r.killedWall.Add(chaosKeyLease)
	}
	deadline = later(deadline, time.Now().Add(10*time.Second))
	began := time.Now()
	var wg sync.WaitGroup
	work := make(chan func(*rand.Rand))
	for w := range 4 {
		rng := rand.New(rand.NewPCG(r.seed, uint64(2000+w)))
		wg.Go(func() {
			for f := range work {
				f(rng)
			}
		})
	}
	ctx := t.Context()
	var stillOpen []string
	var openMu sync.Mutex
	for _, o := range orders {
		work <- func(rng *rand.Rand) {
			rep, ok := r.untilAnswered(ctx, rng, "/charge", o.body, o.key, deadline)
			if !ok {
				openMu.Lock()
				stillOpen = append(stillOpen, fmt.Sprintf("charge key %s: last %s", o.key, rep))
				openMu.Unlock()
				r.book.markUnresolved(o)
				return
			}
			r.book.answered(o, rep)
		}
	}
	for _, rf := range refunds {
		work <- func(rng *rand.Rand) {
			rep, ok := r.untilAnswered(ctx, rng, "/charge/"+rf.charge.id+"/refund", rf.body, rf.key, deadline)
			if !ok {
				openMu.Lock()
				stillOpen = append(stillOpen, fmt.Sprintf("refund key %s: last %s", rf.key, rep))
				openMu.Unlock()
				return
			}
			r.book.refundAnswered(rf, rep)
		}
	}
	close(work)
	wg.Wait()
	t.Logf("chaos: final pass: %d charge key(s) and %d refund key(s) left open by the load, answered within %v; %d still without an answer",
		len(orders), len(refunds), time.Since(began).Round(time.Millisecond), len(stillOpen))
	for i, s := range stillOpen {
		if i == 5 {
			break
		}
		t.Errorf("a key still unanswered (409 or no connection) %v after the kill, past payrouter's %v in-flight lease: %s",
			time.Since(r.killedWall).Round(time.Second), chaosKeyLease, s)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// watchProcessing polls every charge told processing until it is final, noting when.
func (r *chaosRun) watchProcessing(ctx context.Context) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, ch := range r.book.processing() {
			n++
			in := r.fleet.get(n % 2)
			ans, err := in.getCharge(ch.id)
			if err != nil || ans.ChargeStatus == "" || ans.ChargeStatus == "processing" {
				continue
			}
			r.book.seenFinal(ch, ans.ChargeStatus, time.Now())
		}
	}
}

// settle waits until neither instance lists a processing charge and the queue is empty, and
// every charge told processing has been seen final. It reports how long it waited, and whether
// the fleet settled.
func (r *chaosRun) settle(t *testing.T, by time.Time) (time.Duration, bool) {
	t.Helper()
	began := time.Now()
	for {
		ok, why, listed := r.settled()
		if ok {
			return time.Since(began), true
		}
		if time.Now().After(by) {
			t.Errorf("%v after every gateway was normal again: still not settled: %s", chaosSettle, why)
			for i, c := range listed {
				if i == 5 {
					break
				}
				r.book.mu.Lock()
				told, known := r.book.charges[c.ID]
				r.book.mu.Unlock()
				how := "no client was told about it (its key's request died with its instance, or its answer had no charge id)"
				if known {
					how = fmt.Sprintf("its client was told %s (%d)", told.told, told.status)
				}
				t.Logf("  still processing: %s %s %d created %s, attempts %s; %s", c.ID, c.Currency, c.Amount, c.CreatedAt, describe(c.Attempts), how)
			}
			return time.Since(began), false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// settled is one look at whether the fleet has settled, what is left if not, and the charges
// the instances list as processing.
func (r *chaosRun) settled() (bool, string, []chargeObject) {
	var left []string
	var listed []chargeObject
	for i, who := range []string{"A", "B"} {
		in := r.fleet.get(i)
		list, rep, err := in.adminCharges("processing")
		switch {
		case rep.status == http.StatusNotFound || rep.status == http.StatusMethodNotAllowed:
			// Not there (yet): reported once; the charges told processing are still watched.
			if r.adminChargesMissing.CompareAndSwap(false, true) {
				r.book.problem("GET /admin/charges?status=processing is not served", "%s: %s", who, rep)
			}
		case err != nil:
			left = append(left, fmt.Sprintf("%s: GET /admin/charges?status=processing: %v", who, err))
		case len(list) > 0:
			left = append(left, fmt.Sprintf("%s lists %d processing charge(s) (%s...)", who, len(list), list[0].ID))
			if len(listed) == 0 {
				listed = list
			}
		}
		m, err := in.metrics()
		if err != nil {
			left = append(left, fmt.Sprintf("%s: /metrics: %v", who, err))
			continue
		}
		// The queue is not required to be empty: a recheck of an attempt a gateway never
		// received stays in it for routing.RecheckFor (5 minutes), in case the gateway processes
		// it late. What matters is that no money is held by an attempt no charge keeps, which
		// waitForStrays checks in the ledgers.
		_ = m
	}
	if n := len(r.book.processing()); n > 0 {
		left = append(left, fmt.Sprintf("%d charge(s) told processing not yet seen final through GET /charge/{id}", n))
	}
	return len(left) == 0, strings.Join(left, "; "), listed
}

// hedges sums payrouter_hedges_total by result over both instances (the restarted one counts
// from its restart).
func (r *chaosRun) hedges() string {
	var parts []string
	for _, result := range []string{"won_primary", "won_hedge", "voided"} {
		var n float64
		for i := range 2 {
			if m, err := r.fleet.get(i).metrics(); err == nil {
				v, _ := m.value("payrouter_hedges_total", "result", result)
				n += v
			}
		}
		parts = append(parts, fmt.Sprintf("%s %v", result, n))
	}
	return strings.Join(parts, ", ")
}

// adminCharges is GET /admin/charges?status=... on the admin listener.
func (in *instance) adminCharges(status string) ([]chargeObject, reply, error) {
	r, err := send(in.probeClient, http.MethodGet, in.adminURL+"/admin/charges?status="+status, nil, "Authorization", "Bearer "+adminToken)
	if err != nil {
		return nil, r, err
	}
	if r.status != http.StatusOK {
		return nil, r, fmt.Errorf("want 200: %s", r)
	}
	var list struct {
		Charges *[]chargeObject `json:"charges"`
	}
	if err := json.Unmarshal(r.body, &list); err != nil || list.Charges == nil {
		return nil, r, fmt.Errorf("want {\"charges\": [...]}: %v: %s", err, r)
	}
	return *list.Charges, r, nil
}

// chargeObject is a charge object as GET /charge/{id} shows it, with what the money checks need.
type chargeObject struct {
	ID               string    `json:"id"`
	Status           string    `json:"status"`
	Amount           int64     `json:"amount"`
	Currency         string    `json:"currency"`
	Gateway          string    `json:"gateway"`
	GatewayReference string    `json:"gateway_reference"`
	Attempts         []attempt `json:"attempts"`
	CreatedAt        string    `json:"created_at"`
}

// readFinals is GET /charge/{id} of every charge a client was told about, through either instance.
func (r *chaosRun) readFinals(t *testing.T) map[string]chargeObject {
	t.Helper()
	ids := r.book.chargeIDs()
	out := make(map[string]chargeObject, len(ids))
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan string)
	for w := range 8 {
		wg.Go(func() {
			for id := range work {
				in := r.fleet.get(w % 2)
				rep, err := send(in.client, http.MethodGet, in.url+"/charge/"+id, nil, "Authorization", "Bearer "+apiKey)
				var c chargeObject
				switch {
				case err != nil:
					r.book.problem("GET /charge/{id} failed after the run", "%s: %v", id, err)
					continue
				case rep.status != http.StatusOK:
					r.book.problem("GET /charge/{id} of a charge a client was told about did not answer 200", "%s", rep)
					continue
				case json.Unmarshal(rep.body, &c) != nil:
					r.book.problem("GET /charge/{id} is not a charge object", "%s", rep)
					continue
				}
				mu.Lock()
				out[id] = c
				mu.Unlock()
			}
		})
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	return out
}

// refundObject is a refund as POST /charge/{id}/refund and GET /refund/{id} show it.
type refundObject struct {
	ID       string `json:"id"`
	ChargeID string `json:"charge_id"`
	Amount   int64  `json:"amount"`
	Status   string `json:"status"`
}

// readRefunds polls GET /refund/{id} of every accepted refund until it shows succeeded (or
// failed), or until by.
func (r *chaosRun) readRefunds(t *testing.T, by time.Time) map[string]refundObject {
	t.Helper()
	out := map[string]refundObject{}
	pending := r.book.acceptedRefunds()
	by = later(by, time.Now().Add(5*time.Second))
	for n := 0; len(pending) > 0; n++ {
		var next []*chaosRefund
		for _, rf := range pending {
			in := r.fleet.get(n % 2)
			rep, err := send(in.client, http.MethodGet, in.url+"/refund/"+rf.id, nil, "Authorization", "Bearer "+apiKey)
			var ro refundObject
			if err != nil || rep.status != http.StatusOK || json.Unmarshal(rep.body, &ro) != nil {
				out[rf.id] = refundObject{ID: rf.id, Status: fmt.Sprintf("GET /refund/{id}: %v %s", err, rep)}
				next = append(next, rf)
				continue
			}
			out[rf.id] = ro
			if ro.Status != "succeeded" && ro.Status != "failed" {
				next = append(next, rf)
			}
		}
		pending = next
		if len(pending) == 0 || time.Now().After(by) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	return out
}

// --- what the clients were told ------------------------------------------------------------------

// chaosOrder is one Idempotency-Key of a charge and its body.
type chaosOrder struct {
	key      string
	body     []byte
	amount   int64
	currency string
	capture  bool
	token    string

	mu     sync.Mutex
	done   bool   // an answer (not 409) came back
	status int    // the answer that now stands for the key
	id     string // its charge
}

type orderSnapshot struct {
	done   bool
	status int
	id     string
}

func (o *chaosOrder) snapshot() orderSnapshot {
	o.mu.Lock()
	defer o.mu.Unlock()
	return orderSnapshot{o.done, o.status, o.id}
}

// storedStatus reports whether payrouter keeps an answer of that status for its key
// (CONTRACT.md, Idempotency): a repeat must replay it.
func storedStatus(status int) bool {
	switch status {
	case http.StatusCreated, http.StatusAccepted, http.StatusPaymentRequired, http.StatusBadGateway:
		return true
	}
	return false
}

// chaosCharge is one charge id a client was told about.
type chaosCharge struct {
	id     string
	order  *chaosOrder
	told   string // succeeded, requires_capture, processing, declined, failed
	status int    // the HTTP status it was told with
	toldAt time.Time
	// finalAt is when a charge told processing was first seen final, and finalStatus what it was.
	finalAt     time.Time
	finalStatus string
}

// chaosRefund is one refund request.
type chaosRefund struct {
	key    string
	charge *chaosCharge
	amount int64 // asked for (the charge's amount for a full refund)
	body   []byte

	answered bool
	status   int    // 201, 202, or what else came back
	id       string // re_...
	state    string // the refund's status in the answer: succeeded, queued, pending
	reply    string
}

func (rf *chaosRefund) accepted() bool {
	return rf.answered && (rf.status == http.StatusCreated || rf.status == http.StatusAccepted) && rf.id != ""
}

// chaosBook is what every client was told, and the problems seen while the load ran.
type chaosBook struct {
	mu        sync.Mutex
	orders    []*chaosOrder
	charges   map[string]*chaosCharge
	refunds   []*chaosRefund
	openKeys  []*chaosOrder  // keys the load gave up on (409 past chaosConflictWait, no connection)
	openRefs  []*chaosRefund // likewise for refunds
	unsettled []*chaosOrder  // keys the final pass could not answer either
	noID      map[int]int    // answers without a charge id, by status
	counts    map[string]int
	problems  map[string][]string
	order     []string // problem kinds in the order first seen
}

func newChaosBook() *chaosBook {
	return &chaosBook{charges: map[string]*chaosCharge{}, noID: map[int]int{}, counts: map[string]int{}, problems: map[string][]string{}}
}

func (b *chaosBook) count(what string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.counts[what]++
}

// problem records a failure, reported at the end with its count and first examples.
func (b *chaosBook) problem(kind, format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problemLocked(kind, format, args...)
}

// problemLocked is problem for a caller holding b.mu.
func (b *chaosBook) problemLocked(kind, format string, args ...any) {
	if _, ok := b.problems[kind]; !ok {
		b.order = append(b.order, kind)
	}
	b.problems[kind] = append(b.problems[kind], fmt.Sprintf(format, args...))
}

// report fails the test once per kind of problem, with its count and first three examples.
func (b *chaosBook) report(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, kind := range b.order {
		list := b.problems[kind]
		ex := list[:min(3, len(list))]
		t.Errorf("%s: %d time(s); e.g.\n    %s", kind, len(list), strings.Join(ex, "\n    "))
	}
}

func (b *chaosBook) addOrder(o *chaosOrder) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.orders = append(b.orders, o)
}

func (b *chaosBook) randomOrder(rng *rand.Rand) *chaosOrder {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.orders) == 0 {
		return nil
	}
	return b.orders[rng.IntN(len(b.orders))]
}

func (b *chaosBook) leaveForLater(o *chaosOrder) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.openKeys = append(b.openKeys, o)
}

func (b *chaosBook) leaveRefundForLater(rf *chaosRefund) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.openRefs = append(b.openRefs, rf)
}

// takeLeftOpen returns the keys the load left open that no later answer (a repeat) settled.
func (b *chaosBook) takeLeftOpen() ([]*chaosOrder, []*chaosRefund) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var orders []*chaosOrder
	for _, o := range b.openKeys {
		if !o.snapshot().done {
			orders = append(orders, o)
		}
	}
	refs := b.openRefs
	b.openKeys, b.openRefs = nil, nil
	return orders, refs
}

func (b *chaosBook) markUnresolved(o *chaosOrder) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unsettled = append(b.unsettled, o)
}

// answered records an answer to a charge key and what it told about its charge. The answer
// stands for the key unless the key already has a stored one (a repeat's answer comes after).
func (b *chaosBook) answered(o *chaosOrder, rep reply) *chaosCharge {
	a, err := decodeAnswer(rep)
	told := ""
	switch {
	case err != nil:
		b.problem("an answer to POST /charge that is not JSON", "%s: %s", o.key, rep)
		return nil
	case rep.status == http.StatusCreated && (a.ChargeStatus == "succeeded" || a.ChargeStatus == "requires_capture"):
		told = a.ChargeStatus
	case rep.status == http.StatusAccepted && a.ChargeStatus == "processing":
		told = "processing"
	case rep.status == http.StatusPaymentRequired:
		told = "declined"
	case rep.status == http.StatusServiceUnavailable, rep.status == http.StatusBadGateway:
		told = "failed"
	default:
		b.problem("an unexpected answer to POST /charge", "%s: %s", o.key, rep)
		return nil
	}
	o.mu.Lock()
	if !o.done || !storedStatus(o.status) {
		o.done, o.status, o.id = true, rep.status, a.chargeID()
	}
	o.mu.Unlock()

	id := a.chargeID()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.counts[fmt.Sprintf("answer %d %s", rep.status, told)]++
	if id == "" {
		b.noID[rep.status]++
		return nil
	}
	if ch, ok := b.charges[id]; ok {
		if ch.told != told {
			b.problemLocked("one charge told two different statuses", "%s: %s (%d), then %s: %s", id, ch.told, ch.status, told, rep)
		}
		return ch
	}
	ch := &chaosCharge{id: id, order: o, told: told, status: rep.status, toldAt: time.Now()}
	b.charges[id] = ch
	return ch
}

// processing lists the charges told processing not yet seen final.
func (b *chaosBook) processing() []*chaosCharge {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*chaosCharge
	for _, ch := range b.charges {
		if ch.told == "processing" && ch.finalAt.IsZero() {
			out = append(out, ch)
		}
	}
	return out
}

func (b *chaosBook) seenFinal(ch *chaosCharge, status string, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ch.finalAt.IsZero() {
		ch.finalAt, ch.finalStatus = at, status
	}
}

func (b *chaosBook) chargeIDs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]string, 0, len(b.charges))
	for id := range b.charges {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (b *chaosBook) addRefund(rf *chaosRefund) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refunds = append(b.refunds, rf)
}

// refundAnswered records the answer to a refund request.
func (b *chaosBook) refundAnswered(rf *chaosRefund, rep reply) {
	var ro refundObject
	_ = json.Unmarshal(rep.body, &ro)
	b.mu.Lock()
	defer b.mu.Unlock()
	rf.answered, rf.status, rf.id, rf.state, rf.reply = true, rep.status, ro.ID, ro.Status, rep.String()
	b.counts[fmt.Sprintf("refund answer %d %s", rep.status, ro.Status)]++
	switch {
	case rep.status == http.StatusCreated && ro.Status == "succeeded" && ro.ID != "":
	case rep.status == http.StatusAccepted && (ro.Status == "queued" || ro.Status == "pending") && ro.ID != "":
	default:
		b.problemLocked("a refund of a succeeded charge not answered 201 succeeded or 202 queued", "charge %s, refund of %d: %s", rf.charge.id, rf.amount, rep)
		return
	}
	if ro.Amount != rf.amount {
		b.problemLocked("an accepted refund of another amount than asked", "asked %d of %s, answered %s", rf.amount, rf.charge.id, rep)
	}
}

func (b *chaosBook) acceptedRefunds() []*chaosRefund {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*chaosRefund
	for _, rf := range b.refunds {
		if rf.accepted() {
			out = append(out, rf)
		}
	}
	return out
}

// --- the money check -----------------------------------------------------------------------------

// chaosSummary is what the run adds up to.
type chaosSummary struct {
	charges, told                                    int
	byTold                                           map[string]int
	processing, processingFinal                      int
	maxResolve                                       time.Duration
	refunds, refundsQueued, refundsRefused, unknownR int
	strayVoided, strayRefunded                       int
	orphans, ledgerTxs                               int
	unsettledKeys                                    int
	loadTook, settled                                time.Duration
	settledOK                                        bool
	// keptByReference counts the charges whose transaction was found by their gateway
	// reference, keptByElimination those found as the only one not given back.
	keptByReference, keptByElimination int
	failedNoID                         int
	hedges                             string // payrouter_hedges_total by result, both instances
	multiGateway                       int    // charges with transactions at two gateways or more
}

func (s chaosSummary) String(r *chaosRun) string {
	r.flipsMu.Lock()
	flips := []string{fmt.Sprintf("normal %d", r.flips["normal"])}
	for _, b := range chaosBehaviors {
		flips = append(flips, fmt.Sprintf("%s %d", b.name, r.flips[b.name]))
	}
	r.flipsMu.Unlock()
	r.book.mu.Lock()
	var counts []string
	for k, v := range r.book.counts {
		counts = append(counts, fmt.Sprintf("%s: %d", k, v))
	}
	noID := fmt.Sprint(r.book.noID)
	r.book.mu.Unlock()
	sort.Strings(counts)
	settled := fmt.Sprintf("settled %v after the final pass", s.settled.Round(100*time.Millisecond))
	if !s.settledOK {
		settled = fmt.Sprintf("NOT settled %v after the final pass", s.settled.Round(100*time.Millisecond))
	}
	return fmt.Sprintf("chaos: %d charges (%d charge ids told): %d succeeded, %d requires_capture, %d declined, %d failed (and %d answers 503/502 without a charge id), %d processing (%d seen final, in max %v); "+
		"%d refunds accepted (%d queued), %d refused, %d unanswered; %d stray approvals voided, %d refunded; %d ledger transactions, %d of charges no client was told about; "+
		"%d keys never answered; %s killed at %v, back %v later; load %v, %s\n  the transaction each charge stands on found by its gateway_reference %d times, by elimination %d; hedges (since each instance started): %s; charges with transactions at 2+ gateways: %d\n  behaviours set: %s\n  answers without a charge id, by status: %s\n  %s",
		s.charges, s.told, s.byTold["succeeded"], s.byTold["requires_capture"], s.byTold["declined"], s.byTold["failed"], s.failedNoID, s.processing, s.processingFinal,
		s.maxResolve.Round(100*time.Millisecond), s.refunds, s.refundsQueued, s.refundsRefused, s.unknownR, s.strayVoided, s.strayRefunded,
		s.ledgerTxs, s.orphans, s.unsettledKeys, r.killedName, r.killedAt.Round(100*time.Millisecond), r.restartedAfter.Round(100*time.Millisecond),
		s.loadTook.Round(100*time.Millisecond), settled, s.keptByReference, s.keptByElimination, s.hedges, s.multiGateway,
		strings.Join(flips, ", "), noID, strings.Join(counts, "\n  "))
}

// check holds the ledgers against what the clients were told, recording each mismatch as a
// problem, and adds up the run.
func (r *chaosRun) check(t *testing.T, money moneyByCharge, finals map[string]chargeObject, refunds map[string]refundObject) chaosSummary {
	t.Helper()
	b := r.book
	b.mu.Lock()
	charges := make([]*chaosCharge, 0, len(b.charges))
	for _, ch := range b.charges {
		charges = append(charges, ch)
	}
	refundsBy := map[string][]*chaosRefund{}
	sum := chaosSummary{byTold: map[string]int{}, charges: len(b.orders), told: len(b.charges), ledgerTxs: money.total, unsettledKeys: len(b.unsettled),
		failedNoID: b.noID[http.StatusServiceUnavailable] + b.noID[http.StatusBadGateway]}
	for _, rf := range b.refunds {
		refundsBy[rf.charge.id] = append(refundsBy[rf.charge.id], rf)
	}
	b.mu.Unlock()
	sort.Slice(charges, func(i, j int) bool { return charges[i].id < charges[j].id })

	for _, e := range money.foreign {
		b.problem("a ledger transaction whose reference is not <charge id>-a<N>", "%s", e)
	}
	for _, ch := range charges {
		sum.byTold[ch.told]++
		final, haveFinal := finals[ch.id]
		// What the charge is now: what the client was told, or, for processing, what it became.
		status := ch.told
		if ch.told == "processing" {
			sum.processing++
			if !ch.finalAt.IsZero() {
				sum.processingFinal++
				sum.maxResolve = max(sum.maxResolve, ch.finalAt.Sub(ch.toldAt))
			}
			if haveFinal {
				status = final.Status
			}
			if status == "processing" || status == "" {
				b.problem("a charge told processing is not final once settled", "%s (%s %d): GET shows %q; ledger %s",
					ch.id, ch.order.currency, ch.order.amount, final.Status, describeEntries(money.charges[ch.id]))
				continue
			}
		} else if haveFinal && !sameStatus(ch.told, final.Status) {
			b.problem("a charge's status changed from what its client was told", "%s told %s (%d), GET shows %s; ledger %s",
				ch.id, ch.told, ch.status, final.Status, describeEntries(money.charges[ch.id]))
		}

		txs := money.charges[ch.id]
		// Accepted refunds are owed; refunds never answered may or may not have been applied.
		var owed, maybe int64
		for _, rf := range refundsBy[ch.id] {
			switch {
			case rf.accepted():
				owed += rf.amount
				sum.refunds++
				if rf.status == http.StatusAccepted {
					sum.refundsQueued++
				}
				if ro := refunds[rf.id]; ro.Status != "succeeded" {
					b.problem("an accepted refund not succeeded once settled (GET /refund/{id})", "%s of %d for %s (answered %d %s): now %q",
						rf.id, rf.amount, ch.id, rf.status, rf.state, ro.Status)
				}
			case rf.answered:
				sum.refundsRefused++
			default:
				maybe += rf.amount
				sum.unknownR++
			}
		}
		r.checkMoney(ch, status, final, txs, owed, maybe, &sum)
	}

	known := map[string]bool{}
	for _, ch := range charges {
		known[ch.id] = true
	}
	for _, txs := range money.charges {
		gws := map[string]bool{}
		for _, e := range txs {
			gws[e.Gateway] = true
		}
		if len(gws) > 1 {
			sum.multiGateway++
		}
	}
	for id, txs := range money.charges {
		if known[id] {
			continue
		}
		sum.orphans++
		if held := holding(txs); held > 0 {
			b.problem("money held for a charge no client was told about", "%s holds %d: %s; %s", id, held, describeEntries(txs), r.sameOrder(txs))
		}
	}
	return sum
}

// sameOrder names the orders of the same amount and currency as a charge no client was told
// about, and what their keys were answered: the order such a charge came from (amounts are
// random enough to tell), charged again under another id when its key was sent again.
func (r *chaosRun) sameOrder(txs []ledgerEntry) string {
	if len(txs) == 0 {
		return ""
	}
	r.book.mu.Lock()
	defer r.book.mu.Unlock()
	var found []string
	for _, o := range r.book.orders {
		if o.amount != txs[0].Amount || o.currency != txs[0].Currency {
			continue
		}
		st := o.snapshot()
		told := "no charge id"
		if ch := r.book.charges[st.id]; ch != nil {
			told = ch.id + " told " + ch.told
		}
		found = append(found, fmt.Sprintf("key %s answered %d (%s)", o.key, st.status, told))
	}
	if len(found) == 0 {
		return "no order of that amount and currency"
	}
	return "its order, by amount and currency: " + strings.Join(found, ", ")
}

// sameStatus reports whether a charge's later status is what its client was told, allowing a
// succeeded charge to show its refunds.
func sameStatus(told, now string) bool {
	if told == "succeeded" {
		return now == "succeeded" || now == "refunded" || now == "partially_refunded"
	}
	return told == now
}

// checkMoney holds one charge's transactions against its status: owed is the sum of its
// accepted refunds, maybe that of refunds whose answer never came.
func (r *chaosRun) checkMoney(ch *chaosCharge, status string, final chargeObject, txs []ledgerEntry, owed, maybe int64, sum *chaosSummary) {
	b := r.book
	amount := ch.order.amount
	where := fmt.Sprintf("%s (%s %d, capture %v, %s, told %s %d, now %s)", ch.id, ch.order.currency, amount, ch.order.capture, ch.order.token, ch.told, ch.status, status)
	// keep is the transaction the charge stands on: the one at its gateway with its gateway
	// reference, else the only one that is not voided.
	keep := -1
	for i, e := range txs {
		if final.Gateway != "" && e.Gateway == final.Gateway && e.ID == final.GatewayReference {
			keep = i
			sum.keptByReference++
		}
	}
	strays := func(skip int) {
		for i, e := range txs {
			if i == skip {
				continue
			}
			switch {
			case e.Status == "voided":
				sum.strayVoided++
			case e.released():
				sum.strayRefunded++
			default:
				b.problem("a stray approval of a charge still holds money", "%s: %s; all: %s", where, e, describeEntries(txs))
			}
		}
	}
	switch status {
	case "succeeded", "refunded", "partially_refunded", "requires_capture":
		want := "captured"
		if status == "requires_capture" {
			want = "authorized"
		}
		if keep < 0 {
			var live []int
			for i, e := range txs {
				if !e.released() {
					live = append(live, i)
				}
			}
			if len(live) == 1 {
				keep = live[0]
				sum.keptByElimination++
			}
		}
		if keep < 0 {
			b.problem("a "+status+" charge without exactly one "+want+" transaction", "%s: gateway %q ref %q; ledger %s",
				where, final.Gateway, final.GatewayReference, describeEntries(txs))
			strays(-1)
			return
		}
		k := txs[keep]
		switch {
		case k.Amount != amount:
			b.problem("a charge's transaction of another amount", "%s: %s", where, k)
		case want == "authorized" && k.Status != "authorized":
			b.problem("a requires_capture charge not holding an authorization", "%s: %s; all %s", where, k, describeEntries(txs))
		case want == "captured" && k.Status != "captured" && k.Status != "partially_refunded" && k.Status != "refunded":
			b.problem("a succeeded charge not captured at its gateway", "%s: %s; all %s", where, k, describeEntries(txs))
		case want == "captured" && (k.Refunded < owed || k.Refunded > owed+maybe):
			b.problem("a succeeded charge's refunds not applied exactly once", "%s: accepted refunds %d (plus %d unanswered), the ledger refunded %d: %s",
				where, owed, maybe, k.Refunded, k)
		}
		strays(keep)
	case "declined", "failed", "voided":
		if owed > 0 {
			b.problem("a refund accepted for a charge that holds no money", "%s: %d accepted", where, owed)
		}
		strays(-1)
	default:
		b.problem("a charge in a status the check does not know", "%s: ledger %s", where, describeEntries(txs))
	}
}

// TestChaosMoneyCheck: the money check of TestChaosMoney finds each kind of mismatch in
// hand-made ledgers and passes balanced ones, so that a chaos run without findings means the
// ledgers balanced, not that nothing was compared. No process is started.
func TestChaosMoneyCheck(t *testing.T) {
	const id, amount = "ch_T", 1000
	tx := func(gw, ref, gid, status string, refunded int64) ledgerEntry {
		return ledgerEntry{Gateway: gw, Reference: id + "-" + ref, ID: gid, Amount: amount, Currency: "USD", Status: status, Refunded: refunded}
	}
	at := func(gw, gid, status string) chargeObject {
		return chargeObject{ID: id, Status: status, Amount: amount, Gateway: gw, GatewayReference: gid}
	}
	cases := []struct {
		name    string
		told    string
		capture bool
		final   chargeObject
		txs     []ledgerEntry
		refunds []int64 // accepted refunds, each succeeded
		other   map[string][]ledgerEntry
		want    string // the kinds of problem expected, joined by " + "; "" for none
	}{
		{"succeeded, the hedge's loser voided", "succeeded", true, at("paywell", "P1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0), tx("ding", "a2", "D1", "voided", 0)}, nil, nil, ""},
		{"succeeded, a stray refunded in full", "succeeded", true, at("ding", "D1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "refunded", amount), tx("ding", "a2", "D1", "captured", 0)}, nil, nil, ""},
		{"succeeded, captured twice", "succeeded", true, at("paywell", "P1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0), tx("ding", "a2", "D1", "captured", 0)}, nil, nil, "a stray approval of a charge still holds money"},
		{"succeeded, the loser still authorized", "succeeded", true, at("paywell", "P1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0), tx("ding", "a2", "D1", "authorized", 0)}, nil, nil, "a stray approval of a charge still holds money"},
		{"succeeded, nothing captured", "succeeded", true, at("paywell", "P1", "succeeded"),
			nil, nil, nil, "a succeeded charge without exactly one captured transaction"},
		{"succeeded, only authorized", "succeeded", true, at("paywell", "P1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "authorized", 0)}, nil, nil, "a succeeded charge not captured at its gateway"},
		{"succeeded, a refund applied", "succeeded", true, at("paywell", "P1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "partially_refunded", 300)}, []int64{300}, nil, ""},
		{"succeeded, fully refunded in two", "succeeded", true, at("paywell", "P1", "refunded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "refunded", amount)}, []int64{400, 600}, nil, ""},
		{"succeeded, a refund never applied", "succeeded", true, at("paywell", "P1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0)}, []int64{300}, nil, "a succeeded charge's refunds not applied exactly once"},
		{"succeeded, a refund applied twice", "succeeded", true, at("paywell", "P1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "partially_refunded", 600)}, []int64{300}, nil, "a succeeded charge's refunds not applied exactly once"},
		{"declined, nothing", "declined", true, at("paywell", "", "declined"), nil, nil, nil, ""},
		{"declined, yet captured", "declined", true, at("paywell", "", "declined"),
			[]ledgerEntry{tx("tranglo", "a1", "T1", "captured", 0)}, nil, nil, "a stray approval of a charge still holds money"},
		{"failed, its approval voided", "failed", true, at("", "", "failed"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "voided", 0)}, nil, nil, ""},
		{"failed, yet succeeded later", "failed", true, at("paywell", "P1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0)}, nil, nil,
			"a charge's status changed from what its client was told + a stray approval of a charge still holds money"},
		{"requires_capture, one authorization", "requires_capture", false, at("ding", "D1", "requires_capture"),
			[]ledgerEntry{tx("ding", "a1", "D1", "authorized", 0)}, nil, nil, ""},
		{"requires_capture, captured", "requires_capture", false, at("ding", "D1", "requires_capture"),
			[]ledgerEntry{tx("ding", "a1", "D1", "captured", 0)}, nil, nil, "a requires_capture charge not holding an authorization"},
		{"processing, then succeeded", "processing", true, at("paywell", "P1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0)}, nil, nil, ""},
		{"processing, then failed, yet captured", "processing", true, at("", "", "failed"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0)}, nil, nil, "a stray approval of a charge still holds money"},
		{"processing for ever", "processing", true, at("", "", "processing"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0)}, nil, nil, "a charge told processing is not final once settled"},
		{"money of a charge nobody was told about", "declined", true, at("", "", "declined"), nil, nil,
			map[string][]ledgerEntry{"ch_U": {{Gateway: "paywell", Reference: "ch_U-a1", ID: "P9", Amount: 5, Status: "captured"}}},
			"money held for a charge no client was told about"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &chaosRun{book: newChaosBook()}
			o := &chaosOrder{key: "k", amount: amount, currency: "USD", capture: c.capture, token: "tok_visa"}
			ch := &chaosCharge{id: id, order: o, told: c.told, status: http.StatusCreated, toldAt: time.Now()}
			if c.told == "processing" {
				ch.finalAt = ch.toldAt.Add(time.Second)
			}
			r.book.orders, r.book.charges[id] = []*chaosOrder{o}, ch
			finalRefunds := map[string]refundObject{}
			for i, a := range c.refunds {
				rf := &chaosRefund{key: fmt.Sprint("rk", i), charge: ch, amount: a, answered: true, status: http.StatusCreated, id: fmt.Sprint("re_", i), state: "succeeded"}
				r.book.refunds = append(r.book.refunds, rf)
				finalRefunds[rf.id] = refundObject{ID: rf.id, ChargeID: id, Amount: a, Status: "succeeded"}
			}
			money := moneyByCharge{charges: map[string][]ledgerEntry{}}
			if c.txs != nil {
				money.charges[id] = c.txs
			}
			for k, v := range c.other {
				money.charges[k] = v
			}
			r.check(t, money, map[string]chargeObject{id: c.final}, finalRefunds)
			var got []string
			for _, kind := range r.book.order {
				got = append(got, fmt.Sprintf("%s: %s", kind, r.book.problems[kind]))
			}
			switch {
			case c.want == "" && len(got) > 0:
				t.Errorf("a balanced ledger: want no finding; got %v", got)
			case strings.Join(r.book.order, " + ") != c.want:
				t.Errorf("want exactly the findings %q; got %v", c.want, got)
			}
		})
	}
}

// waitForStrays polls the ledgers until no transaction holds money that its charge does not keep
// (an approval after a failover, a hedge that lost, a late answer), or until by: releasing them
// is the queue worker's job, from rechecks handed out every few gateway timeouts. A charge no
// client was told about is read through GET /charge/{id}. It returns the last ledgers read; the
// money check then says what is wrong, if anything still is.
func (r *chaosRun) waitForStrays(t *testing.T, s *sims, finals map[string]chargeObject, by time.Time) (moneyByCharge, error) {
	t.Helper()
	began := time.Now()
	for {
		money, err := readMoney(s)
		if err != nil {
			return money, err
		}
		var strays []string
		for id, txs := range money.charges {
			final, ok := finals[id]
			if !ok {
				in := r.fleet.get(0)
				rep, err := send(in.client, http.MethodGet, in.url+"/charge/"+id, nil, "Authorization", "Bearer "+apiKey)
				if err == nil && rep.status == http.StatusOK && json.Unmarshal(rep.body, &final) == nil {
					finals[id] = final
				}
			}
			for _, e := range txs {
				kept := e.Gateway == final.Gateway && e.ID == final.GatewayReference &&
					(final.Status == "succeeded" || final.Status == "requires_capture" || final.Status == "refunded" || final.Status == "processing")
				if e.held() > 0 && !kept {
					strays = append(strays, e.String()+" of "+id+" ("+final.Status+")")
				}
			}
		}
		if len(strays) == 0 {
			t.Logf("no money held by attempts no charge keeps, %v after the charges settled", time.Since(began).Round(time.Millisecond))
			return money, nil
		}
		if time.Now().After(by) {
			t.Logf("%d transaction(s) still hold money no charge keeps, e.g. %s", len(strays), strays[0])
			return money, nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}
