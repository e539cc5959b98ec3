package gatewaytest

import (
	"fmt"
	"slices"

	"github.com/payrouter/payrouter"
)

// ValidResult reports what is wrong with a result an adapter gave for op, or nil: the outcome is
// one an adapter may give (breaker_open and bulkhead_full are decided before an adapter is
// called); a decline names its code; a status look-up that succeeded says what it found; and
// every failure says why. The fuzzers of the adapters' parsers hold every answer to it.
func ValidResult(op payrouter.Operation, r payrouter.Result) error {
	if !slices.Contains(validOutcomes, r.Outcome) {
		return fmt.Errorf("outcome %q is not one an adapter may answer", r.Outcome)
	}
	switch r.Outcome {
	case payrouter.OutcomeDeclined:
		if r.DeclineCode == "" {
			return fmt.Errorf("a decline without a decline code")
		}
	case payrouter.OutcomeSucceeded:
		if op == payrouter.OpStatus && r.State == payrouter.TxUnknown {
			return fmt.Errorf("a status look-up that succeeded without saying what it found")
		}
	case payrouter.OutcomeUnavailable, payrouter.OutcomeTimeout, payrouter.OutcomeUnknown, payrouter.OutcomeError:
		if r.Detail == "" {
			return fmt.Errorf("a %s result without a detail", r.Outcome)
		}
	}
	if r.State == payrouter.TxNotFound && (op != payrouter.OpStatus || r.Outcome != payrouter.OutcomeSucceeded) {
		return fmt.Errorf("not_found from a %s with outcome %s: only a successful look-up can find nothing", op, r.Outcome)
	}
	return nil
}
