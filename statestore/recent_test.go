package statestore

import (
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// A request answered through this instance just before the outage is replayed during it, not
// charged again: the shared store, which has its answer, cannot be asked.
func TestRecentAnswerReplayedDuringOutage(t *testing.T) {
	h := start(t, newFake())
	mustClaimNew(t, h, "k-answered", fpA)
	answer := record(fpA, 201, "charged before the outage")
	mustComplete(t, h, "k-answered", answer)
	mustClaimNew(t, h, "k-other", fpA)
	if err := h.CompleteCharge(t.Context(), charge("ch_x", payrouter.StatusSucceeded, base), "k-other", record(fpA, 201, "x"), time.Hour); err != nil {
		t.Fatal(err)
	}
	h.goDown(t)

	wantReplay(t, h, "k-answered", fpA, answer)
	wantReplay(t, h, "k-other", fpA, record(fpA, 201, "x"))
	wantClaimErr(t, h, "k-answered", fpB, payrouter.ErrMismatch)
	mustClaimNew(t, h, "k-never-seen", fpA)
}

func TestRecentAnswersAreBounded(t *testing.T) {
	now := base
	r := newRecentAnswers(2, time.Minute)
	for _, k := range []string{"a", "b", "c"} {
		r.add(k, record(fpA, 201, k), time.Hour, now)
	}
	if _, ok := r.get("a", now); ok {
		t.Error("the oldest of three answers is still kept with room for two")
	}
	if _, ok := r.get("c", now); !ok {
		t.Error("the newest answer is not kept")
	}
	if _, ok := r.get("b", now.Add(time.Minute)); ok {
		t.Error("an answer is kept past RecentFor")
	}
	r.add("b", record(fpA, 201, "b again"), time.Hour, now) // b now in the slot a had
	r.add("d", record(fpA, 201, "d"), time.Hour, now)       // overwrites b's old slot
	if got, ok := r.get("b", now); !ok || string(got.Body) != "b again" {
		t.Errorf("a key added again is lost when its old slot is reused: %v %+v", ok, got)
	}
	if _, ok := newRecentAnswers(0, time.Minute).get("a", now); ok {
		t.Error("a store with no room for recent answers keeps one")
	}
}
