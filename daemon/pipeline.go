package daemon

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/chat"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/sample"
	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/planner"
)

// Observer receives the pipeline's events as they happen, on the job's goroutine; callbacks
// must return quickly. ctx is the job's context (done once the job is cancelled). Tests use
// it to act at an exact point of a job, e.g. cancel it after its first prefill chunk.
type Observer struct {
	PrefillChunk func(ctx context.Context, id string, done, total int)
	Token        func(ctx context.Context, id string, generated int)
	// ResultWriteFailed is called after each failed attempt to write a finished job's
	// result (attempt counts from 1); the worker then retries within REDLITE_RESULT_WRITE_TIMEOUT.
	ResultWriteFailed func(ctx context.Context, id string, attempt int, err error)
}

// prefillCancelTokens bounds one prefill forward pass, and so how long a cancellation
// waits during prefill: the planner's smallest chunk. A 2048-token chunk of an 80B model on
// a CPU worker ran 21 s after a cancel; a quarter of it bounds the wait to about 5 s, at
// the cost of more, smaller passes (the same logits).
const prefillCancelTokens = 512

// run is one attempt of one job.
type run struct {
	w       *worker
	task    *asynq.Task
	id      string
	queue   string
	log     *slog.Logger
	start   time.Time
	phase   jobs.Phase
	prog    *progressWriter
	text    *textWriter
	outcome string
	// thinking: the prompt left a <think> block open, so the output starts with reasoning.
	thinking bool
	out      taskWriter // progress and result go here
}

// taskWriter writes a job's progress and result into its task while the task exists.
// asynq's ResultWriter sets the field whether or not the task is there, so once a Redis
// failover has lost a job (its enqueue never reached the replica) it would bring back a hash
// that is no task at all, which no inspector can read and nothing ever deletes.
//
// It writes for one attempt: once another worker has found the attempt orphaned (its worker
// taken for dead, jobs.RetryOrphan), the write is refused and the attempt stopped.
type taskWriter struct {
	ctx       context.Context // the task's: nothing is written once asynq has let the job go
	client    *jobs.Client
	queue, id string
	retried   int                     // the attempt: failed attempts before it
	stop      context.CancelCauseFunc // the attempt's context
	orphaned  func()                  // the worker's onOrphaned
}

func (t taskWriter) Write(p []byte) (int, error) {
	if err := t.ctx.Err(); err != nil {
		return 0, fmt.Errorf("write to job %s: %w", t.id, err)
	}
	ctx, cancel := context.WithTimeout(t.ctx, 5*time.Second)
	defer cancel()
	if err := t.client.WriteAttemptEnvelope(ctx, t.queue, t.id, t.retried, p); err != nil {
		if errors.Is(err, jobs.ErrAttemptOrphaned) {
			t.stop(errOrphaned)
			t.orphaned()
		}
		return 0, err
	}
	return len(p), nil
}

func (r *run) finishLog(err error) {
	d := time.Since(r.start).Round(time.Millisecond)
	var fault *EngineFault
	switch {
	case err == nil:
		r.log.Info("job done", "outcome", r.outcome, "duration", d)
	case errors.As(err, &fault):
		r.log.Error("job failed; it will be retried", "err", err, "duration", d, "stack", fault.Stack)
	case errors.Is(err, errWaiting):
		r.log.Debug("checked the child jobs", "err", err, "duration", d)
	default:
		r.log.Warn("job ended", "outcome", r.outcome, "err", err, "duration", d)
	}
}

// setPhase moves the job between the phase gauges and publishes the phase; "" ends it.
func (r *run) setPhase(p jobs.Phase) {
	if r.phase == p {
		return
	}
	if r.phase != "" {
		r.w.m.phase.WithLabelValues(string(r.phase)).Dec()
	}
	r.phase = p
	if p == "" {
		return
	}
	r.w.m.phase.WithLabelValues(string(p)).Inc()
	r.prog.update(func(pr *jobs.Progress) { pr.Phase = p })
}

// invalid ends an attempt whose payload is bad: archived at once, with the reason.
func (r *run) invalid(err error) error {
	r.outcome = outcomeInvalid
	return permanent(fmt.Errorf("invalid payload: %w", err))
}

// admit checks a decoded job against this worker before any engine work: a job for another
// model is moved to its workers (done), and the payload's timeout and deadline bound ctx.
// The caller runs the job with the returned context, then calls cancel.
func (r *run) admit(ctx context.Context, p jobs.Payload) (_ context.Context, cancel context.CancelFunc, done bool, err error) {
	cancel = func() {}
	opts := p.Options()
	if !r.w.lm.serves(opts.Model) {
		return ctx, cancel, true, r.rerouteModel(ctx, p) // reroute.go
	}
	if r.w.ownQueue(r.queue) {
		r.w.m.affinityJobs.Inc()
	}
	// asynq enforces the task message's timeout and deadline; a raw client may have put
	// them only in the payload, so they are applied here too.
	var cancels []context.CancelFunc
	cancel = func() {
		for _, c := range cancels {
			c()
		}
	}
	if opts.Deadline != nil {
		var c context.CancelFunc
		ctx, c = context.WithDeadline(ctx, *opts.Deadline)
		cancels = append(cancels, c)
	}
	if opts.Timeout > 0 {
		var c context.CancelFunc
		ctx, c = context.WithTimeout(ctx, time.Duration(opts.Timeout)*time.Second)
		cancels = append(cancels, c)
	}
	// An attempt that starts past the job's deadline (asynq retries a job its deadline
	// stopped) can do nothing, and must not overwrite the partial result of the attempt the
	// deadline stopped.
	if d := r.payloadDeadline(); !d.IsZero() && !time.Now().Before(d) {
		r.outcome = outcomeCancelled
		return ctx, cancel, true, permanent(fmt.Errorf("deadline %s passed before this attempt: %w", d.Format(time.RFC3339), context.DeadlineExceeded))
	}
	return ctx, cancel, false, nil
}

// generate runs a job on the engine: tokenize → plan → session → generate → result.
func (r *run) generate(ctx context.Context, p jobs.Payload, sampling jobs.Sampling) error {
	w := r.w
	pr, err := w.lm.tokenize(p)
	if err != nil {
		r.outcome = outcomeInvalid
		return permanent(fmt.Errorf("tokenize: %w", err))
	}
	ids := pr.ids
	r.thinking = pr.thinking
	r.prog.update(func(pr *jobs.Progress) { pr.PromptTokens, pr.MaxTokens = len(ids), sampling.MaxTokens })

	r.setPhase(jobs.PhasePlanning)
	plan, err := w.planFor(len(ids), sampling.MaxTokens)
	if err != nil {
		if errors.Is(err, planner.ErrDoesNotFit) {
			return r.reroute(ctx, p, len(ids), sampling.MaxTokens, err) // reroute.go
		}
		if s, ok := autoSummary(p); ok {
			return r.hierarchical(ctx, s) // longer than the model's trained context: no worker holds it
		}
		if errors.Is(err, planner.ErrBadJob) {
			r.outcome = outcomeDoesNotFit
			err = fmt.Errorf("does not fit on worker %s: %w", w.name, err)
			if len(ids) > w.maxPrompt(sampling.MaxTokens) {
				// Past the model's trained context, which every worker of it shares.
				err = fmt.Errorf("%w: %w", jobs.ErrContextLength, err)
			}
			return permanent(err)
		}
		return &EngineFault{Err: fmt.Errorf("plan: %w", err)}
	}
	w.m.plan(plan)
	need := plan.NeedMiB * planner.MiB
	w.m.plannedBytes.Add(float64(need))
	defer w.m.plannedBytes.Sub(float64(need))
	r.log.Debug("planned", "prompt_tokens", len(ids), "max_tokens", sampling.MaxTokens, "context", plan.Context,
		"chunk", plan.Chunk, "kv", plan.KV, "need_mib", plan.NeedMiB, "limit_mib", plan.LimitMiB)

	params := sample.Params{
		Temperature: float32(sampling.Temperature),
		TopK:        sampling.TopK,
		TopP:        float32(sampling.TopP),
		MinP:        float32(sampling.MinP),
		Seed:        seedOf(r.id),

		PresencePenalty:   float32(sampling.PresencePenalty),
		FrequencyPenalty:  float32(sampling.FrequencyPenalty),
		RepetitionPenalty: float32(sampling.RepetitionPenalty),
	}
	if sampling.Seed != nil {
		params.Seed = uint64(*sampling.Seed)
	}

	r.setPhase(jobs.PhasePrefill)
	if w.sched == nil {
		experts := w.lm.expertStats()
		// Counted per job: resizing the cache for the next plan resets the backend's counters.
		// A batching worker counts its shared cache per step (batch.go).
		defer func() { w.m.countExperts(experts, w.lm.expertStats()) }()
	}
	generated := 0
	// The progress shows answer and reasoning apart, as the result will (run.result).
	split := chat.NewReasoningStream(r.thinking)
	first := engine.GenerateOptions{
		MaxTokens: sampling.MaxTokens,
		Stop:      sampling.Stop,
		Chunk:     plan.Chunk,

		Logprobs:    sampling.Logprobs,
		TopLogprobs: sampling.TopLogprobs,
		// A cancel, deadline or shutdown waits for one pass of at most this many tokens,
		// whatever the plan's chunk.
		CancelEvery: prefillCancelTokens,
		Vocab:       w.lm.tok,
		Stream:      w.lm.tok.NewStreamDecoder(),
		OnPrefill: func(done, total int) {
			r.prog.update(func(pr *jobs.Progress) { pr.Prefilled = done })
			if f := w.observer.PrefillChunk; f != nil {
				f(ctx, r.id, done, total)
			}
		},
		OnToken: func(n int, text string) {
			// What the split still holds at the end is never flushed here: the result,
			// written next, has it all.
			answer, reasoning := split.Push(text)
			if n <= generated { // text held back until the end
				if answer == "" && reasoning == "" {
					return
				}
				r.prog.update(func(pr *jobs.Progress) { pr.AppendText(answer, reasoning) })
				r.text.push(answer, reasoning, generated)
				return
			}
			generated = n
			if n == 1 {
				r.setPhase(jobs.PhaseDecode)
			}
			r.prog.update(func(pr *jobs.Progress) { pr.Generated = n; pr.AppendText(answer, reasoning) })
			r.text.push(answer, reasoning, n)
			if f := w.observer.Token; f != nil {
				f(ctx, r.id, n)
			}
		},
	}
	// The n completions read the prompt once; each samples with its own seed stream (the
	// first with the seed's own, as the job with n 1 would) and its own grammar matcher.
	// The progress follows the first.
	opts := make([]engine.GenerateOptions, max(sampling.N, 1))
	for i := range opts {
		o := first
		if i > 0 {
			o.OnPrefill, o.OnToken, o.Stream = nil, nil, w.lm.tok.NewStreamDecoder()
		}
		params.Stream = uint64(i)
		if o.Sampler, err = sample.New(params); err != nil {
			r.outcome = outcomeInvalid
			return permanent(fmt.Errorf("sampling: %w", err))
		}
		// Compiled once per job (or shared with an earlier one); the payload's Validate
		// compiled it already, so an error here is a worker of another version.
		if o.Grammar, err = w.matcher(sampling.Format); err != nil {
			r.outcome = outcomeInvalid
			return permanent(err)
		}
		opts[i] = o
	}
	gens, genErr := w.generate(ctx, plan, ids, opts)
	gen := gens[0]
	if errors.Is(genErr, engine.ErrAdmissionTimeout) {
		r.outcome = outcomeBusy
		return fmt.Errorf("worker %s is busy: %w", w.name, genErr)
	}
	if errors.Is(genErr, engine.ErrTooLarge) {
		r.outcome = outcomeDoesNotFit
		return permanent(fmt.Errorf("does not fit on worker %s: %w", w.name, genErr))
	}
	if w.sched != nil && gen.Queued > 0 {
		w.m.admissionWait.Observe(gen.Queued.Seconds())
	}
	res := r.result(p, gens, plan)
	typ := r.task.Type()
	w.m.promptTokens.WithLabelValues(typ).Add(float64(min(gen.PromptTokens, r.prog.snapshot().Prefilled)))
	w.m.genTokens.WithLabelValues(typ).Add(float64(res.Usage.CompletionTokens))

	if genErr != nil {
		if gen.FinishReason != engine.FinishCancelled {
			f := &EngineFault{Err: genErr}
			if pe := (*ml.PanicError)(nil); errors.As(genErr, &pe) {
				f.Stack = string(pe.Stack) // where a pool goroutine or a scheduler callback panicked
			}
			return f
		}
		return r.cancelled(ctx, res, genErr)
	}
	if gen.Prefill > 0 {
		w.m.prefillRate.WithLabelValues(typ).Observe(res.Timings.PrefillTokensPerSecond)
	}
	if gen.Decode > 0 && gen.CompletionTokens > 0 {
		w.m.decodeRate.WithLabelValues(typ).Observe(res.Timings.DecodeTokensPerSecond)
	}
	if wait, ok := r.queueWait(); ok {
		w.m.queueWait.WithLabelValues(typ).Observe(wait.Seconds())
	}
	r.prog.terminate()
	if err := r.complete(ctx, res, p.Options().WebhookURL); err != nil {
		return err
	}
	w.recordPrefix(p)
	return nil
}

// complete writes a finished job's result and queues its webhook. A result that cannot be
// written is a failed attempt: the job runs again rather than being marked completed without
// a result.
func (r *run) complete(ctx context.Context, res jobs.Result, webhook string) error {
	env, err := jobs.EncodeResult(res)
	if err != nil {
		return &EngineFault{Err: err}
	}
	if err := r.writeResult(ctx, env); err != nil {
		return err
	}
	r.text.end(res.FinishReason)
	r.outcome = outcomeCompleted
	if webhook != "" {
		r.w.postWebhook(ctx, r.log, webhook, r.id, env)
	}
	return nil
}

// writeResult writes a finished job's result, retrying with a back-off (50 ms doubling to
// 2 s) while Redis is away, for at most REDLITE_RESULT_WRITE_TIMEOUT: a Redis restart at
// the moment a job finishes must not throw its output away. go-redis reconnects by itself
// on the next command.
func (r *run) writeResult(ctx context.Context, env []byte) error {
	bound := time.NewTimer(r.w.cfg.ResultWriteTimeout)
	defer bound.Stop()
	for attempt, delay := 1, 50*time.Millisecond; ; attempt, delay = attempt+1, min(2*delay, 2*time.Second) {
		_, err := r.out.Write(env)
		if err == nil {
			if attempt > 1 {
				r.log.Info("result written after Redis came back", "attempts", attempt)
			}
			return nil
		}
		if errors.Is(err, jobs.ErrNotFound) {
			return fmt.Errorf("write result: the job is no longer in Redis (deleted, or lost in a Redis failover): %w", err)
		}
		if errors.Is(err, jobs.ErrAttemptOrphaned) {
			r.outcome = outcomeOrphaned
			return fmt.Errorf("write result: %w", err)
		}
		if f := r.w.observer.ResultWriteFailed; f != nil {
			f(ctx, r.id, attempt, err)
		}
		r.log.Warn("could not write the result; retrying", "attempt", attempt, "retry_in", delay, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("write result: %w (job stopped: %v)", err, context.Cause(ctx))
		case <-bound.C:
			return fmt.Errorf("write result: gave up after %v (REDLITE_RESULT_WRITE_TIMEOUT): %w", r.w.cfg.ResultWriteTimeout, err)
		case <-time.After(delay):
		}
	}
}

// cancelled records the partial result of a job whose context ended and returns the error
// that tells asynq what happened.
func (r *run) cancelled(ctx context.Context, res jobs.Result, genErr error) error {
	w := r.w
	if errors.Is(context.Cause(ctx), errShuttingDown) {
		// asynq has requeued the job; a result here would be stale when it runs again.
		r.outcome = outcomeRequeued
		return genErr
	}
	if errors.Is(context.Cause(ctx), errOrphaned) {
		// Another attempt has the job: what this one did is not its result.
		r.outcome = outcomeOrphaned
		return fmt.Errorf("%w: %w", errOrphaned, genErr)
	}
	r.outcome = outcomeCancelled
	r.prog.terminate()
	env, err := jobs.EncodeResult(res)
	if err == nil {
		// asynq's ResultWriter refuses once the task context is done; WriteEnvelope writes
		// the same field while the task exists.
		wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = w.client.WriteAttemptEnvelope(wctx, r.queue, r.id, r.out.retried, env)
		cancel()
	}
	if err != nil {
		r.log.Warn("could not record the cancelled result", "err", err)
	} else {
		r.text.end(jobs.FinishCancelled)
	}
	if d := r.payloadDeadline(); !d.IsZero() && !time.Now().Before(d) {
		// A job past its deadline cannot succeed on another attempt.
		return permanent(fmt.Errorf("deadline %s passed: %w", d.Format(time.RFC3339), genErr))
	}
	return genErr
}

func (r *run) payloadDeadline() time.Time { return payloadDeadline(r.task) }

// result assembles the job's result from what the engine returned: one generation per
// completion, which share the prompt.
func (r *run) result(p jobs.Payload, gens []engine.Generation, plan planner.Plan) jobs.Result {
	g := gens[0]
	logprobs := false
	if gp, ok := p.(*jobs.Generate); ok {
		logprobs = gp.Sampling().Logprobs
	}
	completion := 0
	choices := make([]jobs.Choice, len(gens))
	for i, g := range gens {
		text, reasoning := chat.SplitReasoning(g.Text, r.thinking)
		choices[i] = jobs.Choice{Index: i, Text: text, Reasoning: reasoning, FinishReason: jobs.FinishReason(g.FinishReason),
			CompletionTokens: g.CompletionTokens}
		if choices[i].FinishReason == "" {
			choices[i].FinishReason = jobs.FinishCancelled
		}
		if logprobs {
			choices[i].Logprobs = resultLogprobs(r.w.lm.tok, g.Logprobs)
		}
		completion += g.CompletionTokens
	}
	res := jobs.Result{
		Text:         choices[0].Text,
		Reasoning:    choices[0].Reasoning,
		FinishReason: choices[0].FinishReason,
		Logprobs:     choices[0].Logprobs,
		Usage: jobs.Usage{
			PromptTokens:     g.PromptTokens,
			CompletionTokens: completion,
			TotalTokens:      g.PromptTokens + completion,
			CachedTokens:     g.CachedTokens,
		},
		Timings: jobs.Timings{
			PrefillMS:              ms(g.Prefill),
			PrefillTokensPerSecond: perSecond(g.PromptTokens, g.Prefill),
			DecodeMS:               ms(g.Decode),
			DecodeTokensPerSecond:  perSecond(g.CompletionTokens, g.Decode),
			TotalMS:                ms(time.Since(r.start)),
		},
		Plan:     r.w.resultPlan(plan, g),
		Model:    r.w.lm.name,
		Worker:   r.w.name,
		Metadata: p.Options().Metadata,
	}
	if _, ok := p.(*jobs.Summarize); ok {
		res.Strategy = jobs.StrategySingle
	}
	if len(choices) > 1 {
		res.Choices = choices
	}
	if wait, ok := r.queueWait(); ok {
		res.Timings.QueueWaitMS = ms(wait)
	}
	return res
}

// seedOf is the sampling seed of a job that names none: derived from its id, so that every
// attempt of the job samples the same text on the same model, and a client streaming it
// sees a retry (its worker died) repeat the text it has and go on (jobs.FollowText).
func seedOf(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// queueWait is the time from enqueue to the start of this attempt, when the enqueue time is
// known.
func (r *run) queueWait() (time.Duration, bool) {
	v, ok := r.task.Headers()[jobs.HeaderEnqueuedAt]
	if !ok {
		return 0, false
	}
	var at time.Time
	if ns, err := strconv.ParseInt(v, 10, 64); err == nil {
		at = time.Unix(0, ns)
	} else if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		at = t
	} else {
		return 0, false
	}
	return max(r.start.Sub(at), 0), true
}

func (w *worker) resultPlan(p planner.Plan, g engine.Generation) jobs.Plan {
	jp := resultPlan(p)
	jp.Backend = w.lm.m.Backend.Name()
	if w.sched != nil {
		jp.BlockSize, jp.PoolBlocks, jp.Batch = w.pool.BlockSize, w.pool.Blocks, g.Batch
	}
	return jp
}

func resultPlan(p planner.Plan) jobs.Plan {
	return jobs.Plan{
		Context:         p.Context,
		Chunk:           p.Chunk,
		KVPrecision:     p.KV.String(),
		ExpertResidency: string(p.Residency),
		ExpertCacheMiB:  int(p.ExpertCacheBytes / planner.MiB),
		MTP:             p.MTP,
		Slots:           p.Slots,
		NeedMiB:         int(p.NeedMiB),
		LimitMiB:        int(p.LimitMiB),
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func perSecond(n int, d time.Duration) float64 {
	if d <= 0 || n == 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// generate runs a job in the batch scheduler, or alone in a session of its plan with its
// expert cache. The session's KV cache and state go back at once, however the job ends: an
// error, a cancellation or a panic.
func (w *worker) generate(ctx context.Context, plan planner.Plan, ids []int32, os []engine.GenerateOptions) ([]engine.Generation, error) {
	if w.sched != nil {
		return w.sched.GenerateN(ctx, ids, plan.Context, os)
	}
	fail := func(err error) ([]engine.Generation, error) { return make([]engine.Generation, len(os)), err }
	if err := w.lm.setExpertCache(plan.Residency, plan.ExpertCacheBytes); err != nil {
		return fail(err)
	}
	sess, err := w.lm.m.NewSession(engine.SessionOptions{Context: plan.Context, KV: plan.KV, MTP: plan.MTP, Prefixes: w.prefixes})
	if err != nil {
		return fail(fmt.Errorf("open session: %w", err))
	}
	defer sess.Close()
	gs, err := sess.GenerateN(ctx, ids, os)
	if w.prefixes != nil {
		w.m.prefix.observe(w.prefixes.Stats(), 0)
	}
	return gs, err
}
