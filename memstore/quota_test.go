package memstore_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/memstore"
)

// What each owner is counted at stays exactly in step with what it holds through every kind of
// write, replacement, drop and expiry: random charges, versions, refunds, tasks, keys and
// records of three owners, with shares small enough that charges are dropped and new ones
// refused all along, and the clock moving past retentions and TTLs. After every operation the
// counts must equal a recount from scratch (Recount), and no owner may hold more than its share
// but by what updates of charges it holds and completions of keys it holds add.
func TestUsageMatchesRecount(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 19))
			clock := newFakeClock()
			s := newStore(t, memstore.WithClock(clock.Now), memstore.WithBounds(2*time.Hour, 40<<10))
			ctx := t.Context()
			owners := []string{"key_a", "key_b", ""}
			var ids, refundIDs []string
			holds := map[string]payrouter.Hold{}
			var tasks []string
			statuses := []payrouter.ChargeStatus{payrouter.StatusProcessing, payrouter.StatusRequiresCapture,
				payrouter.StatusSucceeded, payrouter.StatusDeclined, payrouter.StatusFailed, payrouter.StatusVoided}
			full := 0
			for op := range 3000 {
				switch rng.IntN(12) {
				case 0, 1: // a new charge
					c := randomCharge(rng, fmt.Sprintf("ch_%d", op), owners[rng.IntN(len(owners))])
					c.Status = statuses[rng.IntN(len(statuses))]
					switch err := s.SaveCharge(ctx, c); {
					case errors.Is(err, memstore.ErrFull):
						full++
					case err != nil:
						t.Fatal(err)
					default:
						ids = append(ids, c.ID)
					}
				case 2, 3: // a charge's next version: a status, an attempt, a change of its body
					if len(ids) == 0 {
						continue
					}
					c, err := s.Charge(ctx, ids[rng.IntN(len(ids))])
					if errors.Is(err, payrouter.ErrNotFound) {
						continue
					}
					c.Status = statuses[rng.IntN(len(statuses))]
					if rng.IntN(3) == 0 {
						c.Attempts = append(c.Attempts, payrouter.Attempt{Gateway: "ding", Reference: payrouter.AttemptReference(c.ID, len(c.Attempts)+1)})
					}
					if rng.IntN(10) == 0 {
						c.Metadata = map[string]string{"changed": strings.Repeat("x", rng.IntN(300))}
					}
					if err := s.SaveCharge(ctx, c); err != nil {
						t.Fatal(err)
					}
				case 4: // a refund of a captured charge, reserved
					if len(ids) == 0 {
						continue
					}
					c, err := s.Charge(ctx, ids[rng.IntN(len(ids))])
					if errors.Is(err, payrouter.ErrNotFound) || !c.Status.Refundable() || c.RefundLeft() == 0 {
						continue
					}
					amount, _ := c.ReserveRefund(1 + rng.Int64N(c.RefundLeft()))
					st := []payrouter.RefundStatus{payrouter.RefundQueued, payrouter.RefundPending}[rng.IntN(2)]
					rf := &payrouter.Refund{ID: fmt.Sprintf("re_%d", op), ChargeID: c.ID, Owner: c.Owner, Amount: amount, Status: st, Gateway: "paywell", Reference: fmt.Sprintf("re_%d", op)}
					if err := s.ChangeRefund(ctx, payrouter.RefundChange{Refund: rf, Charge: c}); err != nil {
						t.Fatal(err)
					}
					refundIDs = append(refundIDs, rf.ID)
				case 5: // a refund answered: applied or failed, its charge with it
					if len(refundIDs) == 0 {
						continue
					}
					rf, err := s.Refund(ctx, refundIDs[rng.IntN(len(refundIDs))])
					if errors.Is(err, payrouter.ErrNotFound) || (rf.Status != payrouter.RefundQueued && rf.Status != payrouter.RefundPending) {
						continue
					}
					c, err := s.Charge(ctx, rf.ChargeID)
					if err != nil {
						t.Fatal(err) // a charge with a refund under way is never dropped
					}
					from := rf.Status
					if rng.IntN(2) == 0 {
						rf.Status = payrouter.RefundSucceeded
						c.RefundApplied(rf.Amount)
					} else {
						rf.Status, rf.Detail = payrouter.RefundFailed, "declined by the bank"
						c.RefundReleased(rf.Amount)
					}
					if err := s.ChangeRefund(ctx, payrouter.RefundChange{Refund: rf, From: from, Charge: c}); err != nil {
						t.Fatal(err)
					}
				case 6: // a task queued, or acknowledged
					if len(tasks) > 0 && rng.IntN(2) == 0 {
						if err := s.Ack(ctx, tasks[0]); err != nil {
							t.Fatal(err)
						}
						tasks = tasks[1:]
					} else if len(ids) > 0 {
						id, err := s.Enqueue(ctx, payrouter.Task{Kind: payrouter.TaskVoid, Gateway: "paywell", ChargeID: ids[rng.IntN(len(ids))], Reference: "ref"})
						if err != nil {
							t.Fatal(err)
						}
						tasks = append(tasks, id)
					}
				case 7, 8: // a key claimed
					key := fmt.Sprintf("k_%d", rng.IntN(400))
					_, h, err := s.Claim(ctx, owners[rng.IntN(len(owners))], key, "fp", time.Duration(1+rng.IntN(60))*time.Second)
					switch {
					case errors.Is(err, memstore.ErrFull):
						full++
					case errors.Is(err, payrouter.ErrInFlight), err == nil && !h.Held():
					case err != nil:
						t.Fatal(err)
					default:
						holds[key] = h
					}
				case 9: // a key completed, answered from its charge or with a body; or released
					for key, h := range holds {
						delete(holds, key)
						rec := payrouter.IdempotencyRecord{Fingerprint: "fp", Status: 402, Header: map[string]string{"Content-Type": "application/problem+json"}, Body: []byte(strings.Repeat("b", rng.IntN(2000)))}
						if len(ids) > 0 && rng.IntN(2) == 0 {
							rec.Status, rec.Body, rec.ChargeID = 201, nil, ids[rng.IntN(len(ids))]
						}
						var err error
						switch rng.IntN(4) {
						case 0:
							err = s.Release(ctx, h)
						case 1:
							err = s.Renew(ctx, h, time.Minute)
						default:
							err = s.Complete(ctx, h, rec, time.Duration(1+rng.IntN(90))*time.Minute)
						}
						if err != nil && !errors.Is(err, payrouter.ErrHoldLost) {
							t.Fatal(err)
						}
						break
					}
				case 10:
					clock.Advance(time.Duration(rng.IntN(20)) * time.Minute)
				case 11:
					if rng.IntN(10) == 0 {
						s.SetMaxBytesPerOwner(int64(20+rng.IntN(60)) << 10)
					}
				}
				checkUsage(t, s)
			}
			if full == 0 || s.Evicted() == 0 {
				t.Errorf("%d refusals, %d charges dropped: the shares never filled, so the test proved little", full, s.Evicted())
			}
		})
	}
}

// randomCharge is a new charge of owner with a body of random size.
func randomCharge(rng *rand.Rand, id, owner string) *payrouter.Charge {
	c := &payrouter.Charge{ID: id, Owner: owner, Amount: 1 + rng.Int64N(10_000), Currency: "USD", Gateway: "paywell",
		Description: strings.Repeat("d", rng.IntN(500)), CustomerID: strings.Repeat("c", rng.IntN(40)),
		Capture: true, CreatedAt: time.Now()}
	if n := rng.IntN(6); n > 0 {
		c.Metadata = map[string]string{}
		for i := range n {
			c.Metadata[fmt.Sprintf("key%d", i)] = strings.Repeat("v", rng.IntN(200))
		}
	}
	for i := range rng.IntN(3) {
		c.Attempts = append(c.Attempts, payrouter.Attempt{Gateway: "paywell", Outcome: payrouter.OutcomeUnavailable, Reference: payrouter.AttemptReference(id, i+1)})
	}
	return c
}

// Two keys fill the store at once, one to its share with authorizations nobody captures and
// declines, the other at a normal pace, within its share: the normal key is never refused,
// whatever the first does, and the first never holds more than its share. Run it with -race.
func TestQuotaRaceOneKeyFullAnotherNormal(t *testing.T) {
	one := bytesOf(t, owned("flood", "ch_flood_0000", payrouter.StatusRequiresCapture))
	share := 2000 * one // the normal key's 600 charges and keys take about half
	s := newStore(t, memstore.WithBounds(time.Hour, share))
	ctx := t.Context()
	var wg sync.WaitGroup
	refusedFlood := make([]int, 4)
	for w := range 4 { // the flood: authorizations and declines, as fast as it can
		wg.Go(func() {
			for i := range 800 {
				id := fmt.Sprintf("ch_f%d_%04d", w, i)
				st := payrouter.StatusRequiresCapture
				if i%3 == 0 {
					st = payrouter.StatusDeclined
				}
				if _, _, err := s.Claim(ctx, "flood", "k_"+id, "fp", time.Minute); errors.Is(err, memstore.ErrFull) {
					refusedFlood[w]++
					continue
				} else if err != nil {
					t.Error(err)
					return
				}
				switch err := s.SaveCharge(ctx, owned("flood", id, st)); {
				case errors.Is(err, memstore.ErrFull):
					refusedFlood[w]++
				case err != nil:
					t.Error(err)
					return
				}
			}
		})
	}
	for w := range 2 { // the normal key: each charge claimed, processing, then answered
		wg.Go(func() {
			for i := range 300 {
				id := fmt.Sprintf("ch_n%d_%04d", w, i)
				_, h, err := s.Claim(ctx, "normal", "k_"+id, "fp", time.Minute)
				if err != nil {
					t.Errorf("the normal key's claim %d: %v", i, err)
					return
				}
				c := owned("normal", id, payrouter.StatusProcessing)
				if err := s.SaveCharge(ctx, c); err != nil {
					t.Errorf("the normal key's charge %d: %v", i, err)
					return
				}
				c.Status = payrouter.StatusDeclined
				if i%2 == 0 {
					c.Status = payrouter.StatusSucceeded
				}
				if err := s.CompleteCharge(ctx, c, h, payrouter.IdempotencyRecord{Fingerprint: "fp", Status: 201, ChargeID: id}, time.Minute); err != nil {
					t.Errorf("the normal key's answer %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if refusedFlood[0]+refusedFlood[1]+refusedFlood[2]+refusedFlood[3] == 0 {
		t.Error("the flooding key was never refused: its share never filled")
	}
	// Over its share only by what completing keys it held added, never by a new charge or key.
	if got := s.OwnerBytes("flood"); got > share+share/10 {
		t.Errorf("the flooding key holds %d bytes, well over its share of %d", got, share)
	}
	checkUsage(t, s)
}
