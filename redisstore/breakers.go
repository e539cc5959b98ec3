package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payrouter/payrouter"
)

// The fleet's breakers in Redis (docs/architecture.md, Breakers). Each breaker has six keys
// sharing the hash tag {<breaker>}, so that every script below touches one Cluster slot:
//
//	<prefix>breaker:{<breaker>}:tripped  opened and not closed since: open or half-open; its
//	                                     value is the generation of that opening
//	<prefix>breaker:{<breaker>}:open     present for the cooldown: open
//	<prefix>breaker:{<breaker>}:window   hash: s:<bucket>, f:<bucket> (successes, failures),
//	                                     c (failures in a row), w (bucket width, ms), n (buckets)
//	<prefix>breaker:{<breaker>}:trials   trial slots taken while half-open
//	<prefix>breaker:{<breaker>}:trialok  trials that succeeded
//	<prefix>breaker:{<breaker>}:gen      the last generation handed out (payrouter.TrialGen)
//
// Half-open needs no timer: it is tripped without open, which is what the open key's expiry
// leaves behind. Every opening takes the next generation (INCR gen) and writes it into tripped;
// a trial slot is handed out with it, and a trial's report (TrialSucceeded, ReturnTrial, the
// OpenBreaker of a failed trial) is dropped unless tripped still holds it. gen outlives closing
// and ResetBreaker, so that a generation is never handed out twice while a trial of it may run. Forced states are one hash for every breaker, <prefix>breakers:forced, so that
// BreakerStates reads them all at once; no multi-key script touches it, so its slot does not
// matter.
// Transitions are published, as JSON BreakerEvents, on the channel <prefix>breakers.

// stateTTL is how long a breaker's keys outlive their last write. Nothing relies on it: it is a
// safety net, so that a breaker no instance uses any more (renamed, removed from the config)
// leaves nothing behind, and a breaker nobody ever tries again cannot stay tripped for ever.
const stateTTL = 24 * time.Hour

// windowBuckets is how many buckets a rolling window is cut into: what falls out of the window
// does so one bucket at a time, as gobreaker's BucketPeriod does for the local breakers.
const windowBuckets = 10

// The positions of a breaker's keys in the slice breakerKeys returns, which every script takes
// in that order.
const (
	keyTripped = iota
	keyOpen
	keyWindow
	keyTrials
	keyTrialOK
	keyGen
)

func (s *Store) breakerKeys(breaker string) []string {
	return []string{
		s.key("breaker", breaker, "tripped"),
		s.key("breaker", breaker, "open"),
		s.key("breaker", breaker, "window"),
		s.key("breaker", breaker, "trials"),
		s.key("breaker", breaker, "trialok"),
		s.key("breaker", breaker, "gen"),
	}
}

func (s *Store) forcedKey() string      { return s.opts.Prefix + "breakers:forced" }
func (s *Store) breakerChannel() string { return s.opts.Prefix + "breakers" }

// reportScript adds one instance's report to the window and trips the breaker when a rule says
// so. It reads the time from Redis, never from the caller, so that instances whose clocks
// disagree still share one window.
//
// KEYS: tripped, open, window, trials, trialok, gen.
// ARGV: successes, failures, trailing failures, consecutive-failures rule, failures-in-window
// rule, failure rate, min requests, bucket width in ms (0: no window), buckets, cooldown in ms,
// tripped ttl in ms, state ttl in ms, channel, the opened event up to its counts.
// Returns {opened, requests, failures, consecutive failures}.
var reportScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then
  return {0, 0, 0, 0}
end
local add_s, add_f, trailing = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local width, buckets = tonumber(ARGV[8]), tonumber(ARGV[9])
local bucket = 0
if width > 0 then
  local t = redis.call('TIME')
  bucket = math.floor((tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) / width)
end
local oldest = bucket - buckets + 1

local fields = redis.call('HGETALL', KEYS[3])
local stored_width, consecutive = nil, 0
for i = 1, #fields, 2 do
  if fields[i] == 'w' then stored_width = tonumber(fields[i + 1]) end
  if fields[i] == 'c' then consecutive = tonumber(fields[i + 1]) end
end
local successes, failures, stale = 0, 0, {}
for i = 1, #fields, 2 do
  local kind, id = string.sub(fields[i], 1, 2), tonumber(string.sub(fields[i], 3))
  if (kind == 's:' or kind == 'f:') and id then
    -- Buckets of another width (the rules changed) cannot be told apart by age: drop them.
    if stored_width ~= width or id < oldest then
      stale[#stale + 1] = fields[i]
    elseif kind == 's:' then
      successes = successes + tonumber(fields[i + 1])
    else
      failures = failures + tonumber(fields[i + 1])
    end
  end
end
if #stale > 0 then
  redis.call('HDEL', KEYS[3], unpack(stale))
end
-- Failures in a row leave the window too, as in gobreaker's rolling counts: the run is the
-- latest calls, so the part of it still in the window is at most the window's failures.
if width > 0 and consecutive > failures then
  consecutive = failures
end
if add_s == 0 and add_f == 0 then
  return {0, successes + failures, failures, consecutive}
end

local id = string.format('%d', bucket)
if add_s > 0 then
  redis.call('HINCRBY', KEYS[3], 's:' .. id, add_s)
  successes = successes + add_s
  consecutive = trailing
else
  consecutive = consecutive + add_f
end
if add_f > 0 then
  redis.call('HINCRBY', KEYS[3], 'f:' .. id, add_f)
  failures = failures + add_f
end
redis.call('HSET', KEYS[3], 'c', consecutive, 'w', width, 'n', buckets)
redis.call('PEXPIRE', KEYS[3], ARGV[12])

local answered = successes + failures
local rule_c, rule_w = tonumber(ARGV[4]), tonumber(ARGV[5])
local rate, min_requests = tonumber(ARGV[6]), tonumber(ARGV[7])
-- Like gobreaker, only a failure can trip: successes never make any rule truer.
local trip = add_f > 0 and (
  (rule_c > 0 and consecutive >= rule_c) or
  (rule_w > 0 and failures >= rule_w) or
  (rate > 0 and answered > 0 and answered >= min_requests and failures / answered >= rate))
if not trip then
  return {0, answered, failures, consecutive}
end
local gen = redis.call('INCR', KEYS[6])
redis.call('PEXPIRE', KEYS[6], ARGV[11])
redis.call('SET', KEYS[1], gen, 'PX', ARGV[11])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[10])
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])
redis.call('PUBLISH', ARGV[13], ARGV[14] .. string.format(
  '"counts":{"requests":%d,"failures":%d,"consecutive_failures":%d}}', answered, failures, consecutive))
return {1, answered, failures, consecutive}
`)

// openScript opens a breaker that is not open: closed, or (a failed trial of generation ARGV[5],
// not 0) half-open in that generation.
//
// KEYS: tripped, open, window, trials, trialok, gen.
// ARGV: cooldown in ms, tripped ttl in ms, channel, the opened event, the trial's generation.
var openScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
if ARGV[5] ~= '0' and redis.call('GET', KEYS[1]) ~= ARGV[5] then
  return 0
end
local gen = redis.call('INCR', KEYS[6])
redis.call('PEXPIRE', KEYS[6], ARGV[2])
redis.call('SET', KEYS[1], gen, 'PX', ARGV[2])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
`)

// takeTrialScript counts slots taken instead of holding one key per slot: ReturnTrial and the
// ttl then need no slot identity, at the price of every slot expiring ttl after the last take.
// It returns the generation the slot belongs to, 0 for none.
//
// KEYS: tripped, open, trials. ARGV: max, ttl in ms.
var takeTrialScript = redis.NewScript(`
local gen = redis.call('GET', KEYS[1])
if not gen or redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
if tonumber(redis.call('GET', KEYS[3]) or '0') >= tonumber(ARGV[1]) then
  return 0
end
redis.call('INCR', KEYS[3])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return tonumber(gen)
`)

// returnTrialScript never lets the count go below zero: a slot returned after its ttl freed it,
// or after the breaker closed, must not hand out an extra slot later; and a slot of another
// generation than the breaker's is not its to free.
//
// KEYS: tripped, trials. ARGV: the slot's generation.
var returnTrialScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local taken = tonumber(redis.call('GET', KEYS[2]) or '0')
if taken > 0 then
  redis.call('DECR', KEYS[2])
end
return 0
`)

// trialSucceededScript counts successes only while half-open in the trial's generation, so a
// late report from a trial of an earlier half-open period cannot close a breaker that has since
// reopened, nor count in its next half-open period.
//
// KEYS: tripped, open, window, trials, trialok, gen. ARGV: max, state ttl in ms, channel, the
// closed event, the trial's generation.
var trialSucceededScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[5] or redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
local ok = redis.call('INCR', KEYS[5])
redis.call('PEXPIRE', KEYS[5], ARGV[2])
if ok < tonumber(ARGV[1]) then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
`)

// closeScript closes a half-open breaker only: the prober's verdict must not close a breaker
// that another instance has just reopened.
//
// KEYS: tripped, open, window, trials, trialok, gen. ARGV: channel, the closed event.
var closeScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
redis.call('PUBLISH', ARGV[1], ARGV[2])
return 1
`)

// forceScript changes a forced state and tells the fleet in one step, so that no instance can
// read the new state without the event being on its way.
//
// KEYS: the forced hash. ARGV: breaker, forced state ("": none), channel, the event.
var forceScript = redis.NewScript(`
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('PUBLISH', ARGV[3], ARGV[4])
return 1
`)

// ReportOutcomes adds one instance's report to the fleet's window and trips the breaker when the
// rules say so, in one script run: the window, the rules and the transition are one atomic
// step, so two instances reporting at once cannot both open the breaker, nor both miss the
// threshold. The counts are zero when the report was dropped because the breaker is open or
// half-open.
//
// With a rules.Window, failures in a row leave the window with the others, as in the local
// gobreaker's rolling counts. With Window 0 the counts are kept until the breaker opens or is
// reset, or until a day passes with no report, the safety net every key of a breaker has.
func (s *Store) ReportOutcomes(ctx context.Context, breaker string, rules payrouter.BreakerRules, r payrouter.BreakerReport, origin string) (bool, payrouter.BreakerCounts, error) {
	const op = "report outcomes"
	if err := checkBreakerName(op, breaker); err != nil {
		return false, payrouter.BreakerCounts{}, err
	}
	if err := checkRules(op, rules); err != nil {
		return false, payrouter.BreakerCounts{}, err
	}
	if r.Successes < 0 || r.Failures < 0 || r.TrailingFailures < 0 || r.TrailingFailures > r.Failures {
		return false, payrouter.BreakerCounts{}, fmt.Errorf("redisstore: %s %s: report %+v: counts must be >= 0 and trailing failures <= failures", op, breaker, r)
	}
	width, buckets := int64(0), int64(1)
	if rules.Window > 0 {
		windowMs := positiveMillis(rules.Window)
		width = max(windowMs/windowBuckets, 1)
		buckets = (windowMs + width - 1) / width
	}
	head, err := json.Marshal(struct {
		Breaker string                     `json:"breaker"`
		Kind    payrouter.BreakerEventKind `json:"kind"`
		OpenFor time.Duration              `json:"open_for"`
		Origin  string                     `json:"origin,omitempty"`
	}{breaker, payrouter.BreakerOpened, rules.Cooldown, origin})
	if err != nil {
		return false, payrouter.BreakerCounts{}, fmt.Errorf("redisstore: %s %s: %w", op, breaker, err)
	}
	head = append(head[:len(head)-1], ',') // the script appends the counts and the closing brace

	ctx, cancel := s.bound(ctx)
	defer cancel()
	res, err := reportScript.Run(ctx, s.rdb, s.breakerKeys(breaker),
		r.Successes, r.Failures, r.TrailingFailures,
		rules.ConsecutiveFailures, rules.FailuresInWindow,
		strconv.FormatFloat(rules.FailureRate, 'g', -1, 64), rules.MinRequests,
		width, buckets, positiveMillis(rules.Cooldown), positiveMillis(rules.Cooldown+stateTTL), positiveMillis(stateTTL),
		s.breakerChannel(), head).Int64Slice()
	if err != nil {
		return false, payrouter.BreakerCounts{}, fmt.Errorf("redisstore: %s %s: %w", op, breaker, err)
	}
	if len(res) != 4 {
		return false, payrouter.BreakerCounts{}, fmt.Errorf("redisstore: %s %s: script answered %v", op, breaker, res)
	}
	return res[0] == 1, payrouter.BreakerCounts{Requests: res[1], Failures: res[2], ConsecutiveFailures: res[3]}, nil
}

// OpenBreaker opens the breaker unless it is open already; a half-open breaker counts as not
// open, which is how a failed trial (trial, its generation) reopens it, once.
func (s *Store) OpenBreaker(ctx context.Context, breaker string, cooldown time.Duration, counts payrouter.BreakerCounts, trial payrouter.TrialGen, origin string) (bool, error) {
	const op = "open breaker"
	if err := checkBreakerName(op, breaker); err != nil {
		return false, err
	}
	if cooldown <= 0 {
		return false, fmt.Errorf("redisstore: %s %s: cooldown %v must be positive", op, breaker, cooldown)
	}
	event, err := json.Marshal(payrouter.BreakerEvent{
		Breaker: breaker, Kind: payrouter.BreakerOpened, OpenFor: cooldown, Counts: counts, Origin: origin,
	})
	if err != nil {
		return false, fmt.Errorf("redisstore: %s %s: %w", op, breaker, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	n, err := openScript.Run(ctx, s.rdb, s.breakerKeys(breaker),
		positiveMillis(cooldown), positiveMillis(cooldown+stateTTL), s.breakerChannel(), event, genArg(trial)).Int64()
	if err != nil {
		return false, fmt.Errorf("redisstore: %s %s: %w", op, breaker, err)
	}
	return n == 1, nil
}

// TakeTrial takes a trial slot of a half-open breaker and returns its generation (0: none
// taken). A max below 1 is 1, as gobreaker's MaxRequests 0 is. The slots taken expire together,
// ttl after the last take: a crashed holder delays the next trials by at most ttl.
func (s *Store) TakeTrial(ctx context.Context, breaker string, max int, ttl time.Duration) (payrouter.TrialGen, error) {
	const op = "take trial"
	if err := checkBreakerName(op, breaker); err != nil {
		return 0, err
	}
	if ttl <= 0 {
		return 0, fmt.Errorf("redisstore: %s %s: ttl %v must be positive", op, breaker, ttl)
	}
	keys := s.breakerKeys(breaker)
	ctx, cancel := s.bound(ctx)
	defer cancel()
	n, err := takeTrialScript.Run(ctx, s.rdb, []string{keys[keyTripped], keys[keyOpen], keys[keyTrials]},
		atLeastOne(max), positiveMillis(ttl)).Int64()
	if err != nil {
		return 0, fmt.Errorf("redisstore: %s %s: %w", op, breaker, err)
	}
	if n < 0 {
		return 0, fmt.Errorf("redisstore: %s %s: script answered %d", op, breaker, n)
	}
	return payrouter.TrialGen(n), nil
}

// ReturnTrial gives a slot of generation gen back so that another instance can run the trial;
// returning a slot that is no longer counted (expired, or the breaker moved on) changes nothing.
func (s *Store) ReturnTrial(ctx context.Context, breaker string, gen payrouter.TrialGen) error {
	const op = "return trial"
	if err := checkBreakerName(op, breaker); err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	keys := s.breakerKeys(breaker)
	if err := returnTrialScript.Run(ctx, s.rdb, []string{keys[keyTripped], keys[keyTrials]}, genArg(gen)).Err(); err != nil {
		return fmt.Errorf("redisstore: %s %s: %w", op, breaker, err)
	}
	return nil
}

// TrialSucceeded counts a successful trial of a half-open breaker and closes it at the max-th
// (a max below 1 is 1). A success reported while the breaker is not half-open in generation
// gen is dropped.
func (s *Store) TrialSucceeded(ctx context.Context, breaker string, gen payrouter.TrialGen, max int, origin string) (bool, error) {
	const op = "trial succeeded"
	if err := checkBreakerName(op, breaker); err != nil {
		return false, err
	}
	event, err := json.Marshal(payrouter.BreakerEvent{Breaker: breaker, Kind: payrouter.BreakerClosed, Origin: origin})
	if err != nil {
		return false, fmt.Errorf("redisstore: %s %s: %w", op, breaker, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	n, err := trialSucceededScript.Run(ctx, s.rdb, s.breakerKeys(breaker),
		atLeastOne(max), positiveMillis(stateTTL), s.breakerChannel(), event, genArg(gen)).Int64()
	if err != nil {
		return false, fmt.Errorf("redisstore: %s %s: %w", op, breaker, err)
	}
	return n == 1, nil
}

// CloseBreaker closes a half-open breaker at once.
func (s *Store) CloseBreaker(ctx context.Context, breaker, origin string) (bool, error) {
	const op = "close breaker"
	if err := checkBreakerName(op, breaker); err != nil {
		return false, err
	}
	event, err := json.Marshal(payrouter.BreakerEvent{Breaker: breaker, Kind: payrouter.BreakerClosed, Origin: origin})
	if err != nil {
		return false, fmt.Errorf("redisstore: %s %s: %w", op, breaker, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	n, err := closeScript.Run(ctx, s.rdb, s.breakerKeys(breaker), s.breakerChannel(), event).Int64()
	if err != nil {
		return false, fmt.Errorf("redisstore: %s %s: %w", op, breaker, err)
	}
	return n == 1, nil
}

// ForceBreaker sets or clears a forced state. A forced state has no expiry: ops imposed it, and
// only ops (ForcedNone, or ResetBreaker) lift it.
func (s *Store) ForceBreaker(ctx context.Context, breaker string, f payrouter.Forced, origin string) error {
	const op = "force breaker"
	if err := checkBreakerName(op, breaker); err != nil {
		return err
	}
	switch f {
	case payrouter.ForcedNone, payrouter.ForcedOpen, payrouter.ForcedClosed:
	default:
		return fmt.Errorf("redisstore: %s %s: unknown forced state %q", op, breaker, f)
	}
	return s.force(ctx, op, breaker, f, payrouter.BreakerEvent{
		Breaker: breaker, Kind: payrouter.BreakerForced, Forced: f, Origin: origin,
	})
}

// ResetBreaker closes the breaker and lifts its forcing. It costs two round trips because the
// forced hash and the breaker's keys may live on different Cluster slots; the breaker is
// cleared first, so that an instance re-reading state on the BreakerReset event finds it reset.
// The generation stays, so that a trial of the generation reset never counts in a later one.
func (s *Store) ResetBreaker(ctx context.Context, breaker, origin string) error {
	const op = "reset breaker"
	if err := checkBreakerName(op, breaker); err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.rdb.Del(ctx, s.breakerKeys(breaker)[:keyGen]...).Err(); err != nil {
		return fmt.Errorf("redisstore: %s %s: %w", op, breaker, err)
	}
	return s.force(ctx, op, breaker, payrouter.ForcedNone, payrouter.BreakerEvent{
		Breaker: breaker, Kind: payrouter.BreakerReset, Origin: origin,
	})
}

// force writes f and publishes event in one script run.
func (s *Store) force(ctx context.Context, op, breaker string, f payrouter.Forced, event payrouter.BreakerEvent) error {
	payload, err := json.Marshal(event)
	if err != nil {
		return fmt.Errorf("redisstore: %s %s: %w", op, breaker, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err = forceScript.Run(ctx, s.rdb, []string{s.forcedKey()}, breaker, string(f), s.breakerChannel(), payload).Err()
	if err != nil {
		return fmt.Errorf("redisstore: %s %s: %w", op, breaker, err)
	}
	return nil
}

// BreakerStates reads every named breaker in one pipelined round trip, with Redis's clock to
// drop what has left the window, as ReportOutcomes does. It runs no script, so it needs no
// breaker's rules: the window's bucket width and count are stored with its counts.
func (s *Store) BreakerStates(ctx context.Context, breakers []string) (map[string]payrouter.SharedBreaker, error) {
	const op = "breaker states"
	states := make(map[string]payrouter.SharedBreaker, len(breakers))
	if len(breakers) == 0 {
		return states, nil
	}
	for _, b := range breakers {
		if err := checkBreakerName(op, b); err != nil {
			return nil, err
		}
	}
	type reads struct {
		tripped *redis.StringCmd
		open    *redis.DurationCmd
		window  *redis.MapStringStringCmd
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	pipe := s.rdb.Pipeline()
	now := pipe.Time(ctx)
	forced := pipe.HGetAll(ctx, s.forcedKey())
	perBreaker := make([]reads, len(breakers))
	for i, b := range breakers {
		keys := s.breakerKeys(b)
		perBreaker[i] = reads{
			tripped: pipe.Get(ctx, keys[keyTripped]),
			open:    pipe.PTTL(ctx, keys[keyOpen]),
			window:  pipe.HGetAll(ctx, keys[keyWindow]),
		}
	}
	// A closed breaker has no tripped key: its GET answers redis.Nil, which is no failure.
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisstore: %s: %w", op, err)
	}
	for _, err := range []error{now.Err(), forced.Err()} {
		if err != nil {
			return nil, fmt.Errorf("redisstore: %s: %w", op, err)
		}
	}
	nowMs := now.Val().UnixMilli()
	for i, b := range breakers {
		r := perBreaker[i]
		var sb payrouter.SharedBreaker
		if ttl := r.open.Val(); ttl != -2 { // -2: no such key; -1 (no expiry) never happens
			sb.Open = true
			sb.OpenFor = max(ttl, 0)
		}
		if err := errors.Join(r.open.Err(), r.window.Err()); err != nil {
			return nil, fmt.Errorf("redisstore: %s %s: %w", op, b, err)
		}
		gen, err := r.tripped.Uint64()
		switch {
		case errors.Is(err, redis.Nil): // closed
		case err != nil:
			return nil, fmt.Errorf("redisstore: %s %s: generation: %w", op, b, err)
		default:
			sb.Gen = payrouter.TrialGen(gen)
			sb.HalfOpen = !sb.Open
		}
		sb.Forced = payrouter.Forced(forced.Val()[b])
		sb.Counts = windowCounts(r.window.Val(), nowMs)
		states[b] = sb
	}
	return states, nil
}

// windowCounts is what reportScript counts from a window hash at Redis time nowMs: the two must
// agree, or BreakerStates would show counts the rules never saw.
func windowCounts(fields map[string]string, nowMs int64) payrouter.BreakerCounts {
	var c payrouter.BreakerCounts
	width, _ := strconv.ParseInt(fields["w"], 10, 64)
	buckets, _ := strconv.ParseInt(fields["n"], 10, 64)
	c.ConsecutiveFailures, _ = strconv.ParseInt(fields["c"], 10, 64)
	var bucket int64
	if width > 0 {
		bucket = nowMs / width
	}
	oldest := bucket - max(buckets, 1) + 1
	for f, v := range fields {
		kind, idText, ok := strings.Cut(f, ":")
		if !ok {
			continue
		}
		id, err := strconv.ParseInt(idText, 10, 64)
		if err != nil || id < oldest {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		switch kind {
		case "s":
			c.Requests += n
		case "f":
			c.Requests += n
			c.Failures += n
		}
	}
	if width > 0 {
		c.ConsecutiveFailures = min(c.ConsecutiveFailures, c.Failures)
	}
	return c
}

// WatchBreakers subscribes to the fleet's breaker events and calls fn with each, in the order
// Redis delivers them, from the goroutine that called WatchBreakers. Events published while no
// subscription is up (before it starts, between a failure and the caller's next watch) are lost
// for good: Redis pub/sub keeps nothing, which is why callers re-read BreakerStates when
// subscribed is called (once Redis confirmed the subscription, before any event), and on a tick. It returns ctx.Err() when ctx ends, and an error when the subscription fails, including a
// connection that stays silent: after a quiet spell of 10 timeouts it pings, and a ping not
// answered within the timeout ends the watch. A message that is not a BreakerEvent is skipped.
func (s *Store) WatchBreakers(ctx context.Context, subscribed func(), fn func(payrouter.BreakerEvent)) error {
	const op = "watch breakers"
	// Only setting up the subscription is bounded: the subscription itself lasts.
	sctx, cancel := s.bound(ctx)
	ps := s.rdb.Subscribe(sctx, s.breakerChannel())
	defer ps.Close()
	msg, err := ps.ReceiveTimeout(sctx, s.opts.Timeout)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("redisstore: %s: subscribing: %w", op, err)
	}
	if sub, ok := msg.(*redis.Subscription); !ok || sub.Kind != "subscribe" {
		return fmt.Errorf("redisstore: %s: subscribing: Redis answered %v", op, msg)
	}
	if subscribed != nil {
		subscribed()
	}

	// Receive does not watch ctx: closing the PubSub is what ends a blocked Receive.
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer stop()
	quiet := 10 * s.opts.Timeout
	wait, pinged := quiet, false
	for {
		msg, err := ps.ReceiveTimeout(ctx, wait)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			var netErr net.Error
			if !errors.As(err, &netErr) || !netErr.Timeout() {
				return fmt.Errorf("redisstore: %s: %w", op, err)
			}
			if pinged {
				return fmt.Errorf("redisstore: %s: no answer to a ping within %v: %w", op, s.opts.Timeout, err)
			}
			pctx, cancel := s.bound(ctx)
			err = ps.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("redisstore: %s: ping: %w", op, err)
			}
			wait, pinged = s.opts.Timeout, true
			continue
		}
		wait, pinged = quiet, false
		switch m := msg.(type) {
		case *redis.Message:
			if ev, ok := decodeBreakerEvent(m.Payload); ok {
				fn(ev)
			}
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				return fmt.Errorf("redisstore: %s: subscription ended (%s)", op, m.Kind)
			}
		case *redis.Pong:
		}
	}
}

// decodeBreakerEvent reads one message of the channel; ok is false for anything that is not a
// BreakerEvent a watcher can act on, which is skipped rather than ending the watch: one bad
// publisher must not cut every instance off the fleet's news.
func decodeBreakerEvent(payload string) (ev payrouter.BreakerEvent, ok bool) {
	if err := json.Unmarshal([]byte(payload), &ev); err != nil || ev.Breaker == "" {
		return ev, false
	}
	switch ev.Kind {
	case payrouter.BreakerOpened, payrouter.BreakerClosed, payrouter.BreakerForced, payrouter.BreakerReset:
		return ev, true
	}
	return ev, false
}

func checkBreakerName(op, breaker string) error {
	if breaker == "" {
		return fmt.Errorf("redisstore: %s: empty breaker name", op)
	}
	return nil
}

func checkRules(op string, r payrouter.BreakerRules) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("redisstore: %s: %w", op, err)
	}
	return nil
}

// positiveMillis is d in whole milliseconds, rounded up, so that a positive duration never becomes a PX
// of 0, which Redis refuses.
func positiveMillis(d time.Duration) int64 {
	return max(int64((d+time.Millisecond-1)/time.Millisecond), 1)
}

func atLeastOne(n int) int { return max(n, 1) }

// genArg is a generation as the scripts compare it with tripped's value.
func genArg(g payrouter.TrialGen) string { return strconv.FormatUint(uint64(g), 10) }
