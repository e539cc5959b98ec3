package e2e

// When each charge's money was captured, as the simulators' ledgers show it: the chaos test's
// bound on captures made after the answer. A hedged charge (the EUR route) whose hedge answered
// before its sale is answered succeeded once its capture is queued, and settled after the
// answer from the sale's outcome (docs/architecture.md, Hedging safely): captured by the sale,
// or the hedge captured. A charge told succeeded must be captured exactly once (checkMoney) and
// within chaosCaptureWithin of its answer, or of the end of the last fault it could see.

import (
	"context"
	"fmt"
	"sync"
	"time"
)

const (
	// chaosCaptureEvery is how often the ledgers are read for new captures: the resolution of
	// the capture times measured.
	chaosCaptureEvery = 250 * time.Millisecond
	// chaosCaptureWithin bounds a capture made after its charge's answer (docs/api.md, What
	// succeeded promises on a hedged route): the worker sends a capture the charge's own
	// request could not send from request_timeout + 2 s + the capture timeout after the answer
	// on, then again after each worker idle period (10 s) while the gateway cannot take it; a
	// try just after a fault may still meet the gateway's capture breaker open for a cooldown.
	// Two idle periods, that grace, its 1 s round, a cooldown, the ledger reads' resolution and
	// 3 s of a loaded two-core machine under -race.
	chaosCaptureWithin = 2*10*time.Second + chaosRequestTimeout + 2*time.Second + chaosGatewayTimeout +
		time.Second + chaosCooldown + chaosCaptureEvery + 3*time.Second
)

// captureWatch records when each transaction was first seen captured in a ledger, by reference.
type captureWatch struct {
	mu    sync.Mutex
	first map[string]time.Time
	// errs counts ledger reads that failed (a simulator busy under the storm): the next read
	// catches up, one resolution later.
	errs int
}

// watchCaptures reads every simulator's ledger each chaosCaptureEvery until ctx ends; the
// returned function waits for it to stop.
func watchCaptures(ctx context.Context, s *sims) (*captureWatch, func()) {
	w := &captureWatch{first: map[string]time.Time{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(chaosCaptureEvery)
		defer tick.Stop()
		for {
			w.read(s)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return w, wg.Wait
}

// read takes one look at the ledgers: a transaction captured (or refunded since) is captured
// from the first look that shows it so.
func (w *captureWatch) read(s *sims) {
	now := time.Now()
	for _, g := range []*sim{s.paywell, s.ding, s.tranglo} {
		list, err := g.entries()
		w.mu.Lock()
		if err != nil {
			w.errs++
		}
		for _, e := range list {
			if e.Status == "captured" || e.Status == "partially_refunded" || e.Status == "refunded" {
				if _, seen := w.first[e.Reference]; !seen {
					w.first[e.Reference] = now
				}
			}
		}
		w.mu.Unlock()
	}
}

// capturedAt is when reference was first seen captured; false when never.
func (w *captureWatch) capturedAt(reference string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.first[reference]
	return at, ok
}

// checkCaptureTime holds a charge told succeeded to its bound: its captured transaction seen
// in its ledger at most chaosCaptureWithin after the later of its answer and the end of the
// last fault it could see by then. A charge with no captured transaction is checkMoney's
// failure, not this one's.
func (r *chaosRun) checkCaptureTime(ch *chaosCharge, txs []ledgerEntry, sum *chaosSummary) {
	if r.captures == nil || ch.told != "succeeded" || ch.toldAt.IsZero() {
		return
	}
	for _, e := range txs {
		if e.Status != "captured" && e.Status != "partially_refunded" && e.Status != "refunded" {
			continue
		}
		at, ok := r.captures.capturedAt(e.Reference)
		if !ok {
			continue // captured after the last read: the money check has it
		}
		after := at.Sub(ch.toldAt)
		sum.capturesTimed++
		sum.maxCaptureAfterAnswer = max(sum.maxCaptureAfterAnswer, after)
		end, fault := r.tl.lastEnd(ch.gatewayList(), at)
		from := later(ch.toldAt, end)
		if at.Sub(from) > chaosCaptureWithin {
			last := "no fault"
			if fault != "" {
				last = fmt.Sprintf("the last fault it could see, %s, ended +%v", fault, end.Sub(r.began).Round(10*time.Millisecond))
			}
			r.book.problem("a charge told succeeded not captured within its bound", "%s (key %s, %s %d): told succeeded +%v, %s captured +%v: %v after %s; bound %v; answers %s",
				ch.id, ch.order.key, ch.order.currency, ch.order.amount, ch.toldAt.Sub(r.began).Round(10*time.Millisecond), e.Reference,
				at.Sub(r.began).Round(10*time.Millisecond), at.Sub(from).Round(10*time.Millisecond), last, chaosCaptureWithin, ch.order.history(r.began))
		}
	}
}
