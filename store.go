package payrouter

import (
	"context"
	"time"
)

// ChargeStore keeps charges. Charges are written whole: the router is the only writer of a charge
// while its request runs.
type ChargeStore interface {
	// SaveCharge creates or replaces the charge with c.ID.
	SaveCharge(ctx context.Context, c *Charge) error
	// Charge returns the charge with that id, or ErrNotFound.
	Charge(ctx context.Context, id string) (*Charge, error)
	// ChargesByStatus returns up to limit charges in that status, oldest first (the reconciler
	// reads the processing ones).
	ChargesByStatus(ctx context.Context, status ChargeStatus, limit int) ([]*Charge, error)
}

// IdempotencyRecord is the stored first complete answer to a request with an Idempotency-Key.
type IdempotencyRecord struct {
	Fingerprint string            `json:"fingerprint"` // of the request body: another body is a mismatch
	Status      int               `json:"status"`      // the HTTP status answered
	Header      map[string]string `json:"header,omitempty"`
	Body        []byte            `json:"body"`
	CreatedAt   time.Time         `json:"created_at"`
}

// IdempotencyStore keeps idempotency keys. A key is claimed before any work begins, then either
// completed with the answer (stored for ttl) or released (the answer is not stored, so the same key
// may be sent again).
type IdempotencyStore interface {
	// Claim takes key for a request with that fingerprint. It returns (nil, nil) when the key is
	// new and now held by the caller; the stored record when the key completed with the same
	// fingerprint; ErrInFlight when another request holds it; ErrMismatch when it was used with
	// another fingerprint. inFlightTTL bounds how long a claim survives a crashed holder.
	Claim(ctx context.Context, key, fingerprint string, inFlightTTL time.Duration) (*IdempotencyRecord, error)
	// Complete stores the answer for a claimed key, kept for ttl.
	Complete(ctx context.Context, key string, rec IdempotencyRecord, ttl time.Duration) error
	// Release forgets a claimed key whose answer is not stored.
	Release(ctx context.Context, key string) error
}

// Forced is a state ops imposed on a breaker through the admin API; it holds until reset and
// applies to every instance sharing the state store.
type Forced string

// The forced states; ForcedNone is no forcing.
const (
	ForcedNone   Forced = ""
	ForcedOpen   Forced = "open"
	ForcedClosed Forced = "closed"
)

// BreakerStateStore keeps the breaker state that outlives one process or is shared by a fleet.
type BreakerStateStore interface {
	// SetForced records a forced state for the breaker named "<gateway>/<operation>"; ForcedNone
	// clears it.
	SetForced(ctx context.Context, breaker string, f Forced) error
	// ForcedStates returns every breaker with a forced state.
	ForcedStates(ctx context.Context) (map[string]Forced, error)
}

// Store is everything payrouter keeps: one implementation per backend (memstore, redisstore).
type Store interface {
	ChargeStore
	IdempotencyStore
	BreakerStateStore
	// Ping reports whether the store answers; /readyz uses it.
	Ping(ctx context.Context) error
	// Close releases the store's connections.
	Close() error
}
