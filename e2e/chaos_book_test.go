package e2e

// What the chaos test's clients were told, and the money check that holds it against the
// simulators' ledgers once the fleet has settled.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// --- what the clients were told ------------------------------------------------------------------

// chaosAnswer is one answer a key got.
type chaosAnswer struct {
	sent, at time.Time // when the request was sent, when its answer came
	who      int       // the instance: 0 A, 1 B
	status   int
	kind     string // the charge's or refund's status, or the problem's type
	id       string // the charge (refund) it names
	replayed bool
}

func (a chaosAnswer) describe(began time.Time) string {
	s := fmt.Sprintf("%s %d %s +%v", chaosNames[a.who][len("payrouter-"):], a.status, a.kind, a.at.Sub(began).Round(10*time.Millisecond))
	if a.replayed {
		s += " (replayed)"
	}
	return s
}

func describeAnswers(list []chaosAnswer, began time.Time) string {
	parts := make([]string, len(list))
	for i, a := range list {
		parts[i] = a.describe(began)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// chaosOrder is one Idempotency-Key of a charge and its body.
type chaosOrder struct {
	key      string
	body     []byte
	amount   int64
	currency string
	capture  bool
	token    string
	twin     string // sent to both instances at once, and during what; "" when not

	mu      sync.Mutex
	answers []chaosAnswer // every answer the key got, as they came
	final   bool          // a final answer (201, 202, 402, 502) came back
	status  int           // the latest final answer's status
	id      string        // its charge
	// firstFinalAt is when the key's first final answer came.
	firstFinalAt time.Time
}

type orderSnapshot struct {
	done   bool
	status int
	id     string
}

func (o *chaosOrder) snapshot() orderSnapshot {
	o.mu.Lock()
	defer o.mu.Unlock()
	return orderSnapshot{o.final, o.status, o.id}
}

// history is every answer the key got, for a failure message.
func (o *chaosOrder) history(began time.Time) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return describeAnswers(o.answers, began)
}

// toldBy is what a final answer to POST /charge tells of its charge: its status; "" for an
// answer that is not final (a 409 or 503 invites the same request again) or not a known one.
func toldBy(status int, chargeStatus string) string {
	switch status {
	case http.StatusCreated:
		switch chargeStatus {
		case "succeeded", "requires_capture", "voided", "refunded", "partially_refunded":
			return chargeStatus
		}
	case http.StatusAccepted:
		if chargeStatus == "processing" {
			return chargeStatus
		}
	case http.StatusPaymentRequired:
		return "declined"
	case http.StatusBadGateway:
		return "failed"
	}
	return ""
}

// outcomeClass is what a status says became of the card, which nothing later may change: a
// charge told succeeded may since show its refunds, one told processing anything final.
func outcomeClass(status string) string {
	switch status {
	case "succeeded", "partially_refunded", "refunded":
		return "captured"
	case "requires_capture":
		return "authorized"
	case "processing", "":
		return ""
	}
	return status // voided, declined, failed
}

// chaosCharge is one charge id a client was told about in a final answer.
type chaosCharge struct {
	id     string
	order  *chaosOrder
	told   string // the first final answer: succeeded, requires_capture, processing, declined, failed
	status int    // the HTTP status it was told with
	toldAt time.Time

	// The rest is written under the book's lock.
	lastTold string          // the latest final answer that was not processing
	class    string          // outcomeClass of the final answers that were not processing
	classBy  chaosAnswer     // the answer that told it first
	gateways map[string]bool // every gateway its answers and look-ups named
	// processingAt is when it was first told processing (zero if never); finalAt when it was
	// first seen final after that (by its poller or a later answer), and finalStatus what.
	processingAt, finalAt time.Time
	finalStatus           string
}

func (ch *chaosCharge) gatewayList() []string {
	var out []string
	for g := range ch.gateways {
		out = append(out, g)
	}
	sort.Strings(out)
	return out
}

// chaosRefund is one refund request.
type chaosRefund struct {
	key    string
	charge *chaosCharge
	amount int64 // asked for (the charge's amount for a full refund)
	body   []byte
	// race numbers the race it is one of (refunds of one charge sent at once with different
	// keys, chaosRun.refundRace); 0 when none. A race's 409 invalid-charge-state is final.
	race int64

	// Written under the book's lock.
	answers  []chaosAnswer
	answered bool   // a final answer came (accepted or refused)
	status   int    // the latest final answer: 201, 202, or what else came back
	id       string // re_...
	state    string // the refund's status in that answer: succeeded, queued, pending
	reply    string
	// toldAt is when it was first accepted (201, or 202 queued); queuedAt when first told 202;
	// finalAt when first seen succeeded or failed after that.
	toldAt, queuedAt, finalAt time.Time
	finalState                string
}

func (rf *chaosRefund) accepted() bool { return !rf.toldAt.IsZero() }

// chaosBook is what every client was told, and the problems seen while the load ran.
type chaosBook struct {
	mu        sync.Mutex
	began     time.Time
	orders    []*chaosOrder
	charges   map[string]*chaosCharge
	refunds   []*chaosRefund
	openKeys  []*chaosOrder  // keys the load gave up on (409, 503 or no connection at their deadline)
	openRefs  []*chaosRefund // likewise for refunds
	unsettled []*chaosOrder  // keys the final pass could not answer either
	noID      map[int]int    // final answers without a charge id, by status
	counts    map[string]int
	problems  map[string][]string
	order     []string        // problem kinds in the order first seen
	raceKeys  map[string]bool // the keys of the refunds sent in races
}

func newChaosBook() *chaosBook {
	return &chaosBook{began: time.Now(), charges: map[string]*chaosCharge{}, noID: map[int]int{}, counts: map[string]int{}, problems: map[string][]string{},
		raceKeys: map[string]bool{}}
}

func (b *chaosBook) count(what string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.counts[what]++
}

// problem records a failure, reported at the end with its count and first examples.
func (b *chaosBook) problem(kind, format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problemLocked(kind, format, args...)
}

// problemLocked is problem for a caller holding b.mu.
func (b *chaosBook) problemLocked(kind, format string, args ...any) {
	if _, ok := b.problems[kind]; !ok {
		b.order = append(b.order, kind)
	}
	b.problems[kind] = append(b.problems[kind], fmt.Sprintf(format, args...))
}

// report fails the test once per kind of problem, with its count and first three examples.
func (b *chaosBook) report(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, kind := range b.order {
		list := b.problems[kind]
		ex := list[:min(3, len(list))]
		t.Errorf("%s: %d time(s); e.g.\n    %s", kind, len(list), strings.Join(ex, "\n    "))
	}
}

func (b *chaosBook) addOrder(o *chaosOrder) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.orders = append(b.orders, o)
}

func (b *chaosBook) randomOrder(rng *rand.Rand) *chaosOrder {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.orders) == 0 {
		return nil
	}
	return b.orders[rng.IntN(len(b.orders))]
}

func (b *chaosBook) leaveForLater(o *chaosOrder) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.openKeys = append(b.openKeys, o)
}

func (b *chaosBook) leaveRefundForLater(rf *chaosRefund) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.openRefs = append(b.openRefs, rf)
}

// takeLeftOpen returns the keys the load left open that no later answer (a repeat) settled.
func (b *chaosBook) takeLeftOpen() ([]*chaosOrder, []*chaosRefund) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var orders []*chaosOrder
	for _, o := range b.openKeys {
		if !o.snapshot().done {
			orders = append(orders, o)
		}
	}
	var refs []*chaosRefund
	for _, rf := range b.openRefs {
		if !rf.answered {
			refs = append(refs, rf)
		}
	}
	b.openKeys, b.openRefs = nil, nil
	return orders, refs
}

func (b *chaosBook) markUnresolved(o *chaosOrder) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unsettled = append(b.unsettled, o)
}

// answered records an answer to a charge key. Only final answers (201, 202, 402, 502) tell
// anything about the charge: a 409 idempotency-conflict or a 503 (gateways-unavailable,
// state-unavailable, with a charge id or not) invites the same request again, and what comes
// after it is the key's answer. The final answers of one key must name one charge and one
// outcome (a 202 is none yet); a request sent after the key's first final answer came must be
// a replay, and a key is never held (409) long after it was answered, unless a fault of the
// schedule (a store down when the answer was to be stored) came between. It returns the charge,
// and whether this answer is its first 202.
func (b *chaosBook) answered(o *chaosOrder, rep reply, who int, tl *chaosTimeline) (*chaosCharge, bool) {
	a, err := decodeAnswer(rep)
	ans := chaosAnswer{sent: rep.start, at: rep.start.Add(rep.elapsed), who: who, status: rep.status,
		replayed: rep.header.Get("Idempotent-Replayed") == "true"}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		ans.kind = "not JSON"
		o.add(ans)
		b.problemLocked("an answer to POST /charge that is not JSON", "%s: %s", o.key, rep)
		return nil, false
	}
	ans.id = a.chargeID()
	ans.kind = a.ChargeStatus
	if ans.kind == "" {
		ans.kind = strings.TrimPrefix(a.Type, "/problems/")
	}
	o.add(ans)
	told := toldBy(rep.status, a.ChargeStatus)
	o.mu.Lock()
	firstAt, firstID := o.firstFinalAt, o.id
	o.mu.Unlock()
	// A fault of the schedule from shortly before the first answer: its answer may not have been
	// stored (the database away), and the key is then settled anew once its hold ran out.
	faultSince := func(from time.Time) bool {
		return tl != nil && tl.globalDuring(from.Add(-chaosRequestTimeout-time.Second), ans.at)
	}
	switch {
	case told != "":
	case rep.status == http.StatusConflict && ans.kind == "idempotency-conflict":
		b.counts["charge 409 idempotency-conflict (sent again)"]++
		if !firstAt.IsZero() && ans.sent.Sub(firstAt) > chaosKeyFree && !faultSince(firstAt) {
			b.problemLocked("a key answered before still held (409) long after", "%s: first answered %v before this 409; answers %s",
				o.key, ans.sent.Sub(firstAt).Round(time.Millisecond), o.history(b.began))
		}
		return nil, false
	case rep.status == http.StatusServiceUnavailable:
		what := "charge 503 " + ans.kind
		if ans.id != "" {
			what += " with its charge id"
		}
		b.counts[what+" (sent again after Retry-After)"]++
		return nil, false
	case rep.status == http.StatusInternalServerError:
		b.problemLocked("payrouter answered POST /charge 500", "%s: %s", o.key, rep)
		return nil, false
	default:
		b.problemLocked("an unexpected answer to POST /charge", "%s: %s; answers %s", o.key, rep, o.history(b.began))
		return nil, false
	}

	b.counts[fmt.Sprintf("answer %d %s", rep.status, told)]++
	id := ans.id
	if id == "" {
		b.noID[rep.status]++
		b.problemLocked("a final answer to POST /charge without a charge id", "%s: %s", o.key, rep)
		return nil, false
	}
	o.mu.Lock()
	if o.firstFinalAt.IsZero() {
		o.firstFinalAt = ans.at
	}
	o.final, o.status, o.id = true, rep.status, id
	o.mu.Unlock()
	if firstID != "" && firstID != id {
		b.problemLocked("one key answered with two charge ids", "%s: %s, then %s; answers %s", o.key, firstID, id, o.history(b.began))
	}
	if !firstAt.IsZero() && ans.sent.After(firstAt) && !ans.replayed && !faultSince(firstAt) {
		b.problemLocked("a key answered before was not replayed", "%s: sent again %v after its first final answer, answered without Idempotent-Replayed: %s; answers %s",
			o.key, ans.sent.Sub(firstAt).Round(time.Millisecond), rep, o.history(b.began))
	}
	ch := b.charges[id]
	if ch == nil {
		ch = &chaosCharge{id: id, order: o, told: told, status: rep.status, toldAt: ans.at, gateways: map[string]bool{}}
		b.charges[id] = ch
	}
	for _, at := range a.Attempts {
		ch.gateways[at.Gateway] = true
	}
	if a.Gateway != "" {
		ch.gateways[a.Gateway] = true
	}
	if told == "processing" {
		if ch.class != "" && ans.sent.After(ch.classBy.at) && !faultSince(ch.classBy.at) {
			b.problemLocked("a charge told final, then processing again", "%s (key %s): told %s, then processing: %s; answers %s",
				id, o.key, ch.lastTold, rep, o.history(b.began))
		}
		if ch.processingAt.IsZero() {
			ch.processingAt = ans.at
			return ch, true
		}
		return ch, false
	}
	ch.lastTold = told
	if !ch.processingAt.IsZero() && ch.finalAt.IsZero() {
		ch.finalAt, ch.finalStatus = ans.at, told
	}
	switch cls := outcomeClass(told); {
	case ch.class == "":
		ch.class, ch.classBy = cls, ans
	case ch.class != cls:
		b.problemLocked("one key answered two different final outcomes", "%s (key %s): %s (%s), then %s: %s; answers %s",
			id, o.key, ch.class, ch.classBy.describe(b.began), told, rep, o.history(b.began))
	}
	return ch, false
}

// add appends an answer to the key's history.
func (o *chaosOrder) add(a chaosAnswer) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.answers = append(o.answers, a)
}

// charge returns the charge a client was told about with that id, nil when none was.
func (b *chaosBook) charge(id string) *chaosCharge {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.charges[id]
}

// looked records a GET /charge/{id} answer of a charge a client was told about: a 404 is a
// failure (the charge exists: it was answered), a 503 a try to make again. ok is true for a
// charge object.
func (b *chaosBook) looked(ch *chaosCharge, rep reply) (chargeObject, bool) {
	var c chargeObject
	b.mu.Lock()
	defer b.mu.Unlock()
	switch rep.status {
	case http.StatusOK:
		if err := json.Unmarshal(rep.body, &c); err != nil || c.ID == "" {
			b.problemLocked("GET /charge/{id} is not a charge object", "%v: %s", err, rep)
			return c, false
		}
		if ch != nil {
			for _, at := range c.Attempts {
				ch.gateways[at.Gateway] = true
			}
		}
		return c, true
	case http.StatusNotFound:
		how := ""
		if ch != nil {
			how = fmt.Sprintf(" (key %s, told %s %v before; answers %s)", ch.order.key, ch.told,
				time.Since(ch.toldAt).Round(time.Millisecond), ch.order.history(b.began))
		}
		b.problemLocked("an answer 404 for a charge or refund that exists (its id was answered before)", "GET /charge/{id}%s: %s", how, rep)
	case http.StatusServiceUnavailable:
		b.counts["GET /charge/{id} 503 "+problemType(rep)+" (asked again)"]++
	default:
		b.problemLocked("an unexpected answer to GET /charge/{id}", "%s", rep)
	}
	return c, false
}

// processing lists the charges told processing not yet seen final.
func (b *chaosBook) processing() []*chaosCharge {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*chaosCharge
	for _, ch := range b.charges {
		if !ch.processingAt.IsZero() && ch.finalAt.IsZero() {
			out = append(out, ch)
		}
	}
	return out
}

func (b *chaosBook) seenFinal(ch *chaosCharge, status string, at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ch.finalAt.IsZero() {
		ch.finalAt, ch.finalStatus = at, status
	}
}

func (b *chaosBook) chargeIDs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]string, 0, len(b.charges))
	for id := range b.charges {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (b *chaosBook) addRefund(rf *chaosRefund) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refunds = append(b.refunds, rf)
	if rf.race > 0 {
		b.raceKeys[rf.key] = true
	}
}

// raced reports whether key is a refund's sent in a race.
func (b *chaosBook) raced(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.raceKeys[key]
}

// unrefunded returns up to n charges told succeeded (201) for which no refund was asked, the
// latest first: a stop of an instance races refunds of them.
func (b *chaosBook) unrefunded(n int) []*chaosCharge {
	b.mu.Lock()
	defer b.mu.Unlock()
	asked := map[string]bool{}
	for _, rf := range b.refunds {
		asked[rf.charge.id] = true
	}
	var out []*chaosCharge
	for i := len(b.orders) - 1; i >= 0 && len(out) < n; i-- {
		o := b.orders[i]
		st := o.snapshot()
		ch := b.charges[st.id]
		if ch != nil && ch.told == "succeeded" && ch.status == http.StatusCreated && !asked[ch.id] {
			asked[ch.id] = true
			out = append(out, ch)
		}
	}
	return out
}

// refundAnswered records an answer to a refund request, and reports whether it is the refund's
// first 202 (its poller starts).
func (b *chaosBook) refundAnswered(rf *chaosRefund, rep reply, who int) bool {
	var ro refundObject
	_ = json.Unmarshal(rep.body, &ro)
	kind := ro.Status
	if kind == "" {
		kind = problemType(rep)
	}
	ans := chaosAnswer{sent: rep.start, at: rep.start.Add(rep.elapsed), who: who, status: rep.status, kind: kind, id: ro.ID,
		replayed: rep.header.Get("Idempotent-Replayed") == "true"}
	b.mu.Lock()
	defer b.mu.Unlock()
	rf.answers = append(rf.answers, ans)
	ch := rf.charge
	switch {
	case rep.status == http.StatusCreated && ro.Status == "succeeded" && ro.ID != "":
	case rep.status == http.StatusAccepted && (ro.Status == "queued" || ro.Status == "pending") && ro.ID != "":
	case rep.status == http.StatusConflict && kind == "idempotency-conflict", rep.status == http.StatusServiceUnavailable:
		b.counts["refund "+fmt.Sprint(rep.status)+" "+kind+" (sent again)"]++
		return false
	case rep.status == http.StatusConflict && kind == "invalid-charge-state" && rf.race > 0:
		b.counts["race refund 409 invalid-charge-state (did not fit: final)"]++
		rf.answered, rf.status, rf.reply = true, rep.status, rep.String()
		return false
	case rep.status == http.StatusConflict && kind == "invalid-charge-state":
		return false // sent again a second later; a refusal at the end is the final pass's failure
	case rep.status == http.StatusNotFound:
		b.problemLocked("an answer 404 for a charge or refund that exists (its id was answered before)",
			"POST /charge/%s/refund (key %s; the charge told %s %v before): %s", ch.id, rf.key, ch.told, time.Since(ch.toldAt).Round(time.Millisecond), rep)
		rf.answered, rf.status, rf.reply = true, rep.status, rep.String()
		return false
	default:
		b.problemLocked("a refund of a succeeded charge not answered 201 succeeded or 202 queued", "charge %s, refund of %d (key %s): %s; answers %s",
			ch.id, rf.amount, rf.key, rep, describeAnswers(rf.answers, b.began))
		rf.answered, rf.status, rf.reply = true, rep.status, rep.String()
		return false
	}
	b.counts[fmt.Sprintf("refund answer %d %s", rep.status, ro.Status)]++
	if rf.id != "" && rf.id != ro.ID {
		b.problemLocked("one refund key answered with two refund ids", "%s of %s: %s, then %s", rf.key, ch.id, rf.id, ro.ID)
	}
	if ro.Amount != rf.amount {
		b.problemLocked("an accepted refund of another amount than asked", "asked %d of %s (key %s), answered %s", rf.amount, ch.id, rf.key, rep)
	}
	rf.answered, rf.status, rf.id, rf.state, rf.reply = true, rep.status, ro.ID, ro.Status, rep.String()
	if rf.toldAt.IsZero() {
		rf.toldAt = ans.at
	}
	if rep.status == http.StatusAccepted {
		if rf.queuedAt.IsZero() {
			rf.queuedAt = ans.at
			return true
		}
		return false
	}
	if !rf.queuedAt.IsZero() && rf.finalAt.IsZero() {
		rf.finalAt, rf.finalState = ans.at, ro.Status
	}
	return false
}

// refundID is the refund's id as its answers named it.
func (b *chaosBook) refundID(rf *chaosRefund) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return rf.id
}

// lookedRefund records a GET /refund/{id} answer: a 404 is a failure (the refund was answered),
// a 503 a try to make again. ok is true for a refund object.
func (b *chaosBook) lookedRefund(rf *chaosRefund, rep reply) (refundObject, bool) {
	var ro refundObject
	b.mu.Lock()
	defer b.mu.Unlock()
	switch rep.status {
	case http.StatusOK:
		if err := json.Unmarshal(rep.body, &ro); err != nil || ro.ID == "" {
			b.problemLocked("GET /refund/{id} is not a refund object", "%v: %s", err, rep)
			return ro, false
		}
		if (ro.Status == "succeeded" || ro.Status == "failed") && !rf.queuedAt.IsZero() && rf.finalAt.IsZero() {
			rf.finalAt, rf.finalState = time.Now(), ro.Status
		}
		return ro, true
	case http.StatusNotFound:
		b.problemLocked("an answer 404 for a charge or refund that exists (its id was answered before)",
			"GET /refund/{id} (key %s, of charge %s, told %d %s %v before): %s", rf.key, rf.charge.id, rf.status, rf.state, time.Since(rf.toldAt).Round(time.Millisecond), rep)
	case http.StatusServiceUnavailable:
		b.counts["GET /refund/{id} 503 "+problemType(rep)+" (asked again)"]++
	case 0:
	default:
		b.problemLocked("an unexpected answer to GET /refund/{id}", "%s", rep)
	}
	return ro, false
}

func (b *chaosBook) acceptedRefunds() []*chaosRefund {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*chaosRefund
	for _, rf := range b.refunds {
		if rf.accepted() {
			out = append(out, rf)
		}
	}
	return out
}

// refundsQueuedOpen counts the refunds told queued not yet seen applied.
func (b *chaosBook) refundsQueuedOpen() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, rf := range b.refunds {
		if !rf.queuedAt.IsZero() && rf.finalAt.IsZero() {
			n++
		}
	}
	return n
}

// --- the money check -----------------------------------------------------------------------------

// chaosSummary is what the run adds up to.
type chaosSummary struct {
	charges, told                                    int
	byTold                                           map[string]int
	processing, processingFinal                      int
	maxResolve, maxResolveAfterFault                 time.Duration
	refunds, refundsQueued, refundsRefused, unknownR int
	maxRefund, maxRefundAfterFault                   time.Duration
	strayVoided, strayRefunded                       int
	orphans, ledgerTxs                               int
	unsettledKeys                                    int
	loadTook, settled                                time.Duration
	settledOK                                        bool
	// keptByReference counts the charges whose transaction was found by their gateway
	// reference, keptByElimination those found as the only one not given back.
	keptByReference, keptByElimination int
	noID                               int
	hedges                             string // payrouter_hedges_total by result, both instances
	multiGateway                       int    // charges with transactions at two gateways or more
	twins                              int
	// capturesTimed counts the captures of charges told succeeded whose time the ledger reads
	// caught; maxCaptureAfterAnswer is the longest from an answer to its capture.
	capturesTimed         int
	maxCaptureAfterAnswer time.Duration
}

func (s chaosSummary) String(r *chaosRun) string {
	r.flipsMu.Lock()
	flips := []string{fmt.Sprintf("normal %d", r.flips["normal"])}
	for _, b := range chaosBehaviors {
		flips = append(flips, fmt.Sprintf("%s %d", b.name, r.flips[b.name]))
	}
	r.flipsMu.Unlock()
	r.book.mu.Lock()
	var counts []string
	for k, v := range r.book.counts {
		counts = append(counts, fmt.Sprintf("%s: %d", k, v))
	}
	r.book.mu.Unlock()
	sort.Strings(counts)
	settled := fmt.Sprintf("settled %v after the final pass", s.settled.Round(100*time.Millisecond))
	if !s.settledOK {
		settled = fmt.Sprintf("NOT settled %v after the final pass", s.settled.Round(100*time.Millisecond))
	}
	return fmt.Sprintf("chaos: %d charges (%d charge ids told, %d keys sent to both instances at once): %d succeeded, %d requires_capture, %d declined, %d failed, %d processing first "+
		"(%d seen final, in max %v, max %v after the last fault each saw; bound %v)\n  %d refunds accepted (%d queued, final in max %v, max %v after the last fault each saw; bound %v), %d refused, %d unanswered; "+
		"%d stray approvals voided, %d refunded; %d ledger transactions, %d of charges no client was told about; %d keys never answered; %d final answers without a charge id\n"+
		"  load %v, %s\n  the transaction each charge stands on found by its gateway_reference %d times, by elimination %d; hedges (since each instance started): %s; charges with transactions at 2+ gateways: %d\n"+
		"  captures of charges told succeeded timed %d, in max %v after their answers (bound %v after the later of the answer and the last fault each saw)\n"+
		"  behaviours set: %s\n  %s",
		s.charges, s.told, s.twins, s.byTold["succeeded"], s.byTold["requires_capture"], s.byTold["declined"], s.byTold["failed"], s.processing, s.processingFinal,
		s.maxResolve.Round(100*time.Millisecond), s.maxResolveAfterFault.Round(100*time.Millisecond), chaosResolveWithin,
		s.refunds, s.refundsQueued, s.maxRefund.Round(100*time.Millisecond), s.maxRefundAfterFault.Round(100*time.Millisecond), chaosRefundWithin,
		s.refundsRefused, s.unknownR, s.strayVoided, s.strayRefunded,
		s.ledgerTxs, s.orphans, s.unsettledKeys, s.noID,
		s.loadTook.Round(100*time.Millisecond), settled, s.keptByReference, s.keptByElimination, s.hedges, s.multiGateway,
		s.capturesTimed, s.maxCaptureAfterAnswer.Round(10*time.Millisecond), chaosCaptureWithin,
		strings.Join(flips, ", "), strings.Join(counts, "\n  "))
}

// check holds the ledgers against what the clients were told, recording each mismatch as a
// problem, and adds up the run. It runs once every client, poller and refunder is done.
func (r *chaosRun) check(t *testing.T, money moneyByCharge, finals map[string]chargeObject, refunds map[string]refundObject) chaosSummary {
	t.Helper()
	b := r.book
	b.mu.Lock()
	charges := make([]*chaosCharge, 0, len(b.charges))
	for _, ch := range b.charges {
		charges = append(charges, ch)
	}
	refundsBy := map[string][]*chaosRefund{}
	sum := chaosSummary{byTold: map[string]int{}, charges: len(b.orders), told: len(b.charges), ledgerTxs: money.total, unsettledKeys: len(b.unsettled)}
	for _, n := range b.noID {
		sum.noID += n
	}
	for _, rf := range b.refunds {
		refundsBy[rf.charge.id] = append(refundsBy[rf.charge.id], rf)
	}
	for _, o := range b.orders {
		if o.twin != "" {
			sum.twins++
		}
	}
	b.mu.Unlock()
	sort.Slice(charges, func(i, j int) bool { return charges[i].id < charges[j].id })

	for _, e := range money.foreign {
		b.problem("a ledger transaction whose reference is not <charge id>-a<N>", "%s", e)
	}
	for _, ch := range charges {
		sum.byTold[ch.told]++
		final, haveFinal := finals[ch.id]
		// What the charge is now: as stored (GET /charge/{id} after the run), else what its
		// client was last told.
		status := ch.lastTold
		if haveFinal && final.Status != "" {
			status = final.Status
		}
		if status == "" {
			status = "processing"
		}
		txs := money.charges[ch.id]
		if !ch.processingAt.IsZero() {
			sum.processing++
			if status == "processing" {
				b.problem("a charge told processing is not final once settled", "%s (key %s, %s %d): GET shows %q; answers %s; ledger %s",
					ch.id, ch.order.key, ch.order.currency, ch.order.amount, final.Status, ch.order.history(r.began), describeEntries(txs))
				continue
			}
			r.checkResolved(ch, &sum)
		}
		if ch.class != "" && outcomeClass(status) != ch.class {
			b.problem("a charge's status changed from what its client was told", "%s (key %s) told %s (%s), GET shows %s; answers %s; ledger %s",
				ch.id, ch.order.key, ch.lastTold, ch.classBy.describe(r.began), status, ch.order.history(r.began), describeEntries(txs))
		}

		// Accepted refunds are owed; refunds never answered may or may not have been applied.
		var owed, maybe int64
		for _, rf := range refundsBy[ch.id] {
			switch {
			case rf.accepted():
				owed += rf.amount
				sum.refunds++
				if !rf.queuedAt.IsZero() {
					sum.refundsQueued++
					r.checkRefundResolved(rf, &sum)
				}
				if ro := refunds[rf.id]; ro.Status != "succeeded" {
					b.problem("an accepted refund not succeeded once settled (GET /refund/{id})", "%s of %d for %s (key %s, answers %s): now %q",
						rf.id, rf.amount, ch.id, rf.key, describeAnswers(rf.answers, r.began), ro.Status)
				}
			case rf.answered:
				sum.refundsRefused++
			default:
				maybe += rf.amount
				sum.unknownR++
			}
		}
		if owed > ch.order.amount {
			b.problem("refunds accepted beyond what the charge captured", "%s (key %s, %s %d): %d accepted (201 or 202); refunds: %s; ledger %s",
				ch.id, ch.order.key, ch.order.currency, ch.order.amount, owed, describeRefunds(refundsBy[ch.id], r.began), describeEntries(txs))
		}
		r.checkMoney(ch, status, final, txs, owed, maybe, refundsBy[ch.id], &sum)
		r.checkCaptureTime(ch, txs, &sum)
	}

	known := map[string]bool{}
	for _, ch := range charges {
		known[ch.id] = true
	}
	for _, txs := range money.charges {
		gws := map[string]bool{}
		for _, e := range txs {
			gws[e.Gateway] = true
		}
		if len(gws) > 1 {
			sum.multiGateway++
		}
	}
	for id, txs := range money.charges {
		if known[id] {
			continue
		}
		sum.orphans++
		if held := holding(txs); held > 0 {
			b.problem("money held for a charge no client was told about", "%s holds %d: %s; %s", id, held, describeEntries(txs), r.sameOrder(txs))
		}
	}
	return sum
}

// checkResolved holds a charge told processing to its bound: final at most chaosResolveWithin
// after the later of its 202 and the end of the last fault it could see.
func (r *chaosRun) checkResolved(ch *chaosCharge, sum *chaosSummary) {
	if ch.finalAt.IsZero() {
		r.book.problem("a charge told processing never seen final by its client's polling", "%s (key %s): answers %s", ch.id, ch.order.key, ch.order.history(r.began))
		return
	}
	sum.processingFinal++
	end, fault := r.tl.lastEnd(ch.gatewayList(), ch.finalAt)
	from := later(ch.processingAt, end)
	sum.maxResolve = max(sum.maxResolve, ch.finalAt.Sub(ch.processingAt))
	sum.maxResolveAfterFault = max(sum.maxResolveAfterFault, ch.finalAt.Sub(from))
	if ch.finalAt.Sub(from) > chaosResolveWithin {
		last := "no fault"
		if fault != "" {
			last = fmt.Sprintf("the last fault it could see, %s, ended +%v", fault, end.Sub(r.began).Round(10*time.Millisecond))
		}
		r.book.problem("a charge told processing not final within its bound", "%s (key %s, %s %d, gateways %v): told processing +%v, final (%s) +%v: %v after %s; bound %v; answers %s",
			ch.id, ch.order.key, ch.order.currency, ch.order.amount, ch.gatewayList(), ch.processingAt.Sub(r.began).Round(10*time.Millisecond),
			ch.finalStatus, ch.finalAt.Sub(r.began).Round(10*time.Millisecond), ch.finalAt.Sub(from).Round(10*time.Millisecond), last,
			chaosResolveWithin, ch.order.history(r.began))
	}
}

// checkRefundResolved holds a refund told queued to its bound: succeeded at most
// chaosRefundWithin after the later of its 202 and the end of the last fault it could see.
func (r *chaosRun) checkRefundResolved(rf *chaosRefund, sum *chaosSummary) {
	if rf.finalAt.IsZero() {
		return // not succeeded: the money check says so
	}
	end, fault := r.tl.lastEnd(rf.charge.gatewayList(), rf.finalAt)
	from := later(rf.queuedAt, end)
	sum.maxRefund = max(sum.maxRefund, rf.finalAt.Sub(rf.queuedAt))
	sum.maxRefundAfterFault = max(sum.maxRefundAfterFault, rf.finalAt.Sub(from))
	if rf.finalAt.Sub(from) > chaosRefundWithin {
		r.book.problem("a refund told queued not final within its bound", "%s of %d for %s (key %s): queued +%v, %s +%v: %v after the last fault it could see (%s, ended +%v); bound %v; answers %s",
			rf.id, rf.amount, rf.charge.id, rf.key, rf.queuedAt.Sub(r.began).Round(10*time.Millisecond), rf.finalState, rf.finalAt.Sub(r.began).Round(10*time.Millisecond),
			rf.finalAt.Sub(from).Round(10*time.Millisecond), fault, end.Sub(r.began).Round(10*time.Millisecond), chaosRefundWithin, describeAnswers(rf.answers, r.began))
	}
}

// sameOrder names the orders of the same amount and currency as a charge no client was told
// about, and what their keys were answered: the order such a charge came from (amounts are
// random enough to tell), charged again under another id when its key was sent again.
func (r *chaosRun) sameOrder(txs []ledgerEntry) string {
	if len(txs) == 0 {
		return ""
	}
	r.book.mu.Lock()
	defer r.book.mu.Unlock()
	var found []string
	for _, o := range r.book.orders {
		if o.amount != txs[0].Amount || o.currency != txs[0].Currency {
			continue
		}
		st := o.snapshot()
		told := "no charge id"
		if ch := r.book.charges[st.id]; ch != nil {
			told = ch.id + " told " + ch.told
		}
		found = append(found, fmt.Sprintf("key %s answered %d (%s): %s", o.key, st.status, told, o.history(r.began)))
	}
	if len(found) == 0 {
		return "no order of that amount and currency"
	}
	return "its order, by amount and currency: " + strings.Join(found, ", ")
}

// everCaptured reports whether a transaction was captured at some point: captured, or refunded
// (in part or in full) since.
func (e ledgerEntry) everCaptured() bool {
	return e.Status == "captured" || e.Status == "partially_refunded" || e.Status == "refunded"
}

// describeRefunds lists a charge's refund requests for a failure message.
func describeRefunds(list []*chaosRefund, began time.Time) string {
	if len(list) == 0 {
		return "no refund asked"
	}
	parts := make([]string, len(list))
	for i, rf := range list {
		state := "unanswered"
		switch {
		case rf.accepted():
			state = "accepted " + rf.id
		case rf.answered:
			state = fmt.Sprintf("refused %d", rf.status)
		}
		parts[i] = fmt.Sprintf("%d by key %s %s %s", rf.amount, rf.key, state, describeAnswers(rf.answers, began))
	}
	return strings.Join(parts, "; ")
}

// checkMoney holds one charge's transactions against its status: owed is the sum of its
// accepted refunds, maybe that of refunds whose answer never came.
func (r *chaosRun) checkMoney(ch *chaosCharge, status string, final chargeObject, txs []ledgerEntry, owed, maybe int64, refunds []*chaosRefund, sum *chaosSummary) {
	b := r.book
	amount := ch.order.amount
	where := fmt.Sprintf("%s (key %s, %s %d, capture %v, %s, told %s %d, now %s; answers %s)", ch.id, ch.order.key, ch.order.currency, amount,
		ch.order.capture, ch.order.token, ch.told, ch.status, status, ch.order.history(r.began))
	// No card is captured twice for one key: a hedge that lost and a late approval are voided,
	// never captured and refunded.
	captured := 0
	for _, e := range txs {
		if e.everCaptured() {
			captured++
		}
	}
	if captured > 1 {
		b.problem("a card captured twice for one key", "%s: %d captured transactions: %s", where, captured, describeEntries(txs))
	}
	// keep is the transaction the charge stands on: the one at its gateway with its gateway
	// reference, else the only one that is not voided.
	keep := -1
	for i, e := range txs {
		if final.Gateway != "" && e.Gateway == final.Gateway && e.ID == final.GatewayReference {
			keep = i
			sum.keptByReference++
		}
	}
	strays := func(skip int) {
		for i, e := range txs {
			if i == skip {
				continue
			}
			switch {
			case e.Status == "voided":
				sum.strayVoided++
			case e.released():
				sum.strayRefunded++
			default:
				b.problem("a stray approval of a charge still holds money", "%s: %s; all: %s", where, e, describeEntries(txs))
			}
		}
	}
	switch status {
	case "succeeded", "refunded", "partially_refunded", "requires_capture":
		want := "captured"
		if status == "requires_capture" {
			want = "authorized"
		}
		if keep < 0 {
			var live []int
			for i, e := range txs {
				if !e.released() {
					live = append(live, i)
				}
			}
			if len(live) == 1 {
				keep = live[0]
				sum.keptByElimination++
			}
		}
		if keep < 0 {
			b.problem("a "+status+" charge without exactly one "+want+" transaction", "%s: gateway %q ref %q; ledger %s",
				where, final.Gateway, final.GatewayReference, describeEntries(txs))
			strays(-1)
			return
		}
		k := txs[keep]
		switch {
		case k.Amount != amount:
			b.problem("a charge's transaction of another amount", "%s: %s", where, k)
		case want == "authorized" && k.Status != "authorized":
			b.problem("a requires_capture charge not holding an authorization", "%s: %s; all %s", where, k, describeEntries(txs))
		case want == "captured" && !k.everCaptured():
			b.problem("a succeeded charge not captured at its gateway", "%s: %s; all %s", where, k, describeEntries(txs))
		case want == "captured" && (k.Refunded < owed || k.Refunded > owed+maybe):
			b.problem("a succeeded charge's refunds not applied exactly once", "%s: accepted refunds %d (plus %d unanswered), the ledger refunded %d: %s; refunds: %s",
				where, owed, maybe, k.Refunded, k, describeRefunds(refunds, r.began))
		}
		if want == "captured" && final.ID != "" && final.AmountRefunded != k.Refunded {
			b.problem("a charge's stored amount_refunded is not what its gateway refunded", "%s: GET /charge/{id} shows amount_refunded %d, the ledger refunded %d: %s; refunds: %s",
				where, final.AmountRefunded, k.Refunded, k, describeRefunds(refunds, r.began))
		}
		strays(keep)
	case "declined", "failed", "voided":
		if owed > 0 {
			b.problem("a refund accepted for a charge that holds no money", "%s: %d accepted; refunds: %s", where, owed, describeRefunds(refunds, r.began))
		}
		for _, e := range txs {
			switch {
			case e.held() > 0 && status != "voided":
				b.problem("a charge stored failed or declined while a gateway holds money for it", "%s: %s holds %d; all: %s", where, e, e.held(), describeEntries(txs))
			case e.held() > 0:
				b.problem("a stray approval of a charge still holds money", "%s: %s; all: %s", where, e, describeEntries(txs))
			case e.Status == "voided":
				sum.strayVoided++
			default:
				sum.strayRefunded++
			}
		}
	default:
		b.problem("a charge in a status the check does not know", "%s: ledger %s", where, describeEntries(txs))
	}
}

// TestChaosMoneyCheck: the money check of TestChaosMoney finds each kind of mismatch in
// hand-made ledgers and passes balanced ones, so that a chaos run without findings means the
// ledgers balanced, not that nothing was compared. No process is started.
func TestChaosMoneyCheck(t *testing.T) {
	const id, amount = "ch_T", 1000
	tx := func(gw, ref, gid, status string, refunded int64) ledgerEntry {
		return ledgerEntry{Gateway: gw, Reference: id + "-" + ref, ID: gid, Amount: amount, Currency: "USD", Status: status, Refunded: refunded}
	}
	at := func(gw, gid, status string) chargeObject {
		return chargeObject{ID: id, Status: status, Amount: amount, Gateway: gw, GatewayReference: gid}
	}
	refunded := func(c chargeObject, n int64) chargeObject { c.AmountRefunded = n; return c }
	cases := []struct {
		name    string
		told    string
		capture bool
		final   chargeObject
		txs     []ledgerEntry
		refunds []int64 // accepted refunds, each succeeded
		other   map[string][]ledgerEntry
		want    string // the kinds of problem expected, joined by " + "; "" for none
	}{
		{"succeeded, the hedge's loser voided", "succeeded", true, at("paywell", "P1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0), tx("ding", "a2", "D1", "voided", 0)}, nil, nil, ""},
		{"succeeded, a stray captured and refunded in full", "succeeded", true, at("ding", "D1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "refunded", amount), tx("ding", "a2", "D1", "captured", 0)}, nil, nil, "a card captured twice for one key"},
		{"succeeded, captured twice", "succeeded", true, at("paywell", "P1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0), tx("ding", "a2", "D1", "captured", 0)}, nil, nil,
			"a card captured twice for one key + a stray approval of a charge still holds money"},
		{"succeeded, the loser still authorized", "succeeded", true, at("paywell", "P1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0), tx("ding", "a2", "D1", "authorized", 0)}, nil, nil, "a stray approval of a charge still holds money"},
		{"succeeded, nothing captured", "succeeded", true, at("paywell", "P1", "succeeded"),
			nil, nil, nil, "a succeeded charge without exactly one captured transaction"},
		{"succeeded, only authorized", "succeeded", true, at("paywell", "P1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "authorized", 0)}, nil, nil, "a succeeded charge not captured at its gateway"},
		{"succeeded, a refund applied", "succeeded", true, refunded(at("paywell", "P1", "partially_refunded"), 300),
			[]ledgerEntry{tx("paywell", "a1", "P1", "partially_refunded", 300)}, []int64{300}, nil, ""},
		{"succeeded, fully refunded in two", "succeeded", true, refunded(at("paywell", "P1", "refunded"), amount),
			[]ledgerEntry{tx("paywell", "a1", "P1", "refunded", amount)}, []int64{400, 600}, nil, ""},
		{"succeeded, refunds accepted beyond the charge", "succeeded", true, refunded(at("paywell", "P1", "refunded"), 2*amount),
			[]ledgerEntry{tx("paywell", "a1", "P1", "refunded", 2*amount)}, []int64{amount, amount}, nil, "refunds accepted beyond what the charge captured"},
		{"succeeded, a refund counted twice in amount_refunded", "succeeded", true, refunded(at("paywell", "P1", "partially_refunded"), 600),
			[]ledgerEntry{tx("paywell", "a1", "P1", "partially_refunded", 300)}, []int64{300}, nil, "a charge's stored amount_refunded is not what its gateway refunded"},
		{"succeeded, a refund never applied", "succeeded", true, at("paywell", "P1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0)}, []int64{300}, nil, "a succeeded charge's refunds not applied exactly once"},
		{"succeeded, a refund applied twice", "succeeded", true, refunded(at("paywell", "P1", "partially_refunded"), 600),
			[]ledgerEntry{tx("paywell", "a1", "P1", "partially_refunded", 600)}, []int64{300}, nil, "a succeeded charge's refunds not applied exactly once"},
		{"succeeded, shown voided", "succeeded", true, at("paywell", "P1", "voided"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0)}, nil, nil,
			"a charge's status changed from what its client was told + a stray approval of a charge still holds money"},
		{"declined, nothing", "declined", true, at("paywell", "", "declined"), nil, nil, nil, ""},
		{"declined, yet captured", "declined", true, at("paywell", "", "declined"),
			[]ledgerEntry{tx("tranglo", "a1", "T1", "captured", 0)}, nil, nil, "a charge stored failed or declined while a gateway holds money for it"},
		{"failed, its approval voided", "failed", true, at("", "", "failed"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "voided", 0)}, nil, nil, ""},
		{"failed, a late capture refunded in full", "failed", true, at("", "", "failed"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "refunded", amount)}, nil, nil, ""},
		{"failed, yet succeeded later", "failed", true, at("paywell", "P1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0)}, nil, nil, "a charge's status changed from what its client was told"},
		{"failed, a refund accepted", "failed", true, at("", "", "failed"), nil, []int64{300}, nil, "a refund accepted for a charge that holds no money"},
		{"requires_capture, one authorization", "requires_capture", false, at("ding", "D1", "requires_capture"),
			[]ledgerEntry{tx("ding", "a1", "D1", "authorized", 0)}, nil, nil, ""},
		{"requires_capture, captured", "requires_capture", false, at("ding", "D1", "requires_capture"),
			[]ledgerEntry{tx("ding", "a1", "D1", "captured", 0)}, nil, nil, "a requires_capture charge not holding an authorization"},
		{"processing, then succeeded", "processing", true, at("paywell", "P1", "succeeded"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0)}, nil, nil, ""},
		{"processing, then failed, yet captured", "processing", true, at("", "", "failed"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0)}, nil, nil, "a charge stored failed or declined while a gateway holds money for it"},
		{"processing for ever", "processing", true, at("", "", "processing"),
			[]ledgerEntry{tx("paywell", "a1", "P1", "captured", 0)}, nil, nil, "a charge told processing is not final once settled"},
		{"money of a charge nobody was told about", "declined", true, at("", "", "declined"), nil, nil,
			map[string][]ledgerEntry{"ch_U": {{Gateway: "paywell", Reference: "ch_U-a1", ID: "P9", Amount: 5, Status: "captured"}}},
			"money held for a charge no client was told about"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &chaosRun{book: newChaosBook(), tl: newChaosTimeline(), began: time.Now()}
			o := &chaosOrder{key: "k", amount: amount, currency: "USD", capture: c.capture, token: "tok_visa"}
			now := time.Now()
			ch := &chaosCharge{id: id, order: o, told: c.told, status: http.StatusCreated, toldAt: now, gateways: map[string]bool{}}
			if c.told == "processing" {
				ch.processingAt, ch.finalAt = now, now.Add(time.Second)
			} else {
				ch.lastTold, ch.class = c.told, outcomeClass(c.told)
			}
			r.book.orders, r.book.charges[id] = []*chaosOrder{o}, ch
			finalRefunds := map[string]refundObject{}
			for i, a := range c.refunds {
				rf := &chaosRefund{key: fmt.Sprint("rk", i), charge: ch, amount: a, answered: true, status: http.StatusCreated, id: fmt.Sprint("re_", i), state: "succeeded", toldAt: now}
				r.book.refunds = append(r.book.refunds, rf)
				finalRefunds[rf.id] = refundObject{ID: rf.id, ChargeID: id, Amount: a, Status: "succeeded"}
			}
			money := moneyByCharge{charges: map[string][]ledgerEntry{}}
			if c.txs != nil {
				money.charges[id] = c.txs
			}
			for k, v := range c.other {
				money.charges[k] = v
			}
			r.check(t, money, map[string]chargeObject{id: c.final}, finalRefunds)
			var got []string
			for _, kind := range r.book.order {
				got = append(got, fmt.Sprintf("%s: %s", kind, r.book.problems[kind]))
			}
			switch {
			case c.want == "" && len(got) > 0:
				t.Errorf("a balanced ledger: want no finding; got %v", got)
			case strings.Join(r.book.order, " + ") != c.want:
				t.Errorf("want exactly the findings %q; got %v", c.want, got)
			}
		})
	}
}

// TestChaosAnswerCheck: the chaos test's book takes a 503 (with the charge's id or not) for an
// invitation to send the same request again, never for a final answer, so a 503 then a decline
// is one outcome (seed 1796117519572790093 once failed `make test` on that), while two final
// outcomes for one key, a key not replayed or held long after its answer are found. No process
// is started.
func TestChaosAnswerCheck(t *testing.T) {
	charge := func(status int, chargeStatus, id string) string {
		return fmt.Sprintf(`{"id":%q,"status":%q,"amount":1000,"currency":"USD","gateway":"tranglo","attempts":[]}`, id, chargeStatus)
	}
	prob := func(status int, kind, id string) string {
		return fmt.Sprintf(`{"type":"/problems/%s","status":%d,"charge_id":%q,"attempts":[]}`, kind, status, id)
	}
	type ans struct {
		status   int
		body     string
		sent     time.Duration // after the first request
		took     time.Duration
		replayed bool
	}
	a := func(status int, body string, sent time.Duration, replayed bool) ans {
		return ans{status, body, sent, 20 * time.Millisecond, replayed}
	}
	cases := []struct {
		name  string
		fault bool // a fault of the schedule from the start
		list  []ans
		want  string
	}{
		{"503 with its charge id, then declined 0.6 s later", false, []ans{
			a(503, prob(503, "gateways-unavailable", "ch_1"), 0, false), a(402, prob(402, "card-declined", "ch_1"), 600*time.Millisecond, false)}, ""},
		{"state-unavailable, then succeeded", false, []ans{
			a(503, prob(503, "state-unavailable", ""), 0, false), a(201, charge(201, "succeeded", "ch_1"), 600*time.Millisecond, false)}, ""},
		{"processing, then succeeded, then refunded in part", false, []ans{
			a(202, charge(202, "processing", "ch_1"), 0, false), a(201, charge(201, "succeeded", "ch_1"), time.Second, true),
			a(201, charge(201, "partially_refunded", "ch_1"), 2*time.Second, true)}, ""},
		{"processing, then failed (502)", false, []ans{
			a(202, charge(202, "processing", "ch_1"), 0, false), a(502, prob(502, "gateway-error", "ch_1"), time.Second, true)}, ""},
		{"declined, then succeeded", false, []ans{
			a(402, prob(402, "card-declined", "ch_1"), 0, false), a(201, charge(201, "succeeded", "ch_1"), time.Second, true)},
			"one key answered two different final outcomes"},
		{"succeeded, then failed", false, []ans{
			a(201, charge(201, "succeeded", "ch_1"), 0, false), a(502, prob(502, "gateway-error", "ch_1"), time.Second, true)},
			"one key answered two different final outcomes"},
		{"requires_capture, then succeeded", false, []ans{
			a(201, charge(201, "requires_capture", "ch_1"), 0, false), a(201, charge(201, "succeeded", "ch_1"), time.Second, true)},
			"one key answered two different final outcomes"},
		{"succeeded, then processing again", false, []ans{
			a(201, charge(201, "succeeded", "ch_1"), 0, false), a(202, charge(202, "processing", "ch_1"), time.Second, true)},
			"a charge told final, then processing again"},
		{"two charge ids for one key", false, []ans{
			a(201, charge(201, "succeeded", "ch_1"), 0, false), a(201, charge(201, "succeeded", "ch_2"), time.Second, true)},
			"one key answered with two charge ids"},
		{"answered, then answered anew", false, []ans{
			a(201, charge(201, "succeeded", "ch_1"), 0, false), a(201, charge(201, "succeeded", "ch_1"), time.Second, false)},
			"a key answered before was not replayed"},
		{"answered anew across a fault of the schedule", true, []ans{
			a(201, charge(201, "succeeded", "ch_1"), 0, false), a(201, charge(201, "succeeded", "ch_1"), time.Second, false)}, ""},
		{"twins: the replay comes back before the first answer", false, []ans{
			{201, charge(201, "succeeded", "ch_1"), 10 * time.Millisecond, 20 * time.Millisecond, true},
			{201, charge(201, "succeeded", "ch_1"), 0, 100 * time.Millisecond, false}}, ""},
		{"held long after it was answered", false, []ans{
			a(201, charge(201, "succeeded", "ch_1"), 0, false), a(409, prob(409, "idempotency-conflict", ""), 12*time.Second, false)},
			"a key answered before still held (409) long after"},
		{"held a moment after it was answered (a twin in flight)", false, []ans{
			a(201, charge(201, "succeeded", "ch_1"), 0, false), a(409, prob(409, "idempotency-conflict", ""), time.Second, false)}, ""},
		{"a 404 to POST /charge", false, []ans{a(404, prob(404, "not-found", ""), 0, false)}, "an unexpected answer to POST /charge"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &chaosRun{book: newChaosBook(), tl: newChaosTimeline(), began: time.Now()}
			if c.fault {
				r.tl.begin("pg-restart")()
			}
			o := &chaosOrder{key: "k", amount: 1000, currency: "USD", capture: true, token: "tok_visa"}
			r.book.addOrder(o)
			start := time.Now()
			for i, x := range c.list {
				h := http.Header{}
				if x.replayed {
					h.Set("Idempotent-Replayed", "true")
				}
				r.chargeAnswered(o, reply{req: "POST /charge", status: x.status, header: h, body: []byte(x.body), start: start.Add(x.sent), elapsed: x.took}, i%2)
			}
			if got := strings.Join(r.book.order, " + "); got != c.want {
				var all []string
				for _, kind := range r.book.order {
					all = append(all, fmt.Sprintf("%s: %s", kind, r.book.problems[kind]))
				}
				t.Errorf("want exactly the findings %q; got %v", c.want, all)
			}
		})
	}
}

// waitForStrays polls the ledgers until no transaction holds money that its charge does not keep
// (an approval after a failover, a hedge that lost, a late answer), or until by: releasing them
// is the queue worker's job, from rechecks handed out every few gateway timeouts. A charge no
// client was told about is read through GET /charge/{id}. It returns the last ledgers read; the
// money check then says what is wrong, if anything still is.
func (r *chaosRun) waitForStrays(t *testing.T, s *sims, finals map[string]chargeObject, by time.Time) (moneyByCharge, error) {
	t.Helper()
	began := time.Now()
	for {
		money, err := readMoney(s)
		if err != nil {
			return money, err
		}
		var strays []string
		for id, txs := range money.charges {
			final, ok := finals[id]
			if !ok || final.CaptureQueued {
				// Not read yet, or a hedged charge whose capture was still to settle when it was
				// read: the settlement may have moved it to its sale's gateway since.
				in := r.fleet.get(0)
				rep, err := send(in.client, http.MethodGet, in.url+"/charge/"+id, nil, "Authorization", "Bearer "+apiKey)
				var now chargeObject
				if err == nil && rep.status == http.StatusOK && json.Unmarshal(rep.body, &now) == nil {
					final = now
					finals[id] = final
				}
			}
			for _, e := range txs {
				cls := outcomeClass(final.Status)
				kept := e.Gateway == final.Gateway && e.ID == final.GatewayReference &&
					(cls == "captured" || cls == "authorized" || final.Status == "processing")
				if e.held() > 0 && !kept {
					strays = append(strays, e.String()+" of "+id+" ("+final.Status+")")
				}
			}
		}
		if len(strays) == 0 {
			t.Logf("no money held by attempts no charge keeps, %v after the charges settled", time.Since(began).Round(time.Millisecond))
			return money, nil
		}
		if time.Now().After(by) {
			t.Logf("%d transaction(s) still hold money no charge keeps, e.g. %s", len(strays), strays[0])
			return money, nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}
