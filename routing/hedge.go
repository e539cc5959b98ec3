package routing

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/payrouter/payrouter"
)

// Hedge is a route's hedging (docs/architecture.md, Hedging safely): when the first gateway called
// for a charge has not answered after a delay, the charge is also sent to the next gateway of
// the route. Two gateways means two possible charges, so the hedge authorizes only: the first
// call is a sale (authorize and capture) when the charge asks for capture, and a hedge that
// wins is captured only once the sale is known to hold nothing. The first approval is kept
// and every other approval is voided.
//
// A Hedge is also the schema of routes[].hedge in a configuration file (docs/configuration.md).
type Hedge struct {
	// After is when the hedge starts; the zero HedgeAfter never hedges (configuration files
	// must give one).
	After HedgeAfter `yaml:"after"`
	// Budget is the most extra gateway calls hedges may add, as a share of the route's charges,
	// in (0, 1]; 0: DefaultHedgeBudget, the same as a file that leaves the key out. Every
	// extra call counts: the hedge itself, and the void of the approval that lost or, when
	// the hedge won a charge asking for capture, its settlement's call (the hedge's capture or
	// void): a hedge costs two.
	Budget float64 `yaml:"budget"`
}

// DefaultHedgeBudget is Hedge.Budget when none is given: extra calls worth a tenth of the
// route's charges, so one charge in twenty may be hedged (and its loser voided).
const DefaultHedgeBudget = 0.1

// HedgeP95 is hedge.after's word for HedgeAfter.P95.
const HedgeP95 = "p95"

// HedgeAfter is a hedge's delay: Delay, or with P95 the 95th percentile of the first gateway's
// recent charge-attempt latencies (the last latencyWindow of them; with fewer than
// minLatencySamples, no hedge). In a file: a positive duration ("800ms") or "p95".
type HedgeAfter struct {
	Delay time.Duration // unused with P95
	P95   bool
}

// errHedgeAfter is what a hedge.after that is neither a positive duration nor "p95" is told.
var errHedgeAfter = errors.New(`must be a positive duration ("800ms") or "` + HedgeP95 + `"`)

// ParseHedgeAfter reads hedge.after: a positive duration ("800ms") or "p95".
func ParseHedgeAfter(s string) (HedgeAfter, error) {
	if s == HedgeP95 {
		return HedgeAfter{P95: true}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return HedgeAfter{}, errHedgeAfter
	}
	return HedgeAfter{Delay: d}, nil
}

// UnmarshalText is ParseHedgeAfter, for decoders.
func (a *HedgeAfter) UnmarshalText(text []byte) error {
	parsed, err := ParseHedgeAfter(string(text))
	if err != nil {
		return err
	}
	*a = parsed
	return nil
}

// String is a as a file writes it: "p95", a duration, or "" for the zero HedgeAfter.
func (a HedgeAfter) String() string {
	switch {
	case a.P95:
		return HedgeP95
	case a.Delay > 0:
		return a.Delay.String()
	}
	return ""
}

const (
	// hedgeBurst is the most hedges a route may save up while it needs none: after a quiet
	// spell, a burst of slow answers is hedged for this many charges, then at Budget's rate.
	hedgeBurst = 10
	// latencyWindow is how many recent charge-attempt latencies of a gateway its p95 is taken
	// from, and minLatencySamples how many it needs before a p95 means anything.
	latencyWindow     = 100
	minLatencySamples = 20
)

// hedgeBudget is a route's token bucket: each charge adds its Budget, each extra gateway call
// spends one: a hedge when it starts, the void of the approval that lost when it is sent, the
// settlement of a hedge that won a captured charge when it wins.
type hedgeBudget struct {
	mu     sync.Mutex
	share  float64
	tokens float64
}

// charge adds one charge's share.
func (b *hedgeBudget) charge() {
	b.mu.Lock()
	b.tokens = min(b.tokens+b.share, hedgeBurst)
	b.mu.Unlock()
}

// has reports whether a hedge could be paid for now.
func (b *hedgeBudget) has() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens >= 1
}

// take spends one hedge, if there is one to spend.
func (b *hedgeBudget) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// spend pays for an extra call that is made whatever the bucket holds (the void of an approval
// that lost: money must never stay held to save a call): the bucket may go into debt, down to
// -hedgeBurst, and the route's next hedges wait until its charges have paid it back.
func (b *hedgeBudget) spend() {
	b.mu.Lock()
	b.tokens = max(b.tokens-1, -hedgeBurst)
	b.mu.Unlock()
}

// giveBack returns a hedge that made no gateway call (its guard refused it).
func (b *hedgeBudget) giveBack() {
	b.mu.Lock()
	b.tokens = min(b.tokens+1, hedgeBurst)
	b.mu.Unlock()
}

// latencies keeps a gateway's most recent charge-attempt durations.
type latencies struct {
	mu   sync.Mutex
	ring [latencyWindow]time.Duration
	n    int // how many of ring are filled
	next int // where the next one goes
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.ring[l.next] = d
	l.next = (l.next + 1) % latencyWindow
	l.n = min(l.n+1, latencyWindow)
	l.mu.Unlock()
}

// p95 is the 95th percentile (nearest rank) of the recent durations; false with fewer than
// minLatencySamples of them.
func (l *latencies) p95() (time.Duration, bool) {
	l.mu.Lock()
	if l.n < minLatencySamples {
		l.mu.Unlock()
		return 0, false
	}
	ds := slices.Clone(l.ring[:l.n])
	l.mu.Unlock()
	slices.Sort(ds)
	rank := (95*len(ds) + 99) / 100 // ceil(0.95 n)
	return ds[rank-1], true
}

// recordAttempt feeds what one charge attempt's answer tells of its gateway to the hedge delays
// (its latency, when the gateway was called) and to the success_rate strategy (an approval or a
// decline). Failures say nothing about card approvals: they are the breaker's business.
func (t *table) recordAttempt(now time.Time, res Result) {
	st := t.stats[res.Gateway]
	if st == nil || !res.Called {
		return
	}
	switch res.Outcome {
	case payrouter.OutcomeSucceeded:
		st.approvals.add(now, true)
	case payrouter.OutcomeDeclined:
		st.approvals.add(now, false)
	}
	st.latency.add(res.Duration)
}

// hedgeDelay is how long the first gateway gets before a hedge starts; false: no hedge (p95
// without enough samples yet).
func (t *table) hedgeDelay(h *Hedge, gateway string) (time.Duration, bool) {
	if !h.After.P95 {
		return h.After.Delay, h.After.Delay > 0
	}
	if st := t.stats[gateway]; st != nil {
		return st.latency.p95()
	}
	return 0, false
}

// flight is one attempt of a hedged charge, on its own goroutine: a hedge authorizes only; the
// first gateway called is a sale (authorized and captured in one call) when the charge asks for
// capture, else it authorizes only too.
type flight struct {
	name  string
	gw    payrouter.Gateway
	ref   string
	index int // its Attempt in the charge
	hedge bool
	sale  bool
	start time.Time
	// rechecked: a recheck of this flight is queued already (a primary, when its hedge started).
	rechecked bool
	// settles: the sale of a charge a hedge won, still running when the charge was decided:
	// its answer settles the charge's queued capture (Keeper.SaleAnswered), it is never
	// voided here. Set before the background that reads it starts (decide).
	settles bool
}

// flightAnswer is what a flight came to: the gateway's answer, resolved by a status look-up when
// it may have processed the charge and the charge was still waiting for it.
type flightAnswer struct {
	f        *flight
	called   bool              // the gateway was asked (Result.Called)
	own      payrouter.Outcome // the gateway's answer to the call itself
	res      payrouter.Result  // that answer, or what a status look-up made of it
	d        time.Duration
	resolved payrouter.TxState // what a status look-up found; "" when none was made
}

// hedgedRun is a charge on a hedged route while its authorize-only attempts run.
type hedgedRun struct {
	*chargeRun
	// answers gets every flight's answer; it has room for all of them, so that a flight whose
	// answer nobody waits for any more never blocks.
	answers chan flightAnswer
	// decided is set once the charge's answer is known: later answers are left to the
	// background (finishLate) and queued rechecks, not resolved by a status look-up.
	decided atomic.Bool
	// storeMu orders the flights' storing of the charge before their first gateway call, and
	// guards at and closed.
	storeMu sync.Mutex
	// at is the version of the charge the flights' last store left (the charge's own Stored
	// belongs to the charge's goroutine); closed is set once the charge's answer is decided,
	// and a flight not yet sent then is not sent at all.
	at     payrouter.Stored
	closed bool
	// claimed is the charge as the claim of its key stored it (Plan.Stored: processing, naming
	// the first candidate and its reference, no attempt yet), until a flight's save: the first
	// flight, naming the same, needs no save of its own. nil: every flight saves.
	claimed *payrouter.Charge
	// deadline is the budget's end: flights outlive the charge's answer but not the budget.
	deadline time.Time
	// budget is the route's hedge budget: the void of an approval that lost is paid from it.
	budget *hedgeBudget
}

// hedged runs a charge's first gateways on a hedged route (docs/architecture.md, Hedging safely).
// The first gateway called makes a sale when the charge asks for capture (authorize and capture
// in one call, as an unhedged charge does), else it authorizes only; if it has not answered
// after the hedge delay and the route's budget allows, the next gateway whose guard admits it
// is called too, authorize-only. The rules, all about money:
//   - The first approval wins. A sale that wins is the charge, captured: one call for most
//     charges. A hedge that wins a charge asking for capture is answered succeeded with
//     CaptureQueued set and its capture queued (TaskCapture), made after the answer once the
//     sale's final outcome says the sale holds nothing; a sale that captured keeps the charge
//     and the hedge is voided instead (payments settles it: completeWinner). Every other
//     approval is voided at once, or queued (TaskVoid) until it is; that void, or the hedge's
//     settlement, is paid from the route's budget, as the hedge was.
//   - An attempt still running when the winner is known does not hold the answer up: it ends
//     in the background, bounded by its gateway's timeout and the budget, a TaskRecheck is
//     queued at once so that a crash cannot leave its approval in place, and an approval it
//     brings is voided as soon as it comes.
//   - A decline (or a refusal of our request) ends the charge only once the other attempt has
//     answered too: an approval there wins. An attempt whose outcome stays unknown (a failed
//     status look-up, pending) next to a decline leaves the charge declined, and the unknown
//     attempt gets a TaskRecheck, which voids an approval found later.
//   - An unknown attempt with no other answer leaves the charge processing: nothing goes to a
//     third gateway while one may have charged.
//   - When neither was processed, the rest of the candidates are returned for ordinary failover.
//
// A route's hedging applies only when a hedge could happen at all (a delay is known, the budget
// holds one, a second candidate exists); otherwise the charge runs the ordinary way. hedged
// reports done when the charge is decided (or could not be stored); otherwise rest is what is
// left to try.
func (run *chargeRun) hedged(ctx context.Context, policy *Hedge, budget *hedgeBudget, candidates []string) (rest []string, done bool) {
	budget.charge()
	h := &hedgedRun{chargeRun: run, answers: make(chan flightAnswer, len(candidates)), at: run.c.Stored, budget: budget}
	if run.stored {
		h.claimed = &payrouter.Charge{Gateway: run.c.Gateway, Reference: run.c.Reference, Attempts: run.c.Attempts}
	}
	defer h.close()
	if deadline, ok := ctx.Deadline(); ok {
		h.deadline = deadline
	} else {
		h.deadline = run.r.now().Add(run.r.budget)
	}
	l := &hedgeLoop{h: h, policy: policy, budget: budget, candidates: candidates}
	defer l.stopTimer()
	for {
		if len(l.live) == 0 {
			if rest, done, wait := l.startPrimary(ctx); !wait {
				return rest, done
			}
		}
		select {
		case <-l.timerC:
			l.timer, l.timerC = nil, nil
			l.startHedge(ctx)
		case a := <-h.answers:
			if l.answer(ctx, a) {
				return nil, true
			}
		}
	}
}

// hedgeLoop is what hedged keeps track of while a hedged charge's flights run.
type hedgeLoop struct {
	h          *hedgedRun
	policy     *Hedge
	budget     *hedgeBudget
	candidates []string
	next       int            // the next candidate to start
	live       []*flight      // started, not answered
	answered   []flightAnswer // in the order they came
	// hedgeCalled: a hedge was started (and not refused).
	hedgeCalled bool
	timer       *time.Timer
	timerC      <-chan time.Time
}

func (l *hedgeLoop) stopTimer() {
	if l.timer != nil {
		l.timer.Stop()
		l.timer, l.timerC = nil, nil
	}
}

// startPrimary runs when no flight is live: the charge is decided (or could not be stored), or
// nothing was processed anywhere. Before any hedge, the next candidate then starts as the first
// gateway of a hedged charge again, with the hedge timer (wait is true); after one, or when no
// hedge could happen, ordinary failover goes on with rest.
func (l *hedgeLoop) startPrimary(ctx context.Context) (rest []string, done, wait bool) {
	h := l.h
	if h.storeFailed() || h.decide(ctx, l.answered, nil, l.hedgeCalled) {
		return nil, true, false
	}
	if l.hedgeCalled || len(l.candidates)-l.next < 2 || !l.budget.has() {
		return l.candidates[l.next:], false, false
	}
	delay, ok := h.tab.hedgeDelay(l.policy, l.candidates[l.next])
	if !ok {
		return l.candidates[l.next:], false, false
	}
	l.live = append(l.live, h.launch(ctx, l.candidates[l.next], false))
	l.next++
	l.timer = time.NewTimer(delay)
	l.timerC = l.timer.C
	return nil, false, true
}

// startHedge starts the next candidate as a hedge of the live primary, if the budget pays.
func (l *hedgeLoop) startHedge(ctx context.Context) {
	h := l.h
	if l.next >= len(l.candidates) || !l.budget.take() {
		return
	}
	for _, f := range l.live {
		if !f.hedge && !f.rechecked {
			h.keep.ReleaseLater(ctx, payrouter.TaskRecheck, h.c, f.name, f.ref, "", h.deadline.Sub(h.r.now()))
			f.rechecked = true
		}
	}
	l.live = append(l.live, h.launch(ctx, l.candidates[l.next], true))
	l.next++
}

// answer takes in one flight's answer; it reports true when the charge is decided (an approval).
func (l *hedgeLoop) answer(ctx context.Context, a flightAnswer) bool {
	h := l.h
	l.live = slices.DeleteFunc(l.live, func(f *flight) bool { return f == a.f })
	h.record(a)
	if a.f.hedge && !a.called && !h.storeFailed() {
		l.budget.giveBack()
		if len(l.live) > 0 {
			l.startHedge(ctx) // the next candidate whose guard admits it
		}
	} else if a.f.hedge {
		l.hedgeCalled = true
	}
	l.answered = append(l.answered, a)
	if len(l.live) == 0 {
		l.stopTimer()
	}
	if a.res.Outcome == payrouter.OutcomeSucceeded {
		h.decide(ctx, l.answered, l.live, l.hedgeCalled || hasHedge(l.live))
		return true
	}
	return false
}

// hasHedge reports whether one of the flights is a hedge.
func hasHedge(fs []*flight) bool {
	return slices.ContainsFunc(fs, func(f *flight) bool { return f.hedge })
}

// launch starts one attempt at gateway name on its own goroutine: a hedge authorizes only, the
// first gateway is a sale when the charge asks for capture. The attempt is not cancelled when
// the charge answers: its context ends at the budget's deadline, and the guard bounds the call
// by the gateway's timeout, so the goroutine always ends.
func (h *hedgedRun) launch(ctx context.Context, name string, hedge bool) *flight {
	c := h.c
	ref := payrouter.AttemptReference(c.ID, len(c.Attempts)+1)
	// What is stored before the first call: the charge as it stands, without this attempt (as
	// the ordinary path stores it). A copy, because this goroutine goes on changing c.
	snapshot := *c
	snapshot.Attempts = slices.Clone(c.Attempts)
	snapshot.Gateway, snapshot.Reference = name, ref // where the reconciler looks, should this process die mid-call
	sale := !hedge && c.Capture
	// Its reference from now on, in every save a later flight makes: should this process die
	// with it in flight, the reconciler and the releases know it may have been sent.
	c.Attempts = append(c.Attempts, payrouter.Attempt{Gateway: name, Reference: ref, Hedge: hedge, Sale: sale})
	f := &flight{name: name, gw: h.tab.gw.Adapters[name], ref: ref, index: len(c.Attempts) - 1, hedge: hedge, sale: sale, start: h.r.now()}

	req := authorization(c, ref, sale)
	look := payrouter.Charge{ID: c.ID, Amount: c.Amount, Currency: c.Currency}
	call := h.tab.gw.Call(name, payrouter.OpCharge, ref, func(ctx context.Context) payrouter.Result { return f.gw.Authorize(ctx, req) })
	call.Attempt, call.Hedge = f.index+1, hedge
	call.Before = func(ctx context.Context) bool { return h.storeBeforeCall(ctx, &snapshot) }
	callCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), h.deadline)
	go func() {
		defer cancel()
		res := call.Do(callCtx)
		h.tab.recordAttempt(h.r.now(), res)
		a := flightAnswer{f: f, called: res.Called, own: res.Outcome, res: res.Result, d: res.Duration}
		if res.Outcome.MayHaveProcessed() && !h.decided.Load() {
			a.res = h.resolve(callCtx, &look, f.gw, name, ref)
			a.resolved = a.res.State
		}
		h.answers <- a
	}()
	return f
}

// storeBeforeCall stores the charge as processing before each flight's gateway call, naming that
// flight's gateway and reference: with a hedge, the hedge's. The primary it hedges has a
// recheck queued when the hedge starts (startHedge), so should this process die with both in
// flight, the reconciler settles the charge on the hedge and the recheck voids the primary's
// approval; when the charge ends on the primary, the recheck finds the attempt kept and does
// nothing.
func (h *hedgedRun) storeBeforeCall(ctx context.Context, snapshot *payrouter.Charge) bool {
	h.storeMu.Lock()
	defer h.storeMu.Unlock()
	if h.storeErr != nil || h.closed {
		return false
	}
	claimed := h.claimed
	h.claimed = nil
	if claimed != nil && snapshot.Gateway == claimed.Gateway && snapshot.Reference == claimed.Reference &&
		len(snapshot.Attempts) == len(claimed.Attempts) {
		return true // stored so by the claim of its key
	}
	snapshot.Stored = h.at
	if err := h.keep.SaveCharge(ctx, snapshot); err != nil {
		h.storeErr = err
		return false
	}
	h.at = snapshot.Stored
	if !h.stored {
		// Written once, by the first flight, before its answer is sent to the charge's
		// goroutine, which reads it: a late flight's save must not write it again.
		h.stored = true
	}
	return true
}

// close hands the version the flights stored back to the charge, whose goroutine writes it
// from here on, and keeps any flight not sent yet from being sent.
func (h *hedgedRun) close() {
	h.storeMu.Lock()
	defer h.storeMu.Unlock()
	h.closed = true
	h.c.Stored = h.at
}

// storeFailed reports whether storing the charge failed, so that no gateway was called.
func (h *hedgedRun) storeFailed() bool {
	h.storeMu.Lock()
	defer h.storeMu.Unlock()
	return h.storeErr != nil
}

// record writes a flight's answer into its attempt.
func (h *hedgedRun) record(a flightAnswer) {
	at := &h.c.Attempts[a.f.index]
	at.Outcome, at.Duration, at.Resolved = a.own, a.d, a.resolved
	if !a.called {
		at.Reference = "" // never sent: nothing can be held there
	} else {
		if a.res.Outcome != payrouter.OutcomeSucceeded {
			h.r.log.Info("charge.attempt", "charge_id", h.c.ID, "gateway", a.f.name, "outcome", a.res.Outcome,
				"duration_ms", a.d.Milliseconds(), "hedge", a.f.hedge, "detail", a.res.Detail)
		}
	}
	if a.resolved == payrouter.TxNotFound {
		// Never received: a gateway may still process it late, so it is looked up again.
		h.keep.ReleaseLater(context.Background(), payrouter.TaskRecheck, h.c, a.f.name, a.f.ref, "", h.tab.gw.Timeout(a.f.name, payrouter.OpCharge))
	}
}

// answerKind sorts a flight's answer for deciding its charge.
type answerKind int

const (
	notProcessed answerKind = iota // unavailable, refused, or looked up and not found
	approval
	refusal // declined, or our request refused as malformed: no charge, and none to come
	maybe   // pending or unknown: it may still be approved
)

// kindOf is the answerKind of a (after its status look-up, if one was made).
func kindOf(a flightAnswer) answerKind {
	switch {
	case a.res.Outcome == payrouter.OutcomeSucceeded:
		return approval
	case a.res.Outcome.NotSent():
		return notProcessed
	case a.res.Outcome == payrouter.OutcomeDeclined || a.res.Outcome == payrouter.OutcomeError:
		return refusal
	}
	return maybe
}

// decide settles the charge from its answers once an approval came or nothing is running any
// more (live then is empty). It reports false when nothing was processed anywhere: the caller
// goes on.
func (h *hedgedRun) decide(ctx context.Context, answered []flightAnswer, live []*flight, hedged bool) bool {
	var win, stop, unsure *flightAnswer
	for i := range answered {
		a := &answered[i]
		switch kindOf(*a) {
		case approval:
			if win == nil {
				win = a
			}
		case refusal:
			if stop == nil {
				stop = a
			}
		case maybe:
			if unsure == nil {
				unsure = a
			}
		}
	}
	if win == nil && stop == nil && unsure == nil {
		return false
	}
	h.decided.Store(true)

	// Every attempt that may yet be approved and is not the charge's is released: looked up
	// later, voided when found approved.
	keep := win
	switch {
	case keep == nil && stop != nil:
		keep = stop
	case keep == nil:
		keep = unsure
	}
	for i := range answered {
		if a := &answered[i]; a != keep && kindOf(*a) == maybe && !a.f.rechecked {
			h.keep.ReleaseLater(ctx, payrouter.TaskRecheck, h.c, a.f.name, a.f.ref, a.res.GatewayReference, 0)
		}
	}
	if win != nil && win.f.hedge && h.c.Capture {
		for _, f := range live {
			f.settles = f.sale // its answer settles the hedge's capture, before abandon reads it
		}
	}
	if len(live) > 0 {
		h.abandon(ctx, live)
	}

	if win == nil {
		Apply(h.c, keep.f.name, keep.f.ref, keep.res)
		return true
	}
	Apply(h.c, win.f.name, win.f.ref, win.res)
	if hedged {
		result := "won_primary"
		if win.f.hedge {
			result = "won_hedge"
		}
		h.r.obs.HedgeDone(result)
	}
	h.completeWinner(ctx, win, answered, live)
	return true
}

// saleOf tells of the sale among a charge's flights: unsettled while it may still hold money
// (running, or answered without a final word), running while its answer has not come; both
// false when there is no sale or it certainly holds nothing (not sent, declined, refused).
func saleOf(answered []flightAnswer, live []*flight) (unsettled, running bool) {
	for _, f := range live {
		if f.sale {
			return true, true
		}
	}
	for _, a := range answered {
		if a.f.sale {
			k := kindOf(a)
			return k == maybe || k == approval, false
		}
	}
	return false, false
}

// completeWinner completes the winning attempt when the charge asks for capture. A sale that
// won captured in its own call: Apply made the charge what its gateway says. A hedge that won
// (or a sale that came back only authorized) only authorized: its capture is queued
// (Keeper.QueueCapture) and the charge answered succeeded with CaptureQueued set, the capture
// made after the answer, off the customer's time, so a gateway's slow capture no longer adds
// its tail to the charge's. While the sale may still hold
// money (running, or answered without a final word), the queued capture settles first from the
// sale's final outcome (awaitSale, and the sale's answer handed over by finishLate): nothing is
// captured at the hedge before the sale is known to hold nothing. The settlement's call (the
// hedge's capture or void) is the hedge's second extra call, paid from the route's budget.
//
// Should the capture not be queued: with the sale settled it is made now, and only a confirmed
// capture makes the charge succeeded (anything else leaves it processing, and the reconciler,
// finding it authorized with capture wanted, captures it); with the sale unsettled nothing is
// captured and the charge answers processing: the reconciler looks the sale up first.
func (h *hedgedRun) completeWinner(ctx context.Context, win *flightAnswer, answered []flightAnswer, live []*flight) {
	c := h.c
	switch {
	case !c.Capture:
		c.Status = payrouter.StatusRequiresCapture
		return
	case !win.f.hedge && win.res.State != payrouter.TxAuthorized:
		return // the sale captured in its own call: as its gateway answered
	case win.res.State == payrouter.TxCaptured:
		c.Status = payrouter.StatusSucceeded // the gateway captured it already
		return
	}
	// A hedge, or a sale that came back only authorized (captured after the answer too, never
	// left waiting).
	var unsettled, running bool
	if win.f.hedge {
		h.budget.spend()
		unsettled, running = saleOf(answered, live)
	}
	err := h.keep.QueueCapture(ctx, c, win.f.name, win.f.ref, win.res.GatewayReference, running)
	if err == nil {
		c.Status, c.CaptureQueued = payrouter.StatusSucceeded, true
		return
	}
	if unsettled {
		c.Status = payrouter.StatusProcessing
		h.r.log.WarnContext(ctx, "charge.capture_not_queued", "charge_id", c.ID, "gateway", win.f.name, "err", err,
			"then", "processing: the reconciler looks the sale up before anything is captured")
		return
	}
	h.r.log.WarnContext(ctx, "charge.capture_not_queued", "charge_id", c.ID, "gateway", win.f.name, "err", err,
		"then", "captured before the answer")
	req := payrouter.TxRequest{
		Reference: payrouter.OperationReference(win.f.ref, payrouter.OpCapture), ChargeReference: win.f.ref,
		GatewayReference: win.res.GatewayReference, Amount: c.Amount, Currency: c.Currency,
	}
	res := h.tab.gw.Call(win.f.name, payrouter.OpCapture, req.Reference, func(ctx context.Context) payrouter.Result {
		return win.f.gw.Capture(ctx, req)
	}).Do(ctx)
	if res.Outcome == payrouter.OutcomeSucceeded {
		c.Status = payrouter.StatusSucceeded
		return
	}
	c.Status = payrouter.StatusProcessing
	h.r.log.WarnContext(ctx, "charge.capture_failed", "charge_id", c.ID, "gateway", win.f.name, "outcome", res.Outcome,
		"detail", res.Detail, "then", "processing: the reconciler captures the authorization")
}

// abandon lets attempts still running when the charge is decided end in the background. Each
// is rechecked later from the queue (so that a crash of this process cannot leave an approval
// in place), and an approval it brings when it ends is voided at once.
func (h *hedgedRun) abandon(ctx context.Context, live []*flight) {
	c := h.c
	// The background keeps only what it needs: c belongs to the caller once Charge returns.
	bare := &payrouter.Charge{ID: c.ID, Amount: c.Amount, Currency: c.Currency}
	for _, f := range live {
		c.Attempts[f.index].Outcome = payrouter.OutcomeUnknown // not known when the charge answered
		c.Attempts[f.index].Reference = f.ref
		if !f.rechecked {
			left := max(f.start.Add(h.tab.gw.Timeout(f.name, payrouter.OpCharge)).Sub(h.r.now()), 0)
			h.keep.ReleaseLater(ctx, payrouter.TaskRecheck, bare, f.name, f.ref, "", left)
		}
	}
	answers, router, tab, keep, budget, n := h.answers, h.r, h.tab, h.keep, h.budget, len(live)
	router.late.Go(func() {
		for range n {
			a := <-answers // every flight answers by its deadline
			router.finishLate(tab, keep, budget, bare, a)
		}
	})
}

// finishLate handles the answer of an attempt that ended after its charge was decided: an
// approval is voided at once, through the gateways of the charge's table (or queued until it
// is), and the stored charge shows how it ended. The void is an extra call of the hedge: the
// route's budget pays for it. The sale of a charge a hedge won is never voided here: its answer
// goes to the Keeper, which settles the charge's queued capture from it.
func (r *Router) finishLate(tab *table, keep Keeper, budget *hedgeBudget, c *payrouter.Charge, a flightAnswer) {
	voided := false
	if a.f.hedge && !a.called {
		budget.giveBack() // abandoned before it was sent: it cost no call
	}
	if a.f.settles {
		defer keep.SaleAnswered(c.ID, a.res)
	} else if a.res.Outcome == payrouter.OutcomeSucceeded {
		budget.spend()
		r.obs.HedgeDone("voided")
		voided = r.voidStray(tab.gw, keep, c, a.f.name, a.f.ref, a.res.GatewayReference)
	}
	r.log.Info("charge.late_answer", "charge_id", c.ID, "gateway", a.f.name, "outcome", a.res.Outcome,
		"duration_ms", a.d.Milliseconds(), "hedge", a.f.hedge, "voided", voided)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	at := payrouter.Attempt{Gateway: a.f.name, Outcome: a.own, Duration: a.d, Voided: voided}
	if a.called {
		at.Reference = a.f.ref
	}
	if err := keep.NoteLateAnswer(ctx, c.ID, a.f.ref, at); err != nil {
		r.log.WarnContext(ctx, "charge.store_failed", "charge_id", c.ID, "err", err)
	}
}

// voidStray voids an approval no charge keeps (a hedge that lost, answering after its charge
// was decided) at gateway, through gws: the gateways of the configuration its charge ran on. A
// void that fails is queued (TaskVoid) and retried until it is done. It reports whether it is
// voided now.
func (r *Router) voidStray(gws *Gateways, keep Keeper, c *payrouter.Charge, gateway, ref, gwRef string) bool {
	req := payrouter.TxRequest{
		Reference: payrouter.OperationReference(ref, payrouter.OpVoid), ChargeReference: ref, GatewayReference: gwRef,
		Amount: c.Amount, Currency: c.Currency,
	}
	gw := gws.Adapters[gateway]
	ctx, cancel := context.WithTimeout(context.Background(), gws.Timeout(gateway, payrouter.OpVoid))
	defer cancel()
	res := gws.Call(gateway, payrouter.OpVoid, req.Reference, func(ctx context.Context) payrouter.Result {
		return gw.Void(ctx, req)
	}).Do(ctx)
	if res.Outcome == payrouter.OutcomeSucceeded {
		return true
	}
	r.log.WarnContext(ctx, "charge.void_failed", "charge_id", c.ID, "gateway", gateway, "reference", ref, "outcome", res.Outcome,
		"detail", res.Detail, "then", "queued")
	keep.ReleaseLater(ctx, payrouter.TaskVoid, c, gateway, ref, gwRef, 0)
	return false
}
