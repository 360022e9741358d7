package jobs

import (
	"context"
	"errors"
	"fmt"
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
