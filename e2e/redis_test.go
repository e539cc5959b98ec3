package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter/pgstore/pgtest"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

// TestRedisOutageFleet: the shared Redis dies under a fleet of two instances (docs/architecture.md,
// Breakers: "Redis slow or down must not take payrouter down"). Redis holds only coordination
// state, so what users see is:
//   - charges through A and B keep being answered, 201, each in under a second;
//   - money state is still one: a charge made through A is read through B at once, and the same
//     Idempotency-Key sent to B replays A's answer with no second gateway call (the fault
//     injection's "same key at both instances during a Redis stall forks the charge");
//   - /readyz answers 503 with a reason naming the coordination store, payrouter_state_store_up
//     is 0, and each instance logs state_store.down, so ops know breakers are local;
//   - Redis comes back (empty, on the same port): within 10 s /readyz is 200 again,
//     payrouter_state_store_up 1, state_store.up logged, and charges go on.
func TestRedisOutageFleet(t *testing.T) {
	skipIfShort(t)
	const (
		chargeBound   = time.Second
		noticeBound   = 5 * time.Second
		recoveryBound = 10 * time.Second
	)
	rds := redistest.Start(t)
	s := startSims(t)
	gw := gatewayConfig{Timeout: time.Second, MaxConcurrent: 10, ConsecutiveFailures: 5, Cooldown: 30 * time.Second}
	a, b := startFleet(t, s, routerConfig{
		RequestTimeout: 3 * time.Second,
		RedisURL:       rds.URL(), DatabaseURL: pgtest.NewDatabase(t),
		Gateways: map[string]gatewayConfig{"paywell": gw},
		Routes:   []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell"}}},
	})
	fleet := []struct {
		name string
		in   *instance
	}{{"A", a}, {"B", b}}
	for _, m := range fleet {
		if r, err := m.in.readyz(); err != nil || r.status != http.StatusOK {
			t.Fatalf("%s before the outage: want /readyz 200; got %v %s", m.name, err, r)
		}
	}

	rds.Stop()
	down := time.Now()
	// What each instance charged during the outage, by instance.
	saved := map[string]string{}
	var slowest time.Duration
	for i := range 3 {
		for _, m := range fleet {
			r, ans := m.in.mustCharge(t, int64(5000+10*i), "USD", "tok_visa")
			slowest = max(slowest, r.elapsed)
			if r.status != http.StatusCreated || describe(ans.Attempts) != "[paywell/succeeded]" {
				t.Errorf("charge %d through %s with Redis down: want 201 with the one attempt paywell/succeeded; got %s", i+1, m.name, r)
				continue
			}
			if r.elapsed >= chargeBound {
				t.Errorf("charge %d through %s with Redis down: want it answered within %v; it took %v", i+1, m.name, chargeBound, r.elapsed.Round(time.Millisecond))
			}
			if _, ok := saved[m.name]; !ok {
				saved[m.name] = ans.ID
			}
		}
	}

	// One money home through the outage: A's charge is B's at once, and A's key replays on B.
	key := "redis-outage-order-1"
	body := chargeBody(5500, "USD", "tok_visa", "")
	first, err := a.chargeKeyed(key, body)
	if err != nil || first.status != http.StatusCreated {
		t.Fatalf("a keyed charge through A with Redis down: want 201; got %v %s", err, first)
	}
	fa, _ := decodeAnswer(first)
	calls := s.paywell.stats(t).Requests
	again, err := b.chargeKeyed(key, body)
	if err != nil {
		t.Fatal(err)
	}
	if ra, _ := decodeAnswer(again); again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "true" || ra.ID != fa.ID {
		t.Errorf("the same Idempotency-Key through B with Redis down: want A's charge %s replayed (201, Idempotent-Replayed: true); got %s", fa.ID, again)
	}
	if now := s.paywell.stats(t).Requests; now != calls {
		t.Errorf("the same Idempotency-Key through B with Redis down: want no second gateway call; paywell counted %d more", now-calls)
	}
	for _, c := range []struct {
		saver, reader string
		in            *instance
	}{{"A", "B", b}, {"B", "A", a}} {
		id := saved[c.saver]
		if id == "" {
			continue // the charge already failed above
		}
		got, err := c.in.getCharge(id)
		if err != nil {
			t.Errorf("charge %s, made through %s while Redis is down: want it read through %s at once; got %v", id, c.saver, c.reader, err)
		} else if got.ID != id || got.ChargeStatus != "succeeded" || got.Gateway != "paywell" {
			t.Errorf("charge %s through %s while Redis is down: want it succeeded by paywell; got %+v", id, c.reader, got)
		}
	}

	for _, m := range fleet {
		eventually(t, noticeBound, m.name+" answers /readyz 503, naming the coordination store on the admin listener only", func() (bool, string) {
			r, err := m.in.readyz()
			if err != nil {
				return false, err.Error()
			}
			a, err := m.in.adminReadyz()
			if err != nil {
				return false, err.Error()
			}
			var public, private struct {
				Reason *string `json:"reason"`
			}
			_ = json.Unmarshal(r.body, &public)
			_ = json.Unmarshal(a.body, &private)
			return r.status == http.StatusServiceUnavailable && public.Reason == nil &&
				a.status == http.StatusServiceUnavailable && private.Reason != nil && strings.Contains(*private.Reason, "coordination store"), r.String() + " / admin " + a.String()
		})
		eventually(t, noticeBound, m.name+" shows payrouter_state_store_up 0", stateStoreUp(m.in, 0))
		eventually(t, noticeBound, m.name+" logs state_store.down", logged(m.in.proc, "state_store.down"))
	}
	noticed := time.Since(down)

	if err := rds.Restart(); err != nil {
		t.Fatalf("restarting redis-server on its port: %v", err)
	}
	up := time.Now()
	for _, m := range fleet {
		eventually(t, recoveryBound, m.name+" answers /readyz 200 once Redis is back", func() (bool, string) {
			r, err := m.in.readyz()
			if err != nil {
				return false, err.Error()
			}
			return r.status == http.StatusOK, r.String()
		})
	}
	recovered := time.Since(up)
	for _, m := range fleet {
		eventually(t, 2*time.Second, m.name+" shows payrouter_state_store_up 1", stateStoreUp(m.in, 1))
		eventually(t, 2*time.Second, m.name+" logs state_store.up", logged(m.in.proc, "state_store.up"))
	}

	// And the fleet charges on Redis again.
	if r, _ := a.mustCharge(t, 6000, "USD", "tok_visa"); r.status != http.StatusCreated {
		t.Errorf("a charge through A after Redis came back: want 201; got %s", r)
	}
	t.Logf("Redis down: slowest charge %v; /readyz 503, state_store_up 0 and state_store.down on both within %v; Redis back: /readyz 200 on both within %v",
		slowest.Round(time.Millisecond), noticed.Round(time.Millisecond), recovered.Round(time.Millisecond))
}

// stateStoreUp is a condition: in's payrouter_state_store_up is want.
func stateStoreUp(in *instance, want float64) func() (bool, string) {
	return func() (bool, string) {
		m, err := in.metrics()
		if err != nil {
			return false, err.Error()
		}
		v, ok := m.value("payrouter_state_store_up")
		return ok && v == want, fmt.Sprintf("payrouter_state_store_up %v (exported: %v)", v, ok)
	}
}

// logged is a condition: the process has written a log line with msg.
func logged(p *process, msg string) func() (bool, string) {
	return func() (bool, string) {
		return strings.Contains(p.out.String(), `"msg":"`+msg+`"`), "its last lines:\n" + p.out.tail(5)
	}
}
