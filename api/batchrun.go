package api

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlite/batch/jobs"
)

const (
	// minLockTTL is the shortest a batch lock lives: a runner that died (kill -9, a lost
	// network) holds its batch for at most the lock's life, which is this or 20 batch
	// intervals if longer. A live runner renews it a few times per life while it steps.
	minLockTTL = time.Second
	// enqueueChunk is how many lines one step enqueues, so that a 50,000-line batch starts
	// running while the rest is still being enqueued, and each step is short.
	enqueueChunk = 500
	// pollWindow is about how many pending lines one step looks at (SSCAN's COUNT).
	pollWindow = 2000
	// stopCancelTimeout bounds the cancel of one running line when a batch stops.
	stopCancelTimeout = 30 * time.Second
)

// batchRunner drives every unfinished batch, on every instance: each step of a batch runs
// under a Redis lock, so that the instances share the work and any of them can carry on
// when another stops. All a step knows is in Redis; a step cut short is repeated.
type batchRunner struct {
	s       *Server
	token   string // this runner's lock value
	kickc   chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	started bool
	done    chan struct{}
}

func newBatchRunner(s *Server) *batchRunner {
	b := make([]byte, 8)
	rand.Read(b)
	ctx, cancel := context.WithCancel(context.Background())
	return &batchRunner{s: s, token: hex.EncodeToString(b), kickc: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// kick makes the runner look at the batches now rather than at its next tick.
func (br *batchRunner) kick() {
	select {
	case br.kickc <- struct{}{}:
	default:
	}
}

func (br *batchRunner) start() {
	br.started = true
	go func() {
		defer close(br.done)
		tick := time.NewTicker(br.s.cfg.BatchInterval)
		defer tick.Stop()
		for {
			br.stepAll()
			select {
			case <-br.ctx.Done():
				return
			case <-tick.C:
			case <-br.kickc:
			}
		}
	}()
}

// terminate stops the runner between steps, or cuts the step in flight short (it is
// repeated by whichever instance runs next).
func (br *batchRunner) terminate() {
	br.cancel()
	if br.started {
		<-br.done
	}
}

func (br *batchRunner) stepAll() {
	ctx := br.ctx
	ids, err := br.s.rdb.SMembers(ctx, keyBatchesOpen).Result()
	if err != nil {
		if ctx.Err() == nil {
			br.s.log.Warn("list open batches", "err", err)
		}
		return
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		ok, err := br.s.rdb.SetNX(ctx, keyBatchLock(id), br.token, br.lockTTL()).Result()
		if err != nil || !ok {
			continue
		}
		if err := br.locked(ctx, id, br.step); err != nil && ctx.Err() == nil {
			br.s.log.Warn("batch step", "batch", id, "err", err)
		}
		unlockScript.Run(context.WithoutCancel(ctx), br.s.rdb, []string{keyBatchLock(id)}, br.token)
	}
}

func (br *batchRunner) lockTTL() time.Duration { return max(minLockTTL, 20*br.s.cfg.BatchInterval) }

// locked runs f while renewing the batch's lock every third of its life; a renewal that
// fails (another instance has the batch now) cancels f.
func (br *batchRunner) locked(ctx context.Context, id string, f func(context.Context, string) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(br.lockTTL() / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := br.renew(ctx, id); err != nil {
					if ctx.Err() == nil {
						br.s.log.Warn("batch lock", "batch", id, "err", err)
					}
					cancel()
					return
				}
			}
		}
	}()
	err := f(ctx, id)
	cancel()
	<-done
	return err
}

var unlockScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end
return 0`)

var renewScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) end
return 0`)

// renew extends the lock; an error means another instance has taken the batch over.
func (br *batchRunner) renew(ctx context.Context, id string) error {
	n, err := renewScript.Run(ctx, br.s.rdb, []string{keyBatchLock(id)}, br.token, br.lockTTL().Milliseconds()).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("batch %s: lost the lock", id)
	}
	return nil
}

func (br *batchRunner) save(ctx context.Context, b *batchState) error {
	data, _ := json.Marshal(b)
	return br.s.rdb.Set(ctx, keyBatch(b.ID), data, 0).Err()
}

// step moves one batch on as far as it can now.
func (br *batchRunner) step(ctx context.Context, id string) error {
	s := br.s
	b, err := s.loadBatch(ctx, id)
	var ae *apiError
	if errors.As(err, &ae) && ae.status == 404 {
		return s.rdb.SRem(ctx, keyBatchesOpen, id).Err()
	}
	if err != nil {
		return err
	}
	if b.final() {
		return br.cleanup(ctx, b)
	}
	now := time.Now()
	if b.Stop == "" {
		if at, err := s.rdb.Get(ctx, keyBatchCancel(id)).Int64(); err == nil {
			b.Stop, b.Status, b.CancellingAt = statusCancelled, statusCancelling, &at
		} else if now.Unix() >= b.ExpiresAt {
			b.Stop = statusExpired
		}
		if b.Stop != "" {
			if err := br.save(ctx, b); err != nil {
				return err
			}
		}
	}
	if !b.Validated {
		if b.Stop != "" {
			return br.finish(ctx, b)
		}
		if err := br.validate(ctx, b); err != nil || b.final() {
			return err
		}
	}
	if b.Stop == "" {
		if err := br.enqueue(ctx, b); err != nil {
			return err
		}
	}
	done, err := br.poll(ctx, b)
	if err != nil || !done {
		return err
	}
	return br.finish(ctx, b)
}

// validate reads the input file into the per-line hashes and moves the batch to
// in_progress, or fails it with the file's problems by line number. Lines whose body we
// cannot run (an unsupported parameter) are refused one by one into the error file.
func (br *batchRunner) validate(ctx context.Context, b *batchState) error {
	s := br.s
	content, err := s.rdb.Get(ctx, keyFileContent(b.InputFileID)).Bytes()
	if errors.Is(err, redis.Nil) {
		return br.fail(ctx, b, []BatchError{{Code: "input_file_not_found", Message: fmt.Sprintf("input file %s was deleted before the batch started", b.InputFileID)}})
	}
	if err != nil {
		return err
	}
	lines, errs := ParseBatchInput(content, b.Endpoint)
	if len(errs) > 0 {
		return br.fail(ctx, b, errs)
	}
	served, err := s.servedModels(ctx)
	if err != nil {
		return err
	}
	for start := 0; start < len(lines); start += enqueueChunk {
		chunk := lines[start:min(start+enqueueChunk, len(lines))]
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, l := range chunk {
				n := start + i
				f := strconv.Itoa(n)
				req, _ := json.Marshal(batchReq{CustomID: l.CustomID})
				p.HSet(ctx, keyBatchReqs(b.ID), f, req)
				g, err := batchPayload(l, b.Endpoint)
				if err == nil {
					err = checkModel(served, g.Model)
				}
				if err == nil && b.Model == nil && g.Model != "" {
					b.Model = &g.Model
				}
				if err != nil {
					line, _ := json.Marshal(errorResponse(batchJobID(b.ID, n), l.CustomID, err))
					p.HSet(ctx, keyBatchErr(b.ID), f, line)
					continue
				}
				data, err := jobs.EncodePayload(g)
				if err != nil {
					return err
				}
				p.HSet(ctx, keyBatchPayloads(b.ID), f, data)
				p.SAdd(ctx, keyBatchPending(b.ID), n)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	b.Validated = true
	b.Status, b.InProgressAt = statusInProgress, unixNow()
	b.RequestCounts.Total = len(lines)
	b.RequestCounts.Failed = int(s.rdb.HLen(ctx, keyBatchErr(b.ID)).Val())
	return br.save(ctx, b)
}

// batchPayload is a line's job: its body, mapped as the endpoint's route maps it, as a
// generate payload at low priority so that interactive jobs pass batches by.
func batchPayload(l BatchLine, endpoint string) (*jobs.Generate, error) {
	rt := textRouteFor(endpoint)
	if rt == nil {
		return nil, badRequest("url", "a batch of endpoint %q cannot run", clip(endpoint))
	}
	g, opts, err := rt.mapping.parse(l.Body)
	if err != nil {
		return nil, err
	}
	if opts.Stream {
		return nil, unsupported("stream", "stream is not supported in a batch")
	}
	if g.Priority == "" {
		g.Priority = jobs.PriorityLow
	}
	return g, nil
}

func (br *batchRunner) fail(ctx context.Context, b *batchState, errs []BatchError) error {
	b.Status, b.FailedAt = statusFailed, unixNow()
	b.Errors = &BatchErrors{Object: "list", Data: errs}
	if err := br.save(ctx, b); err != nil {
		return err
	}
	br.s.m.batches.WithLabelValues(statusFailed).Inc()
	return br.cleanup(ctx, b)
}

// enqueue puts the next chunk of lines on the queue.
func (br *batchRunner) enqueue(ctx context.Context, b *batchState) error {
	s := br.s
	if b.Next >= b.RequestCounts.Total {
		return nil
	}
	end := min(b.Next+enqueueChunk, b.RequestCounts.Total)
	fields := make([]string, 0, end-b.Next)
	for n := b.Next; n < end; n++ {
		fields = append(fields, strconv.Itoa(n))
	}
	vals, err := s.rdb.HMGet(ctx, keyBatchPayloads(b.ID), fields...).Result()
	if err != nil {
		return err
	}
	// Each line's job belongs to the batch's owner from before it exists (owner.go). The
	// ids are the batch's own, which no token's ids can equal.
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, v := range vals {
			if _, ok := v.(string); ok {
				p.Set(ctx, keyOwner(batchJobID(b.ID, b.Next+i)), b.Owner, ownerTTL)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record the owner of the lines of batch %s: %w", b.ID, err)
	}
	for i, v := range vals {
		n := b.Next + i
		data, ok := v.(string)
		if !ok {
			continue // refused at validation, or enqueued by a step cut short
		}
		g, err := jobs.DecodeGenerate([]byte(data))
		if err == nil {
			g.IdempotencyKey = batchJobID(b.ID, n)
			_, err = s.client.Enqueue(ctx, g)
			if errors.Is(err, jobs.ErrDuplicate) {
				err = nil
			}
		}
		if errors.Is(err, jobs.ErrBadPayload) || errors.Is(err, jobs.ErrUnknownModel) || errors.Is(err, jobs.ErrNoCapacity) {
			// Refused at the door (no worker can hold it, say): the line's answer.
			req, _ := s.lineReq(ctx, b.ID, n)
			line, _ := json.Marshal(errorResponse(batchJobID(b.ID, n), req.CustomID, textRouteFor(b.Endpoint).named(err)))
			err = s.tx(ctx, func(p redis.Pipeliner) error {
				p.HSet(ctx, keyBatchErr(b.ID), strconv.Itoa(n), line)
				p.SRem(ctx, keyBatchPending(b.ID), n)
				return nil
			})
		} else if err == nil {
			s.m.enqueued.WithLabelValues("batch").Inc()
		}
		if err != nil {
			// Redis trouble: save how far we got; the next step goes on from here.
			b.Next = n
			return errors.Join(err, br.save(ctx, b))
		}
		s.rdb.HDel(ctx, keyBatchPayloads(b.ID), strconv.Itoa(n))
	}
	b.Next = end
	return br.save(ctx, b)
}

func (s *Server) lineReq(ctx context.Context, batchID string, n int) (batchReq, error) {
	var req batchReq
	data, err := s.rdb.HGet(ctx, keyBatchReqs(batchID), strconv.Itoa(n)).Bytes()
	if err != nil {
		return req, err
	}
	return req, json.Unmarshal(data, &req)
}

// poll records the lines whose job has finished (cancelling those still running when the
// batch stops) and updates the counts; done reports that no line is left.
func (br *batchRunner) poll(ctx context.Context, b *batchState) (done bool, err error) {
	s := br.s
	// A window of the pending lines per step, from where the last step stopped: a step's
	// work is bounded however large the batch, and every line comes round.
	pending, cursor, err := s.rdb.SScan(ctx, keyBatchPending(b.ID), b.Cursor, "", pollWindow).Result()
	if err != nil {
		return false, err
	}
	b.Cursor = cursor
	for _, f := range pending {
		n, err := strconv.Atoi(f)
		if err != nil {
			s.rdb.SRem(ctx, keyBatchPending(b.ID), f)
			continue
		}
		if err := br.pollLine(ctx, b, n); err != nil {
			return false, err
		}
	}
	counts, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HLen(ctx, keyBatchOut(b.ID))
		p.HLen(ctx, keyBatchErr(b.ID))
		p.SCard(ctx, keyBatchPending(b.ID))
		p.HMGet(ctx, keyBatchUsage(b.ID), "input", "output", "cached")
		return nil
	})
	if err != nil {
		return false, err
	}
	completed, failed := int(counts[0].(*redis.IntCmd).Val()), int(counts[1].(*redis.IntCmd).Val())
	left := counts[2].(*redis.IntCmd).Val()
	b.RequestCounts.Completed, b.RequestCounts.Failed = completed, failed
	b.Usage = usageOf(counts[3].(*redis.SliceCmd).Val())
	if err := br.save(ctx, b); err != nil { // the counts, and the cursor
		return false, err
	}
	return left == 0 && (b.Next >= b.RequestCounts.Total || b.Stop != ""), nil
}

// pollLine records line n if its job is done; when the batch stops, it cancels the job
// first, or, for a line never enqueued, records it cancelled.
func (br *batchRunner) pollLine(ctx context.Context, b *batchState, n int) error {
	s := br.s
	if n >= b.Next && b.Stop == "" {
		return nil // not enqueued yet
	}
	id := batchJobID(b.ID, n)
	req, err := s.lineReq(ctx, b.ID, n)
	if err != nil {
		return fmt.Errorf("line %d: %w", n, err)
	}
	stopped := func() error {
		what := "the batch was cancelled before this request finished"
		if b.Stop == statusExpired {
			what = "the batch expired (completion window 24h) before this request finished"
		}
		code := "batch_" + b.Stop
		line, _ := json.Marshal(BatchOutputLine{ID: "batch_req_" + id, CustomID: req.CustomID, Error: &BatchLineError{Code: code, Message: what}})
		return br.record(ctx, b.ID, n, keyBatchCancelled(b.ID), line)
	}
	if n >= b.Next {
		return stopped()
	}
	st, err := s.client.Status(ctx, id)
	if errors.Is(err, jobs.ErrNotFound) {
		line, _ := json.Marshal(errorResponse(id, req.CustomID, &apiError{status: 500, typ: typeServer, code: "job_lost",
			msg: fmt.Sprintf("job %s is gone from Redis (deleted, or its result expired before it was read)", id)}))
		return br.record(ctx, b.ID, n, keyBatchErr(b.ID), line)
	}
	if err != nil {
		return err
	}
	if !st.State.Done() {
		if b.Stop == "" {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, stopCancelTimeout)
		err := s.client.Cancel(cctx, id)
		cancel()
		if err != nil && !errors.Is(err, jobs.ErrFinished) {
			return err
		}
		if st, err = s.client.Status(ctx, id); err != nil {
			return err
		}
	}
	switch {
	case st.State == jobs.StateCompleted && st.Result != nil:
		line, _ := json.Marshal(BatchOutputLine{ID: "batch_req_" + id, CustomID: req.CustomID,
			Response: &BatchResponse{StatusCode: 200, RequestID: id, Body: textRouteFor(b.Endpoint).reply(id, st.CompletedAt, *st.Result)}})
		u := st.Result.Usage
		return br.record(ctx, b.ID, n, keyBatchOut(b.ID), line, func(p redis.Pipeliner) {
			p.HIncrBy(ctx, keyBatchUsage(b.ID), "input", int64(u.PromptTokens))
			p.HIncrBy(ctx, keyBatchUsage(b.ID), "output", int64(u.CompletionTokens))
			p.HIncrBy(ctx, keyBatchUsage(b.ID), "cached", int64(u.CachedTokens))
		})
	case b.Stop != "" && st.Result != nil && st.Result.FinishReason == jobs.FinishCancelled:
		return stopped()
	default:
		line, _ := json.Marshal(errorResponse(id, req.CustomID, jobEndError(st)))
		if jobs.ContextLengthExceeded(st.LastError) {
			line, _ = json.Marshal(errorResponse(id, req.CustomID, textRouteFor(b.Endpoint).named(contextLengthExceeded(fmt.Sprintf("job %s: %s", id, st.LastError)))))
		} else if ae := asAPIError(jobEndError(st)); ae.code == "job_failed" {
			line, _ = json.Marshal(errorResponse(id, req.CustomID, &apiError{status: 500, typ: typeServer, code: "job_failed", msg: ae.msg}))
		}
		return br.record(ctx, b.ID, n, keyBatchErr(b.ID), line)
	}
}

// usageOf reads the counters of keyBatchUsage (HMGET input output cached): nil when no line
// has completed yet. A batch recorded before the cached counter existed has none: 0.
func usageOf(vals []any) *BatchUsage {
	var n [3]int
	for i, v := range vals {
		s, ok := v.(string)
		switch {
		case ok && i < len(n):
			n[i], _ = strconv.Atoi(s)
		case i < 2:
			return nil
		}
	}
	return &BatchUsage{InputTokens: n[0], OutputTokens: n[1], TotalTokens: n[0] + n[1], InputTokensDetails: InputTokenDetails{CachedTokens: n[2]}}
}

// record writes a finished line and takes it off the pending set in one transaction, with
// also's commands (a completed line's usage): one batch runner at a time polls a line, and
// only while it is pending, so a line counts once.
func (br *batchRunner) record(ctx context.Context, batchID string, n int, key string, line []byte, also ...func(redis.Pipeliner)) error {
	err := br.s.tx(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, strconv.Itoa(n), line)
		p.SRem(ctx, keyBatchPending(batchID), n)
		p.HDel(ctx, keyBatchPayloads(batchID), strconv.Itoa(n))
		for _, f := range also {
			f(p)
		}
		return nil
	})
	return err
}

// finish writes the output and error files and gives the batch its final status. File ids
// derive from the batch id, so that a finish repeated after a crash rewrites the same files.
func (br *batchRunner) finish(ctx context.Context, b *batchState) error {
	s := br.s
	if b.Status != statusFinalizing {
		b.Status, b.FinalizingAt = statusFinalizing, unixNow()
		if err := br.save(ctx, b); err != nil {
			return err
		}
	}
	out, err := br.linesOf(ctx, keyBatchOut(b.ID))
	if err != nil {
		return err
	}
	errLines, err := br.linesOf(ctx, keyBatchErr(b.ID))
	if err != nil {
		return err
	}
	cancelled, err := br.linesOf(ctx, keyBatchCancelled(b.ID))
	if err != nil {
		return err
	}
	errLines = append(errLines, cancelled...)
	slices.SortFunc(errLines, func(a, b numbered) int { return cmp.Compare(a.n, b.n) })
	if len(out) > 0 {
		f, err := s.storeFile(ctx, b.Owner, "file-"+b.ID+"-output", b.ID+"_output.jsonl", purposeBatchOutput, joinLines(out), 0)
		if err != nil {
			return err
		}
		b.OutputFileID = &f.ID
	}
	if len(errLines) > 0 {
		f, err := s.storeFile(ctx, b.Owner, "file-"+b.ID+"-errors", b.ID+"_error.jsonl", purposeBatchOutput, joinLines(errLines), 0)
		if err != nil {
			return err
		}
		b.ErrorFileID = &f.ID
	}
	b.RequestCounts.Completed, b.RequestCounts.Failed = len(out), len(errLines)-len(cancelled)
	usage, err := s.rdb.HMGet(ctx, keyBatchUsage(b.ID), "input", "output", "cached").Result()
	if err != nil {
		return err
	}
	b.Usage = usageOf(usage)
	now := unixNow()
	switch b.Stop {
	case statusCancelled:
		b.Status, b.CancelledAt = statusCancelled, now
	case statusExpired:
		b.Status, b.ExpiredAt = statusExpired, now
	default:
		b.Status, b.CompletedAt = statusCompleted, now
	}
	if err := br.save(ctx, b); err != nil {
		return err
	}
	s.m.batches.WithLabelValues(b.Status).Inc()
	return br.cleanup(ctx, b)
}

// cleanup drops a final batch's working keys and takes it off the open set.
func (br *batchRunner) cleanup(ctx context.Context, b *batchState) error {
	err := br.s.tx(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, keyBatchReqs(b.ID), keyBatchPending(b.ID), keyBatchOut(b.ID), keyBatchErr(b.ID),
			keyBatchCancelled(b.ID), keyBatchPayloads(b.ID), keyBatchCancel(b.ID), keyBatchUsage(b.ID))
		p.SRem(ctx, keyBatchesOpen, b.ID)
		p.SRem(ctx, keyQueuedBatches(b.Owner), b.ID)
		return nil
	})
	return err
}

type numbered struct {
	n    int
	line string
}

func (br *batchRunner) linesOf(ctx context.Context, key string) ([]numbered, error) {
	m, err := br.s.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, err
	}
	out := make([]numbered, 0, len(m))
	for k, v := range m {
		n, _ := strconv.Atoi(k)
		out = append(out, numbered{n, v})
	}
	slices.SortFunc(out, func(a, b numbered) int { return cmp.Compare(a.n, b.n) })
	return out, nil
}

func joinLines(ls []numbered) []byte {
	var size int
	for _, l := range ls {
		size += len(l.line) + 1
	}
	out := make([]byte, 0, size)
	for _, l := range ls {
		out = append(out, l.line...)
		out = append(out, '\n')
	}
	return out
}
