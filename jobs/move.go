package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlite/batch/internal/redisx"
)

// ErrNotActive: MoveActive found the job no longer active in its queue (cancelled, timed out,
// or already moved).
var ErrNotActive = errors.New("job is not active in its queue")

// moveScript moves an active task to another queue's pending list in one step, so that it
// is pending in exactly one queue at any time and a worker that dies right after the move
// leaves nothing for asynq's recoverer to run again. The task keeps its id, payload,
// retention, retry count and headers; only the queue in its message changes. In the old
// queue the task's hash becomes a stub without a message (field moved_to), still in the
// active list and lease set, so that asynq's removal of the finished attempt (Done, after
// asynq.RevokeTask) finds what it deletes; should the worker die first, asynq's recoverer
// skips an entry without a message.
//
// KEYS: 1 the task hash in the old queue, 2 its lease set, 3 the task hash in the new queue,
// 4 the new queue's pending list, 5 asynq's set of queues.
// ARGV: 1 id, 2 the message as read (unchanged since), 3 the new message, 4 now in Unix ns,
// 5 the new queue's name.
var moveScript = redis.NewScript(`
if redis.call("HGET", KEYS[1], "msg") ~= ARGV[2] then return redis.error_reply("CHANGED") end
if not redis.call("ZSCORE", KEYS[2], ARGV[1]) then return redis.error_reply("NOT ACTIVE") end
if redis.call("EXISTS", KEYS[3]) == 1 then return redis.error_reply("EXISTS") end
redis.call("DEL", KEYS[1])
redis.call("HSET", KEYS[1], "moved_to", ARGV[5])
redis.call("HSET", KEYS[3], "msg", ARGV[3], "state", "pending", "pending_since", ARGV[4])
redis.call("LPUSH", KEYS[4], ARGV[1])
redis.call("SADD", KEYS[5], ARGV[5])
return 1`)

// MoveActive moves job id, which the calling worker runs from queue from, to the pending list
// of queue to (a worker that cannot fit a job hands it to a class that can). It must be the
// handler's last word on the job, which then returns asynq.RevokeTask: asynq removes the
// attempt from the old queue without retrying or archiving it. Redis Cluster is not
// supported: the two queues' keys are in different slots.
func (c *Client) MoveActive(ctx context.Context, from, id, to string) error {
	if from == to {
		return fmt.Errorf("move job %s: it is already in queue %s", id, to)
	}
	old, err := c.rdb.HGet(ctx, redisx.TaskKey(from, id), "msg").Bytes()
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("move job %s from %s: %w", id, from, ErrNotActive)
	}
	if err != nil {
		return fmt.Errorf("move job %s: %w", id, redisx.Classify(err))
	}
	msg, err := redisx.SetTaskQueue(old, to)
	if err != nil {
		return fmt.Errorf("move job %s: %w", id, err)
	}
	keys := []string{redisx.TaskKey(from, id), redisx.LeaseKey(from), redisx.TaskKey(to, id), redisx.PendingKey(to), redisx.AllQueues}
	err = moveScript.Run(ctx, c.rdb, keys, id, old, msg, strconv.FormatInt(time.Now().UnixNano(), 10), to).Err()
	switch {
	case err == nil:
		return nil
	case err.Error() == "NOT ACTIVE" || err.Error() == "CHANGED":
		return fmt.Errorf("move job %s from %s: %w", id, from, ErrNotActive)
	case err.Error() == "EXISTS":
		return fmt.Errorf("move job %s to %s: %w: a job with this id is there", id, to, ErrDuplicate)
	}
	return fmt.Errorf("move job %s: %w", id, redisx.Classify(err))
}

// ErrNotWaiting: a job is no longer where Waiting found it (taken, moved or cancelled meanwhile).
var ErrNotWaiting = errors.New("job is no longer waiting in its queue")

// WaitingJob is a job that waits in a queue, as Waiting reads it.
type WaitingJob struct {
	ID, Queue, Type string
	State           State // pending, retry or scheduled
	Payload         []byte
	// Since is when it was put in the pending list (enqueued, moved, given back by a worker
	// that stopped), or for retry and scheduled, when it became due.
	Since time.Time
	msg   []byte
}

// waitingBatch bounds the jobs Waiting reads per queue and state.
const waitingBatch = 100

// Waiting lists up to 100 jobs of each waiting state of queue that have waited since before
// before: pending ones (oldest first) and retry and scheduled ones due since then. A job
// whose message cannot be read is left out.
func (c *Client) Waiting(ctx context.Context, queue string, before time.Time) ([]WaitingJob, error) {
	pfx := redisx.QueuePrefix(queue)
	ids, err := c.rdb.LRange(ctx, pfx+"pending", -waitingBatch, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("list pending jobs of queue %s: %w", queue, redisx.Classify(err))
	}
	slices.Reverse(ids) // asynq takes from the right: the oldest first
	states := make([]State, len(ids))
	for i := range ids {
		states[i] = StatePending
	}
	for _, st := range []State{StateRetry, StateScheduled} {
		due, err := c.rdb.ZRangeByScore(ctx, pfx+string(st), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(before.Unix(), 10), Count: waitingBatch}).Result()
		if err != nil {
			return nil, fmt.Errorf("list %s jobs of queue %s: %w", st, queue, redisx.Classify(err))
		}
		for _, id := range due {
			ids, states = append(ids, id), append(states, st)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	cmds, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			p.HMGet(ctx, redisx.TaskKey(queue, id), "msg", "state", "pending_since")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read waiting jobs of queue %s: %w", queue, redisx.Classify(err))
	}
	var out []WaitingJob
	for i, cmd := range cmds {
		v := cmd.(*redis.SliceCmd).Val()
		msg, _ := v[0].(string)
		state, _ := v[1].(string)
		if msg == "" || State(state) != states[i] {
			continue // taken or moved in between
		}
		j := WaitingJob{ID: ids[i], Queue: queue, State: states[i], msg: []byte(msg)}
		if j.Type, j.Payload, err = redisx.TaskTypeAndPayload(j.msg); err != nil {
			continue
		}
		if j.State == StatePending {
			ns, err := strconv.ParseInt(fmt.Sprint(v[2]), 10, 64)
			if err != nil || !time.Unix(0, ns).Before(before) {
				continue // no record of when, or not long enough
			}
			j.Since = time.Unix(0, ns)
		}
		out = append(out, j)
	}
	return out, nil
}

// moveWaitingScript moves a waiting task to the front of another queue's pending list (it
// has waited longest) in one step, keeping its hash's fields (a hierarchical parent's
// progress) and when it started waiting.
//
// KEYS: 1 the task hash, 2 the list or set of its state, 3 the task hash in the new queue,
// 4 the new queue's pending list, 5 asynq's set of queues.
// ARGV: 1 id, 2 the message as read, 3 the new message, 4 the state as read, 5 the new
// queue's name, 6 now in Unix ns.
var moveWaitingScript = redis.NewScript(`
if redis.call("HGET", KEYS[1], "msg") ~= ARGV[2] or redis.call("HGET", KEYS[1], "state") ~= ARGV[4] then
  return redis.error_reply("CHANGED")
end
if redis.call("EXISTS", KEYS[3]) == 1 then return redis.error_reply("EXISTS") end
local removed
if ARGV[4] == "pending" then removed = redis.call("LREM", KEYS[2], 0, ARGV[1]) else removed = redis.call("ZREM", KEYS[2], ARGV[1]) end
if removed == 0 then return redis.error_reply("CHANGED") end
local since = redis.call("HGET", KEYS[1], "pending_since") or ARGV[6]
local fields = redis.call("HGETALL", KEYS[1])
redis.call("DEL", KEYS[1])
redis.call("HSET", KEYS[3], unpack(fields))
redis.call("HSET", KEYS[3], "msg", ARGV[3], "state", "pending", "pending_since", since)
redis.call("RPUSH", KEYS[4], ARGV[1])
redis.call("SADD", KEYS[5], ARGV[5])
return 1`)

// MoveWaiting moves a job Waiting found to queue to, where it is taken next. It keeps its id,
// payload, retention, retry count and headers.
func (c *Client) MoveWaiting(ctx context.Context, j WaitingJob, to string) error {
	if j.Queue == to {
		return fmt.Errorf("move job %s: it is already in queue %s", j.ID, to)
	}
	msg, err := redisx.SetTaskQueue(j.msg, to)
	if err != nil {
		return fmt.Errorf("move job %s: %w", j.ID, err)
	}
	keys := []string{redisx.TaskKey(j.Queue, j.ID), redisx.QueuePrefix(j.Queue) + string(j.State), redisx.TaskKey(to, j.ID), redisx.PendingKey(to), redisx.AllQueues}
	err = moveWaitingScript.Run(ctx, c.rdb, keys, j.ID, j.msg, msg, string(j.State), to, strconv.FormatInt(time.Now().UnixNano(), 10)).Err()
	return waitingScriptError(err, "move job "+j.ID+" from "+j.Queue+" to "+to)
}

// archiveWaitingScript archives a waiting task as asynq's inspector does (archived set by
// time, trimmed to asynq's 90 days and 10,000 jobs), with the message given.
//
// KEYS: 1 the task hash, 2 the list or set of its state, 3 the queue's archived set.
// ARGV: 1 id, 2 the message as read, 3 the new message, 4 the state as read, 5 now in Unix
// seconds, 6 the cutoff of 90 days, 7 the largest archive.
var archiveWaitingScript = redis.NewScript(`
if redis.call("HGET", KEYS[1], "msg") ~= ARGV[2] or redis.call("HGET", KEYS[1], "state") ~= ARGV[4] then
  return redis.error_reply("CHANGED")
end
local removed
if ARGV[4] == "pending" then removed = redis.call("LREM", KEYS[2], 0, ARGV[1]) else removed = redis.call("ZREM", KEYS[2], ARGV[1]) end
if removed == 0 then return redis.error_reply("CHANGED") end
redis.call("ZADD", KEYS[3], ARGV[5], ARGV[1])
redis.call("HSET", KEYS[1], "msg", ARGV[3], "state", "archived")
redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", ARGV[6])
redis.call("ZREMRANGEBYRANK", KEYS[3], 0, -tonumber(ARGV[7]))
return 1`)

// asynq's limits of an archive (internal/rdb: archivedExpirationInDays, maxArchiveSize).
const (
	archiveDays    = 90
	archiveMaxJobs = 10000
)

// ArchiveWaiting archives a job Waiting found, with reason as its last error (Status's
// LastError).
func (c *Client) ArchiveWaiting(ctx context.Context, j WaitingJob, reason string) error {
	now := time.Now()
	msg, err := redisx.SetTaskFailure(j.msg, reason, now)
	if err != nil {
		return fmt.Errorf("archive job %s: %w", j.ID, err)
	}
	pfx := redisx.QueuePrefix(j.Queue)
	keys := []string{redisx.TaskKey(j.Queue, j.ID), pfx + string(j.State), pfx + "archived"}
	err = archiveWaitingScript.Run(ctx, c.rdb, keys, j.ID, j.msg, msg, string(j.State), now.Unix(),
		now.AddDate(0, 0, -archiveDays).Unix(), archiveMaxJobs+1).Err()
	return waitingScriptError(err, "archive job "+j.ID+" in "+j.Queue)
}

func waitingScriptError(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case err.Error() == "CHANGED":
		return fmt.Errorf("%s: %w", what, ErrNotWaiting)
	case err.Error() == "EXISTS":
		return fmt.Errorf("%s: %w: a job with this id is there", what, ErrDuplicate)
	}
	return fmt.Errorf("%s: %w", what, redisx.Classify(err))
}

// restartWaitScript sets when a pending task started waiting to now.
var restartWaitScript = redis.NewScript(`
if redis.call("HGET", KEYS[1], "state") ~= "pending" then return 0 end
redis.call("HSET", KEYS[1], "pending_since", ARGV[1])
return 1`)

// RestartWait records that job id, pending in queue, starts waiting now: a worker that stops
// gives its unfinished jobs back to their queues (asynq keeps when they were first enqueued),
// and a job's wait in a queue no worker serves is counted from then (Waiting).
func (c *Client) RestartWait(ctx context.Context, queue, id string) error {
	if err := restartWaitScript.Run(ctx, c.rdb, []string{redisx.TaskKey(queue, id)}, time.Now().UnixNano()).Err(); err != nil {
		return fmt.Errorf("job %s: record its requeue: %w", id, redisx.Classify(err))
	}
	return nil
}
