package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Mode is how a simulated gateway answers calls to its API (docs/simulator.md,
// PUT /_sim/behavior).
type Mode string

// The modes of a simulated gateway.
const (
	// ModeNormal answers as the gateway would: approvals, declines, errors.
	ModeNormal Mode = "normal"
	// ModeUnavailable answers the gateway's own "not processed, retry later" form; nothing is
	// recorded.
	ModeUnavailable Mode = "unavailable"
	// ModeError500 answers a plain HTTP 500; nothing is recorded.
	ModeError500 Mode = "error500"
	// ModeHang never answers, until the client goes away or the server closes; nothing is
	// recorded.
	ModeHang Mode = "hang"
	// ModeReset reads the request and then resets the connection; nothing is recorded.
	ModeReset Mode = "reset"
	// ModeProcessThenHang processes the call exactly as ModeNormal does (the charge is recorded,
	// a capture, void or refund applied) and then never answers, like ModeHang: the gateway
	// moved the money but its answer never arrives. Only a status look-up tells the caller.
	ModeProcessThenHang Mode = "process_then_hang"
	// ModeProcessThen503 processes the call exactly as ModeNormal does (recorded, a capture, void
	// or refund applied) and then answers what a proxy in front of the gateway answers when the
	// gateway's connection drops before its answer: 503, text/plain, EnvoyResetBody. The gateway
	// moved the money; the caller sees a 503 that is not the gateway's own "not processed" form,
	// which must never be read as one.
	ModeProcessThen503 Mode = "process_then_503"
)

// EnvoyResetBody is what Envoy answers (503, text/plain) when the upstream's connection is reset
// after the request was forwarded and before any answer header came back: ModeProcessThen503's
// answer.
const EnvoyResetBody = "upstream connect error or disconnect/reset before headers. reset reason: connection termination"

// Modes lists every mode, in the order error messages name them.
var Modes = []Mode{ModeNormal, ModeUnavailable, ModeError500, ModeHang, ModeReset, ModeProcessThenHang, ModeProcessThen503}

// Valid reports whether m is one of Modes.
func (m Mode) Valid() bool {
	for _, v := range Modes {
		if m == v {
			return true
		}
	}
	return false
}

// Behavior is what PUT /_sim/behavior sets. Its zero value is a healthy, prompt gateway.
type Behavior struct {
	// Mode is how calls are answered; "" is ModeNormal.
	Mode Mode
	// Latency delays every answer, in every mode but the two that never answer (hang,
	// process_then_hang). In normal mode the transaction is recorded when the request arrives, so
	// a client that gives up early still charged the card.
	Latency time.Duration
	// DeclineAll declines every charge, whatever its token.
	DeclineAll bool
	// SlowShare is the heavy tail: each call to the gateway's API is, with this probability (in
	// [0, 1]), delayed by SlowLatency on top of Latency. The slow calls are recorded as Latency's
	// are, when they arrive. 0 is no tail. Health and control calls are never slowed by it.
	SlowShare float64
	// SlowLatency is the extra delay of a call drawn into the tail; it must be set when
	// SlowShare is.
	SlowLatency time.Duration
	// RefundUnchecked approves every refund of a captured transaction, whatever is left to
	// refund: the ledger then records refunded beyond the amount, so that a test can see
	// over-refunds at the gateway and payrouter alone holds the limit. The transaction's state
	// is still checked (an authorization or a voided one is not refunded).
	RefundUnchecked bool
	// Pending answers every new charge pending (each fake in its own form: Ding's
	// ProcessingState Processing, Tranglo's 968, Stripe's processing) and makes it final this
	// long after: approved or declined as it would have been at once. A look-up shows it pending
	// until then, final after; the fake calls back then when a callback is set (PUT
	// /_sim/callback). 0: charges are final at once.
	Pending time.Duration
}

// delay is how long the answer to one API call is held back: Latency, plus SlowLatency for a
// call whose draw (in [0, 1)) falls within SlowShare.
func (b Behavior) delay(draw float64) time.Duration {
	if b.SlowShare > 0 && draw < b.SlowShare {
		return b.Latency + b.SlowLatency
	}
	return b.Latency
}

// behaviorJSON is Behavior on the wire: the latencies as Go duration strings ("20s", "150ms").
type behaviorJSON struct {
	Mode            Mode    `json:"mode"`
	Latency         string  `json:"latency"`
	DeclineAll      bool    `json:"decline_all"`
	SlowShare       float64 `json:"slow_share"`
	SlowLatency     string  `json:"slow_latency"`
	RefundUnchecked bool    `json:"refund_unchecked"`
	Pending         string  `json:"pending"`
}

// MarshalJSON writes {"mode", "latency", "decline_all", "slow_share", "slow_latency",
// "refund_unchecked", "pending"}.
func (b Behavior) MarshalJSON() ([]byte, error) {
	m := b.Mode
	if m == "" {
		m = ModeNormal
	}
	return json.Marshal(behaviorJSON{
		Mode: m, Latency: b.Latency.String(), DeclineAll: b.DeclineAll,
		SlowShare: b.SlowShare, SlowLatency: b.SlowLatency.String(), RefundUnchecked: b.RefundUnchecked,
		Pending: b.Pending.String(),
	})
}

// UnmarshalJSON reads what MarshalJSON writes, and validates it like ParseBehavior.
func (b *Behavior) UnmarshalJSON(data []byte) error {
	v, err := ParseBehavior(bytes.NewReader(data))
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// ParseBehavior decodes a PUT /_sim/behavior body strictly: one JSON object, no unknown fields, a
// known mode (missing means normal), a non-negative latency and pending in Go duration syntax
// (missing or "" means none), a slow_share in [0, 1] (missing means no tail) and, when slow_share is above 0, a
// positive slow_latency. A PUT replaces the whole behavior, so what is left out is reset.
func ParseBehavior(r io.Reader) (Behavior, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var in behaviorJSON
	if err := dec.Decode(&in); err != nil {
		return Behavior{}, fmt.Errorf(`behavior: want a JSON object {"mode": "normal|unavailable|error500|hang|reset|process_then_hang|process_then_503", "latency": "20s", "decline_all": false, "slow_share": 0.02, "slow_latency": "2s", "refund_unchecked": false, "pending": "2s"}: %v`, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Behavior{}, errors.New("behavior: unexpected data after the JSON object")
	}
	b := Behavior{Mode: in.Mode, DeclineAll: in.DeclineAll, RefundUnchecked: in.RefundUnchecked}
	if b.Mode == "" {
		b.Mode = ModeNormal
	}
	if !b.Mode.Valid() {
		return Behavior{}, fmt.Errorf("behavior: unknown mode %q: want one of %v", in.Mode, Modes)
	}
	var err error
	if b.Latency, err = parseLatency("latency", in.Latency); err != nil {
		return Behavior{}, err
	}
	if b.SlowLatency, err = parseLatency("slow_latency", in.SlowLatency); err != nil {
		return Behavior{}, err
	}
	if b.Pending, err = parseLatency("pending", in.Pending); err != nil {
		return Behavior{}, err
	}
	if in.SlowShare < 0 || in.SlowShare > 1 {
		return Behavior{}, fmt.Errorf("behavior: slow_share %v: want a probability between 0 and 1, such as 0.02", in.SlowShare)
	}
	if in.SlowShare > 0 && b.SlowLatency == 0 {
		return Behavior{}, fmt.Errorf("behavior: slow_share %v needs a slow_latency, the extra delay of the slow calls, such as \"2s\"", in.SlowShare)
	}
	b.SlowShare = in.SlowShare
	return b, nil
}

// parseLatency reads one of the behavior's durations: "" is none, anything else a non-negative
// Go duration.
func parseLatency(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("behavior: %s %q: want a duration such as \"250ms\" or \"20s\"", field, s)
	}
	if d < 0 {
		return 0, fmt.Errorf("behavior: %s %q: must not be negative", field, s)
	}
	return d, nil
}
