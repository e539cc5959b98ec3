package redisstore_test

// Sentinel and Cluster, each a real deployment on loopback: state.redis_url in their forms, the
// forced-state suite, a breaker trip heard by a second store, and one lease holder across two.

import (
	"context"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/redisstore"
	"github.com/payrouter/payrouter/redisstore/redistest"
)

func TestStoreThroughSentinel(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master)
	t.Run("forced states", func(t *testing.T) {
		checkForcedStates(t, openStore(t, sentinel.URL(), redisstore.Options{Timeout: suiteTimeout}))
	})
	t.Run("breaker trip reaches another instance", func(t *testing.T) {
		checkTripHeard(t, sentinel.URL())
	})
	t.Run("one lease holder", func(t *testing.T) {
		checkOneLeaseHolder(t, sentinel.URL())
	})
}

func TestStoreOnCluster(t *testing.T) {
	cluster := redistest.StartCluster(t)
	t.Run("forced states", func(t *testing.T) {
		checkForcedStates(t, openStore(t, cluster.URL(), redisstore.Options{Timeout: suiteTimeout}))
	})
	t.Run("breaker trip reaches another instance", func(t *testing.T) {
		checkTripHeard(t, cluster.URL())
	})
	t.Run("one lease holder", func(t *testing.T) {
		checkOneLeaseHolder(t, cluster.URL())
	})
}

// checkTripHeard trips a breaker through one store and expects a second store on the same
// deployment to hear the opened event, and to read the breaker open.
func checkTripHeard(t *testing.T, url string) {
	o := redisstore.Options{Timeout: suiteTimeout, Prefix: "trip:" + t.Name() + ":"}
	a, b := openStore(t, url, o), openStore(t, url, o)
	events := make(chan payrouter.BreakerEvent, 16)
	subscribed := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.WatchBreakers(ctx, func() { close(subscribed) }, func(ev payrouter.BreakerEvent) { events <- ev })
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-subscribed:
	case <-done:
		t.Fatal("WatchBreakers returned before subscribing")
	case <-time.After(5 * time.Second):
		t.Fatal("WatchBreakers not subscribed after 5s")
	}
	rules := payrouter.BreakerRules{ConsecutiveFailures: 2, Cooldown: time.Minute}
	opened, _, err := a.ReportOutcomes(t.Context(), "paywell/charge", rules, payrouter.BreakerReport{Failures: 2, TrailingFailures: 2}, "A")
	if err != nil || !opened {
		t.Fatalf("ReportOutcomes = %v, %v; want opened", opened, err)
	}
	select {
	case ev := <-events:
		if ev.Kind != payrouter.BreakerOpened || ev.Breaker != "paywell/charge" || ev.Origin != "A" {
			t.Fatalf("event heard by the other store: %+v, want paywell/charge opened by A", ev)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the other store heard no event within 2s of the trip")
	}
	states, err := b.BreakerStates(t.Context(), []string{"paywell/charge", "ding/charge"})
	if err != nil {
		t.Fatal(err)
	}
	if !states["paywell/charge"].Open || states["ding/charge"].Open {
		t.Errorf("BreakerStates through the other store: %+v; want paywell/charge open, ding/charge closed", states)
	}
	if err := a.ForceBreaker(t.Context(), "ding/charge", payrouter.ForcedOpen, "A"); err != nil {
		t.Fatal(err)
	}
	forcedEqual(t, b, map[string]payrouter.Forced{"ding/charge": payrouter.ForcedOpen})
}

// checkOneLeaseHolder has two stores on the same deployment ask for one lease: the first holds
// it, the second is refused until the first drops it.
func checkOneLeaseHolder(t *testing.T, url string) {
	o := redisstore.Options{Timeout: suiteTimeout, Prefix: "lease:" + t.Name() + ":"}
	a, b := openStore(t, url, o), openStore(t, url, o)
	holdLease(t, a, "a", time.Minute, true)
	holdLease(t, b, "b", time.Minute, false)
	if err := a.DropLease(t.Context(), leaseName, "a"); err != nil {
		t.Fatal(err)
	}
	holdLease(t, b, "b", time.Minute, true)
}
