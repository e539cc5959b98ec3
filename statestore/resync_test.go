package statestore

import (
	"errors"
	"maps"
	"testing"

	"github.com/payrouter/payrouter"
)

func mustSetForced(t *testing.T, s payrouter.BreakerStateStore, breaker string, f payrouter.Forced) {
	t.Helper()
	if err := s.SetForced(t.Context(), breaker, f); err != nil {
		t.Fatalf("SetForced(%s, %q): %v", breaker, f, err)
	}
}

func wantForced(t *testing.T, s payrouter.BreakerStateStore, want map[string]payrouter.Forced) {
	t.Helper()
	got, err := s.ForcedStates(t.Context())
	if err != nil || !maps.Equal(got, want) {
		t.Fatalf("ForcedStates = %v, %v; want %v", got, err, want)
	}
}

// TestResync: when the primary returns, the forced states set during the outage are in it
// before OnChange(true) is called (where the caller re-syncs its breakers from the primary), and
// the Store is up again with a log line saying so.
func TestResync(t *testing.T) {
	h := start(t, newFake())
	mustSetForced(t, h, "ding/charge", payrouter.ForcedClosed)
	h.goDown(t)

	mustSetForced(t, h, "paywell/charge", payrouter.ForcedOpen)
	mustSetForced(t, h, "ding/charge", payrouter.ForcedNone) // lifted during the outage
	mustSetForced(t, h, "tranglo/refund", payrouter.ForcedClosed)
	mustSetForced(t, h, "tranglo/refund", payrouter.ForcedOpen) // the later change is the one pushed

	h.comeUp(t)
	h.waitChanges(t, false, true)
	want := map[string]payrouter.Forced{"paywell/charge": payrouter.ForcedOpen, "tranglo/refund": payrouter.ForcedOpen}
	if got := h.changes.forcedWhenUp(); !maps.Equal(got, want) {
		t.Fatalf("the primary's forced states when OnChange(true) was called = %v, want %v", got, want)
	}
	if got := h.fake.forcedNow(); !maps.Equal(got, want) {
		t.Fatalf("the primary's forced states after the re-sync = %v, want %v", got, want)
	}
	log := h.log.String()
	if n := logCount(log, "state_store.up"); n != 1 {
		t.Fatalf("state_store.up logged %d times, want once; log:\n%s", n, log)
	}
	if n := h.pendingCount(); n != 0 {
		t.Fatalf("%d forced states still pending after the re-sync", n)
	}
	wantForced(t, h, want)
}

// TestResyncRetriesWhatFailed: a change the primary refuses stays pending and is what this
// instance answers meanwhile; a later change to that breaker waits behind it, so the two reach
// the primary in order; once the primary takes it the Store forgets it.
func TestResyncRetriesWhatFailed(t *testing.T) {
	h := start(t, newFake())
	h.goDown(t)
	mustSetForced(t, h, "paywell/charge", payrouter.ForcedOpen)
	mustSetForced(t, h, "ding/charge", payrouter.ForcedOpen)
	refused := errors.New("ERR script refused")
	h.fake.setFailForce("paywell/charge", refused)

	h.comeUp(t)
	waitFor(t, "push_failed logged", func() bool { return logCount(h.log.String(), "state_store.push_failed") > 0 })
	if h.pendingCount() != 1 {
		t.Fatalf("%d forced states pending, want the refused one only", h.pendingCount())
	}
	if got := h.fake.forcedNow(); !maps.Equal(got, map[string]payrouter.Forced{"ding/charge": payrouter.ForcedOpen}) {
		t.Fatalf("the primary's forced states = %v, want the one it took", got)
	}
	t.Run("reads show the pending change", func(t *testing.T) {
		wantForced(t, h, map[string]payrouter.Forced{"paywell/charge": payrouter.ForcedOpen, "ding/charge": payrouter.ForcedOpen})
	})
	t.Run("a change while pending waits behind it", func(t *testing.T) {
		// The primary refuses every change to paywell/charge: this one succeeding says it was
		// taken here, behind the pending one, not sent ahead of it.
		mustSetForced(t, h, "paywell/charge", payrouter.ForcedClosed)
		wantForced(t, h, map[string]payrouter.Forced{"paywell/charge": payrouter.ForcedClosed, "ding/charge": payrouter.ForcedOpen})
	})

	h.fake.setFailForce("paywell/charge", nil)
	waitFor(t, "pushed", func() bool { return h.pendingCount() == 0 })
	if got := h.fake.forcedNow()["paywell/charge"]; got != payrouter.ForcedClosed {
		t.Fatalf("the primary has paywell/charge %q, want the latest change, closed", got)
	}
	if !h.Up() {
		t.Fatal("went down over an error that was not unavailable")
	}
}

// TestOutageDuringResync: a primary that answers pings but fails the push keeps the Store down
// and the change pending, until a later re-sync.
func TestOutageDuringResync(t *testing.T) {
	h := start(t, newFake())
	h.goDown(t)
	mustSetForced(t, h, "paywell/charge", payrouter.ForcedOpen)
	h.fake.setFailForce("paywell/charge", errRefused) // as if Redis died again right after the ping
	h.fake.down.Store(false)
	waitFor(t, "a failed re-sync", func() bool {
		_, reason, _ := h.Down()
		return h.fake.pings.Load() > 2 && errors.Is(reason, errRefused)
	})
	if h.Up() {
		t.Fatal("up although the re-sync could not push")
	}
	h.fake.setFailForce("paywell/charge", nil)
	waitFor(t, "Up", h.Up)
	if got := h.fake.forcedNow()["paywell/charge"]; got != payrouter.ForcedOpen {
		t.Fatalf("the primary has paywell/charge %q after the re-sync, want open", got)
	}
	h.waitChanges(t, false, true)
}

// TestForcedStatesSurviveOutage: a breaker forced open, through this instance or another, stays
// forced open here while the primary is down, since the Store keeps what it last read.
func TestForcedStatesSurviveOutage(t *testing.T) {
	h := start(t, newFake())
	h.fake.set("ding/charge", payrouter.ForcedOpen)
	mustSetForced(t, h, "paywell/refund", payrouter.ForcedClosed)
	want := map[string]payrouter.Forced{"ding/charge": payrouter.ForcedOpen, "paywell/refund": payrouter.ForcedClosed}
	wantForced(t, h, want)
	h.goDown(t)
	wantForced(t, h, want)
}

// TestForcedElsewhereDuringOutageIsLearnt: what another instance forced while this one could not
// reach the primary is what this one answers once it is back, and the push of this one's own
// change for another breaker does not undo it.
func TestForcedElsewhereDuringOutageIsLearnt(t *testing.T) {
	h := start(t, newFake())
	h.goDown(t)
	mustSetForced(t, h, "paywell/charge", payrouter.ForcedOpen)
	h.fake.set("ding/charge", payrouter.ForcedClosed)
	h.comeUp(t)
	waitFor(t, "pushed", func() bool { return h.pendingCount() == 0 })
	wantForced(t, h, map[string]payrouter.Forced{"paywell/charge": payrouter.ForcedOpen, "ding/charge": payrouter.ForcedClosed})
}
