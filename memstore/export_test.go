package memstore

import (
	"fmt"

	"github.com/payrouter/payrouter"
)

// IdempotencyLen is how many idempotency keys the store holds, expired ones not yet swept
// included: what the memory bound is about.
func (s *Store) IdempotencyLen() int {
	s.idemMu.Lock()
	defer s.idemMu.Unlock()
	return len(s.idem)
}

// ExpiriesLen is how many expiries, stale ones included, the sweep still has to look at.
func (s *Store) ExpiriesLen() int {
	s.idemMu.Lock()
	defer s.idemMu.Unlock()
	return len(s.expiries)
}

// Visits is how many charges the bounds took off the front of a settled order, to drop or to
// park them: the work making room did.
func (s *Store) Visits() int64 {
	s.chargeMu.RLock()
	defer s.chargeMu.RUnlock()
	return s.visits
}

// Usage is what each owner is counted at, as the quotas see it.
func (s *Store) Usage() map[string]int64 {
	s.usageMu.Lock()
	defer s.usageMu.Unlock()
	out := map[string]int64{}
	for owner, u := range s.usage {
		out[owner] = u.charges + u.keys
	}
	return out
}

// Recount counts what each owner holds from scratch, from what the store holds now rather than
// from the writes that brought it there: every charge's body, the distinct versions its
// current state and its events hold, its events and refunds; every idempotency key with its
// record. An error says which charge's own count differs from its recount, or that the total
// differs from the owners' sum.
func (s *Store) Recount() (map[string]int64, error) {
	s.idemMu.Lock()
	defer s.idemMu.Unlock()
	s.chargeMu.Lock()
	defer s.chargeMu.Unlock()
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	out := map[string]int64{}
	var sum int64
	for id, e := range s.entries {
		n := chargeFixedBytes
		versions := map[*payrouter.Charge]bool{}
		if c := s.charges[id]; c != nil {
			n += mapBytes(e.md) + str(e.desc) + str(e.cust)
			versions[c] = true
		}
		for _, ev := range s.eventsOf[id] {
			if ev.gone {
				continue
			}
			n += eventBytes(&ev.ev)
			if ev.ev.Charge != nil {
				versions[ev.ev.Charge] = true
			}
		}
		for v := range versions {
			n += versionBytes(v, e)
		}
		for _, rid := range s.refundsOf[id] {
			if r := s.refunds[rid]; r != nil {
				n += refundBytes(r)
			}
		}
		if n != e.bytes {
			return nil, fmt.Errorf("charge %s is counted at %d bytes, recounted at %d", id, e.bytes, n)
		}
		out[e.owner] += n
		sum += n
	}
	for key, e := range s.idem {
		n := idemBytes(key, &e)
		if n != e.bytes {
			return nil, fmt.Errorf("key %s is counted at %d bytes, recounted at %d", key, e.bytes, n)
		}
		out[e.owner] += n
		sum += n
	}
	if t := s.total.Load(); t != sum {
		return nil, fmt.Errorf("the total is %d bytes, the owners' recount %d", t, sum)
	}
	for owner, n := range out {
		if n == 0 {
			delete(out, owner)
		}
	}
	return out, nil
}

// The accounted sizes, for the measuring test to compare with the heap.
var (
	ChargeFixedBytes = chargeFixedBytes
	IdemBytesOf      = func(key, owner, fingerprint string, rec *payrouter.IdempotencyRecord) int64 {
		return idemBytes(key, &idemEntry{owner: owner, fingerprint: fingerprint, rec: rec})
	}
)
