package daemon

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/jobs"
)

// handler is the worker's asynq handler: one handler per task type on asynq's ServeMux,
// with what every attempt needs as middleware around them, outermost first —
//
//   - attempt: the attempt's record (run), its claim for orphan recovery, its progress
//     and text stream writers, and its metrics and log line once it ends, whatever ended it;
//   - recoverPanics: a panic anywhere below becomes a retried EngineFault carrying the
//     stack (asynq would recover too, but as a plain error without it).
//
// A task of a type no handler takes is archived at once as invalid, as a bad payload is,
// instead of retried by asynq's not-found handler: no worker of this build will take it.
func (w *worker) handler() asynq.Handler {
	mux := asynq.NewServeMux()
	mux.Use(w.attempt, recoverPanics)
	mux.HandleFunc(jobs.TypeGenerate, w.handleGenerate)
	mux.HandleFunc(jobs.TypeSummarize, w.handleSummarize)
	unknown := w.attempt(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		_, err := jobs.Decode(t.Type(), t.Payload())
		return runOf(ctx).invalid(err)
	}))
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if _, pattern := mux.Handler(t); pattern == "" {
			return unknown.ProcessTask(ctx, t)
		}
		return mux.ProcessTask(ctx, t)
	})
}

// handleGenerate runs a generate job.
func (w *worker) handleGenerate(ctx context.Context, t *asynq.Task) error {
	r := runOf(ctx)
	p, err := jobs.DecodeGenerate(t.Payload())
	if err != nil {
		return r.invalid(err)
	}
	ctx, cancel, done, err := r.admit(ctx, p)
	defer cancel()
	if done {
		return err
	}
	return r.generate(ctx, p, p.Sampling())
}

// handleSummarize runs a summarize job: alone, as a piece of a hierarchical summary, or as
// the parent of one (hierarchy.go).
func (w *worker) handleSummarize(ctx context.Context, t *asynq.Task) error {
	r := runOf(ctx)
	s, err := jobs.DecodeSummarize(t.Payload())
	if err != nil {
		return r.invalid(err)
	}
	ctx, cancel, done, err := r.admit(ctx, s)
	defer cancel()
	if done {
		return err
	}
	if s.Part != nil {
		if err := r.checkParent(ctx, s.Part); err != nil {
			return err
		}
	}
	if hier, err := r.wantsHierarchy(ctx, s); err != nil {
		return err
	} else if hier {
		return r.hierarchical(ctx, s)
	}
	return r.generate(ctx, s, s.Sampling())
}

type runKey struct{}

// runOf is the attempt's record, which the attempt middleware put in ctx.
func runOf(ctx context.Context) *run { return ctx.Value(runKey{}).(*run) }

// attempt is the middleware that keeps an attempt's record (see handler).
func (w *worker) attempt(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) (err error) {
		w.running.Add(1)
		defer w.running.Done()
		r := &run{w: w, task: task, start: time.Now(), outcome: outcomeFault}
		r.id, _ = asynq.GetTaskID(ctx)
		r.queue, _ = asynq.GetQueueName(ctx)
		defer w.track(r.queue, r.id)()
		retried, _ := asynq.GetRetryCount(ctx)
		if w.hb != nil {
			// Before the engine runs: a restarted worker proves the attempt orphaned by this
			// record (orphans.go).
			a := attemptMember(r.id, retried)
			w.hb.claim(a)
			defer w.hb.release(a)
		}
		r.log = w.log.With("job", r.id, "type", task.Type(), "queue", r.queue, "attempt", retried+1)
		ctx, stop := context.WithCancelCause(ctx)
		defer stop(nil)
		r.out = taskWriter{ctx: ctx, client: w.client, queue: r.queue, id: r.id, retried: retried, stop: stop, orphaned: w.onOrphaned(r.log)}
		r.prog = newProgressWriter(r.out, w.cfg.ProgressInterval, r.log, w.m)
		r.prog.start()
		r.text = newTextWriter(w.client, r.id, retried, w.cfg.StreamInterval, r.log, w.m)
		r.text.start()
		defer func() {
			r.text.terminate()
			r.prog.terminate()
			r.setPhase("")
			w.m.jobs.WithLabelValues(task.Type(), r.outcome).Inc()
			w.m.duration.WithLabelValues(task.Type(), r.outcome).Observe(time.Since(r.start).Seconds())
			r.finishLog(err)
		}()
		if done, err := w.client.Finished(ctx, r.queue, r.id); err == nil && done {
			// An earlier attempt wrote the result and asynq did not record the completion
			// (the worker died, or Redis failed over, in between): finishing now records it.
			r.log.Info("the job already has its result from an earlier attempt; not running it again")
			r.outcome = outcomeCompleted
			return nil
		}
		r.setPhase(jobs.PhaseTokenizing)
		return next.ProcessTask(context.WithValue(ctx, runKey{}, r), task)
	})
}

// recoverPanics is the middleware that turns a panic into a retried EngineFault with the
// stack that shows it.
func recoverPanics(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) (err error) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			stack := string(debug.Stack())
			if lp, ok := p.(*ml.PanicError); ok {
				// The panic happened on a CPU pool goroutine: its stack is the one that shows
				// the fault.
				stack = string(lp.Stack) + "\nraised on the job's goroutine:\n" + stack
			}
			err = &EngineFault{Err: fmt.Errorf("panic: %v", p), Stack: stack}
			runOf(ctx).outcome = outcomeFault
		}()
		return next.ProcessTask(ctx, task)
	})
}
