package routing

// How a gateway's answer is read into the charge it decided: the one reading every path uses,
// a charge's attempts and everything after its first answer alike.

import "github.com/payrouter/payrouter"

// OutcomeOfState turns what a status look-up found into the outcome the charge came to: any
// state of an approved transaction (voided or refunded since included) is an approval, whose
// state Apply then shows as it is.
func OutcomeOfState(res payrouter.Result) payrouter.Result {
	switch res.State {
	case payrouter.TxAuthorized, payrouter.TxCaptured, payrouter.TxVoided, payrouter.TxRefunded, payrouter.TxPartiallyRefunded:
		res.Outcome = payrouter.OutcomeSucceeded
	case payrouter.TxDeclined:
		res.Outcome = payrouter.OutcomeDeclined
	case payrouter.TxNotFound:
		res.Outcome = payrouter.OutcomeUnavailable
	case payrouter.TxFailed:
		res.Outcome = payrouter.OutcomeError
	default:
		// pending, or a state a charge attempt should not be in: not known yet.
		res.Outcome = payrouter.OutcomePending
	}
	return res
}

// Apply records on c the answer res of the gateway that decided it, called with reference ref.
func Apply(c *payrouter.Charge, gateway, ref string, res payrouter.Result) {
	c.Gateway = gateway
	c.Reference = ref
	c.GatewayReference = res.GatewayReference
	switch res.Outcome {
	case payrouter.OutcomeSucceeded:
		// The state the gateway reports is the truth, whatever was asked: an approval sent
		// again with its reference may come back voided or refunded since.
		status, known := payrouter.StatusOfState(res.State)
		switch {
		case known && status != payrouter.StatusDeclined && status != payrouter.StatusFailed:
			c.Status = status
		case c.Capture:
			c.Status = payrouter.StatusSucceeded
		default:
			c.Status = payrouter.StatusRequiresCapture
		}
	case payrouter.OutcomeDeclined:
		c.Status = payrouter.StatusDeclined
		c.DeclineCode = res.DeclineCode
		if c.DeclineCode == "" {
			c.DeclineCode = "declined"
		}
	case payrouter.OutcomeError:
		c.Status = payrouter.StatusFailed
	default: // pending, timeout, unknown: not known yet
		c.Status = payrouter.StatusProcessing
	}
}
