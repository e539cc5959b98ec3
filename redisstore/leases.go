package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// A lease is one key, <prefix>lease:{<name>}, whose value is its holder and whose expiry is the
// lease's end: a holder that crashes loses the lease by doing nothing.

// holdLeaseScript takes a free lease or renews the caller's own in one step: a GET then SET from
// the client would let a lease that expires in between be renewed over its new holder.
//
// KEYS: the lease. ARGV: holder, ttl in ms.
var holdLeaseScript = redis.NewScript(`
local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// dropLeaseScript deletes the lease only if the caller still holds it: a holder whose lease
// expired while it was stalled must not drop the lease of the process that took it over.
//
// KEYS: the lease. ARGV: holder.
var dropLeaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
return 0
`)

// HoldLease takes the lease or renews the caller's. A holder keeps it only by renewing well
// within ttl; the ttl is whole milliseconds, rounded up.
func (s *Store) HoldLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if err := checkLease("hold lease", name, holder); err != nil {
		return false, err
	}
	if ttl <= 0 {
		return false, fmt.Errorf("redisstore: hold lease %s: ttl %v must be positive", name, ttl)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	n, err := holdLeaseScript.Run(ctx, s.rdb, []string{s.key("lease", name)}, holder, positiveMillis(ttl)).Int64()
	if err != nil {
		return false, fmt.Errorf("redisstore: hold lease %s: %w", name, err)
	}
	return n == 1, nil
}

// DropLease gives the lease up so that another process can take it without waiting for it to
// expire; it is a no-op when holder does not hold it.
func (s *Store) DropLease(ctx context.Context, name, holder string) error {
	if err := checkLease("drop lease", name, holder); err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := dropLeaseScript.Run(ctx, s.rdb, []string{s.key("lease", name)}, holder).Err(); err != nil {
		return fmt.Errorf("redisstore: drop lease %s: %w", name, err)
	}
	return nil
}

// checkLease refuses empty names and holders: an empty holder would make every anonymous caller
// the holder of every lease it takes.
func checkLease(op, name, holder string) error {
	switch {
	case name == "":
		return fmt.Errorf("redisstore: %s: empty lease name", op)
	case holder == "":
		return fmt.Errorf("redisstore: %s %s: empty holder", op, name)
	}
	return nil
}
