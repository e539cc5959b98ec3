package resilience_test

// Measurements of the fleet against a real redis-server, for `make bench`: how fast a second
// instance learns that a breaker opened, without HTTP in the way (TestBenchFleetAgreement), and
// what sharing a breaker through Redis costs a call, ours against gobreaker's
// DistributedCircuitBreaker (BenchmarkGuardWithFleet, BenchmarkDistributedGobreaker, compared in
// one run by TestBenchBreakerOnRedis). The TestBench... tests are skipped unless PAYROUTER_BENCH=1,
// as in bench/: they take seconds of a whole machine.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/redisstore"
	"github.com/payrouter/payrouter/redisstore/redistest"
	"github.com/payrouter/payrouter/resilience"
)

// requireBenchEnv skips t unless PAYROUTER_BENCH=1, which `make bench` sets.
func requireBenchEnv(t *testing.T) {
	t.Helper()
	if os.Getenv("PAYROUTER_BENCH") != "1" {
		t.Skip("PAYROUTER_BENCH=1 not set: the measurements run with `make bench`")
	}
}

// benchRules are the breaker rules of every measurement here: payrouter's demo rule (5 failures
// in a row), and a cooldown long enough that nothing half-opens during one.
var benchRules = resilience.BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 5, Cooldown: time.Hour}}

// benchCallers is how many goroutines call at once in the benchmarks, the bench/ loads' busy
// storefront; benchCallTime is how long their gateway takes, a fast one.
const (
	benchCallers  = 16
	benchCallTime = time.Millisecond
)

// benchInstance is one instance's breakers tied to the fleet, with the times its paywell/charge
// breaker opened.
type benchInstance struct {
	d      *resilience.Domains
	fleet  *resilience.Fleet
	guard  *resilience.Guard
	opened chan time.Time
}

// openClock is an Observer that notes when a charge breaker starts to show open. It is called
// under the breaker's lock, in the same step that changes the state, so its time is the moment
// Breaker.State() first answers open, with no polling in between.
type openClock struct {
	resilience.NopObserver
	opened chan time.Time
}

func (c openClock) BreakerTransition(_ string, op payrouter.Operation, _, to resilience.State, _ resilience.Counts, _ time.Duration) {
	if op == payrouter.OpCharge && to == resilience.StateOpen {
		select {
		case c.opened <- time.Now():
		default: // nobody is measuring
		}
	}
}

// startBenchInstance starts an instance named origin on the Redis at url, with keys under prefix,
// synced and running until tb's end.
func startBenchInstance(tb testing.TB, url, prefix, origin string) *benchInstance {
	tb.Helper()
	store, err := redisstore.Open(url, redisstore.Options{Prefix: prefix})
	if err != nil {
		tb.Fatal(err)
	}
	in := &benchInstance{opened: make(chan time.Time, 1)}
	in.d = resilience.NewDomains([]resilience.GatewaySettings{{Name: "paywell", TimeoutSettings: resilience.TimeoutSettings{Timeout: 2 * time.Second}, BulkheadSettings: resilience.BulkheadSettings{MaxConcurrent: benchCallers}, Breaker: benchRules}}, openClock{opened: in.opened})
	in.guard = in.d.Guard("paywell", payrouter.OpCharge)
	in.fleet = resilience.NewFleet(in.d, store, resilience.FleetOptions{Origin: origin})
	if err := in.fleet.Sync(context.Background()); err != nil {
		tb.Fatalf("%s: Sync at start: %v", origin, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { in.fleet.Run(ctx) })
	tb.Cleanup(func() { cancel(); wg.Wait(); store.Close(); in.d.Close() })
	return in
}

func (in *benchInstance) breaker() *resilience.Breaker { return in.guard.Breaker() }

func benchUnavailable(context.Context) payrouter.Result {
	return payrouter.Result{Outcome: payrouter.OutcomeUnavailable}
}

// fleetAgreementRounds is how many trips TestBenchFleetAgreement times: enough for a p99 that is
// not simply the slowest, at some 25 ms a round.
const fleetAgreementRounds = 100

// TestBenchFleetAgreement measures, in process, how long instance B takes to show open a breaker
// that instance A tripped: two Domains, each with its Fleet and its own Redis client, on one
// redis-server, as two payrouter processes are. A trips paywell/charge with 5 failed calls
// through its Guard; the time is from A's breaker opening to B's, both read from an Observer
// called as the state changes. What it takes is A's fleet call that opens the breaker in Redis
// (the open, or the failures' report whose script trips it: either publishes the change), Redis
// pub/sub, and B applying the event: bench's
// TestBenchBreakerAgreement measures the same between processes, through their admin APIs.
func TestBenchFleetAgreement(t *testing.T) {
	requireBenchEnv(t)
	srv := redistest.Start(t)
	const prefix = "fleetbench:"
	a := startBenchInstance(t, srv.URL(), prefix, "A")
	b := startBenchInstance(t, srv.URL(), prefix, "B")
	check, err := redisstore.Open(srv.URL(), redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	name := a.breaker().Name()

	var took []time.Duration
	stale, undone := 0, 0
	for round := 0; len(took) < fleetAgreementRounds; round++ {
		if round == 2*fleetAgreementRounds {
			t.Fatalf("%d rounds, %d of them spoiled by a late open; giving up", round, stale)
		}
		undone += benchFleetReset(t, a, b, check, name)
		benchDrain(a.opened)
		benchDrain(b.opened)
		if a.breaker().State() != resilience.StateClosed || b.breaker().State() != resilience.StateClosed {
			stale++ // reopened by late news since the reset (see benchFleetReset)
			continue
		}

		for range benchRules.ConsecutiveFailures {
			a.guard.Do(t.Context(), benchUnavailable)
		}
		var openedA, openedB time.Time
		select {
		case openedA = <-a.opened:
		default:
			t.Fatalf("round %d: A's breaker is %s after %d failures, want open", round+1, a.breaker().State(), benchRules.ConsecutiveFailures)
		}
		select {
		case openedB = <-b.opened:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: B's breaker is %s 5 s after A's opened", round+1, b.breaker().State())
		}
		if openedB.Before(openedA) {
			stale++ // B opened on the previous round's late news (see benchFleetReset)
			continue
		}
		took = append(took, openedB.Sub(openedA))
		// Let the trip's own fleet calls finish before the next reset (see benchFleetReset).
		time.Sleep(benchTripSettle)
	}

	slices.Sort(took)
	w := t.Output()
	fmt.Fprintln(w)
	fmt.Fprintf(w, "fleet agreement in process: A trips paywell/charge (5 failures through its Guard); time until B's Breaker.State() is open; %d rounds, one redis-server (%d more spoiled by a late open and not counted; %d resets undone by a late fleet call and repeated)\n", len(took), stale, undone)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "min\tp50\tp90\tp99\tmax")
	var cells []string
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 1} {
		cells = append(cells, benchQuantile(took, q).Round(time.Microsecond).String())
	}
	fmt.Fprintln(tw, strings.Join(cells, "\t"))
	tw.Flush()
}

// benchTripSettle is how long a round waits after a trip before the next reset. A trip makes two
// fleet calls of its own, asynchronously: the failures' report and the open (each bounded by the
// fleet's 100 ms timeout, and done in well under a millisecond here). One that reaches Redis after
// the reset opens the breaker again, fleet-wide, for a whole cooldown: a reset that races the trip
// it undoes loses. Waiting keeps rounds apart; benchFleetReset repairs the rare round it does not.
const benchTripSettle = 20 * time.Millisecond

// benchFleetReset resets the breaker name through a's fleet until both instances show it closed
// and Redis holds nothing of it, trying again when a late fleet call (benchTripSettle) opened it
// again; it returns how many resets were undone so.
func benchFleetReset(t *testing.T, a, b *benchInstance, check *redisstore.Store, name string) (undone int) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		if attempt > 10 {
			t.Fatalf("%s not clean after %d resets", name, attempt-1)
		}
		if err := a.fleet.Force(t.Context(), a.breaker(), payrouter.ForcedNone); err != nil {
			t.Fatalf("reset %s: %v", name, err)
		}
		closed := false
		for deadline := time.Now().Add(time.Second); !closed && time.Now().Before(deadline); {
			closed = a.breaker().State() == resilience.StateClosed && b.breaker().State() == resilience.StateClosed
			if !closed {
				time.Sleep(time.Millisecond)
			}
		}
		states, err := check.BreakerStates(t.Context(), []string{name})
		if err != nil {
			t.Fatal(err)
		}
		st := states[name]
		if closed && !st.Open && !st.HalfOpen && st.Counts.Requests == 0 {
			return attempt - 1
		}
	}
}

func benchDrain(c chan time.Time) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// benchQuantile is the q-quantile of sorted by the nearest-rank method (bench.Sample.Quantile's).
func benchQuantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(sorted)) - 1e-9))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// benchGatewayCall stands for a call to a fast gateway: it takes benchCallTime and succeeds.
func benchGatewayCall() { time.Sleep(benchCallTime) }

// BenchmarkGuardWithFleet is payrouter's shared breaker on the request path: benchCallers
// goroutines calling through one Guard whose Fleet shares the breaker through a real Redis.
// Admission is local (no network call); the successes are sent to Redis in one script call every
// 100 ms, whatever the rate; so the calls run side by side, and the rate is about benchCallers
// calls per benchCallTime, what the gateway itself allows.
func BenchmarkGuardWithFleet(b *testing.B) {
	srv := redistest.Start(b)
	in := startBenchInstance(b, srv.URL(), "fleetbench:", "bench")
	ctx := context.Background()
	call := func(context.Context) payrouter.Result {
		benchGatewayCall()
		return payrouter.Result{Outcome: payrouter.OutcomeSucceeded}
	}
	benchRunCallers(b, func() error {
		if r, _ := in.guard.Do(ctx, call); r.Outcome != payrouter.OutcomeSucceeded {
			return fmt.Errorf("outcome %s: %s", r.Outcome, r.Detail)
		}
		return nil
	}, nil)
}

// BenchmarkDistributedGobreaker is gobreaker v2.4.0's DistributedCircuitBreaker on the same Redis
// and the same calls: what docs/architecture.md (Breakers) keeps off the request path, measured for
// the record, never used by payrouter.
//
// Why it serializes: DistributedCircuitBreaker.Execute reads the shared state (GET), takes a lock
// in Redis (SharedDataStore.Lock), runs the wrapped call, writes the state back (SET) and only
// then unlocks. The lock is one per breaker, so it is held for the whole gateway call, and every
// call through that breaker, from every goroutine of every instance sharing the Redis, runs one at
// a time: the rate cannot pass 1 / (benchCallTime + four round trips), however many callers
// there are. Worse, a caller that finds the lock taken sleeps 500 ms before trying again (and
// gives up after 5 s with the store's error), while the caller that just finished takes it again
// at once: a few callers get nearly every call through and the others starve (starved-callers;
// in a run longer than 5 s, failed/op too). Execute also reads the shared state before it takes
// the lock, so a caller that waited for the lock writes back counts that miss the calls made
// meanwhile: concurrent callers lose each other's updates.
func BenchmarkDistributedGobreaker(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 2 * benchCallers, MaxRetries: -1})
	b.Cleanup(func() { rdb.Close() })
	store := &gobreakerStore{rdb: rdb, prefix: "fleetbench:", lockTTL: 5 * time.Second, tokens: map[string]string{}}
	cb, err := gobreaker.NewDistributedCircuitBreaker[struct{}](store, gobreaker.Settings{
		Name:        "paywell/charge",
		MaxRequests: 1,
		Timeout:     benchRules.Cooldown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= uint32(benchRules.ConsecutiveFailures) },
	})
	if err != nil {
		b.Fatal(err)
	}
	benchRunCallers(b, func() error {
		_, err := cb.Execute(func() (struct{}, error) {
			benchGatewayCall()
			return struct{}{}, nil
		})
		return err
	}, func() { store.ending.Store(true) })
}

// benchRunCallers runs benchCallers goroutines, each starting its next call as soon as its last
// returned, until b.N calls have completed, and reports the rate (calls/s), the p50 and p99 time
// of those calls, the share that failed, and how many callers completed none (starved). The
// clock stops at the b.N-th call: the calls still waiting then are not counted, so that a breaker
// that makes some callers wait seconds is measured by the rate of the others, not by how long its
// last caller waited. end, when not nil, is then called to let those waiting go at once.
func benchRunCallers(b *testing.B, call func() error, end func()) {
	n := int64(b.N)
	lat := make([][]time.Duration, benchCallers)
	var completed, failed atomic.Int64
	finished := make(chan struct{})
	var wg sync.WaitGroup
	b.ResetTimer()
	for i := range benchCallers {
		wg.Go(func() {
			for completed.Load() < n {
				start := time.Now()
				err := call()
				d := time.Since(start)
				c := completed.Add(1)
				if c > n {
					return // after the clock stopped
				}
				lat[i] = append(lat[i], d)
				if err != nil {
					failed.Add(1)
				}
				if c == n {
					close(finished)
				}
			}
		})
	}
	<-finished
	b.StopTimer()
	if end != nil {
		end()
	}
	wg.Wait()
	starved := 0
	for _, l := range lat {
		if len(l) == 0 {
			starved++
		}
	}
	all := slices.Sorted(slices.Values(slices.Concat(lat...)))
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
	b.ReportMetric(float64(benchQuantile(all, 0.5))/float64(time.Millisecond), "p50-ms")
	b.ReportMetric(float64(benchQuantile(all, 0.99))/float64(time.Millisecond), "p99-ms")
	b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
	b.ReportMetric(float64(starved), "starved-callers")
}

// breakerOnRedisPairs is how many times TestBenchBreakerOnRedis runs each benchmark, alternately.
const breakerOnRedisPairs = 2

// TestBenchBreakerOnRedis runs BenchmarkDistributedGobreaker and BenchmarkGuardWithFleet
// alternately (A B B A ...), so that the machine's drift falls on both alike, and prints each
// run, each one's pooled rate and the ratio: how many more calls per second a fleet can make
// through payrouter's shared breaker than through gobreaker's distributed one, with the same
// Redis, gateway and callers.
func TestBenchBreakerOnRedis(t *testing.T) {
	requireBenchEnv(t)
	benches := []struct {
		name string
		fn   func(*testing.B)
	}{
		{"DistributedGobreaker", BenchmarkDistributedGobreaker},
		{"GuardWithFleet", BenchmarkGuardWithFleet},
	}
	results := make([][]testing.BenchmarkResult, len(benches))
	w := t.Output()
	fmt.Fprintln(w)
	fmt.Fprintf(w, "shared breaker on one redis-server: %d goroutines calling a %s gateway through gobreaker's DistributedCircuitBreaker vs payrouter's Guard with a Fleet; %d alternating runs each\n",
		benchCallers, benchCallTime, breakerOnRedisPairs)
	fmt.Fprintf(w, "p50-ms and p99-ms are of the calls completed; starved-callers is how many of the %d completed none\n", benchCallers)
	for i := range 2 * breakerOnRedisPairs {
		k := i % 2
		if (i/2)%2 == 1 {
			k = 1 - k // A B, B A, A B, ...
		}
		r := testing.Benchmark(benches[k].fn)
		if r.N == 0 {
			t.Fatalf("Benchmark%s failed; run `go test -run '^$' -bench %s ./resilience/` for its message", benches[k].name, benches[k].name)
		}
		results[k] = append(results[k], r)
		fmt.Fprintf(w, "Benchmark%s\t%s\n", benches[k].name, r)
	}
	rate := func(rs []testing.BenchmarkResult) float64 {
		var n int
		var d time.Duration
		for _, r := range rs {
			n += r.N
			d += r.T
		}
		return float64(n) / d.Seconds()
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "breaker\tcalls/s (pooled)")
	for k, bench := range benches {
		fmt.Fprintf(tw, "%s\t%.0f\n", bench.name, rate(results[k]))
	}
	fmt.Fprintf(tw, "GuardWithFleet / DistributedGobreaker\t%.1fx\n", rate(results[1])/rate(results[0]))
	tw.Flush()
}

// gobreakerStore is gobreaker.SharedDataStore over go-redis, written as its interface asks: Lock
// is one attempt, SET NX PX with a token of this holder (gobreaker itself retries every 500 ms,
// for up to 5 s); Unlock deletes the lock only if it still holds that token, so that a holder
// whose lock expired cannot free someone else's; GetData and SetData are GET and SET, nil data
// for a missing key.
type gobreakerStore struct {
	rdb     redis.UniversalClient
	prefix  string
	lockTTL time.Duration

	mu sync.Mutex
	// tokens holds the token of each lock this process holds. gobreaker's Unlock takes no token,
	// and the lock lets one holder at a time, so one per name is enough (as long as no call
	// outlives lockTTL, which a 1 ms call does not).
	tokens map[string]string

	// ending, set once a benchmark's clock has stopped, lets every waiting caller through without
	// the lock: gobreaker's lock loop cannot be cancelled, and would keep the run's last callers
	// for up to 5 s of unmeasured time.
	ending atomic.Bool
}

var _ gobreaker.SharedDataStore = (*gobreakerStore)(nil)

// errGobreakerLockTaken is Lock's answer when another caller holds the lock.
var errGobreakerLockTaken = errors.New("gobreakerStore: lock held by another caller")

// gobreakerStoreTimeout bounds each call: the interface has no context.
const gobreakerStoreTimeout = time.Second

// gobreakerUnlockScript deletes KEYS[1] only if it holds ARGV[1], the holder's token.
var gobreakerUnlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

func (s *gobreakerStore) Lock(name string) error {
	if s.ending.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), gobreakerStoreTimeout)
	defer cancel()
	token := rand.Text()
	err := s.rdb.Do(ctx, "SET", s.prefix+name, token, "NX", "PX", s.lockTTL.Milliseconds()).Err()
	if errors.Is(err, redis.Nil) {
		return errGobreakerLockTaken
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.tokens[name] = token
	s.mu.Unlock()
	return nil
}

func (s *gobreakerStore) Unlock(name string) error {
	s.mu.Lock()
	token, ok := s.tokens[name]
	delete(s.tokens, name)
	s.mu.Unlock()
	if !ok && s.ending.Load() {
		return nil // let through by ending
	}
	if !ok {
		return errors.New("gobreakerStore: unlock of " + name + ", which this process does not hold")
	}
	ctx, cancel := context.WithTimeout(context.Background(), gobreakerStoreTimeout)
	defer cancel()
	n, err := gobreakerUnlockScript.Run(ctx, s.rdb, []string{s.prefix + name}, token).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("gobreakerStore: lock " + name + " expired before unlock")
	}
	return nil
}

func (s *gobreakerStore) GetData(name string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), gobreakerStoreTimeout)
	defer cancel()
	b, err := s.rdb.Get(ctx, s.prefix+name).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return b, err
}

func (s *gobreakerStore) SetData(name string, data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), gobreakerStoreTimeout)
	defer cancel()
	return s.rdb.Set(ctx, s.prefix+name, data, 0).Err()
}
