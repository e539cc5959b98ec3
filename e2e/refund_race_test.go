package e2e

// Concurrent refunds of one charge with different Idempotency-Keys, as a storefront whose
// customer-service tool and whose shop both refund at once would send them. The gateway is told
// to approve every refund without checking what is left (refund_unchecked, docs/simulator.md),
// so that payrouter alone holds the limit: what the storefront was told, what the gateway
// applied (its ledger and its request count) and what GET /charge/{id} says must all agree, and
// never add up to more than the charge captured.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter/pgstore/pgtest"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

// raceAmount is what every charge of these tests captures.
const raceAmount = 1000

// TestConcurrentRefundsNeverExceedTheCharge: on one instance with its money in memory, and on
// two instances sharing PostgreSQL and Redis with the refunds sent through both:
//   - eight full refunds of one captured charge of 1000 at once, with eight keys, at a gateway
//     that approves every refund: at most 1000 is accepted (201 or 202), the others are 409
//     invalid-charge-state and never reach the gateway; the gateway's ledger shows exactly the
//     accepted ones, and so does the charge's amount_refunded;
//   - eight partial refunds of 300 of another charge of 1000 at once: at most three fit;
//   - the same eight full refunds at a gateway that checks (normal mode): the ones that do not
//     fit are 409, never a 502 from the gateway's refusal, and are never sent;
//   - the gateway down (unavailable) and refunds queued: three full refunds of one charge at
//     once are at most one 202 queued, the others 409; once the gateway is back the queued one
//     is applied once.
func TestConcurrentRefundsNeverExceedTheCharge(t *testing.T) {
	skipIfShort(t)
	for _, tc := range []struct {
		name  string
		fleet bool
	}{{"memory", false}, {"fleet", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s, ins := refundRaceSetup(t, tc.fleet)
			g := s.paywell
			g.setBehavior(t, `{"mode":"normal","refund_unchecked":true}`)

			t.Run("eight full refunds", func(t *testing.T) {
				ch := captureForRace(t, ins[0])
				race := refundRace(t, ins, g, ch, "full", 8, 0)
				race.judge(t, g, "")
			})
			t.Run("eight partial refunds of 300", func(t *testing.T) {
				ch := captureForRace(t, ins[0])
				race := refundRace(t, ins, g, ch, "partial", 8, 300)
				race.judge(t, g, "")
			})
			t.Run("eight full refunds at a gateway that checks", func(t *testing.T) {
				g.setBehavior(t, `{"mode":"normal"}`)
				defer g.setBehavior(t, `{"mode":"normal","refund_unchecked":true}`)
				ch := captureForRace(t, ins[0])
				race := refundRace(t, ins, g, ch, "checked", 8, 0)
				race.judge(t, g, "")
			})
			t.Run("three full refunds with the gateway down", func(t *testing.T) {
				ch := captureForRace(t, ins[0])
				g.setBehavior(t, `{"mode":"unavailable"}`)
				race := refundRace(t, ins, g, ch, "down", 3, 0)
				// Back, and approving whatever it is sent: every refund queued is applied.
				g.setBehavior(t, `{"mode":"normal","refund_unchecked":true}`)
				race.judge(t, g, "queued")
			})
		})
	}
}

// refundRaceSetup starts the simulators and one instance on memory, or two sharing PostgreSQL and
// Redis, routing USD to paywell alone, refunds queued when paywell cannot take them.
func refundRaceSetup(t *testing.T, fleet bool) (*sims, []*instance) {
	t.Helper()
	s := startSims(t)
	gw := gatewayConfig{Timeout: time.Second, MaxConcurrent: 32, ConsecutiveFailures: 50, Cooldown: 30 * time.Second}
	cfg := routerConfig{
		RequestTimeout: 3 * time.Second,
		Gateways:       map[string]gatewayConfig{"paywell": gw},
		Routes:         []routeConfig{{Name: "usd", Currencies: []string{"USD"}, Gateways: []string{"paywell"}}},
	}
	if fleet {
		cfg.RedisURL, cfg.DatabaseURL = redistest.Start(t).URL(), pgtest.NewDatabase(t)
	}
	edit := func(y string) string {
		const fallbacks = "fallbacks:\n  charge: fail\n"
		if !strings.Contains(y, fallbacks) {
			t.Fatalf("the harness's configuration has no %q to add the refund fallback to:\n%s", fallbacks, y)
		}
		return strings.Replace(y, fallbacks, fallbacks+"  refund: queue\n", 1)
	}
	a := startPayrouterEdited(t, s, cfg, edit)
	if !fleet {
		return s, []*instance{a}
	}
	a.proc.name = "payrouter-A"
	b := startPayrouterEdited(t, s, cfg, edit)
	b.proc.name = "payrouter-B"
	return s, []*instance{a, b}
}

// setBehavior is PUT /_sim/behavior with body as it stands.
func (s *sim) setBehavior(t *testing.T, body string) {
	t.Helper()
	s.control(t, http.MethodPut, "/_sim/behavior", []byte(body), nil)
}

// captureForRace charges raceAmount through in, captured at once, and returns its id.
func captureForRace(t *testing.T, in *instance) string {
	t.Helper()
	r, a := in.mustCharge(t, raceAmount, "USD", "tok_visa")
	if r.status != http.StatusCreated || a.ChargeStatus != "succeeded" {
		t.Fatalf("a charge of %d to refund: want 201 succeeded; got %s", raceAmount, r)
	}
	return a.ID
}

// raceAnswer is one refund request of a race and its answer.
type raceAnswer struct {
	n      int
	key    string
	via    *instance
	amount int64 // asked for: the charge's amount for a full refund
	rep    reply
	err    error
	ro     refundObject
}

func (a raceAnswer) String() string {
	if a.err != nil {
		return fmt.Sprintf("refund %d (key %s, through %s): no answer: %v", a.n, a.key, a.via.proc.name, a.err)
	}
	what := problemType(a.rep)
	if a.ro.ID != "" {
		what = fmt.Sprintf("%s %s of %d", a.ro.ID, a.ro.Status, a.ro.Amount)
	}
	return fmt.Sprintf("refund %d (key %s, through %s): %d %s", a.n, a.key, a.via.proc.name, a.rep.status, what)
}

// accepted reports whether the storefront was told the refund will happen: 201 succeeded, or 202
// queued (or pending, its outcome not known yet).
func (a raceAnswer) accepted() bool {
	return a.err == nil && a.ro.ID != "" &&
		(a.rep.status == http.StatusCreated && a.ro.Status == "succeeded" ||
			a.rep.status == http.StatusAccepted && (a.ro.Status == "queued" || a.ro.Status == "pending"))
}

// raceRun is one race: n refunds of a charge sent at once.
type raceRun struct {
	what    string // for messages
	charge  string
	ins     []*instance
	answers []raceAnswer
	// calls is how many calls the gateway received while the race ran (until its last answer).
	calls int64
	took  time.Duration
}

// refundRace sends n refunds of charge, one of g's, at once, each with its own key, alternately
// through each instance: of amount each, or full refunds (the body {}) when amount is 0.
func refundRace(t *testing.T, ins []*instance, g *sim, charge, name string, n int, amount int64) *raceRun {
	t.Helper()
	body, asked := []byte(`{}`), int64(raceAmount)
	kind := "full refunds"
	if amount > 0 {
		body, asked = fmt.Appendf(nil, `{"amount":%d}`, amount), amount
		kind = fmt.Sprintf("refunds of %d", amount)
	}
	via := "one instance"
	if len(ins) > 1 {
		via = fmt.Sprintf("%d instances", len(ins))
	}
	run := &raceRun{
		what:   fmt.Sprintf("%d %s of one charge of %d sent at once with %d keys through %s", n, kind, raceAmount, n, via),
		charge: charge, ins: ins, answers: make([]raceAnswer, n),
	}
	if c, rep, err := ins[0].chargeObject(charge); err != nil || c.Gateway != g.name {
		t.Fatalf("GET /charge/%s before the race: want a %s charge; got %v %s", charge, g.name, err, rep)
	}
	before := g.stats(t).Requests
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		a := raceAnswer{n: i + 1, key: fmt.Sprintf("race-%s-%s-%d", name, charge, i+1), via: ins[i%len(ins)], amount: asked}
		wg.Go(func() {
			<-start
			a.rep, a.err = send(a.via.client, http.MethodPost, a.via.url+"/charge/"+charge+"/refund", body,
				"Authorization", "Bearer "+apiKey, "Content-Type", "application/json", "Idempotency-Key", a.key)
			if a.err == nil {
				_ = json.Unmarshal(a.rep.body, &a.ro)
			}
			run.answers[i] = a
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	run.took = time.Since(began)
	run.calls = g.stats(t).Requests - before
	t.Logf("%s: answered in %v: %s", run.what, run.took.Round(time.Millisecond), run.describe())
	return run
}

func (run *raceRun) describe() string {
	parts := make([]string, len(run.answers))
	for i, a := range run.answers {
		parts[i] = a.String()
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// judge holds the race to the contract: the accepted refunds fit the charge, the refused ones are
// 409 invalid-charge-state with nothing sent, and once every accepted refund is final the
// gateway's ledger and GET /charge/{id} show exactly them. With expectQueued "queued" the
// gateway was down: the accepted ones must be 202 queued, and are judged once applied.
func (run *raceRun) judge(t *testing.T, g *sim, expectQueued string) {
	t.Helper()
	var accepted []raceAnswer
	var sum int64
	for _, a := range run.answers {
		switch {
		case a.accepted():
			accepted = append(accepted, a)
			sum += a.ro.Amount
			if a.ro.Amount != a.amount {
				t.Errorf("%s: %s; want the amount asked, %d", run.what, a, a.amount)
			}
			if expectQueued == "queued" && (a.rep.status != http.StatusAccepted || a.ro.Status != "queued") {
				t.Errorf("%s with paywell down: %s; want 202 queued or 409", run.what, a)
			}
		case a.err == nil && a.rep.status == http.StatusConflict && problemType(a.rep) == "invalid-charge-state":
		default:
			t.Errorf("%s: the storefront got %s; a refund that does not fit what is left must be 409 /problems/invalid-charge-state, and one that fits 201 or 202: %s",
				run.what, a, a.rep)
		}
	}
	if sum > raceAmount {
		t.Errorf("%s: the storefront was told %d refund(s) accepted, %d in all, more than the %d the charge captured: %s",
			run.what, len(accepted), sum, raceAmount, run.describe())
	}
	if expectQueued == "queued" && len(accepted) > 1 {
		t.Errorf("%s with paywell down: %d answered 202 queued, want at most one (the rest 409): %s", run.what, len(accepted), run.describe())
	}
	if full := run.answers[0].amount; len(accepted) == 0 || expectQueued == "" && sum+full <= raceAmount {
		t.Errorf("%s: %d accepted, %d in all; want as many as fit the %d captured (the first to arrive must not be refused): %s",
			run.what, len(accepted), sum, raceAmount, run.describe())
	}

	// While the race ran the gateway was sent the accepted ones, once each, and nothing for the
	// refused ones.
	if run.calls > int64(len(accepted)) {
		t.Errorf("%s: paywell received %d refund call(s) for %d accepted refund(s): refunds answered 409 (or failed) were sent to the gateway all the same",
			run.what, run.calls, len(accepted))
	}

	// Once every accepted refund is final, the gateway holds exactly them.
	var applied int64
	for _, a := range accepted {
		ro := run.waitFinal(t, a)
		if ro.Status == "succeeded" {
			applied += ro.Amount
		} else {
			t.Errorf("%s: %s, then GET /refund/%s shows %q; an accepted refund must be applied", run.what, a, a.ro.ID, ro.Status)
		}
	}
	tx, ok := run.ledgerTx(t, g)
	if !ok {
		return
	}
	if tx.Refunded != applied {
		t.Errorf("%s: paywell's ledger shows %d refunded (%s), the storefront was told of %d in accepted refunds: %s",
			run.what, tx.Refunded, tx, applied, run.describe())
	}
	if tx.Refunded > tx.Amount {
		t.Errorf("%s: paywell refunded %d of a charge of %d: the customer was given back more than was paid (%s)", run.what, tx.Refunded, tx.Amount, tx)
	}
	for _, in := range run.ins {
		c, rep, err := in.chargeObject(run.charge)
		if err != nil {
			t.Errorf("%s: GET /charge/%s through %s afterwards: %v %s", run.what, run.charge, in.proc.name, err, rep)
			continue
		}
		if c.AmountRefunded != tx.Refunded {
			t.Errorf("%s: GET /charge/%s through %s shows amount_refunded %d (status %s); paywell's ledger refunded %d",
				run.what, run.charge, in.proc.name, c.AmountRefunded, c.Status, tx.Refunded)
		}
	}
}

// waitFinal polls GET /refund/{id} of an accepted refund until it is succeeded or failed.
func (run *raceRun) waitFinal(t *testing.T, a raceAnswer) refundObject {
	t.Helper()
	if a.rep.status == http.StatusCreated {
		return a.ro
	}
	var ro refundObject
	eventually(t, 40*time.Second, fmt.Sprintf("%s: %s final", run.what, a), func() (bool, string) {
		rep, err := send(a.via.client, http.MethodGet, a.via.url+"/refund/"+a.ro.ID, nil, "Authorization", "Bearer "+apiKey)
		if err != nil {
			return false, err.Error()
		}
		if rep.status != http.StatusOK || json.Unmarshal(rep.body, &ro) != nil {
			return false, rep.String()
		}
		return ro.Status == "succeeded" || ro.Status == "failed", rep.String()
	})
	return ro
}

// ledgerTx is the charge's transaction in the gateway's ledger.
func (run *raceRun) ledgerTx(t *testing.T, g *sim) (ledgerEntry, bool) {
	t.Helper()
	list, err := g.entries()
	if err != nil {
		t.Fatal(err)
	}
	var found []ledgerEntry
	for _, e := range list {
		if id, _, ok := splitReference(e.Reference); ok && id == run.charge {
			found = append(found, e)
		}
	}
	if len(found) != 1 {
		t.Errorf("%s: want one paywell transaction for charge %s; the ledger has %s", run.what, run.charge, describeEntries(found))
		return ledgerEntry{}, false
	}
	return found[0], true
}

// chargeObject is GET /charge/{id} with the money fields.
func (in *instance) chargeObject(id string) (chargeObject, reply, error) {
	rep, err := send(in.client, http.MethodGet, in.url+"/charge/"+id, nil, "Authorization", "Bearer "+apiKey)
	if err != nil {
		return chargeObject{}, rep, err
	}
	var c chargeObject
	if rep.status != http.StatusOK {
		return c, rep, fmt.Errorf("want 200")
	}
	if err := json.Unmarshal(rep.body, &c); err != nil {
		return c, rep, err
	}
	return c, rep, nil
}
