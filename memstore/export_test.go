package memstore

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
