package jobs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
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
	old, err := c.rdb.HGet(ctx, taskKey(from, id), "msg").Bytes()
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("move job %s from %s: %w", id, from, ErrNotActive)
	}
	if err != nil {
		return fmt.Errorf("move job %s: %w", id, classifyRedis(err))
	}
	msg, err := SetTaskQueue(old, to)
	if err != nil {
		return fmt.Errorf("move job %s: %w", id, err)
	}
	pfx := "asynq:{" + from + "}:"
	keys := []string{taskKey(from, id), pfx + "lease", taskKey(to, id), "asynq:{" + to + "}:pending", "asynq:queues"}
	err = moveScript.Run(ctx, c.rdb, keys, id, old, msg, strconv.FormatInt(time.Now().UnixNano(), 10), to).Err()
	switch {
	case err == nil:
		return nil
	case err.Error() == "NOT ACTIVE" || err.Error() == "CHANGED":
		return fmt.Errorf("move job %s from %s: %w", id, from, ErrNotActive)
	case err.Error() == "EXISTS":
		return fmt.Errorf("move job %s to %s: %w: a job with this id is there", id, to, ErrDuplicate)
	}
	return fmt.Errorf("move job %s: %w", id, classifyRedis(err))
}

// taskMessageQueue is the field number of the queue name in asynq's TaskMessage (asynq
// v0.26 internal/proto/asynq.proto: string queue = 4).
const taskMessageQueue = 4

// SetTaskQueue returns asynq's protobuf TaskMessage msg with its queue field set to queue and
// every other field as it was. It reads the wire format itself (the message is asynq's
// internal type): a malformed message is an error, never a panic.
func SetTaskQueue(msg []byte, queue string) ([]byte, error) {
	out := make([]byte, 0, len(msg)+len(queue))
	rest := msg
	for len(rest) > 0 {
		tag, n := binary.Uvarint(rest)
		if n <= 0 {
			return nil, fmt.Errorf("task message: bad field tag at byte %d", len(msg)-len(rest))
		}
		field, wire := tag>>3, tag&7
		size := n
		switch wire {
		case 0: // varint
			_, m := binary.Uvarint(rest[n:])
			if m <= 0 {
				return nil, fmt.Errorf("task message: bad varint in field %d", field)
			}
			size += m
		case 1: // 64-bit
			size += 8
		case 2: // length-delimited
			l, m := binary.Uvarint(rest[n:])
			if m <= 0 || l > uint64(len(rest)-n-m) {
				return nil, fmt.Errorf("task message: bad length in field %d", field)
			}
			size += m + int(l)
		case 5: // 32-bit
			size += 4
		default:
			return nil, fmt.Errorf("task message: field %d has wire type %d", field, wire)
		}
		if size > len(rest) || field == 0 {
			return nil, fmt.Errorf("task message: field %d is cut short or invalid", field)
		}
		if field != taskMessageQueue {
			out = append(out, rest[:size]...)
		}
		rest = rest[size:]
	}
	out = binary.AppendUvarint(out, taskMessageQueue<<3|2)
	out = binary.AppendUvarint(out, uint64(len(queue)))
	return append(out, queue...), nil
}
