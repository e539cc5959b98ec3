package payrouter

import (
	"crypto/sha256"
	"encoding/hex"
)

// IdempotencyKeyPrefix starts every key an IdempotencyStore is given: what follows it is a
// digest, never the caller's Idempotency-Key. Keys stored before payrouter hashed them
// ("<scope>:<key>") never start with it, so the two forms cannot be confused.
const IdempotencyKeyPrefix = "sha256:"

// IdempotencyStoreKey is the key an IdempotencyStore keeps for the Idempotency-Key key sent
// with an API key of scope: "sha256:" and the lower-case hex SHA-256 of scope + ":" + key. The
// stores never see the caller's key, which may be anything printable (a card number pasted by
// mistake is refused before this, but an order number or an email address is not): what a
// database dump or a Redis key listing shows is a digest.
//
// pgstore's migration 00002 turns keys stored before this change into the same form in SQL,
// 'sha256:' || encode(sha256(convert_to(key, 'UTF8')), 'hex'), so that a key claimed before an
// upgrade and retried after it still finds its claim or its answer. Idempotency-Keys are
// printable ASCII, whose bytes are the same in every encoding, so both compute the same digest.
//
// The digest is not keyed: it hides a key that is hard to guess (a UUID), not one that is easy
// to guess (an order number can be found by trying them). It is not meant to; it keeps caller
// text out of the stores.
func IdempotencyStoreKey(scope, key string) string {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{':'})
	h.Write([]byte(key))
	// Written into one buffer of the result's length: one allocation, the string's.
	var out [len(IdempotencyKeyPrefix) + 2*sha256.Size]byte
	copy(out[:], IdempotencyKeyPrefix)
	hex.Encode(out[len(IdempotencyKeyPrefix):], h.Sum(make([]byte, 0, sha256.Size)))
	return string(out[:])
}
