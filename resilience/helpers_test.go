package resilience

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// Short names for the outcomes, so that sequences of them read as tables.
const (
	succ   = payrouter.OutcomeSucceeded
	decl   = payrouter.OutcomeDeclined
	pend   = payrouter.OutcomePending
	unav   = payrouter.OutcomeUnavailable
	tmo    = payrouter.OutcomeTimeout
	unk    = payrouter.OutcomeUnknown
	malf   = payrouter.OutcomeError // the gateway called our request malformed
	brOpen = payrouter.OutcomeBreakerOpen
	bhFull = payrouter.OutcomeBulkheadFull
)

// transition is one BreakerTransition the recorder heard.
type transition struct {
	Name     string
	From, To State
	Counts   Counts
}

// recorder is an Observer that remembers everything, for tests to compare.
type recorder struct {
	mu          sync.Mutex
	transitions []transition
	forced      []string // "<gateway>/<op>=<forced>" for each BreakerForced
	rejected    map[string]int
	calls       []payrouter.Outcome
	durations   []time.Duration
	inFlight    []int
	bhRejected  int
	probes      []probe
}

// probe is one ProbeDone the recorder heard.
type probe struct {
	Gateway string
	Healthy bool
}

func newRecorder() *recorder { return &recorder{rejected: map[string]int{}} }

func (r *recorder) BreakerTransition(gateway string, op payrouter.Operation, from, to State, c Counts, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.transitions = append(r.transitions, transition{gateway + "/" + string(op), from, to, c})
}

func (r *recorder) BreakerForced(gateway string, op payrouter.Operation, f payrouter.Forced) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forced = append(r.forced, gateway+"/"+string(op)+"="+string(f))
}

func (r *recorder) BreakerRejected(gateway string, op payrouter.Operation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejected[gateway+"/"+string(op)]++
}

func (r *recorder) CallDone(_ context.Context, _ string, _ payrouter.Operation, o payrouter.Outcome, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, o)
	r.durations = append(r.durations, d)
}

func (r *recorder) BulkheadChanged(_ string, inFlight, _ int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight = append(r.inFlight, inFlight)
}

func (r *recorder) ProbeDone(gateway string, healthy bool, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.probes = append(r.probes, probe{gateway, healthy})
}

func (r *recorder) BulkheadRejected(string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bhRejected++
}

// moves returns the transitions heard, as "from>to" strings.
func (r *recorder) moves() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, t := range r.transitions {
		out = append(out, string(t.From)+">"+string(t.To))
	}
	return out
}

func (r *recorder) last() transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.transitions) == 0 {
		return transition{}
	}
	return r.transitions[len(r.transitions)-1]
}

// expectMoves fails t unless the recorder heard exactly want, and checks that every report
// starts where the one before ended (the gauge set from them is then always right).
func expectMoves(t *testing.T, r *recorder, want ...string) {
	t.Helper()
	got := r.moves()
	if !slices.Equal(got, want) {
		t.Errorf("transitions heard: got %q, want %q", got, want)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := map[string]State{}
	for _, tr := range r.transitions {
		from, seen := prev[tr.Name]
		if !seen {
			from = StateClosed
		}
		if tr.From != from {
			t.Errorf("transition %s %s>%s: the previous report ended at %s", tr.Name, tr.From, tr.To, from)
		}
		prev[tr.Name] = tr.To
	}
}

// feed reports outcomes to b one by one through Allow; every call must be admitted.
func feed(t *testing.T, b *Breaker, outcomes ...payrouter.Outcome) {
	t.Helper()
	for i, o := range outcomes {
		done, err := b.Allow()
		if err != nil {
			t.Fatalf("call %d (%s): Allow: %v (state %s)", i+1, o, err, b.State())
		}
		done(o)
	}
}

// repeat returns n copies of o.
func repeat(o payrouter.Outcome, n int) []payrouter.Outcome {
	return slices.Repeat([]payrouter.Outcome{o}, n)
}

// seq joins runs of outcomes.
func seq(runs ...[]payrouter.Outcome) []payrouter.Outcome { return slices.Concat(runs...) }

// trip opens b (whose rules must trip on ConsecutiveFailures) with failures.
func trip(t *testing.T, b *Breaker) {
	t.Helper()
	n := b.Settings().ConsecutiveFailures
	if n == 0 {
		t.Fatal("trip needs ConsecutiveFailures")
	}
	feed(t, b, repeat(unav, n)...)
	if s := b.State(); s != StateOpen {
		t.Fatalf("after %d failures: state %s, want open", n, s)
	}
}

// expectState fails t unless b shows state s.
func expectState(t *testing.T, b *Breaker, s State) {
	t.Helper()
	if got := b.Snapshot().State; got != s {
		t.Errorf("state: got %s, want %s", got, s)
	}
}
