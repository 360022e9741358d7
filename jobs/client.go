package jobs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/redlite/batch/internal/redisx"
)

// DefaultPollInterval is how often Wait and Cancel look at a job. asynq has no completion
// notification (a finished task is only a state change in a Redis hash), so waiting is
// polling; half a second is far below a job's length, and a poll costs Redis two small
// commands per queue searched.
const DefaultPollInterval = 500 * time.Millisecond

// Client enqueues jobs and follows them. It is safe for concurrent use.
type Client struct {
	rdb    redis.UniversalClient
	owned  bool   // Close closes rdb
	target string // the Redis URL without passwords
	client *asynq.Client
	insp   *asynq.Inspector
	cfg    clientConfig
	caps   capabilityCache
}

type clientConfig struct {
	tls       TLSFiles
	poll      time.Duration
	retention time.Duration
	maxRetry  int
	anyway    bool   // EnqueueAnyway
	id        string // JobID
	hookAllow WebhookAllow
	resolver  Resolver
	streamRdb redis.UniversalClient // WithStreamRedis
}

// ClientOption configures NewClient.
type ClientOption func(*clientConfig)

// WithPollInterval sets how often Wait and Cancel poll (default DefaultPollInterval).
func WithPollInterval(d time.Duration) ClientOption {
	return func(c *clientConfig) {
		if d > 0 {
			c.poll = d
		}
	}
}

// WithTLSFiles sets the CA and client certificate files of a rediss:// connection
// (see TLSFiles).
func WithTLSFiles(f TLSFiles) ClientOption { return func(c *clientConfig) { c.tls = f } }

// WithRetention sets how long results are kept for every job this client enqueues
// (default DefaultRetention).
func WithRetention(d time.Duration) ClientOption { return func(c *clientConfig) { c.retention = d } }

// WithMaxRetry sets how often a failed job is retried (default DefaultMaxRetry).
func WithMaxRetry(n int) ClientOption { return func(c *clientConfig) { c.maxRetry = n } }

// WithWebhookAllow sets the internal receivers that a job's webhook_url may name (the
// operator's REDLITE_WEBHOOK_ALLOW, which the workers must allow too); by default, webhooks
// reach public addresses only.
func WithWebhookAllow(a WebhookAllow) ClientOption { return func(c *clientConfig) { c.hookAllow = a } }

// WithResolver sets how Enqueue looks up a webhook_url's host (default: the system's
// resolver).
func WithResolver(r Resolver) ClientOption { return func(c *clientConfig) { c.resolver = r } }

// EnqueueOption overrides a client default for one job.
type EnqueueOption func(*clientConfig)

// Retention overrides the result retention for one job.
func Retention(d time.Duration) EnqueueOption { return func(c *clientConfig) { c.retention = d } }

// MaxRetry overrides the retry count for one job.
func MaxRetry(n int) EnqueueOption { return func(c *clientConfig) { c.maxRetry = n } }

// EnqueueAnyway enqueues a job that no live worker can take (RouteJob) instead of refusing
// it: for workers not started yet.
func EnqueueAnyway() EnqueueOption { return func(c *clientConfig) { c.anyway = true } }

// JobID gives a job without an idempotency key this id instead of a fresh UUID, for a
// caller that records something under the id before the job exists (redlite-api records the
// job's owner first, so that no moment shows the job without one). A payload's idempotency
// key wins over it.
func JobID(id string) EnqueueOption { return func(c *clientConfig) { c.id = id } }

// NewClient connects lazily to the Redis at redisURL (see RedisURL); use Ping to check.
func NewClient(redisURL string, opts ...ClientOption) (*Client, error) {
	u, err := redisx.Parse(redisURL)
	if err != nil {
		return nil, err
	}
	cfg, err := newClientConfig(opts)
	if err != nil {
		return nil, err
	}
	if u, err = u.WithTLSFiles(cfg.tls); err != nil {
		return nil, err
	}
	rdb, err := redisx.NewClient(u)
	if err != nil {
		return nil, err
	}
	return newClient(rdb, u, cfg, true), nil
}

// NewClientFromRedis makes a client over rdb, the connection to u that the caller made
// (redisx.NewClient) and shares with asynq and the rest of its process: Close leaves it
// open. WithTLSFiles does not apply: rdb is configured already.
func NewClientFromRedis(rdb redis.UniversalClient, u RedisURL, opts ...ClientOption) (*Client, error) {
	cfg, err := newClientConfig(opts)
	if err != nil {
		return nil, err
	}
	return newClient(rdb, u, cfg, false), nil
}

func newClientConfig(opts []ClientOption) (clientConfig, error) {
	cfg := clientConfig{poll: DefaultPollInterval, retention: DefaultRetention, maxRetry: DefaultMaxRetry}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg, cfg.check()
}

func newClient(rdb redis.UniversalClient, u RedisURL, cfg clientConfig, owned bool) *Client {
	return &Client{
		target: u.String(),
		rdb:    rdb,
		owned:  owned,
		client: asynq.NewClientFromRedisClient(rdb),
		insp:   asynq.NewInspectorFromRedisClient(rdb),
		cfg:    cfg,
	}
}

func (c clientConfig) check() error {
	// asynq keeps whole seconds; below one second the result would be deleted on completion.
	if c.retention < time.Second {
		return fmt.Errorf("jobs: retention must be at least 1s, got %v", c.retention)
	}
	if c.maxRetry < 0 {
		return fmt.Errorf("jobs: max retry must not be negative, got %d", c.maxRetry)
	}
	return nil
}

// Close closes the Redis connections, unless they were given to NewClientFromRedis.
func (c *Client) Close() error {
	if !c.owned {
		return nil
	}
	return c.rdb.Close()
}

// Redis says which Redis the client talks to: its URL without passwords.
func (c *Client) Redis() string { return c.target }

// Ping checks that Redis answers.
func (c *Client) Ping(ctx context.Context) error {
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis ping: %w", redisx.Classify(err))
	}
	return nil
}

// CheckMemory returns an error matching ErrRedisOOM when Redis is at its maxmemory with the
// noeviction policy, where it refuses every write (enqueue, a worker taking a job, a
// result); PING still answers then. It reads INFO memory.
func (c *Client) CheckMemory(ctx context.Context) error {
	info, err := c.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return fmt.Errorf("redis info memory: %w", redisx.Classify(err))
	}
	var used, limit int64
	var policy string
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_memory":
			used, _ = strconv.ParseInt(v, 10, 64)
		case "maxmemory":
			limit, _ = strconv.ParseInt(v, 10, 64)
		case "maxmemory_policy":
			policy = v
		}
	}
	if limit > 0 && used >= limit && policy == "noeviction" {
		return redisx.OutOfMemory(fmt.Errorf("used_memory %d ≥ maxmemory %d", used, limit))
	}
	return nil
}

// Job identifies an enqueued job.
type Job struct {
	ID    string
	Queue string
	Type  string
}

// Enqueue validates p and puts it on the queue of its priority. A webhook_url whose host
// is, or resolves to, an internal address is refused (CheckWebhookURL). The job id is p's
// idempotency key when set; when a job with that key already exists in any of our queues,
// Enqueue returns that job and an error matching ErrDuplicate.
func (c *Client) Enqueue(ctx context.Context, p Payload, opts ...EnqueueOption) (Job, error) {
	cfg := c.cfg
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.check(); err != nil {
		return Job{}, err
	}
	data, err := EncodePayload(p)
	if err != nil {
		return Job{}, err
	}
	o := p.Options()
	if o.WebhookURL != "" {
		if err := CheckWebhookURL(ctx, o.WebhookURL, cfg.hookAllow, cfg.resolver); err != nil {
			return Job{}, err
		}
	}
	caps, err := c.Capabilities(ctx)
	if err != nil {
		return Job{}, fmt.Errorf("enqueue %s: %w", p.TaskType(), err)
	}
	route, err := RouteJob(caps, p, cfg.anyway)
	if err != nil {
		_ = c.rdb.HIncrBy(ctx, RefusedKey, RefusedReason(err), 1).Err() // best effort: a count for dashboards
		return Job{}, fmt.Errorf("enqueue %s: %w", p.TaskType(), err)
	}
	queue := route.Queue
	if q, err := c.affinityQueue(ctx, route); err != nil {
		return Job{}, fmt.Errorf("enqueue %s: %w", p.TaskType(), err)
	} else if q != "" {
		queue = q
		_ = c.rdb.HIncrBy(ctx, AffinityKey, "routed", 1).Err() // best effort: a count for dashboards
	}
	aopts := []asynq.Option{asynq.Queue(queue), asynq.MaxRetry(cfg.maxRetry), asynq.Retention(cfg.retention)}
	if o.Deadline != nil {
		if !o.Deadline.After(time.Now()) {
			return Job{}, invalid("deadline", "is not in the future: %s", o.Deadline.Format(time.RFC3339))
		}
		aopts = append(aopts, asynq.Deadline(*o.Deadline))
	}
	if o.Timeout > 0 {
		aopts = append(aopts, asynq.Timeout(time.Duration(o.Timeout)*time.Second))
	} else if o.Deadline == nil {
		aopts = append(aopts, asynq.Timeout(DefaultTimeout))
	}
	if o.IdempotencyKey != "" {
		// asynq refuses a duplicate id only within one queue; the same key at another
		// priority must find the first job too. Two clients racing with one key at two
		// priorities can still both succeed: the window is one round trip.
		if info, err := c.find(ctx, o.IdempotencyKey); err == nil {
			return jobOf(info), duplicate(info)
		} else if !errors.Is(err, ErrNotFound) {
			return Job{}, redisx.Classify(err)
		}
		aopts = append(aopts, asynq.TaskID(o.IdempotencyKey))
	} else if cfg.id != "" {
		aopts = append(aopts, asynq.TaskID(cfg.id))
	}
	task := asynq.NewTaskWithHeaders(p.TaskType(), data, map[string]string{
		HeaderEnqueuedAt: strconv.FormatInt(time.Now().UnixNano(), 10),
	})
	info, err := c.client.EnqueueContext(ctx, task, aopts...)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		if info, ferr := c.find(ctx, o.IdempotencyKey); ferr == nil {
			return jobOf(info), duplicate(info)
		}
		return Job{ID: o.IdempotencyKey, Queue: queue, Type: p.TaskType()},
			fmt.Errorf("enqueue %s: %w: job %s", p.TaskType(), ErrDuplicate, o.IdempotencyKey)
	}
	if err != nil {
		return Job{}, fmt.Errorf("enqueue %s: %w", p.TaskType(), redisx.Classify(err))
	}
	return jobOf(info), nil
}

func jobOf(info *asynq.TaskInfo) Job { return Job{ID: info.ID, Queue: info.Queue, Type: info.Type} }

func duplicate(info *asynq.TaskInfo) error {
	return fmt.Errorf("%w: job %s exists (%s, queue %s, state %s)", ErrDuplicate, info.ID, info.Type, info.Queue, info.State)
}

// Status is a job's state as Redis has it now.
type Status struct {
	Job
	State    State
	Progress *Progress // the last progress the worker published, while it runs
	Result   *Result   // once the worker wrote it (completed, or archived after a cancel)
	// LastError is asynq's message for the last failed attempt: a validation error, an
	// engine fault, "context canceled" for a cancel or a timeout.
	LastError     string
	Retried       int
	MaxRetry      int
	NextProcessAt time.Time // pending, scheduled and retry jobs
	CompletedAt   time.Time
	Deadline      time.Time     // zero when none
	Timeout       time.Duration // zero when none
	Retention     time.Duration // how long the result is kept after completion
}

// Status looks the job up in each of our queues.
func (c *Client) Status(ctx context.Context, id string) (Status, error) {
	info, err := c.find(ctx, id)
	if err != nil {
		return Status{}, err
	}
	st := Status{
		Job:           jobOf(info),
		State:         State(info.State.String()),
		LastError:     info.LastErr,
		Retried:       info.Retried,
		MaxRetry:      info.MaxRetry,
		NextProcessAt: info.NextProcessAt,
		CompletedAt:   info.CompletedAt,
		Deadline:      info.Deadline,
		Timeout:       info.Timeout,
		Retention:     info.Retention,
	}
	if len(info.Result) > 0 {
		env, err := DecodeEnvelope(info.Result)
		if err != nil {
			return st, fmt.Errorf("job %s: %w", id, err)
		}
		st.Progress, st.Result = env.Progress, env.Result
	}
	return st, nil
}

// Result returns the result of a completed job; ErrNotDone while it is not finished; a
// *JobError (ErrFailed, ErrCancelled) with whatever result exists for an archived one.
func (c *Client) Result(ctx context.Context, id string) (Result, error) {
	st, err := c.Status(ctx, id)
	if err != nil {
		return Result{}, err
	}
	return finalResult(st)
}

func finalResult(st Status) (Result, error) {
	var r Result
	if st.Result != nil {
		r = *st.Result
	}
	switch st.State {
	case StateCompleted:
		if st.Result == nil {
			return r, fmt.Errorf("job %s completed without a result", st.ID)
		}
		return r, nil
	case StateArchived:
		return r, &JobError{
			ID:        st.ID,
			State:     st.State,
			LastError: st.LastError,
			Cancelled: st.Result != nil && st.Result.FinishReason == FinishCancelled,
		}
	}
	return r, fmt.Errorf("job %s is %s: %w", st.ID, st.State, ErrNotDone)
}

// Wait polls until the job is done and returns its result (see Result for errors). While it
// waits it calls onProgress, if not nil, each time the progress changes: phase "queued"
// while the job waits, then what the worker publishes. FollowText waits the same way and
// hands out the text as it comes.
func (c *Client) Wait(ctx context.Context, id string, onProgress func(Progress)) (Result, error) {
	tick := time.NewTicker(c.cfg.poll)
	defer tick.Stop()
	var last Progress
	first := true
	for {
		st, err := c.Status(ctx, id)
		if err != nil {
			return Result{}, err
		}
		if st.State.Done() {
			return finalResult(st)
		}
		if onProgress != nil {
			p := progressOf(st)
			if first || p != last {
				onProgress(p)
				last, first = p, false
			}
		}
		select {
		case <-ctx.Done():
			return Result{}, fmt.Errorf("wait for job %s: %w", id, ctx.Err())
		case <-tick.C:
		}
	}
}

// progressOf is what a waiting client should show: the worker's progress while the job is
// active, "queued" otherwise (a retrying job's hash still holds the last attempt's progress).
func progressOf(st Status) Progress {
	if p := st.Progress; p != nil && (p.Phase == PhaseMap || p.Phase == PhaseReduce) {
		return *p // a hierarchical summary's parent waits in retry between its checks
	}
	if st.State == StateActive {
		switch {
		case st.Progress != nil:
			return *st.Progress
		case st.Result != nil:
			u := st.Result.Usage
			return Progress{Phase: PhaseDone, PromptTokens: u.PromptTokens, Prefilled: u.PromptTokens, Generated: u.CompletionTokens}
		}
	}
	return Progress{Phase: PhaseQueued}
}

// Cancel stops a job. A job that waits (pending, scheduled, retry) is archived at once. For
// an active job Cancel asks its worker to stop (asynq's CancelProcessing), waits until the
// worker lets go, which for our daemon is within one prefill chunk or one token, and then
// archives it, because asynq treats a cancelled attempt as a failure to retry. Pass a ctx
// with a deadline: a worker that never answers keeps Cancel waiting until ctx ends.
//
// A cancelled job ends archived with a result whose finish_reason is "cancelled" (the
// worker's partial result, or an empty one written here). Cancelling a finished job returns
// an error matching ErrFinished.
func (c *Client) Cancel(ctx context.Context, id string) error {
	tick := time.NewTicker(c.cfg.poll)
	defer tick.Stop()
	asked := false
	for {
		info, err := c.find(ctx, id)
		if err != nil {
			return err
		}
		switch info.State {
		case asynq.TaskStateCompleted:
			return fmt.Errorf("cancel job %s: %w (completed)", id, ErrFinished)
		case asynq.TaskStateArchived:
			if !asked {
				return fmt.Errorf("cancel job %s: %w (archived)", id, ErrFinished)
			}
			return c.cancelled(ctx, info)
		case asynq.TaskStateActive:
			// Asked on every poll: the cancel message is pub/sub, lost if the worker had
			// not yet registered the job when it was sent.
			if err := c.insp.CancelProcessing(id); err != nil {
				return fmt.Errorf("cancel job %s: %w", id, err)
			}
			asked = true
		default:
			err := c.insp.ArchiveTask(info.Queue, id)
			if err == nil {
				return c.cancelled(ctx, info)
			}
			if !errors.Is(err, asynq.ErrTaskNotFound) {
				// It may have become active in between; look again.
				if st, ferr := c.find(ctx, id); ferr == nil && st.State == asynq.TaskStateActive {
					continue
				}
				return fmt.Errorf("cancel job %s: %w", id, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cancel job %s: still %s: %w", id, info.State, ctx.Err())
		case <-tick.C:
		}
	}
}

// markCancelledScript writes a cancelled result unless the task is gone or the worker has
// already written a result (its partial text is worth more than an empty one).
var markCancelledScript = redis.NewScript(`
if redis.call("EXISTS", KEYS[1]) == 0 then return 0 end
local cur = redis.call("HGET", KEYS[1], "result")
if cur then
  local ok, env = pcall(cjson.decode, cur)
  if ok and type(env) == "table" and env["type"] == "result" then return 2 end
end
redis.call("HSET", KEYS[1], "result", ARGV[1])
return 1`)

func (c *Client) markCancelled(ctx context.Context, info *asynq.TaskInfo) error {
	r := Result{FinishReason: FinishCancelled}
	if p, err := Decode(info.Type, info.Payload); err == nil {
		r.Metadata = p.Options().Metadata
	}
	env, err := EncodeResult(r)
	if err != nil {
		return err
	}
	if err := markCancelledScript.Run(ctx, c.rdb, []string{redisx.TaskKey(info.Queue, info.ID)}, env).Err(); err != nil {
		return fmt.Errorf("cancel job %s: record the cancellation: %w", info.ID, err)
	}
	return nil
}

// writeEnvelopeScript writes ARGV[1] as the result of the task KEYS[1] if it exists and,
// for ARGV[2] ≥ 0, unless the attempt after ARGV[2] failed ones was found orphaned
// (retryOrphanScript's field): 1 written, 0 no task, 2 refused.
var writeEnvelopeScript = redis.NewScript(`
if redis.call("EXISTS", KEYS[1]) == 0 then return 0 end
if tonumber(ARGV[2]) >= 0 then
	local o = redis.call("HGET", KEYS[1], "orphaned")
	if o and tonumber(o) >= tonumber(ARGV[2]) then return 2 end
end
redis.call("HSET", KEYS[1], "result", ARGV[1])
return 1`)

// WriteEnvelope stores env (from EncodeProgress or EncodeResult) as the job's result, if the
// job still exists. It is for workers whose task context has ended: asynq's ResultWriter
// refuses to write once a job is cancelled or past its deadline, yet the partial result with
// finish_reason "cancelled" must still be recorded.
func (c *Client) WriteEnvelope(ctx context.Context, queue, id string, env []byte) error {
	return c.WriteAttemptEnvelope(ctx, queue, id, -1, env)
}

// WriteAttemptEnvelope is WriteEnvelope for the attempt after retried failed ones, which it
// refuses (ErrAttemptOrphaned) once a worker has found that attempt orphaned and sent the
// job to run again (RetryOrphan): a worker taken for dead that wakes must not write over
// what the job's next attempt writes.
func (c *Client) WriteAttemptEnvelope(ctx context.Context, queue, id string, retried int, env []byte) error {
	n, err := writeEnvelopeScript.Run(ctx, c.rdb, []string{redisx.TaskKey(queue, id)}, env, retried).Int()
	if err != nil {
		return fmt.Errorf("write result of job %s: %w", id, redisx.Classify(err))
	}
	switch n {
	case 0:
		return fmt.Errorf("write result of job %s in queue %s: %w", id, queue, ErrNotFound)
	case 2:
		return fmt.Errorf("write result of job %s: %w", id, ErrAttemptOrphaned)
	}
	return nil
}

// Finished reads the job's result field and reports whether it holds a finished result
// (not progress, not a cancellation). A worker asks before it runs a job: asynq delivers at
// least once, and a job whose result was written but whose completion asynq never recorded
// (the worker died, or Redis failed over, in between) comes back to be run again.
func (c *Client) Finished(ctx context.Context, queue, id string) (bool, error) {
	raw, err := c.rdb.HGet(ctx, redisx.TaskKey(queue, id), "result").Bytes()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read result of job %s: %w", id, redisx.Classify(err))
	}
	env, err := DecodeEnvelope(raw)
	if err != nil {
		return false, nil // not ours to judge: run the job
	}
	return env.Type == EnvelopeResult && env.Result.FinishReason != FinishCancelled, nil
}

// findScript returns the queue whose task hash holds the id's message (asynq's internal/base
// key layout), searching every queue asynq knows: routing spreads jobs over many queues. A
// hash without a message is what a move leaves behind (MoveActive).
var findScript = redis.NewScript(`
for _, q in ipairs(redis.call("SMEMBERS", KEYS[1])) do
  if redis.call("HEXISTS", ` + redisx.TaskKeyLua("q", "ARGV[1]") + `, "msg") == 1 then return q end
end
return false`)

// find looks for id in every queue.
func (c *Client) find(ctx context.Context, id string) (*asynq.TaskInfo, error) {
	if id == "" {
		return nil, fmt.Errorf("job id is empty: %w", ErrNotFound)
	}
	for attempt := 1; ; attempt++ {
		q, err := findScript.Run(ctx, c.rdb, []string{redisx.AllQueues}, id).Text()
		if errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("look up job %s: %w", id, redisx.Classify(err))
		}
		info, err := c.insp.GetTaskInfo(q, id)
		switch {
		case err == nil:
			return info, nil
		case (errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) || movedMeanwhile(err)) && attempt < 5:
			// Deleted, or moved to another queue between the two reads (a worker's
			// MoveActive leaves a stub without a message, which asynq cannot describe; the
			// stranded-job sweep moves the whole hash): look again. A deleted job is then
			// found nowhere.
			continue
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
			return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
		}
		return nil, fmt.Errorf("look up job %s in queue %s: %w", id, q, redisx.Classify(err))
	}
}

// movedMeanwhile reports asynq's refusal to describe a task hash without a state: the stub
// a move leaves behind (asynq v0.26 has no sentinel for it).
func movedMeanwhile(err error) bool {
	return strings.Contains(err.Error(), "is not supported task state")
}
