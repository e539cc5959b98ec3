package routing

import (
	"fmt"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/resilience"
)

// TestSuccessRateDecliningGatewayLosesFirstPlace: a gateway that starts declining healthy cards
// is not unhealthy to its breaker (a decline is the provider working), yet the route stops
// sending it charges first; it gets them back once its declines have left the window.
func TestSuccessRateDecliningGatewayLosesFirstPlace(t *testing.T) {
	f := newFixture(t, Route{Name: "rated", Gateways: []string{"paywell", "ding"}, Strategy: SuccessRate})
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.router.now = func() time.Time { return now }
	draw := 99 // never below exploreShare: no exploration unless a test step says so
	f.router.rnd = func(n int) int { return min(draw, n-1) }
	first := func() string {
		t.Helper()
		_, order, err := f.router.Candidates(newCharge())
		if err != nil {
			t.Fatal(err)
		}
		return order[0]
	}
	charge := func(i int) *payrouter.Charge {
		t.Helper()
		c := newCharge()
		c.ID = fmt.Sprintf("ch_%d", i)
		if _, err := charge(t.Context(), f.router, f.keep, c); err != nil {
			t.Fatal(err)
		}
		return c
	}

	for i := range 30 {
		if c := charge(i); c.Gateway != "paywell" || c.Status != payrouter.StatusSucceeded {
			t.Fatalf("healthy charge %d: %s at %q", i, c.Status, c.Gateway)
		}
	}

	// paywell starts declining every card; declines never fail over, so they all land there
	// until its rate falls more than rateMargin below ding's (unknown yet: 1.0).
	f.gw["paywell"].authorize = declined
	declines := 0
	for ; first() == "paywell"; declines++ {
		if declines > 10 {
			t.Fatalf("paywell still first after %d declines in %d charges", declines, 30+declines)
		}
		if c := charge(100 + declines); c.Status != payrouter.StatusDeclined {
			t.Fatalf("status %s, want declined", c.Status)
		}
	}
	if declines != 2 { // 30/31 is within the margin of 1.0, 30/32 is not
		t.Errorf("paywell lost first place after %d declines, want 2", declines)
	}
	if c := charge(200); c.Gateway != "ding" || c.Status != payrouter.StatusSucceeded {
		t.Errorf("next charge: %s at %q, want succeeded at ding", c.Status, c.Gateway)
	}
	if b := f.dom.Breaker("paywell", payrouter.OpCharge).Snapshot(); b.State != resilience.StateClosed || b.Counts.Failures != 0 {
		t.Errorf("paywell's breaker %s with %d failures: declines must not count against it", b.State, b.Counts.Failures)
	}

	// Exploration: a few charges keep the route's order, so paywell still hears of cards.
	draw = exploreShare - 1
	if got := first(); got != "paywell" {
		t.Errorf("exploring charge goes to %s first, want the route's order", got)
	}
	draw = 99

	// Once its declines are older than the window, paywell is unknown again, and first.
	now = now.Add(approvalWindow)
	if got := first(); got != "paywell" {
		t.Errorf("after the window, %s is first; want paywell back", got)
	}
}

func TestSuccessRateOrder(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	feed := func(w *approvalRate, approved, declined int) {
		for range approved {
			w.add(now, true)
		}
		for range declined {
			w.add(now, false)
		}
	}
	cases := []struct {
		name  string
		rates map[string][2]int // approved, declined
		want  []string
	}{
		{"no samples keep the order", nil, []string{"paywell", "ding", "tranglo"}},
		{"too few samples count as 1.0", map[string][2]int{"paywell": {0, 19}, "ding": {90, 10}}, []string{"paywell", "tranglo", "ding"}},
		{"highest first", map[string][2]int{"paywell": {70, 30}, "ding": {80, 20}, "tranglo": {90, 10}}, []string{"tranglo", "ding", "paywell"}},
		{"close rates keep the order", map[string][2]int{"paywell": {92, 8}, "ding": {95, 5}, "tranglo": {60, 40}}, []string{"paywell", "ding", "tranglo"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Route{Name: "rated", Gateways: []string{"paywell", "ding", "tranglo"}, Strategy: SuccessRate})
			f.router.now = func() time.Time { return now }
			f.router.rnd = func(n int) int { return n - 1 }
			for g, r := range tc.rates {
				feed(&f.router.table().stats[g].approvals, r[0], r[1])
			}
			if _, got, _ := f.router.Candidates(newCharge()); !equal(got, tc.want) {
				t.Errorf("order %v, want %v", got, tc.want)
			}
		})
	}
}

func TestApprovalRateWindowSlides(t *testing.T) {
	var w approvalRate
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i := range 20 {
		w.add(t0.Add(time.Duration(i)*time.Second), false)
	}
	if r := w.rate(t0.Add(20 * time.Second)); r != 0 {
		t.Errorf("rate %v after 20 declines, want 0", r)
	}
	for i := range 20 {
		w.add(t0.Add(3*time.Minute+time.Duration(i)*time.Second), true)
	}
	if r := w.rate(t0.Add(4 * time.Minute)); r != 0.5 {
		t.Errorf("rate %v with 20 of 40 approved, want 0.5", r)
	}
	if r := w.rate(t0.Add(approvalWindow + 30*time.Second)); r != 1 {
		t.Errorf("rate %v once the declines left the window (20 approvals left), want 1", r)
	}
}
