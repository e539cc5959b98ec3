package config

import (
	"math"
	"time"
)

// Limits bound what one API key, or one client address, can take of the service
// (docs/limits.md). Every zero value means "off" and is said so in configs/payrouter.yaml.
type Limits struct {
	// RequestsPerSecond is each API key's sustained rate of storefront requests (every
	// authenticated route). Over it: 429 rate-limited with Retry-After. 0: no limit. default 200
	RequestsPerSecond float64 `yaml:"requests_per_second"`
	// Burst is how many requests a key may send at once above the rate. 0: the rate rounded up.
	// default 400
	Burst int `yaml:"burst"`
	// KeyShare is the share of one gateway's bulkhead (max_concurrent) each API key is sure of:
	// ceil(key_share × max_concurrent) slots, at least 1. It binds only while other keys need the
	// slots (resilience.Bulkhead.SetKeyShare): a key alone uses every slot. A charge refused for
	// it is passed at that gateway as bulkhead_full and goes on to the next one. Enforced only
	// when auth.api_keys holds more than one key: a single key has nobody to leave room for. In
	// (0, 1]; 1: off. default 0.5
	KeyShare float64 `yaml:"key_share"`
	// AuthFailuresPerMinute is how many failed authentications (a missing or wrong API key or
	// admin token) one client address may make within a minute, on either listener; past it a
	// missing or wrong credential from the address is answered 429 instead of 401, and a right
	// one still goes through. 0: off. default 20
	AuthFailuresPerMinute int `yaml:"auth_failures_per_minute"`
}

// Defaults of Limits and of the state bounds.
const (
	defaultRequestsPerSecond     = 200
	defaultBurst                 = 400
	defaultKeyShare              = 0.5
	defaultAuthFailuresPerMinute = 20
	// defaultRetention is pgstore's DefaultChargeRetention: thirteen months, past the card
	// networks' usual dispute windows and a fiscal year. config does not import pgstore.
	defaultRetention = 395 * 24 * time.Hour
	// defaultMaxMemory bounds the in-memory store: with the collector's headroom (the heap may
	// grow to twice the live data) the process stays near 1 GiB however many keys share it,
	// about the 1.2 GiB the count bound it replaced allowed.
	defaultMaxMemory = 512 << 20
	// minMemoryPerKey is the least share of max_memory a key may have: about 100 of the largest
	// charges the API accepts with their keys, or over a thousand typical ones.
	minMemoryPerKey = 1 << 20
)

func applyLimitDefaults(c *Config, present map[string]bool) {
	l := &c.Limits
	if !present["limits.requests_per_second"] {
		l.RequestsPerSecond = defaultRequestsPerSecond
	}
	if !present["limits.burst"] {
		l.Burst = defaultBurst
		if present["limits.requests_per_second"] {
			// A rate set alone gets a burst to match, not the default rate's.
			l.Burst = int(math.Ceil(2 * l.RequestsPerSecond))
		}
	}
	if !present["limits.key_share"] {
		l.KeyShare = defaultKeyShare
	}
	if !present["limits.auth_failures_per_minute"] {
		l.AuthFailuresPerMinute = defaultAuthFailuresPerMinute
	}
	defDuration(&c.State.Retention, present["state.retention"], defaultRetention)
	if !present["state.max_memory"] {
		c.State.MaxMemory = defaultMaxMemory
	}
}

func (v *validator) limits() {
	l := v.c.Limits
	if l.RequestsPerSecond < 0 || math.IsNaN(l.RequestsPerSecond) || math.IsInf(l.RequestsPerSecond, 0) {
		v.addf("limits.requests_per_second", "must be >= 0 (0: no limit)")
	}
	if l.Burst < 0 {
		v.addf("limits.burst", "must be >= 0 (0: the rate rounded up)")
	}
	if !(l.KeyShare > 0 && l.KeyShare <= 1) {
		v.addf("limits.key_share", "must be in (0, 1]: the share of a gateway's bulkhead each API key is sure of (1: no share)")
	}
	if l.AuthFailuresPerMinute < 0 {
		v.addf("limits.auth_failures_per_minute", "must be >= 0 (0: off)")
	}
	s := v.c.State
	v.positive("state.retention", s.Retention)
	if s.Retention > 0 && s.Retention < v.c.Idempotency.TTL {
		v.addf("state.retention", "must be at least idempotency.ttl (%s): a replayed answer shows its charge's current state, so the charge must outlive its key", v.c.Idempotency.TTL)
	}
	if per, keys := v.c.MemoryPerKey(), v.c.WritingScopes(); s.MaxMemory > 0 && per < minMemoryPerKey {
		v.addf("state.max_memory", "%s shared by %d API keys is %s each, under the %s a key needs (about 100 of the largest charges): raise it to at least %s",
			s.MaxMemory, keys, Bytes(per), Bytes(minMemoryPerKey), Bytes(minMemoryPerKey*int64(keys)))
	}
}

// WritingScopes counts the API key scopes that may write money state (charge, capture, void or
// refund: each claims an Idempotency-Key), the keys sharing a name counting once: each has its
// share of state.max_memory. At least 1.
func (c *Config) WritingScopes() int {
	scopes := map[string]bool{}
	for _, k := range c.Auth.APIKeys {
		if !k.Allows(RightCharge) && !k.Allows(RightCapture) && !k.Allows(RightVoid) && !k.Allows(RightRefund) {
			continue // a read-only key holds nothing
		}
		if k.Name != "" {
			scopes["name:"+k.Name] = true
		} else {
			scopes["key:"+k.Key] = true
		}
	}
	return max(len(scopes), 1)
}

// MemoryPerKey is each API key scope's share of state.max_memory: the most bytes of charges and
// idempotency keys one key may make the in-memory store hold (docs/limits.md, Memory); 0: no
// bound.
func (c *Config) MemoryPerKey() int64 {
	return int64(c.State.MaxMemory) / int64(c.WritingScopes())
}

// KeyShareFor is the key share in force for a configuration: Limits.KeyShare when more than one
// API key is configured, else 1 (a single key shares a gateway with nobody).
func (c *Config) KeyShareFor() float64 {
	// Keys sharing a name are one storefront's (a rotation): they count once.
	tenants := map[string]bool{}
	for _, k := range c.Auth.APIKeys {
		if k.Name != "" {
			tenants["name:"+k.Name] = true
		} else {
			tenants["key:"+k.Key] = true
		}
	}
	if len(tenants) < 2 {
		return 1
	}
	return c.Limits.KeyShare
}
