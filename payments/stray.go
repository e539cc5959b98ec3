package payments

import (
	"context"
	"time"

	"github.com/payrouter/payrouter"
)

// NoteLateAnswer writes how a late attempt (gateway, ref) ended into its stored charge, once the
// charge's answer is stored: a charge still stored as processing is about to be written with its
// answer, which this must not hold up (the attempt then stays as the answer showed it, unknown,
// and the money is right either way).
func (s *Service) NoteLateAnswer(ctx context.Context, chargeID, gateway, ref string, outcome payrouter.Outcome, d time.Duration, voided bool) error {
	return s.noteAttempt(ctx, chargeID, gateway, ref, func(c *payrouter.Charge, at *payrouter.Attempt) bool {
		if c.Status == payrouter.StatusProcessing {
			return false
		}
		at.Outcome, at.Duration, at.Voided = outcome, d, at.Voided || voided
		return true
	})
}
