package bench

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/payrouter/payrouter/pgstore/pgtest"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

// How TestBenchBreakerAgreement measures: agreementRounds trips; B's admin API polled with a pause
// of pollEvery between polls, about as fast as it can answer (a poll is an HTTP round trip of well
// under a millisecond) without a busy loop taking a core from the processes measured; at most
// tripCharges failing charges to trip A's breaker (its rule is tripAfter in a row).
const (
	agreementRounds = 20
	pollEvery       = 200 * time.Microsecond
	tripCharges     = 20
)

// TestBenchBreakerAgreement measures how long a second instance takes to agree that a gateway is
// down: two payrouter processes, A and B, sharing one Redis (and one PostgreSQL, as a fleet
// must); paywell unavailable; charges through A until A's paywell/charge breaker opens; then the
// time until B's GET /admin/breakers shows it open, B having sent paywell nothing. The fleet promises this by Redis pub/sub within 100 ms
// (docs/architecture.md, Breakers), with a refresh every second as a safety net: a round that took
// about a second would say that the message was lost and the refresh caught it.
//
// The clock starts when A's tripping charge has been answered: its breaker opened before that
// answer was written, so the figure is B's delay plus at most A's answer path. It is also shown
// from the moment A's own admin API first said open (read right after each charge), the bound on
// the other side. Both ends are read over HTTP, so the figures are as coarse as B's polling,
// whose actual interval is printed beside them; resilience's TestBenchFleetAgreement measures the
// same in process, without HTTP.
func TestBenchBreakerAgreement(t *testing.T) {
	requireBench(t)
	rs := redistest.Start(t)
	s := startSims(t)
	// paywell alone on the route: the charge that trips its breaker is answered (503, no gateway
	// left) straight after paywell's failure, with no failover call delaying the instant the
	// clock starts from. A fleet sharing breakers shares its money state too (config refuses
	// redis_url alone): one PostgreSQL database for both.
	o := instanceOptions{databaseURL: pgtest.NewDatabase(t), redisURL: rs.URL(), route: []string{"paywell"}}
	a := s.startPayrouter(t, "payrouter-a", o)
	b := s.startPayrouter(t, "payrouter-b", o)
	charge := a.payrouterCharge(http.StatusServiceUnavailable)
	charge.Name = "payrouter A"

	var fromAnswer, fromAdmin []time.Duration
	var polls, charges []int
	var polling time.Duration
	undone, spoiled := 0, 0
	for round := 0; len(fromAnswer) < agreementRounds; round++ {
		if round == 2*agreementRounds {
			t.Fatalf("%d rounds, %d of them spoiled by a late reopen; giving up", round, spoiled)
		}
		// Every round starts from a clean fleet, closed on both (the reset goes through Redis),
		// and a freshly reset simulator failing every call.
		undone += resetOnBoth(t, a, b, "paywell", "charge")
		s.simControl(t, "paywell", http.MethodPost, "/_sim/reset", "")
		s.simControl(t, "paywell", http.MethodPut, "/_sim/behavior", `{"mode":"unavailable"}`)

		ctx, cancel := context.WithCancel(t.Context())
		seen := make(chan pollResult, 1)
		go func() { seen <- b.pollBreaker(ctx, "paywell", "charge", "open", pollEvery) }()

		firstSent := time.Now()
		var answered, adminOpen time.Time
		n := 0
		for adminOpen.IsZero() {
			if n == tripCharges {
				cancel()
				t.Fatalf("round %d: A's paywell/charge still not open after %d failing charges", round+1, n)
			}
			one(t, charge)
			answered = time.Now()
			n++
			st, err := a.breakerState(t.Context(), "paywell", "charge")
			if err != nil {
				cancel()
				t.Fatalf("round %d: A's breakers: %v", round+1, err)
			}
			if st == "open" {
				adminOpen = time.Now()
			}
		}
		var r pollResult
		select {
		case r = <-seen:
		case <-time.After(5 * time.Second):
			cancel()
			t.Fatalf("round %d: B's paywell/charge not open 5 s after A's opened", round+1)
		}
		cancel()
		if r.err != nil {
			t.Fatalf("round %d: polling B: %v", round+1, r.err)
		}
		if n < tripAfter || r.at.Before(firstSent) {
			// Open before this round's failures could have opened it: the previous trip's
			// late fleet call reopened it after the reset (tripSettle). Not a measurement.
			spoiled++
			continue
		}
		fromAnswer = append(fromAnswer, r.at.Sub(answered))
		fromAdmin = append(fromAdmin, r.at.Sub(adminOpen))
		polls = append(polls, r.polls)
		polling += r.elapsed
		charges = append(charges, n)
		// Let the trip's own fleet calls finish before the next reset (resetOnBoth says why).
		time.Sleep(tripSettle)
	}
	if n := s.simRequests(t, "paywell"); n != charges[len(charges)-1] {
		t.Errorf("paywell received %d calls in the last round, A sent %d: B must have sent none", n, charges[len(charges)-1])
	}

	w := t.Output()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "(e) breaker agreement across instances: two payrouter processes on one Redis, paywell unavailable, failing charges through A until A's paywell/charge opens; time until B's GET /admin/breakers shows it open")
	fmt.Fprintf(w, "%d rounds (p99 of %d is the slowest); B polled with %s pauses, one poll every %s on average (the resolution of these figures); charges to trip: %v; resets undone by a late fleet call and repeated: %d; rounds spoiled by one and not counted: %d\n",
		agreementRounds, agreementRounds, pollEvery, formatDuration(polling/time.Duration(sum(polls))), slices.Compact(slices.Sorted(slices.Values(charges))), undone, spoiled)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "B open, counted from\tmin\tp50\tp90\tp99\tmax")
	for _, row := range []struct {
		name string
		d    []time.Duration
	}{
		{"A's tripping charge answered", fromAnswer},
		{"A's /admin/breakers first open", fromAdmin},
	} {
		sm := Sample{Latencies: slices.Sorted(slices.Values(row.d))}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", row.name, formatDifference(sm.Quantile(0)), formatDifference(sm.Quantile(0.5)),
			formatDifference(sm.Quantile(0.9)), formatDifference(sm.Quantile(0.99)), formatDifference(sm.Quantile(1)))
	}
	tw.Flush()
}

// tripSettle is how long a round waits after a trip before the next reset. A trip makes two fleet
// calls of its own, asynchronously: the failures' report and the open (each bounded by the fleet's
// timeout, and done in well under a millisecond here). One that reaches Redis after the reset
// opens the breaker again, fleet-wide, for a whole cooldown: a reset that races the trip it undoes
// loses. Waiting keeps rounds apart; resetOnBoth repairs the rare round it does not.
const tripSettle = 20 * time.Millisecond

// resetOnBoth resets gateway/op through a's admin API until a and b both show it closed, trying
// again when a late fleet call (tripSettle) opened it again; it returns how many resets were
// undone so.
func resetOnBoth(t *testing.T, a, b *instance, gateway, op string) (undone int) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		if attempt > 10 {
			t.Fatalf("%s/%s not closed on both instances after %d resets", gateway, op, attempt-1)
		}
		a.breakerAction(t, gateway, op, "reset")
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			sa, errA := a.breakerState(t.Context(), gateway, op)
			sb, errB := b.breakerState(t.Context(), gateway, op)
			if errA == nil && errB == nil && sa == "closed" && sb == "closed" {
				return attempt - 1
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// pollResult is what pollBreaker saw.
type pollResult struct {
	// at is when the answer showing the state arrived.
	at time.Time
	// polls is how many requests it took; elapsed, how long.
	polls   int
	elapsed time.Duration
	err     error
}

// pollBreaker reads in's admin API every pause until gateway/op shows want or ctx ends.
func (in *instance) pollBreaker(ctx context.Context, gateway, op, want string, pause time.Duration) pollResult {
	start := time.Now()
	for n := 1; ; n++ {
		st, err := in.breakerState(ctx, gateway, op)
		now := time.Now()
		switch {
		case ctx.Err() != nil:
			return pollResult{polls: n, elapsed: now.Sub(start), err: ctx.Err()}
		case err != nil:
			return pollResult{polls: n, elapsed: now.Sub(start), err: err}
		case st == want:
			return pollResult{at: now, polls: n, elapsed: now.Sub(start)}
		}
		time.Sleep(pause)
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
