package resilience

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
)

// twoGateways are the settings a reload starts from: paywell and ding, both tripping after 3
// failures in a row.
func twoGateways() []GatewaySettings {
	return []GatewaySettings{
		{Name: "paywell", TimeoutSettings: TimeoutSettings{Timeout: time.Second}, BulkheadSettings: BulkheadSettings{MaxConcurrent: 4}, Endpoint: "paywell http://paywell", Breaker: threeThenCool},
		{Name: "ding", TimeoutSettings: TimeoutSettings{Timeout: time.Second}, BulkheadSettings: BulkheadSettings{MaxConcurrent: 4}, Endpoint: "ding http://ding", Breaker: threeThenCool},
	}
}

// An unchanged gateway keeps everything: the same guard, breaker (still open) and bulkhead.
func TestUpdateKeepsUnchangedGateways(t *testing.T) {
	d := NewDomains(twoGateways(), nil)
	g := d.Guard("paywell", payrouter.OpCharge)
	trip(t, g.Breaker())

	report, err := d.Update(twoGateways())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(report.Kept, []string{"paywell", "ding"}) || len(report.Changed)+len(report.Added)+len(report.Removed) != 0 {
		t.Errorf("report = %+v, want both kept", report)
	}
	if d.Guard("paywell", payrouter.OpCharge) != g {
		t.Error("the unchanged gateway got a new guard")
	}
	expectState(t, d.Breaker("paywell", payrouter.OpCharge), StateOpen)
}

// A changed timeout gives new guards but keeps the breakers' state and the bulkhead; new breaker
// rules start the breakers afresh; a new bulkhead size gives a new bulkhead, and a call holding a
// slot of the old one finishes on it.
func TestUpdateRenewsOnlyWhatChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		d := NewDomains(twoGateways(), rec)
		trip(t, d.Breaker("paywell", payrouter.OpCharge))
		trip(t, d.Breaker("ding", payrouter.OpCharge))
		oldPaywell, oldDing := d.Guard("paywell", payrouter.OpCharge), d.Guard("ding", payrouter.OpCharge)

		// A call at ding holds a slot of its bulkhead across the reload.
		release := make(chan struct{})
		var wg sync.WaitGroup
		var inFlight payrouter.Result
		wg.Go(func() {
			inFlight, _ = d.Guard("ding", payrouter.OpRefund).Do(context.Background(), func(context.Context) payrouter.Result {
				<-release
				return payrouter.Result{Outcome: payrouter.OutcomeSucceeded}
			})
		})
		synctest.Wait()

		next := twoGateways()
		next[0].Timeout = 5 * time.Second // paywell: timeout only
		next[1].Breaker.ConsecutiveFailures = 10
		next[1].MaxConcurrent = 8 // ding: rules and bulkhead
		report, err := d.Update(next)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(report.Changed, []string{"paywell", "ding"}) {
			t.Errorf("changed = %v, want [paywell ding]", report.Changed)
		}
		if got := report.Renewed["paywell"]; len(got) != 0 {
			t.Errorf("paywell renewed %v, want nothing: only its timeout changed", got)
		}
		if got := report.Renewed["ding"]; !slices.Equal(got, []string{"breakers", "bulkhead", "connections"}) {
			t.Errorf("ding renewed %v, want breakers, bulkhead, connections", got)
		}

		g := d.Guard("paywell", payrouter.OpCharge)
		if g == oldPaywell || g.Timeout() != 5*time.Second {
			t.Errorf("paywell guard: same=%v timeout=%v, want a new guard with 5s", g == oldPaywell, g.Timeout())
		}
		if g.Breaker() != oldPaywell.Breaker() || g.Bulkhead() != oldPaywell.Bulkhead() {
			t.Error("paywell lost its breaker or bulkhead for a timeout change")
		}
		expectState(t, g.Breaker(), StateOpen)

		dg := d.Guard("ding", payrouter.OpCharge)
		if dg.Breaker() == oldDing.Breaker() {
			t.Error("ding kept its breaker through new rules")
		}
		// New rules, same endpoint: the opening goes on until its open_until, counts start over.
		expectState(t, dg.Breaker(), StateOpen)
		if got, want := dg.Breaker().OpenUntil(), oldDing.Breaker().OpenUntil(); !got.Equal(want) {
			t.Errorf("ding's new breaker open until %v, want the old one's %v", got, want)
		}
		if dg.Bulkhead() == oldDing.Bulkhead() || dg.Bulkhead().Capacity() != 8 {
			t.Errorf("ding bulkhead: same=%v capacity=%d, want a new one of 8", dg.Bulkhead() == oldDing.Bulkhead(), dg.Bulkhead().Capacity())
		}
		if oldDing.Bulkhead().InFlight() != 1 || dg.Bulkhead().InFlight() != 0 {
			t.Errorf("in flight: old %d new %d, want the call under way on the old bulkhead", oldDing.Bulkhead().InFlight(), dg.Bulkhead().InFlight())
		}
		reports := len(rec.inFlight)
		close(release)
		wg.Wait()
		if inFlight.Outcome != payrouter.OutcomeSucceeded || oldDing.Bulkhead().InFlight() != 0 {
			t.Errorf("the call under way: %s, old bulkhead in flight %d", inFlight.Outcome, oldDing.Bulkhead().InFlight())
		}
		if len(rec.inFlight) != reports {
			t.Errorf("the replaced bulkhead reported its use after the update: %v; it no longer speaks for ding", rec.inFlight[reports:])
		}
	})
}

// A removed gateway is retired: gone from every list and from Live, but its guards still serve
// the charges it holds; added back, it is a gateway again.
func TestUpdateRetiresRemovedGateways(t *testing.T) {
	d := NewDomains(twoGateways(), nil)
	added := GatewaySettings{Name: "tranglo", Endpoint: "tranglo http://tranglo", Breaker: threeThenCool}
	report, err := d.Update([]GatewaySettings{twoGateways()[0], added})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(report.Removed, []string{"ding"}) || !slices.Equal(report.Added, []string{"tranglo"}) {
		t.Errorf("report = %+v, want ding removed and tranglo added", report)
	}
	if got := d.Gateways(); !slices.Equal(got, []string{"paywell", "tranglo"}) {
		t.Errorf("Gateways() = %v", got)
	}
	for _, s := range d.Snapshots() {
		if s.Gateway == "ding" {
			t.Errorf("Snapshots lists the retired %s", s.Name)
		}
	}
	if d.Live("ding") || !d.Live("tranglo") {
		t.Errorf("Live: ding %v tranglo %v", d.Live("ding"), d.Live("tranglo"))
	}
	res, _ := d.Guard("ding", payrouter.OpRefund).Do(context.Background(), func(context.Context) payrouter.Result {
		return payrouter.Result{Outcome: payrouter.OutcomeSucceeded}
	})
	if res.Outcome != payrouter.OutcomeSucceeded {
		t.Errorf("a refund at the retired ding: %s", res.Outcome)
	}

	report, err = d.Update(twoGateways())
	if err != nil {
		t.Fatal(err)
	}
	if !d.Live("ding") || !slices.Contains(report.Changed, "ding") || !slices.Equal(report.Removed, []string{"tranglo"}) {
		t.Errorf("ding back: live %v, report %+v", d.Live("ding"), report)
	}
}

// The hooks see a new set before any call can, and a bad list changes nothing.
func TestUpdateHooksAndRefusals(t *testing.T) {
	d := NewDomains(twoGateways(), nil)
	var seen []string
	d.OnUpdate(func(set *DomainSet) {
		if d.Current() == set {
			t.Error("the hook ran after the set was in use")
		}
		seen = set.Gateways()
	})
	if _, err := d.Update([]GatewaySettings{{Name: "paywell"}, {Name: "paywell"}}); err == nil {
		t.Fatal("a gateway given twice was taken")
	}
	if _, err := d.Update([]GatewaySettings{{Name: ""}}); err == nil {
		t.Fatal("a gateway without a name was taken")
	}
	if got := d.Gateways(); !slices.Equal(got, []string{"paywell", "ding"}) || seen != nil {
		t.Fatalf("after refusals: gateways %v, hook saw %v", got, seen)
	}
	if _, err := d.Update(twoGateways()[:1]); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen, []string{"paywell"}) {
		t.Errorf("hook saw %v", seen)
	}
}

// After an Update the prober probes the new gateway, stops probing the removed one, and goes on
// with the unchanged one without starting over.
func TestProberFollowsUpdates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		oob := threeThenCool
		oob.Probe, oob.ProbeInterval = ProbeOutOfBand, 5*time.Second
		gw := func(name string) GatewaySettings {
			return GatewaySettings{Name: name, Breaker: oob}
		}
		paywell, ding, tranglo := &health{}, &health{}, &health{}
		d := NewDomains([]GatewaySettings{gw("paywell"), gw("ding")}, rec)
		p := NewProber(d, map[string]HealthCheck{"paywell": paywell.check, "ding": ding.check}, rec, ProberOptions{})
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { p.Run(ctx) })
		defer func() { cancel(); wg.Wait() }()

		time.Sleep(12 * time.Second) // probes at 5s and 10s
		synctest.Wait()
		if paywell.calls.Load() != 2 || ding.calls.Load() != 2 {
			t.Fatalf("before the update: paywell %d ding %d probes, want 2 each", paywell.calls.Load(), ding.calls.Load())
		}
		if _, err := d.Update([]GatewaySettings{gw("paywell"), gw("tranglo")}); err != nil {
			t.Fatal(err)
		}
		p.Update(map[string]HealthCheck{"paywell": paywell.check, "tranglo": tranglo.check}, nil)
		time.Sleep(5500 * time.Millisecond) // 17.5s: paywell's ticker (from 0s) fired at 15s, tranglo's (from 12s) at 17s
		synctest.Wait()
		if got := p.Gateways(); !slices.Equal(got, []string{"paywell", "tranglo"}) {
			t.Errorf("Gateways() = %v", got)
		}
		if paywell.calls.Load() != 3 {
			t.Errorf("paywell probes %d, want 3: its prober went on at its own pace", paywell.calls.Load())
		}
		if ding.calls.Load() != 2 {
			t.Errorf("the removed ding was probed %d times, want 2", ding.calls.Load())
		}
		if tranglo.calls.Load() != 1 {
			t.Errorf("tranglo probes %d, want 1, five seconds after it was added", tranglo.calls.Load())
		}
	})
}

// New breaker rules keep what ops decided: a breaker forced open stays forced open. A new
// endpoint starts afresh: the breaker measured another server.
func TestUpdateKeepsForcedStateThroughNewRules(t *testing.T) {
	d := NewDomains(twoGateways(), nil)
	d.Breaker("paywell", payrouter.OpCharge).Force(payrouter.ForcedOpen)

	next := twoGateways()
	next[0].Breaker.Cooldown = time.Minute
	if _, err := d.Update(next); err != nil {
		t.Fatal(err)
	}
	if s := d.Breaker("paywell", payrouter.OpCharge).Snapshot(); s.Forced != payrouter.ForcedOpen || s.State != StateOpen {
		t.Errorf("after new rules: %s forced %q, want forced open", s.State, s.Forced)
	}

	next[0].Endpoint = "paywell http://paywell-eu"
	if _, err := d.Update(next); err != nil {
		t.Fatal(err)
	}
	if s := d.Breaker("paywell", payrouter.OpCharge).Snapshot(); s.Forced != payrouter.ForcedNone || s.State != StateClosed {
		t.Errorf("after a new endpoint: %s forced %q, want closed, not forced", s.State, s.Forced)
	}
}
