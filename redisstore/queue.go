package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payrouter/payrouter"
)

// The queue is one Redis Stream, <prefix>{tasks}, read through one consumer group, taskGroup
// (DESIGN.md, State stores). The whole key is a hash tag, so every command and script of the
// queue touches one Cluster slot. Each entry holds a task's JSON in its one field, taskField;
// the entry's id is the task's id.
//
// An entry lives in the stream until it is acknowledged, and Ack deletes it as it acknowledges
// it, so the stream holds exactly the tasks not done yet: its length is the queue's depth, and
// it never grows with work already done. That is also why the group is created at id 0: a group
// made after entries were added (by an Enqueue before the first Take, or after Redis lost the
// group with its data) must still hand out every entry the stream holds.
//
// The group is created lazily, by Take, when Redis answers NOGROUP: the first Take ever, or the
// first after Redis restarted empty or was flushed. Enqueue and Ack need no group (XADD makes
// the stream; XACK of a group that does not exist acknowledges nothing, which is right, since
// nothing was handed out from it).
//
// Consumers are named by the caller (one name per payrouter instance) and stay in the group's
// list after the instance is gone; they hold no entries once theirs were claimed back.
// Requires Redis 6.2 or later (XAUTOCLAIM).

const (
	// taskGroup is the consumer group every instance reads the queue through, so that each task
	// is handed to one consumer at a time across the fleet.
	taskGroup = "workers"
	// taskField is the one field of a stream entry: the task's JSON.
	taskField = "task"
)

func (s *Store) taskStream() string { return s.opts.Prefix + "{tasks}" }

// takeScript hands consumer up to max tasks in one atomic step and one round trip: first entries
// pending (handed out to anyone, this consumer included) for at least idle ms, claimed with
// XAUTOCLAIM, then entries never handed out, read with XREADGROUP ">" (non-blocking: a script
// never blocks). It creates the group when Redis answers NOGROUP.
//
// Deliveries: for a claimed entry, it is XPENDING's delivery counter read right after
// XAUTOCLAIM incremented it; Redis counts every delivery of an entry, to any consumer, so there
// is nothing to count ourselves. A new entry's is 1.
//
// An entry with no task field (one deleted while pending: Redis 6.2 still hands it out, with no
// fields; Redis 7 drops it from the pending list itself) is acknowledged and deleted, never
// handed out: it can never be worked, and left pending it would come back after every idle.
//
// XAUTOCLAIM scans at most 10 x COUNT pending entries per call, so the script follows its cursor
// until max tasks are claimed or the pending list is scanned; the pending list holds only the
// tasks in the hands of workers, a short list.
//
// KEYS: the stream. ARGV: group, consumer, max, idle in ms.
// Returns id, deliveries, task JSON for each task handed out, one after another.
var takeScript = redis.NewScript(`
local stream, group, consumer = KEYS[1], ARGV[1], ARGV[2]
local max, idle = tonumber(ARGV[3]), ARGV[4]
local out, n = {}, 0

local function task(fields)
  if type(fields) ~= 'table' then return nil end
  for i = 1, #fields - 1, 2 do
    if fields[i] == 'task' then return fields[i + 1] end
  end
  return nil
end

local function hand(entry, deliveries)
  local t = task(entry[2])
  if not t then
    redis.call('XACK', stream, group, entry[1])
    redis.call('XDEL', stream, entry[1])
    return
  end
  if not deliveries then
    deliveries = redis.call('XPENDING', stream, group, entry[1], entry[1], 1)[1][4]
  end
  n = n + 1
  out[#out + 1] = entry[1]
  out[#out + 1] = deliveries
  out[#out + 1] = t
end

local claimed = redis.pcall('XAUTOCLAIM', stream, group, consumer, idle, '0-0', 'COUNT', max)
if claimed.err then
  if string.sub(claimed.err, 1, 8) ~= 'NOGROUP ' then return claimed end
  redis.call('XGROUP', 'CREATE', stream, group, '0', 'MKSTREAM')
  claimed = {'0-0', {}}
end
while true do
  for _, entry in ipairs(claimed[2]) do hand(entry) end
  if n >= max or claimed[1] == '0-0' then break end
  claimed = redis.call('XAUTOCLAIM', stream, group, consumer, idle, claimed[1], 'COUNT', max - n)
end

if n < max then
  local read = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', max - n, 'STREAMS', stream, '>')
  if read then
    for _, entry in ipairs(read[1][2]) do hand(entry, 1) end
  end
end
return out
`)

// Enqueue adds t to the stream and returns its stream id. The id and delivery count t carries
// are not stored: the stream gives them. One round trip.
func (s *Store) Enqueue(ctx context.Context, t payrouter.Task) (string, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("redisstore: enqueue %s task: encoding: %w", t.Kind, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	id, err := s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: s.taskStream(), Values: []any{taskField, b}}).Result()
	if err != nil {
		return "", fmt.Errorf("redisstore: enqueue %s task: %w", t.Kind, err)
	}
	return id, nil
}

// Take hands consumer up to max tasks: those pending for at least idle (handed out before, to
// any consumer, and not acknowledged), then new ones, each with ID set to its stream id and
// Deliveries to the number of times it was handed out (see takeScript). It never waits for
// tasks to arrive: a queue with nothing to hand out answers at once with none. idle is kept in
// whole milliseconds, rounded up, so a task is never handed out again early. One round trip.
//
// An entry whose JSON cannot be read is left out of the answer and left pending: it is never
// dropped (QueueDepth counts it, and an operator finds it with XPENDING), and never stops the
// other tasks from being worked. Only Enqueue writes the stream, so this is a stream someone
// else wrote into.
func (s *Store) Take(ctx context.Context, consumer string, max int, idle time.Duration) ([]payrouter.Task, error) {
	if consumer == "" {
		return nil, errors.New("redisstore: take: empty consumer")
	}
	if max <= 0 {
		return nil, nil
	}
	if idle < 0 {
		idle = 0
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	reply, err := takeScript.Run(ctx, s.rdb, []string{s.taskStream()}, taskGroup, consumer, max, pxMillis(idle)).Slice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisstore: take: %w", err)
	}
	tasks := make([]payrouter.Task, 0, len(reply)/3)
	for i := 0; i+2 < len(reply); i += 3 {
		id, _ := reply[i].(string)
		deliveries, _ := reply[i+1].(int64)
		body, _ := reply[i+2].(string)
		var t payrouter.Task
		if err := json.Unmarshal([]byte(body), &t); err != nil || id == "" {
			continue
		}
		t.ID, t.Deliveries = id, int(deliveries)
		tasks = append(tasks, t)
	}
	return tasks, nil
}

// Ack acknowledges the task and deletes its entry, in one MULTI/EXEC transaction (one slot, so
// on Cluster too): acknowledged without being deleted, it would stay in the stream for ever and
// be counted by QueueDepth; deleted without being acknowledged, it would stay in the pending
// list. An id that is not in the stream (acknowledged already) is no error; one that is not a
// stream id at all is Redis's error. One round trip.
func (s *Store) Ack(ctx context.Context, id string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	stream := s.taskStream()
	p := s.rdb.TxPipeline()
	p.XAck(ctx, stream, taskGroup, id)
	p.XDel(ctx, stream, id)
	if _, err := p.Exec(ctx); err != nil {
		return fmt.Errorf("redisstore: ack task %s: %w", id, err)
	}
	return nil
}

// QueueDepth counts the tasks not acknowledged yet: the stream's length, since Ack deletes what
// it acknowledges. One round trip.
func (s *Store) QueueDepth(ctx context.Context) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	n, err := s.rdb.XLen(ctx, s.taskStream()).Result()
	if err != nil {
		return 0, fmt.Errorf("redisstore: queue depth: %w", err)
	}
	return n, nil
}
