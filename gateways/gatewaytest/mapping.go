package gatewaytest

import (
	"strings"
	"testing"

	"github.com/payrouter/payrouter"
)

// ResultOf is an adapter's one mapping from a wire answer (HTTP status and body) to a Result.
type ResultOf func(op payrouter.Operation, status int, body []byte) payrouter.Result

// Want is what one row of an adapter's mapping table expects of the Result. Adapters' tests
// declare `type want gatewaytest.Want` to write their rows positionally.
type Want struct {
	Outcome payrouter.Outcome
	State   payrouter.TxState
	Ref     string // GatewayReference
	Decline string // DeclineCode
	Detail  string // a part of Detail, when it matters
}

// CheckMapping checks one row of an adapter's mapping table: exactly the wanted outcome, state,
// reference and decline code, a Detail containing w.Detail, and a valid Result.
func CheckMapping(t *testing.T, resultOf ResultOf, op payrouter.Operation, status int, body string, w Want) {
	t.Helper()
	r := resultOf(op, status, []byte(body))
	got := Want{r.Outcome, r.State, r.GatewayReference, r.DeclineCode, w.Detail}
	if got != w || !strings.Contains(r.Detail, w.Detail) {
		t.Errorf("resultOf(%s, %d, %s) = %+v; want %+v", op, status, body, r, w)
	}
	if err := ValidResult(op, r); err != nil {
		t.Errorf("resultOf(%s, %d, %s) = %+v: %v", op, status, body, r, err)
	}
}

// AddSeed adds one wire answer to a mapping fuzz test's corpus, under every operation.
func AddSeed(f *testing.F, status int, body string) {
	for op := range len(payrouter.Operations) {
		f.Add(uint8(op), status, []byte(body))
	}
}

// FuzzMapping fuzzes an adapter's mapping from the seeds added with AddSeed: whatever the
// gateway (or anything in its place) answers, the mapping neither panics nor gives an invalid
// Result.
func FuzzMapping(f *testing.F, resultOf ResultOf) {
	f.Fuzz(func(t *testing.T, op uint8, status int, body []byte) {
		o := payrouter.Operations[int(op)%len(payrouter.Operations)]
		r := resultOf(o, status, body)
		if err := ValidResult(o, r); err != nil {
			t.Fatalf("resultOf(%s, %d, %q) = %+v: %v", o, status, body, r, err)
		}
	})
}
