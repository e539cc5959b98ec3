package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Mode is how a simulated gateway answers calls to its API (CONTRACT.md, Gateway simulator
// control API).
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
)

// Modes lists every mode, in the order error messages name them.
var Modes = []Mode{ModeNormal, ModeUnavailable, ModeError500, ModeHang, ModeReset}

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
	// Latency delays every answer, in every mode but hang. In normal mode the transaction is
	// recorded when the request arrives, so a client that gives up early still charged the card.
	Latency time.Duration
	// DeclineAll declines every charge, whatever its token.
	DeclineAll bool
}

// behaviorJSON is Behavior on the wire: the latency as a Go duration string ("20s", "150ms").
type behaviorJSON struct {
	Mode       Mode   `json:"mode"`
	Latency    string `json:"latency"`
	DeclineAll bool   `json:"decline_all"`
}

// MarshalJSON writes {"mode", "latency", "decline_all"}.
func (b Behavior) MarshalJSON() ([]byte, error) {
	m := b.Mode
	if m == "" {
		m = ModeNormal
	}
	return json.Marshal(behaviorJSON{Mode: m, Latency: b.Latency.String(), DeclineAll: b.DeclineAll})
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
// known mode (missing means normal), a non-negative latency in Go duration syntax (missing or ""
// means none). A PUT replaces the whole behavior, so what is left out is reset.
func ParseBehavior(r io.Reader) (Behavior, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var in behaviorJSON
	if err := dec.Decode(&in); err != nil {
		return Behavior{}, fmt.Errorf(`behavior: want a JSON object {"mode": "normal|unavailable|error500|hang|reset", "latency": "20s", "decline_all": false}: %v`, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Behavior{}, errors.New("behavior: unexpected data after the JSON object")
	}
	b := Behavior{Mode: in.Mode, DeclineAll: in.DeclineAll}
	if b.Mode == "" {
		b.Mode = ModeNormal
	}
	if !b.Mode.Valid() {
		return Behavior{}, fmt.Errorf("behavior: unknown mode %q: want one of %v", in.Mode, Modes)
	}
	if in.Latency != "" {
		d, err := time.ParseDuration(in.Latency)
		if err != nil {
			return Behavior{}, fmt.Errorf("behavior: latency %q: want a duration such as \"250ms\" or \"20s\"", in.Latency)
		}
		if d < 0 {
			return Behavior{}, fmt.Errorf("behavior: latency %q: must not be negative", in.Latency)
		}
		b.Latency = d
	}
	return b, nil
}
