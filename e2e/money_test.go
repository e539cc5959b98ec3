package e2e

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/payrouter/payrouter/pgstore/pgtest"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

// The regressions of an independent fault-injection run (two instances, Redis, PostgreSQL, the
// simulators), each asserting what the storefront and the gateways' ledgers show.

// moneyFleet starts two instances sharing a database and a Redis, on routes [paywell, ding].
func moneyFleet(t *testing.T, timeout time.Duration) (*sims, *instance, *instance, *redistest.Server) {
	t.Helper()
	rds := redistest.Start(t)
	s := startSims(t)
	gw := gatewayConfig{Timeout: timeout, MaxConcurrent: 10, ConsecutiveFailures: 50, Cooldown: 30 * time.Second}
	a, b := startFleet(t, s, routerConfig{
		RequestTimeout: 3 * time.Second,
		RedisURL:       rds.URL(), DatabaseURL: pgtest.NewDatabase(t),
		Gateways: map[string]gatewayConfig{"paywell": gw, "ding": gw},
		Routes:   []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell", "ding"}}},
	})
	return s, a, b, rds
}

// captured counts the captured (or authorized) transactions of amount across the gateways.
func captured(t *testing.T, s *sims, amount int64) (n int, where []string) {
	t.Helper()
	for _, g := range []*sim{s.paywell, s.ding, s.tranglo} {
		for _, tx := range g.ledger(t) {
			if tx.Amount == amount && (tx.Status == "captured" || tx.Status == "authorized") {
				n++
				where = append(where, g.name+" "+tx.Reference)
			}
		}
	}
	return n, where
}

// TestProxy503AfterTheChargeIsNeverAFailover is finding 1: a proxy in front of paywell forwards
// the charge, paywell takes it, and the proxy answers 503 text/plain. That 503 is not paywell's
// own "not processed" form, so the attempt is unknown and looked up: the charge is paywell's, 201,
// and ding is never called. Before, it failed over and captured twice.
func TestProxy503AfterTheChargeIsNeverAFailover(t *testing.T) {
	skipIfShort(t)
	s, a, _, _ := moneyFleet(t, time.Second)
	s.paywell.behave(t, "process_then_503", 0)
	// The look-up goes through the same proxy: it answers once the charge is in.
	r, ans := a.mustCharge(t, 7101, "USD", "tok_visa")
	if r.status != http.StatusCreated && r.status != http.StatusAccepted {
		t.Fatalf("a charge paywell took behind a proxy that answered 503: want 201 or 202 at paywell; got %s", r)
	}
	if len(ans.Attempts) == 0 || ans.Attempts[0].Outcome != "unknown" {
		t.Errorf("the proxy's 503: want the attempt unknown (looked up, never failed over); got %s", describe(ans.Attempts))
	}
	if st := s.ding.stats(t); st.Requests != 0 {
		t.Errorf("a charge paywell may have taken: want nothing sent to ding; ding counted %d request(s): %s", st.Requests, r)
	}
	if n, where := captured(t, s, 7101); n != 1 {
		t.Errorf("one charge behind a proxy's 503: want it held once across the ledgers; got %d: %v", n, where)
	}
}

// TestVoidedThenAskedAgainSaysVoided is finding 3: authorize, void, then the same key again
// (through the other instance): the answer and GET /charge say voided, never succeeded.
func TestVoidedThenAskedAgainSaysVoided(t *testing.T) {
	skipIfShort(t)
	s, a, b, _ := moneyFleet(t, time.Second)
	key, body := "money-void-1", []byte(`{"amount":7201,"currency":"USD","payment_method":{"type":"card","token":"tok_visa"},"capture":false}`)
	first, err := a.chargeKeyed(key, body)
	if err != nil || first.status != http.StatusCreated {
		t.Fatalf("authorize only: want 201; got %v %s", err, first)
	}
	ch, _ := decodeAnswer(first)
	v, err := send(a.client, "POST", a.url+"/charge/"+ch.ID+"/void", nil,
		"Authorization", "Bearer "+apiKey, "Idempotency-Key", "money-void-1-void")
	if err != nil || v.status != http.StatusOK {
		t.Fatalf("void: want 200; got %v %s", err, v)
	}
	again, err := b.chargeKeyed(key, body)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := decodeAnswer(again); got.ChargeStatus != "voided" {
		t.Errorf("the same key after the void, through B: want the charge shown voided; got %s", again)
	}
	if got, err := b.getCharge(ch.ID); err != nil || got.ChargeStatus != "voided" {
		t.Errorf("GET /charge after the void, through B: want voided; got %+v %v", got, err)
	}
	if n, where := captured(t, s, 7201); n != 0 {
		t.Errorf("a voided authorization: want nothing held; got %v", where)
	}
}

// TestRedisLosingItsDataKeepsIdempotency is finding 4: Redis restarted empty costs nothing of
// money, since it holds none: every key sent again replays, and no card is charged twice.
func TestRedisLosingItsDataKeepsIdempotency(t *testing.T) {
	skipIfShort(t)
	s, a, b, rds := moneyFleet(t, time.Second)
	keys := []string{"money-redis-1", "money-redis-2", "money-redis-3"}
	ids := map[string]string{}
	for i, key := range keys {
		r, err := a.chargeKeyed(key, chargeBody(int64(7301+i), "USD", "tok_visa", ""))
		if err != nil || r.status != http.StatusCreated {
			t.Fatalf("charge %s: want 201; got %v %s", key, err, r)
		}
		ans, _ := decodeAnswer(r)
		ids[key] = ans.ID
	}
	rds.Stop()
	if err := rds.Restart(); err != nil {
		t.Fatal(err)
	}
	calls := s.paywell.stats(t).Requests + s.ding.stats(t).Requests
	for i, key := range keys {
		for _, in := range []*instance{a, b} {
			r, err := in.chargeKeyed(key, chargeBody(int64(7301+i), "USD", "tok_visa", ""))
			if err != nil {
				t.Fatal(err)
			}
			ans, _ := decodeAnswer(r)
			if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || ans.ID != ids[key] {
				t.Errorf("key %s after Redis lost its data: want charge %s replayed; got %s", key, ids[key], r)
			}
		}
	}
	if now := s.paywell.stats(t).Requests + s.ding.stats(t).Requests; now != calls {
		t.Errorf("keys sent again after Redis lost its data: want no gateway call; %d were made", now-calls)
	}
}

// TestStalledHolderLosesItsKey is finding 8, with finding 5's fork: instance A takes a key and
// stalls (SIGSTOP) with the charge at a slow paywell. Within 10 s the same key through B is
// answered, after B settled what A sent (a status look-up at paywell), and never a second charge;
// when A resumes it changes nothing.
func TestStalledHolderLosesItsKey(t *testing.T) {
	skipIfShort(t)
	const freeWithin = 10 * time.Second
	s, a, b, _ := moneyFleet(t, 2*time.Second)
	s.paywell.behave(t, "normal", 1500*time.Millisecond)
	key, body := "money-stall-1", chargeBody(7401, "USD", "tok_visa", "")

	firstDone := make(chan reply, 1)
	go func() {
		r, _ := a.chargeKeyed(key, body)
		firstDone <- r
	}()
	// A is holding the key and waiting on paywell: stop it there.
	eventually(t, 3*time.Second, "paywell receives A's charge", func() (bool, string) {
		return s.paywell.stats(t).Requests >= 1, "paywell has no request yet"
	})
	if err := a.proc.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			_ = a.proc.signal(syscall.SIGCONT)
		}
	}()

	var answered reply
	eventually(t, freeWithin, "the same key through B once A stalled", func() (bool, string) {
		r, err := b.chargeKeyed(key, body)
		if err != nil {
			return false, err.Error()
		}
		answered = r
		return r.status == http.StatusCreated || r.status == http.StatusAccepted, r.String()
	})
	took := time.Since(stopped)
	if ans, _ := decodeAnswer(answered); ans.Gateway != "paywell" {
		t.Errorf("B's answer for the key A held: want the charge A sent to paywell, settled there; got %s", answered)
	}
	if st := s.ding.stats(t); st.Requests != 0 {
		t.Errorf("a charge paywell took while A stalled: want nothing sent to ding; ding counted %d", st.Requests)
	}

	if err := a.proc.signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	select {
	case r := <-firstDone:
		// A's own answer: either the truth or a 409 saying a later request holds the key.
		if r.status != http.StatusCreated && r.status != http.StatusConflict && r.status != http.StatusAccepted {
			t.Errorf("A's answer once it resumed: want 201, 202 or 409; got %s", r)
		}
	case <-time.After(10 * time.Second):
		t.Error("A did not answer within 10 s of resuming")
	}
	if n, where := captured(t, s, 7401); n != 1 {
		t.Errorf("one key held by a stalled A and retried through B: want one transaction held; got %d: %v", n, where)
	}
	// B's record stands: the key replays the same charge through either instance.
	r, err := a.chargeKeyed(key, body)
	if err == nil && r.status != http.StatusCreated && r.status != http.StatusAccepted {
		t.Errorf("the key through A after all: want the charge replayed; got %s", r)
	}
	t.Logf("the key A held was answered through B %v after A stalled", took.Round(time.Millisecond))
}

// TestDatabaseOutageNeverAnswersNotFound is finding 7 and the no-fork rule: with PostgreSQL
// stopped, a charge made seconds before reads 503 state-unavailable (never 404), a new charge is
// 503 state-unavailable with Retry-After in under a second and calls no gateway, /readyz is 503;
// once it is back the same key charges exactly once.
func TestDatabaseOutageNeverAnswersNotFound(t *testing.T) {
	skipIfShort(t)
	s, a, b, _ := moneyFleet(t, time.Second)
	_, before := a.mustCharge(t, 7501, "USD", "tok_visa")
	pgtest.Stop(t)
	defer pgtest.Start(t)
	calls := s.paywell.stats(t).Requests + s.ding.stats(t).Requests

	key, body := "money-db-1", chargeBody(7502, "USD", "tok_visa", "")
	for _, in := range []*instance{a, b} {
		r, err := send(in.client, "GET", in.url+"/charge/"+before.ID, nil, "Authorization", "Bearer "+apiKey)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "state-unavailable") {
			t.Errorf("GET of an existing charge with the database down: want 503 state-unavailable, never 404; got %s", r)
		}
		c, err := in.chargeKeyed(key, body)
		if err != nil {
			t.Fatal(err)
		}
		if c.status != http.StatusServiceUnavailable || c.header.Get("Retry-After") == "" || !strings.Contains(string(c.body), "state-unavailable") {
			t.Errorf("a charge with the database down: want 503 state-unavailable with Retry-After; got %s", c)
		}
		if c.elapsed >= time.Second {
			t.Errorf("a charge with the database down: want it answered in under 1 s; took %v", c.elapsed)
		}
	}
	if now := s.paywell.stats(t).Requests + s.ding.stats(t).Requests; now != calls {
		t.Errorf("with the database down: want no gateway call; %d were made", now-calls)
	}
	eventually(t, 5*time.Second, "A answers /readyz 503 with the database down", func() (bool, string) {
		r, err := a.readyz()
		if err != nil {
			return false, err.Error()
		}
		return r.status == http.StatusServiceUnavailable, r.String()
	})
	eventually(t, 5*time.Second, "A logs database.down", logged(a.proc, "database.down"))

	pgtest.Start(t)
	eventually(t, 10*time.Second, "the same key charges once the database is back", func() (bool, string) {
		r, err := b.chargeKeyed(key, body)
		if err != nil {
			return false, err.Error()
		}
		return r.status == http.StatusCreated, r.String()
	})
	if n, where := captured(t, s, 7502); n != 1 {
		t.Errorf("a key retried across a database outage: want one transaction; got %d: %v", n, where)
	}
	if got, err := a.getCharge(before.ID); err != nil || got.ChargeStatus != "succeeded" {
		t.Errorf("the earlier charge once the database is back: want it succeeded; got %+v %v", got, err)
	}
}
