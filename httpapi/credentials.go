package httpapi

import (
	"crypto/sha256"
	"sync/atomic"
)

// Credentials hold the storefront's API keys and the admin token, shared by both listeners, and
// swapped whole by a reload: ops rotate a key (add the new one, move the clients, remove the old
// one) without a restart.
type Credentials struct {
	cur atomic.Pointer[credentials]
}

type credentials struct {
	apiKeys    [][32]byte // SHA-256 of each API key: compared in constant time, never kept in clear
	adminToken string     // empty: /admin/ answers 403 to everyone
}

// NewCredentials returns the credentials of apiKeys and adminToken.
func NewCredentials(apiKeys []string, adminToken string) *Credentials {
	c := &Credentials{}
	c.Set(apiKeys, adminToken)
	return c
}

// Set replaces the API keys and the admin token; requests that passed the check go on.
func (c *Credentials) Set(apiKeys []string, adminToken string) {
	next := &credentials{adminToken: adminToken}
	for _, k := range apiKeys {
		next.apiKeys = append(next.apiKeys, sha256.Sum256([]byte(k)))
	}
	c.cur.Store(next)
}

func (c *Credentials) load() *credentials { return c.cur.Load() }
