package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payrouter/payrouter"
)

// Charges are kept as:
//   - key("charge", id): a string holding the charge's JSON (payrouter.Charge: the payment token is
//     tagged out of it, so it never reaches Redis), expiring Options.ChargeTTL after the last save;
//   - key("charges", status): one sorted set per status, member the charge id, score its CreatedAt
//     in Unix milliseconds. Redis orders members of equal score by their bytes, so the set's own
//     order is CreatedAt (to the millisecond), then ID: the order ChargesByStatus answers in.
//
// The index may hold stale entries: a charge that expired (the set cannot expire its members one
// by one), or, on Cluster, one whose status moved without its index entry moving with it (see
// SaveCharge). ChargesByStatus reads the charge behind every entry, skips stale ones and removes
// them.

// chargeStatuses are the statuses SaveCharge takes a charge's id out of when the charge moves to
// another one. It must list every payrouter.ChargeStatus: an entry left in a status missing here
// would only be pruned when that status is read.
var chargeStatuses = []payrouter.ChargeStatus{
	payrouter.StatusSucceeded,
	payrouter.StatusRequiresCapture,
	payrouter.StatusProcessing,
	payrouter.StatusDeclined,
	payrouter.StatusFailed,
	payrouter.StatusVoided,
	payrouter.StatusRefunded,
}

// staleIndexBatch is how many index entries ChargesByStatus reads at once after it met stale
// ones, so that a run of expired charges at the head of a set costs a few round trips, not one
// each.
const staleIndexBatch = 100

func (s *Store) chargeKey(id string) string { return s.key("charge", id) }

func (s *Store) chargeStatusKey(status payrouter.ChargeStatus) string {
	return s.key("charges", string(status))
}

// SaveCharge creates or replaces the charge with c.ID, without its payment token, kept for
// Options.ChargeTTL from now, and moves its id to the index of its status. One round trip: the
// charge is written, its id removed from every other status's index and added to its own in a
// single pipeline.
//
// On a single server or Sentinel the pipeline is a MULTI/EXEC transaction, so no reader ever sees
// the charge and its index disagree. On Cluster the charge key and the status sets live on
// different slots, which no transaction (nor script) may span, so it is a plain pipeline:
// ChargesByStatus tolerates the moment they disagree, and a charge has one writer at a time
// (payrouter.ChargeStore), so two saves of one charge do not interleave.
func (s *Store) SaveCharge(ctx context.Context, c *payrouter.Charge) error {
	b, err := encodeCharge(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	p := s.chargePipeline()
	s.queueCharge(ctx, p, c, b)
	if _, err := p.Exec(ctx); err != nil {
		return fmt.Errorf("redisstore: save charge %s: %w", c.ID, err)
	}
	return nil
}

// CompleteCharge saves c and completes key with rec, as SaveCharge and Complete do, in one round
// trip: the commands of both go in one pipeline (a MULTI/EXEC transaction but on Cluster, as for
// SaveCharge).
func (s *Store) CompleteCharge(ctx context.Context, c *payrouter.Charge, key string, rec payrouter.IdempotencyRecord, ttl time.Duration) error {
	b, err := encodeCharge(c)
	if err != nil {
		return err
	}
	rb, err := encodeRecord(key, rec, ttl)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	p := s.chargePipeline()
	// EVAL, not EVALSHA: a pipeline cannot fall back to EVAL when Redis answers NOSCRIPT (after a
	// restart), and the script is short.
	idemCompleteScript.Eval(ctx, p, []string{s.key("idem", key)}, rb, pxMillis(ttl), idemInFlight)
	s.queueCharge(ctx, p, c, b)
	if _, err := p.Exec(ctx); err != nil {
		return fmt.Errorf("redisstore: complete charge %s and its idempotency key: %w", c.ID, err)
	}
	return nil
}

// encodeCharge checks c and returns its stored form.
func encodeCharge(c *payrouter.Charge) ([]byte, error) {
	if c == nil {
		return nil, errors.New("redisstore: save charge: nil charge")
	}
	if c.ID == "" {
		return nil, errors.New("redisstore: save charge: empty id")
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("redisstore: save charge %s: encoding: %w", c.ID, err)
	}
	return b, nil
}

// queueCharge adds to p the commands that save c (encoded as b) and move it to its status set.
func (s *Store) queueCharge(ctx context.Context, p redis.Pipeliner, c *payrouter.Charge, b []byte) {
	own := s.chargeStatusKey(c.Status)
	p.Set(ctx, s.chargeKey(c.ID), b, s.opts.ChargeTTL)
	for _, status := range chargeStatuses {
		if status != c.Status {
			p.ZRem(ctx, s.chargeStatusKey(status), c.ID)
		}
	}
	p.ZAdd(ctx, own, redis.Z{Score: float64(c.CreatedAt.UnixMilli()), Member: c.ID})
	// A busy status set is saved into all the time, so it never expires whole: trim the entries
	// of charges created more than ChargeTTL ago, whose records have expired unless they were
	// saved again long after they were made (a charge is final within minutes, so such entries
	// are rare, and ChargesByStatus only serves the reconciler, which reads recent ones).
	p.ZRemRangeByScore(ctx, own, "-inf", "("+strconv.FormatInt(time.Now().Add(-s.opts.ChargeTTL).UnixMilli(), 10))
	// Every charge in the set was saved no later than now, so it expires no later than the set:
	// a status nobody saves into any more is forgotten whole, without a reader pruning it.
	p.PExpire(ctx, own, s.opts.ChargeTTL)
}

// chargePipeline is a MULTI/EXEC transaction, except on Cluster, where SaveCharge's keys span
// slots (see SaveCharge).
func (s *Store) chargePipeline() redis.Pipeliner {
	if _, ok := s.rdb.(*redis.ClusterClient); ok {
		return s.rdb.Pipeline()
	}
	return s.rdb.TxPipeline()
}

// Charge returns the charge with that id, or an error wrapping payrouter.ErrNotFound. One round
// trip.
func (s *Store) Charge(ctx context.Context, id string) (*payrouter.Charge, error) {
	if id == "" {
		return nil, fmt.Errorf("redisstore: charge %q: %w", id, payrouter.ErrNotFound)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	b, err := s.rdb.Get(ctx, s.chargeKey(id)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, fmt.Errorf("redisstore: charge %q: %w", id, payrouter.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("redisstore: charge %q: %w", id, err)
	}
	return decodeCharge(id, b)
}

// ChargesByStatus returns up to limit charges in that status, oldest first by CreatedAt (to the
// millisecond), ties broken by ID. A limit of zero or less returns none.
//
// It reads limit ids from the status's index, then the charges behind them in one pipeline: two
// round trips. Index entries whose charge expired or is now in another status are skipped, which
// costs more reads of the index until limit charges are found or the index ends, and removed at
// the end, so the next call does not meet them again. All of it within one Options.Timeout.
//
// The index is read by rank, so a charge moving into or out of the status while a call reads
// more than once may be missed by that call; the next call finds it.
func (s *Store) ChargesByStatus(ctx context.Context, status payrouter.ChargeStatus, limit int) ([]*payrouter.Charge, error) {
	if limit <= 0 {
		return nil, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	index := s.chargeStatusKey(status)

	var (
		found []*payrouter.Charge
		stale []any // ids, as ZREM takes them
		seen  = make(map[string]bool)
	)
	for offset, batch := int64(0), int64(limit); len(found) < limit; {
		ids, err := s.rdb.ZRange(ctx, index, offset, offset+batch-1).Result()
		if err != nil {
			return nil, fmt.Errorf("redisstore: charges by status %s: %w", status, err)
		}
		charges, err := s.chargesOf(ctx, ids)
		if err != nil {
			return nil, fmt.Errorf("redisstore: charges by status %s: %w", status, err)
		}
		for i, c := range charges {
			switch {
			case seen[ids[i]]: // shifted to a later rank by a concurrent change
			case c == nil || c.Status != status:
				stale = append(stale, ids[i])
			case len(found) < limit:
				found = append(found, c)
			}
			seen[ids[i]] = true
		}
		if int64(len(ids)) < batch {
			break // the end of the index
		}
		offset += batch
		batch = max(int64(limit-len(found)), staleIndexBatch)
	}
	if len(stale) > 0 {
		// Best effort: a stale entry is skipped by every read, so one not removed now is removed
		// by a later call, and this call's answer is right either way. The removal could only
		// drop a live entry if the charge came back to this status since it was read; a charge
		// leaves a status for good (processing, requires_capture, then final ones).
		_ = s.rdb.ZRem(ctx, index, stale...).Err()
	}
	return found, nil
}

// chargesOf reads the charges with those ids in one round trip; an expired one is nil. A pipeline
// of GETs rather than one MGET, since on Cluster the charges live on different slots.
func (s *Store) chargesOf(ctx context.Context, ids []string) ([]*payrouter.Charge, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	p := s.rdb.Pipeline()
	gets := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		gets[i] = p.Get(ctx, s.chargeKey(id))
	}
	// Exec reports redis.Nil for a missing key like any other failure; each command is checked
	// on its own below.
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	charges := make([]*payrouter.Charge, len(ids))
	for i, get := range gets {
		b, err := get.Bytes()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			return nil, err
		}
		if charges[i], err = decodeCharge(ids[i], b); err != nil {
			return nil, err
		}
	}
	return charges, nil
}

func decodeCharge(id string, b []byte) (*payrouter.Charge, error) {
	var c payrouter.Charge
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("redisstore: charge %q: decoding: %w", id, err)
	}
	return &c, nil
}
