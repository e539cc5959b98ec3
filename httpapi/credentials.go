package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"sync/atomic"

	"github.com/payrouter/payrouter/config"
)

// Credentials hold the storefront's API keys and the admin tokens, shared by both listeners, and
// swapped whole by a reload: ops rotate a key (add the new one, move the clients, remove the old
// one) without a restart. Only SHA-256 digests are kept: every check compares digests in
// constant time, so neither a key's value nor its length shows in how long a check takes.
type Credentials struct {
	cur atomic.Pointer[credentials]
}

type credentials struct {
	apiKeys []apiKey
	admins  []adminToken // empty: /admin/ answers 403 to everyone
}

// apiKey is one configured API key, as requireAPIKey checks it.
type apiKey struct {
	sum    [32]byte
	scope  string          // what its charges, refunds and idempotency keys are stored under
	rights map[string]bool // nil: every right
	list   []string        // the rights as configured, for a 403's detail; nil: every right
}

// allows reports whether the key has right.
func (k *apiKey) allows(right string) bool { return k.rights == nil || k.rights[right] }

// adminToken is one configured admin token.
type adminToken struct {
	sum  [32]byte
	name string // the actor is "admin:<name>"
}

// NewCredentials returns the credentials of plain apiKeys (every right, scope from the digest)
// and adminToken (named "admin"; empty: none).
func NewCredentials(apiKeys []string, adminToken string) *Credentials {
	c := &Credentials{}
	c.Set(apiKeys, adminToken)
	return c
}

// NewAuthCredentials returns the credentials of a configuration's auth section.
func NewAuthCredentials(a config.Auth) *Credentials {
	c := &Credentials{}
	c.SetAuth(a)
	return c
}

// Set replaces the credentials with plain apiKeys and adminToken; requests that passed the check
// go on.
func (c *Credentials) Set(apiKeys []string, adminToken string) {
	a := config.Auth{AdminToken: adminToken}
	for _, k := range apiKeys {
		a.APIKeys = append(a.APIKeys, config.APIKey{Key: k})
	}
	c.SetAuth(a)
}

// SetAuth replaces the credentials with a configuration's auth section; requests that passed the
// check go on.
func (c *Credentials) SetAuth(a config.Auth) {
	next := &credentials{}
	for _, k := range a.APIKeys {
		key := apiKey{sum: sha256.Sum256([]byte(k.Key)), scope: keyScope(k)}
		if k.Rights != nil {
			key.rights = map[string]bool{}
			for _, r := range k.Rights {
				key.rights[r] = true
			}
			key.list = append([]string(nil), k.Rights...)
		}
		next.apiKeys = append(next.apiKeys, key)
	}
	for _, t := range a.Admins() {
		next.admins = append(next.admins, adminToken{sum: sha256.Sum256([]byte(t.Token)), name: t.Name})
	}
	c.cur.Store(next)
}

func (c *Credentials) load() *credentials { return c.cur.Load() }

// apiKey returns the configured key token is, or nil. Every key's digest is compared with the
// token's, in constant time and without stopping at a match, so the time taken depends neither
// on which key matched, nor on whether one did, nor on how close a wrong token came: a client
// throttled for its failures (limits.go) is checked exactly like any other.
func (c *credentials) apiKey(token string) *apiKey {
	sum := sha256.Sum256([]byte(token))
	var key *apiKey
	for i := range c.apiKeys {
		if subtle.ConstantTimeCompare(sum[:], c.apiKeys[i].sum[:]) == 1 && key == nil {
			key = &c.apiKeys[i]
		}
	}
	return key
}

// admin returns the name of the admin token token is, or "": like apiKey, every token is
// compared, in constant time.
func (c *credentials) admin(token string) string {
	sum := sha256.Sum256([]byte(token))
	name := ""
	for _, a := range c.admins {
		if subtle.ConstantTimeCompare(sum[:], a.sum[:]) == 1 && name == "" {
			name = a.name
		}
	}
	return name
}

// keyScope is the scope an API key's charges, refunds and idempotency keys are kept under: its
// name's when it has one (several keys may share it during a rotation), else its digest's.
func keyScope(k config.APIKey) string {
	if k.Name != "" {
		return namedScope(k.Name)
	}
	return digestScope(sha256.Sum256([]byte(k.Key)))
}

// namedScope is the scope of a named API key: "name:" and the name. A digest's scope is 16 hex
// digits and a name has no ':' (config refuses one), so no named scope can equal another key's,
// and a stored "<scope>:<idempotency key>" splits one way only.
func namedScope(name string) string { return config.NamedScope(name) }
