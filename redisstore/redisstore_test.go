package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/redisstore"
	"github.com/payrouter/payrouter/redisstore/redistest"
	"github.com/payrouter/payrouter/storetest"
)

// suiteTimeout bounds each Redis call in the shared suite. The suite checks behaviour, not
// speed: a loaded CI machine running -race must not fail it for being slow. The tight default
// is tested by TestRedisDown and TestRedisUnresponsive.
const suiteTimeout = time.Second

// prefixSeq gives every store a test opens a key prefix of its own, so stores sharing one
// redis-server start empty without a FLUSHDB between them.
var prefixSeq atomic.Int64

// openStore opens a store on the Redis at url, closed when tb ends; an empty o.Prefix gets a
// fresh one.
func openStore(tb testing.TB, url string, o redisstore.Options) *redisstore.Store {
	tb.Helper()
	if o.Prefix == "" {
		o.Prefix = fmt.Sprintf("test%d:", prefixSeq.Add(1))
	}
	s, err := redisstore.Open(url, o)
	if err != nil {
		tb.Fatalf("Open(%s): %v", url, err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// rawClient reads what the store wrote, as an operator with redis-cli would.
func rawClient(t *testing.T, srv *redistest.Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestStore(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T) payrouter.Store {
		return openStore(t, srv.URL(), redisstore.Options{Timeout: suiteTimeout})
	})
}

func BenchmarkStore(b *testing.B) {
	srv := redistest.Start(b)
	storetest.Benchmark(b, func(b *testing.B) payrouter.Store {
		return openStore(b, srv.URL(), redisstore.Options{})
	})
}

// outageCalls are the calls on every charge's path, each made with the round number n so that
// every round works on keys of its own (a restarted Redis is empty).
var outageCalls = []struct {
	name string
	call func(ctx context.Context, s *redisstore.Store, n int) error
}{
	{"SaveCharge", func(ctx context.Context, s *redisstore.Store, n int) error {
		return s.SaveCharge(ctx, &payrouter.Charge{ID: fmt.Sprintf("ch_%d", n), Status: payrouter.StatusProcessing,
			Amount: 100, Currency: "USD", CreatedAt: time.Now()})
	}},
	{"Charge", func(ctx context.Context, s *redisstore.Store, n int) error {
		_, err := s.Charge(ctx, fmt.Sprintf("ch_%d", n))
		return err
	}},
	{"Claim", func(ctx context.Context, s *redisstore.Store, n int) error {
		rec, err := s.Claim(ctx, fmt.Sprintf("k-%d", n), "fp", time.Minute)
		if err == nil && rec != nil {
			return fmt.Errorf("Claim of a new key returned a record %+v", rec)
		}
		return err
	}},
}

// wantFastFailure makes every outage call once and checks that each fails, says it is the store
// failing, and does so within twice the store's timeout rather than hanging the request.
func wantFastFailure(t *testing.T, s *redisstore.Store, timeout time.Duration, n int) {
	t.Helper()
	for _, c := range outageCalls {
		start := time.Now()
		err := c.call(t.Context(), s, n)
		took := time.Since(start)
		switch {
		case err == nil:
			t.Errorf("%s with Redis unavailable succeeded, want an error", c.name)
		case errors.Is(err, payrouter.ErrNotFound), errors.Is(err, payrouter.ErrInFlight):
			t.Errorf("%s with Redis unavailable: %v, want a store failure, not an answer", c.name, err)
		case !strings.HasPrefix(err.Error(), "redisstore: "):
			t.Errorf("%s with Redis unavailable: %q does not say the store failed", c.name, err)
		}
		if took > 2*timeout {
			t.Errorf("%s with Redis unavailable took %v, want at most 2 x %v", c.name, took, timeout)
		}
	}
}

func wantWorking(t *testing.T, s *redisstore.Store, n int, when string) {
	t.Helper()
	for _, c := range outageCalls {
		if err := c.call(t.Context(), s, n); err != nil {
			t.Fatalf("%s %s: %v", c.name, when, err)
		}
	}
}

// TestRedisDown: with Redis gone the store answers every call with an error at once, so requests
// fail fast and honestly, and it works again as soon as Redis is back, with no reconnecting by
// hand and no failed call first.
func TestRedisDown(t *testing.T) {
	const timeout = 100 * time.Millisecond
	srv := redistest.Start(t)
	s := openStore(t, srv.URL(), redisstore.Options{Timeout: timeout})

	wantWorking(t, s, 1, "before the outage")
	srv.Stop()
	wantFastFailure(t, s, timeout, 2)
	wantFastFailure(t, s, timeout, 3) // and again: no state left behind makes a later call hang
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Pooled connections died with the server, and the restarted one has lost its scripts.
	wantWorking(t, s, 4, "after Redis restarted")
}

// TestRedisUnresponsive: a Redis that accepts connections and never answers (overloaded, paused,
// a half-open network path) costs each call its timeout, not a hang. Here no connection refusal
// comes to the rescue; only the store's own deadlines do.
func TestRedisUnresponsive(t *testing.T) {
	const timeout = 100 * time.Millisecond
	s := openStore(t, silentServer(t), redisstore.Options{Timeout: timeout})
	wantFastFailure(t, s, timeout, 1)
}

// silentServer accepts TCP connections and never answers on them. It returns its redis:// URL.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return // closed by the cleanup
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "redis://" + l.Addr().String() + "/0"
}

// TestStoredForm checks what reaches Redis: no payment token anywhere, and every key expiring
// when it should, since a key left without expiry is memory Redis never gets back.
func TestStoredForm(t *testing.T) {
	srv := redistest.Start(t)
	raw := rawClient(t, srv)
	const chargeTTL = time.Hour
	s := openStore(t, srv.URL(), redisstore.Options{ChargeTTL: chargeTTL, Prefix: "form:"})
	ctx := t.Context()

	c := &payrouter.Charge{ID: "ch_form", Status: payrouter.StatusProcessing, Amount: 100, Currency: "USD",
		PaymentMethod: payrouter.PaymentMethod{Type: "card", Token: "tok_secret_4242"}, CreatedAt: time.Now()}
	if err := s.SaveCharge(ctx, c); err != nil {
		t.Fatal(err)
	}
	c.Status = payrouter.StatusSucceeded
	if err := s.SaveCharge(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "k-held", "fp", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "k-done", "fp", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "k-done", payrouter.IdempotencyRecord{Fingerprint: "fp", Status: 201}, 24*time.Hour); err != nil {
		t.Fatal(err)
	}

	keys, err := raw.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	wantKeys := []string{"form:charge:{ch_form}", "form:charges:{succeeded}", "form:idem:{k-done}", "form:idem:{k-held}"}
	if !slices.Equal(keys, wantKeys) {
		t.Fatalf("keys in Redis = %v, want %v (the processing index emptied and gone)", keys, wantKeys)
	}

	v, err := raw.Get(ctx, "form:charge:{ch_form}").Result()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(v, "tok_secret") || strings.Contains(v, "payment_method") {
		t.Errorf("stored charge holds its payment method: %s", v)
	}

	ttls := []struct {
		key  string
		want time.Duration
	}{
		{"form:charge:{ch_form}", chargeTTL},
		{"form:charges:{succeeded}", chargeTTL},
		{"form:idem:{k-held}", 30 * time.Second},
		{"form:idem:{k-done}", 24 * time.Hour},
	}
	for _, tc := range ttls {
		got, err := raw.PTTL(ctx, tc.key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got > tc.want || got < tc.want-10*time.Second {
			t.Errorf("PTTL(%s) = %v, want about %v", tc.key, got, tc.want)
		}
	}
}

// TestStaleIndexEntries: entries of a status's index whose charge expired, or moved to another
// status without the index following (a Cluster save is not one transaction), are skipped and
// removed by ChargesByStatus, even when there are more of them than the limit.
func TestStaleIndexEntries(t *testing.T) {
	srv := redistest.Start(t)
	raw := rawClient(t, srv)
	s := openStore(t, srv.URL(), redisstore.Options{Prefix: "stale:", Timeout: suiteTimeout})
	ctx := t.Context()
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const index = "stale:charges:{processing}"

	save := func(id string, status payrouter.ChargeStatus, created time.Time) {
		t.Helper()
		c := &payrouter.Charge{ID: id, Status: status, Amount: 1, Currency: "USD", CreatedAt: created}
		if err := s.SaveCharge(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	// 250 expired charges older than every live one: more than one read of the index each.
	var expired []string
	for i := range 250 {
		id := fmt.Sprintf("ch_old_%03d", i)
		save(id, payrouter.StatusProcessing, base.Add(time.Duration(i)*time.Millisecond))
		expired = append(expired, "stale:charge:{"+id+"}")
	}
	if err := raw.Del(ctx, expired...).Err(); err != nil { // as their TTL would
		t.Fatal(err)
	}
	save("ch_moved", payrouter.StatusSucceeded, base.Add(time.Hour))
	if err := raw.ZAdd(ctx, index, redis.Z{Score: float64(base.Add(time.Hour).UnixMilli()), Member: "ch_moved"}).Err(); err != nil {
		t.Fatal(err)
	}
	save("ch_live_1", payrouter.StatusProcessing, base.Add(2*time.Hour))
	save("ch_live_2", payrouter.StatusProcessing, base.Add(3*time.Hour))

	for _, limit := range []int{1, 2, 10} {
		got, err := s.ChargesByStatus(ctx, payrouter.StatusProcessing, limit)
		if err != nil {
			t.Fatalf("ChargesByStatus(%d): %v", limit, err)
		}
		want := []string{"ch_live_1", "ch_live_2"}[:min(limit, 2)]
		var ids []string
		for _, c := range got {
			ids = append(ids, c.ID)
		}
		if !slices.Equal(ids, want) {
			t.Fatalf("ChargesByStatus(processing, %d) = %v, want %v", limit, ids, want)
		}
	}
	left, err := raw.ZRange(ctx, index, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ch_live_1", "ch_live_2"}; !slices.Equal(left, want) {
		t.Errorf("index after reading = %v, want the stale entries removed: %v", left, want)
	}
	if got, err := s.ChargesByStatus(ctx, payrouter.StatusSucceeded, 10); err != nil || len(got) != 1 || got[0].ID != "ch_moved" {
		t.Errorf("ChargesByStatus(succeeded) = %v, %v; want ch_moved, whose own entry is not stale", got, err)
	}
}

// TestClaimAcrossInstances: two payrouter instances, each with its own client and connection
// pool, racing for one key, as a client's retries landing on different instances do.
func TestClaimAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	stores := []*redisstore.Store{
		openStore(t, srv.URL(), redisstore.Options{Prefix: "fleet:", Timeout: suiteTimeout}),
		openStore(t, srv.URL(), redisstore.Options{Prefix: "fleet:", Timeout: suiteTimeout}),
	}
	for round := range 20 {
		key := fmt.Sprintf("k-%d", round)
		var won atomic.Int64
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				<-start
				rec, err := stores[i%2].Claim(t.Context(), key, "fp", time.Minute)
				switch {
				case err == nil && rec == nil:
					won.Add(1)
				case !errors.Is(err, payrouter.ErrInFlight):
					t.Errorf("Claim = %+v, %v; want a new claim or ErrInFlight", rec, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if got := won.Load(); got != 1 {
			t.Fatalf("round %d: %d claims won the key across two instances, want exactly 1", round, got)
		}
	}
}

// TestSubMillisecondTTL: Redis expires in whole milliseconds; a shorter TTL must still be
// accepted and kept at least as long as asked, not refused or made permanent.
func TestSubMillisecondTTL(t *testing.T) {
	srv := redistest.Start(t)
	raw := rawClient(t, srv)
	s := openStore(t, srv.URL(), redisstore.Options{Timeout: suiteTimeout, Prefix: "sub:"})
	ctx := t.Context()
	if rec, err := s.Claim(ctx, "k", "fp", 300*time.Microsecond); rec != nil || err != nil {
		t.Fatalf("Claim with a 300µs in-flight TTL = %+v, %v; want a new claim", rec, err)
	}
	if err := s.Complete(ctx, "k2", payrouter.IdempotencyRecord{Fingerprint: "fp"}, 300*time.Microsecond); err != nil {
		t.Fatalf("Complete with a 300µs TTL: %v", err)
	}
	for _, key := range []string{"sub:idem:{k}", "sub:idem:{k2}"} {
		// -1 is a key without expiry; gone already (-2) or expiring are both right.
		if got, err := raw.PTTL(ctx, key).Result(); err != nil || got == -1 {
			t.Errorf("PTTL(%s) = %v, %v; want an expiry", key, got, err)
		}
	}
}
