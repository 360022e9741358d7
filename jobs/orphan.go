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

// ErrRetriesSpent: RetryOrphan found a job whose retries are all spent; asynq's recoverer
// archives such a job when its lease has expired.
var ErrRetriesSpent = errors.New("job has no retries left")

// ErrAttemptOrphaned: WriteAttemptEnvelope found the attempt orphaned; the job runs again
// (or has run) in a later attempt.
var ErrAttemptOrphaned = errors.New("this attempt was found orphaned and the job sent to run again")

// statsTTL is how long asynq keeps a queue's daily processed and failed counts (asynq v0.26
// internal/rdb).
const statsTTL = 90 * 24 * time.Hour

// retryOrphanScript does to an active job what asynq does to one whose lease expired (its
// recoverer calls its own Retry): the job leaves the active list and the lease set, enters
// the retry set at ARGV[5] with the message the caller annotated (one more failed attempt,
// the error, the time), and the queue's processed and failed counts grow by one. It acts
// only if the message and the lease are still those the caller read: a worker that extended
// the lease in between (it is alive) or finished the job keeps it, and of two callers only
// the first moves it. Field "orphaned" keeps the failed attempts counted before the orphaned
// one, for WriteAttemptEnvelope's fence.
//
// KEYS: 1 the task hash, 2 the active list, 3 the lease set, 4 the retry set, 5 and 6 the
// processed and failed counts of the day, 7 and 8 the totals.
// ARGV: 1 id, 2 the message as read, 3 the lease as read, 4 the new message, 5 when to run
// again (Unix s), 6 when the counts of the day expire (Unix s), 7 the failed attempts before
// the orphaned one.
var retryOrphanScript = redis.NewScript(`
if redis.call("HGET", KEYS[1], "msg") ~= ARGV[2] then return 0 end
local lease = redis.call("ZSCORE", KEYS[3], ARGV[1])
if not lease or tonumber(lease) ~= tonumber(ARGV[3]) then return 0 end
if redis.call("LREM", KEYS[2], 0, ARGV[1]) == 0 then return 0 end
redis.call("ZREM", KEYS[3], ARGV[1])
redis.call("ZADD", KEYS[4], ARGV[5], ARGV[1])
redis.call("HSET", KEYS[1], "msg", ARGV[4], "state", "retry", "orphaned", ARGV[7])
for i = 5, 6 do
	if redis.call("INCR", KEYS[i]) == 1 then redis.call("EXPIREAT", KEYS[i], ARGV[6]) end
end
redis.call("INCR", KEYS[7])
redis.call("INCR", KEYS[8])
return 1`)

// RetryOrphan sends job id of queue, active under a lease that expires at lease (Unix
// seconds, as read from the queue's lease set) in its attempt after retried failed ones (-1:
// whichever) and whose worker is known dead, to asynq's
// retry set to run again at once, counting the attempt as failed with errMsg, as asynq's
// recoverer would a minute or more later. ErrNotActive: the job is no longer active under
// that lease or in that attempt (finished, cancelled, extended by a live worker, or already
// moved);
// ErrRetriesSpent: it has no retries left and is left as it is.
func (c *Client) RetryOrphan(ctx context.Context, queue, id string, lease float64, attempt int64, errMsg string) error {
	old, err := c.rdb.HGet(ctx, redisx.TaskKey(queue, id), "msg").Bytes()
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("retry job %s: %w", id, ErrNotActive)
	}
	if err != nil {
		return fmt.Errorf("retry job %s: %w", id, redisx.Classify(err))
	}
	retry, retried, err := redisx.TaskRetries(old)
	if err != nil {
		return fmt.Errorf("retry job %s: %w", id, err)
	}
	if attempt >= 0 && retried != attempt {
		return fmt.Errorf("retry job %s: %w: it is in a later attempt", id, ErrNotActive)
	}
	if retried >= retry {
		return fmt.Errorf("retry job %s: %w (%d of %d)", id, ErrRetriesSpent, retried, retry)
	}
	now := time.Now()
	msg, err := redisx.SetTaskRetried(old, retried+1, errMsg, now)
	if err != nil {
		return fmt.Errorf("retry job %s: %w", id, err)
	}
	pfx := redisx.QueuePrefix(queue)
	day := now.UTC().Format("2006-01-02")
	keys := []string{redisx.TaskKey(queue, id), pfx + "active", pfx + "lease", pfx + "retry",
		pfx + "processed:" + day, pfx + "failed:" + day, pfx + "processed", pfx + "failed"}
	n, err := retryOrphanScript.Run(ctx, c.rdb, keys, id, old, strconv.FormatFloat(lease, 'f', -1, 64), msg,
		now.Unix(), now.Add(statsTTL).Unix(), retried).Int()
	if err != nil {
		return fmt.Errorf("retry job %s: %w", id, redisx.Classify(err))
	}
	if n == 0 {
		return fmt.Errorf("retry job %s: %w", id, ErrNotActive)
	}
	return nil
}
