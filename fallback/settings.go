package fallback

import (
	"slices"
	"strings"

	"github.com/payrouter/payrouter"
)

// Settings is the `fallbacks:` section of the configuration (docs/configuration.md): the policy
// of each operation that has a choice. Capture and void have none (they fail) and so no key. A
// zero value, or one holding only blanks, is the operation's default: Settings{} is every
// default.
type Settings struct {
	// Charge is fallbacks.charge: Fail, the only policy ("": Fail). A charge is never queued or
	// degraded: the caller must know at once that no money moved.
	Charge Policy `yaml:"charge"`
	// Refund is fallbacks.refund: Queue (202 queued, sent later) or Fail (503). "": Queue.
	Refund Policy `yaml:"refund"`
	// Status is fallbacks.status, for the look-up of a processing charge: Degrade (the stored
	// charge, stale) or Fail (503). "": Degrade.
	Status Policy `yaml:"status"`
}

// allowed lists, per operation, the policies it may have, its default first.
var allowed = map[payrouter.Operation][]Policy{
	payrouter.OpCharge:  {Fail},
	payrouter.OpCapture: {Fail},
	payrouter.OpVoid:    {Fail},
	payrouter.OpRefund:  {Queue, Fail},
	payrouter.OpStatus:  {Degrade, Fail},
}

// Allowed returns the policies op may have, its default first; nil for an operation that has no
// fallback.
func Allowed(op payrouter.Operation) []Policy {
	return append([]Policy(nil), allowed[op]...)
}

// Default returns op's policy when nothing is configured ("" for an operation that has none).
func Default(op payrouter.Operation) Policy {
	if p := allowed[op]; len(p) > 0 {
		return p[0]
	}
	return ""
}

// WithDefaults returns s with every unset (or blank) policy replaced by its default.
func (s Settings) WithDefaults() Settings {
	def := func(p *Policy, op payrouter.Operation) {
		if strings.TrimSpace(string(*p)) == "" {
			*p = Default(op)
		}
	}
	def(&s.Charge, payrouter.OpCharge)
	def(&s.Refund, payrouter.OpRefund)
	def(&s.Status, payrouter.OpStatus)
	return s
}

// Policy returns op's policy under s, defaults applied: Fail for capture and void, which have no
// choice.
func (s Settings) Policy(op payrouter.Operation) Policy {
	s = s.WithDefaults()
	switch op {
	case payrouter.OpCharge:
		return s.Charge
	case payrouter.OpRefund:
		return s.Refund
	case payrouter.OpStatus:
		return s.Status
	}
	return Default(op)
}

// Invalid is one setting of Settings that its operation does not allow.
type Invalid struct {
	// Key is the setting's YAML key under fallbacks: ("refund").
	Key string
	Got Policy
	// Allowed are the policies the key may have, its default first.
	Allowed []Policy
}

// Want says what the key may be, for a message: "queue or fail".
func (i Invalid) Want() string {
	names := make([]string, len(i.Allowed))
	for n, p := range i.Allowed {
		names[n] = string(p)
	}
	return strings.Join(names, " or ")
}

// Invalid returns the settings of s (defaults applied first, by the caller) that their
// operations do not allow, in the order of the keys: charge, refund, status.
func (s Settings) Invalid() []Invalid {
	var bad []Invalid
	for _, k := range []struct {
		key string
		op  payrouter.Operation
		got Policy
	}{{"charge", payrouter.OpCharge, s.Charge}, {"refund", payrouter.OpRefund, s.Refund}, {"status", payrouter.OpStatus, s.Status}} {
		if !slices.Contains(allowed[k.op], k.got) {
			bad = append(bad, Invalid{Key: k.key, Got: k.got, Allowed: Allowed(k.op)})
		}
	}
	return bad
}
