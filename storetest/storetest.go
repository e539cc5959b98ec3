// Package storetest is the behaviour every payrouter.Store must have, as one test suite that
// each implementation runs against itself (docs/architecture.md, State stores): memstore in memory,
// pgstore against a real PostgreSQL.
//
// Expiry is tested with short real TTLs and polling, not a fake clock, because a database server
// keeps its own time; the suite still finishes in seconds.
package storetest

import (
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// Timings of the expiry tests. shortTTL is long enough that a record is still there when read
// back at once, even on a loaded CI machine, and short enough to keep the suite fast; expiryWait
// is generous, since a store that expires late is slow to fail rather than flaky.
const (
	shortTTL   = 100 * time.Millisecond
	longTTL    = time.Hour
	expiryWait = 3 * time.Second
	pollEvery  = 10 * time.Millisecond
)

// Run runs the store suite as subtests of t. newStore is called once per subtest and must return
// an empty store of its own; it should close the store with t.Cleanup. Subtests run one after
// another, so stores may share a backend that newStore empties.
func Run(t *testing.T, newStore func(t *testing.T) payrouter.Store) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s payrouter.Store)
	}{
		{"charges/save and get", testSaveAndGet},
		{"charges/replace", testReplace},
		{"charges/payment token is not kept", testTokenNotKept},
		{"charges/not found", testChargeNotFound},
		{"charges/invalid", testSaveInvalid},
		{"charges/copies are isolated", testChargeIsolation},
		{"charges/by status", testChargesByStatus},
		{"charges/concurrent", testConcurrentCharges},
		{"charges/a write from another version is refused", testVersions},

		{"idempotency/claim new key", testClaimNew},
		{"idempotency/complete and replay", testCompleteReplay},
		{"idempotency/complete a charge and its key at once", testCompleteCharge},
		{"idempotency/complete sets created_at", testCompleteSetsCreatedAt},
		{"idempotency/first complete wins", testFirstCompleteWins},
		{"idempotency/complete without a live claim", testCompleteUnclaimed},
		{"idempotency/a stalled holder is fenced off", testHoldLost},
		{"idempotency/renew", testRenew},
		{"idempotency/peek", testPeek},
		{"idempotency/release", testRelease},
		{"idempotency/records are isolated", testRecordIsolation},
		{"idempotency/completed record expires", testCompletedExpiry},
		{"idempotency/in-flight claim expires", testInFlightExpiry},
		{"idempotency/concurrent claims", testConcurrentClaims},
		{"idempotency/invalid", testIdempotencyInvalid},

		{"claim charge/a new key stores its charge, a replay writes nothing", testClaimCharge},
		{"claim charge/a key in flight stores nothing", testClaimChargeInFlight},
		{"claim charge/after a stall the charge is found and its holder fenced off", testClaimChargeAfterStall},
		{"claim charge/concurrent", testConcurrentClaimCharges},
		{"claim charge/invalid", testClaimChargeInvalid},

		{"refunds/save and get", testRefundSaveAndGet},
		{"refunds/not found", testRefundNotFound},
		{"refunds/invalid", testRefundInvalid},

		{"refunds/a change is all or nothing", testRefundChangeAtomic},
		{"refunds/the store refuses refunds beyond the charge", testRefundsFit},

		{"events/every change writes its events", testEvents},

		{"money/racing refunds never exceed the charge, each counted once", testRacingRefunds},
		{"money/opposite changes at once: one is written", testRacingTransitions},

		{"queue/empty", testQueueEmpty},
		{"queue/enqueue, take and ack", testQueueEnqueueAndTake},
		{"queue/handed out again after idle", testQueueHandedOutAgain},
		{"queue/depth counts what is not acknowledged", testQueueDepth},
		{"queue/max", testQueueMax},
		{"queue/concurrent takes", testQueueConcurrentTakes},
		{"queue/ack of an unknown id", testQueueAckUnknown},
		{"queue/a task not due is not handed out", testTakeSkipsNotDue},
		{"queue/a task requeued replaces the one handed out, once", testRequeueTask},

		{"webhooks/the cursor starts at the end and moves with its deliveries", testWebhookCursor},
		{"webhooks/dispatching at once queues each delivery once", testWebhookConcurrentDispatch},
		{"webhooks/dead letters and redelivery", testDeadLetters},
		{"webhooks/an endpoint disabled", testWebhookDisabled},

		{"ping", testPing},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, newStore(t))
		})
	}
}

func testPing(t *testing.T, s payrouter.Store) {
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

// waitFor polls cond until it reports done, failing t after expiryWait. Polling rather than one
// sleep lets a store expire keys with its own clock and granularity.
func waitFor(t *testing.T, what string, cond func() (done bool, err error)) {
	t.Helper()
	deadline := time.Now().Add(expiryWait)
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		done, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, expiryWait)
		}
		<-tick.C
	}
}
