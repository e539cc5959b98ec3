package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/payrouter/payrouter"
)

// A refund is one key, key("refund", id), holding its JSON and expiring Options.ChargeTTL after
// its last save, like the charge it gives money back for: a refund outliving its charge would
// be a record nobody can act on. Refunds are read by id only, so they need no index.

func (s *Store) refundKey(id string) string { return s.key("refund", id) }

// SaveRefund creates or replaces the refund with r.ID, kept for Options.ChargeTTL from now. One
// round trip.
func (s *Store) SaveRefund(ctx context.Context, r *payrouter.Refund) error {
	if r == nil {
		return errors.New("redisstore: save refund: nil refund")
	}
	if r.ID == "" {
		return errors.New("redisstore: save refund: empty id")
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("redisstore: save refund %s: encoding: %w", r.ID, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.rdb.Set(ctx, s.refundKey(r.ID), b, s.opts.ChargeTTL).Err(); err != nil {
		return fmt.Errorf("redisstore: save refund %s: %w", r.ID, err)
	}
	return nil
}

// Refund returns the refund with that id, or an error wrapping payrouter.ErrNotFound. One round
// trip.
func (s *Store) Refund(ctx context.Context, id string) (*payrouter.Refund, error) {
	if id == "" {
		return nil, fmt.Errorf("redisstore: refund %q: %w", id, payrouter.ErrNotFound)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	b, err := s.rdb.Get(ctx, s.refundKey(id)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, fmt.Errorf("redisstore: refund %q: %w", id, payrouter.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("redisstore: refund %q: %w", id, err)
	}
	var r payrouter.Refund
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("redisstore: refund %q: decoding: %w", id, err)
	}
	return &r, nil
}
