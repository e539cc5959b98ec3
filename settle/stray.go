package settle

import (
	"context"
	"time"

	"github.com/payrouter/payrouter"
)

// VoidStray voids an approval no charge keeps (a hedge that lost, answering after its charge was
// decided) at gateway, through gws: the gateways of the configuration its charge ran on. A void
// that fails is queued (TaskVoid) and retried until it is done. It reports whether it is voided
// now.
func (s *Settler) VoidStray(gws *Gateways, c *payrouter.Charge, gateway, ref, gwRef string) bool {
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
	s.log.WarnContext(ctx, "charge.void_failed", "charge_id", c.ID, "gateway", gateway, "reference", ref, "outcome", res.Outcome,
		"detail", res.Detail, "then", "queued")
	s.ReleaseLater(ctx, payrouter.TaskVoid, c, gateway, ref, gwRef, 0)
	return false
}

// NoteLateAnswer writes how a late attempt (gateway, ref) ended into its stored charge, once the
// charge's answer is stored: a charge still stored as processing is about to be written with its
// answer, which this must not hold up (the attempt then stays as the answer showed it, unknown,
// and the money is right either way).
func (s *Settler) NoteLateAnswer(ctx context.Context, chargeID, gateway, ref string, outcome payrouter.Outcome, d time.Duration, voided bool) error {
	return s.noteAttempt(ctx, chargeID, gateway, ref, func(c *payrouter.Charge, at *payrouter.Attempt) bool {
		if c.Status == payrouter.StatusProcessing {
			return false
		}
		at.Outcome, at.Duration, at.Voided = outcome, d, at.Voided || voided
		return true
	})
}
