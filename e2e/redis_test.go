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

// TestRedisOutageFleet: the shared Redis dies under a fleet of two instances (DESIGN.md,
// Breakers: "Redis slow or down must not take payrouter down"). What users see:
//   - charges through A and B keep being answered, 201, each in under a second;
//   - /readyz answers 503 with a reason naming the state store, payrouter_state_store_up is 0,
//     and each instance logs state_store.down, so ops know the fleet no longer shares state;
//   - Redis comes back (empty, on the same port): within 10 s /readyz is 200 again,
//     payrouter_state_store_up 1, state_store.up logged; and a charge A saved during the outage
//     can be fetched through B, because A pushed it to Redis when it returned (the re-sync).
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

	for _, m := range fleet {
		eventually(t, noticeBound, m.name+" answers /readyz 503 naming the state store", func() (bool, string) {
			r, err := m.in.readyz()
			if err != nil {
				return false, err.Error()
			}
			var body struct {
				Reason string `json:"reason"`
			}
			_ = json.Unmarshal(r.body, &body)
			return r.status == http.StatusServiceUnavailable && strings.Contains(body.Reason, "state store"), r.String()
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

	// The re-sync: what each instance saved alone is in Redis for the other.
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
			t.Errorf("charge %s, saved through %s while Redis was down: want it fetched through %s once Redis is back (the re-sync pushed it); got %v",
				id, c.saver, c.reader, err)
		} else if got.ID != id || got.ChargeStatus != "succeeded" || got.Gateway != "paywell" {
			t.Errorf("charge %s through %s after the re-sync: want it succeeded by paywell; got %+v", id, c.reader, got)
		}
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
