package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/planner"
)

// A worker may take a job it cannot run: the fleet changed since the job was routed, a raw
// client put it on a plain priority queue, the client's token estimate was short, or the job
// names another model. Instead of archiving it, the worker moves it (jobs.Client.MoveActive:
// same id, payload, retention and retry count, in one Redis step, so that it runs once) to
// the queue of the capacity bucket that the other live workers which hold it serve
// (jobs.HoldersBucket, as clients route), and archives it only when no live worker can,
// with the planner's explanation for the fleet's largest worker.

const outcomeRerouted = "rerouted" // moved to a queue whose workers can run it

// rerouteTimeout bounds the Redis work of one move.
const rerouteTimeout = 5 * time.Second

// reroute handles a job that does not fit this worker (fit is the planner's error here).
func (r *run) reroute(ctx context.Context, p jobs.Payload, promptTokens, maxTokens int, fit error) error {
	w := r.w
	rctx, cancel := context.WithTimeout(ctx, rerouteTimeout)
	defer cancel()
	caps, err := w.client.Capabilities(rctx)
	if err != nil {
		return &EngineFault{Err: fmt.Errorf("does not fit here, and the fleet cannot be read to move it: %w", err)}
	}
	// The same model tokenizes the same way everywhere: the exact count decides.
	need := promptTokens + maxTokens
	key := jobs.ModelKey(w.lm.name)
	var mine, others []jobs.Capability
	for _, c := range caps {
		if c.Routable() && c.ModelKey == key {
			mine = append(mine, c)
			if c.Worker != w.name {
				// This worker's planner has just said no, whatever its document says.
				others = append(others, c)
			}
		}
	}
	if len(others) == len(mine) {
		// This worker's own document is missing (Redis lost it, or its first refresh has
		// not landed): the list cannot be trusted to say that nobody holds the job.
		return &EngineFault{Err: fmt.Errorf("does not fit here, and the fleet's capabilities are incomplete (this worker's is missing): %w", fit)}
	}
	if b, ok := jobs.HoldersBucket(others, func(jobs.Capability) int { return need }); ok {
		to := jobs.BucketQueue(jobs.BaseQueue(r.queue), key, b)
		if to == r.queue {
			// The other workers of this queue hold it; this one serves it by a document that
			// promised more than its planner gives: back to its queue (a retry) for them.
			r.outcome = outcomeRerouted
			return fmt.Errorf("does not fit on worker %s, but the other workers of queue %s hold it: retried there: %w", w.name, r.queue, fit)
		}
		return r.move(rctx, to, "does_not_fit", fmt.Sprintf("%d prompt tokens + max_tokens %d do not fit here (%v)", promptTokens, maxTokens, fit))
	}
	if s, ok := autoSummary(p); ok {
		return r.hierarchical(ctx, s) // hierarchy.go
	}
	r.outcome = outcomeDoesNotFit
	return permanent(fmt.Errorf("%w: does not fit on any live worker of model %s: %w", jobs.ErrContextLength, w.lm.name, w.largestExplanation(mine, promptTokens, maxTokens, fit)))
}

// largestExplanation is the planner's explanation for the fleet's largest worker of the
// model, which names it; fit (this worker's) when no other is live.
func (w *worker) largestExplanation(mine []jobs.Capability, promptTokens, maxTokens int, fit error) error {
	largest := jobs.LargestWorker(mine)
	if largest == nil {
		return fmt.Errorf("worker %s (GPU limit %s MiB, the only one): %w", w.name, planner.Commas(w.budget.LimitMiB), fit)
	}
	var prof planner.Profile
	var cal planner.Calibration
	var pol planner.Policy
	if json.Unmarshal(largest.Profile, &prof) != nil || json.Unmarshal(largest.Calibration, &cal) != nil || json.Unmarshal(largest.Policy, &pol) != nil {
		return fmt.Errorf("the fleet's largest is worker %s (GPU limit %s MiB, %d tokens at most); here: %w",
			largest.Worker, planner.Commas(largest.GPULimitMiB), largest.MaxContext, fit)
	}
	b := planner.Budget{LimitMiB: largest.GPULimitMiB, MarginMiB: largest.MarginMiB, Source: planner.BudgetSource(largest.BudgetSource)}
	_, err := planner.Choose(planner.Job{PromptTokens: promptTokens, MaxTokens: maxTokens, Slots: largest.Slots, Policy: pol}, prof, cal, b)
	if err == nil {
		err = fit // its own planner says it fits, its published capacity says not: report ours
	}
	return fmt.Errorf("the fleet's largest is worker %s (GPU limit %s MiB): %w", largest.Worker, planner.Commas(largest.GPULimitMiB), err)
}

// rerouteModel handles a job for another model: it moves to the queue RouteJob picks among
// the live workers, or is archived with the served models when none serves it.
func (r *run) rerouteModel(ctx context.Context, p jobs.Payload) error {
	rctx, cancel := context.WithTimeout(ctx, rerouteTimeout)
	defer cancel()
	caps, err := r.w.client.Capabilities(rctx)
	if err != nil {
		return &EngineFault{Err: fmt.Errorf("job for model %q, and the fleet cannot be read to move it: %w", p.Options().Model, err)}
	}
	route, err := jobs.RouteJob(caps, p, false)
	if errors.Is(err, jobs.ErrUnknownModel) || (err == nil && route.Queue == r.queue) {
		r.outcome = outcomeInvalid
		if err == nil {
			err = fmt.Errorf("model: this worker serves %q, not %q", r.w.lm.name, p.Options().Model)
		}
		return permanent(err) // a *jobs.RouteError names the field itself
	}
	if err != nil {
		r.outcome = outcomeDoesNotFit
		return permanent(err)
	}
	return r.move(rctx, route.Queue, "model", fmt.Sprintf("model %q is not served here", p.Options().Model))
}

// move hands the job to queue to; reason labels redlite_jobs_rerouted_total (does_not_fit, model). asynq.RevokeTask keeps asynq from retrying or archiving
// the attempt; its removal of the job from this queue then finds it gone, which it logs.
func (r *run) move(ctx context.Context, to, reason, why string) error {
	if err := r.w.client.MoveActive(ctx, r.queue, r.id, to); err != nil {
		if errors.Is(err, jobs.ErrNotActive) {
			r.outcome = outcomeCancelled // cancelled or timed out meanwhile: asynq has it
			return fmt.Errorf("re-route: %w", err)
		}
		return &EngineFault{Err: fmt.Errorf("re-route to %s: %w", to, err)}
	}
	r.outcome = outcomeRerouted
	r.w.m.rerouted.WithLabelValues(reason).Inc()
	r.log.Info("job moved to a queue whose workers can run it", "to", to, "why", why)
	return asynq.RevokeTask
}
