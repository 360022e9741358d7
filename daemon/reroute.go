package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/planner"
)

// A worker may take a job it cannot run: the fleet changed since the job was routed, a raw
// client put it on a plain priority queue, the client's token estimate was short, or the job
// names another model. Instead of archiving it, the worker moves it (jobs.Client.MoveActive:
// same id, payload, retention and retry count, in one Redis step, so that it runs once) to
// the queue of the smallest class of live workers that hold it, and archives it only when no
// live worker can, with the planner's explanation for the fleet's largest worker.

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
	var mine []jobs.Capability
	for _, c := range caps {
		if !c.Draining && c.ModelKey == jobs.ModelKey(w.lm.name) {
			mine = append(mine, c)
		}
	}
	if !slices.ContainsFunc(mine, func(c jobs.Capability) bool { return c.Worker == w.name }) {
		// This worker's own document is missing (Redis lost it, or its first refresh has
		// not landed): the list cannot be trusted to say that nobody holds the job.
		return &EngineFault{Err: fmt.Errorf("does not fit here, and the fleet's capabilities are incomplete (this worker's is missing): %w", fit)}
	}
	classes := map[string]bool{}
	for _, c := range mine {
		fits, seen := classes[c.Class]
		classes[c.Class] = (fits || !seen) && need <= c.MaxContext // as good as its smallest worker
	}
	var fitting []string
	for c, ok := range classes {
		if ok {
			fitting = append(fitting, c)
		}
	}
	slices.SortFunc(fitting, func(a, b string) int { return cmp.Compare(jobs.ClassMiB(a), jobs.ClassMiB(b)) })
	base := jobs.BaseQueue(r.queue)
	inPlace := false
	for _, class := range fitting {
		to := jobs.ClassQueue(base, jobs.ModelKey(w.lm.name), class)
		if to == r.queue {
			// Every worker of the class holds it; this one took it from a smaller class's
			// queue and is smaller than they are (fewer slots, another calibration).
			inPlace = true
			continue
		}
		return r.move(rctx, to, "does_not_fit", fmt.Sprintf("%d prompt tokens + max_tokens %d do not fit here (%v)", promptTokens, maxTokens, fit))
	}
	if inPlace {
		// No larger class holds it: back to its queue (a retry) for one of the workers that do.
		r.outcome = outcomeRerouted
		return fmt.Errorf("does not fit on worker %s, but the other workers of queue %s hold it: retried there: %w", w.name, r.queue, fit)
	}
	if s, ok := autoSummary(p); ok {
		return r.hierarchical(ctx, s) // hierarchy.go
	}
	r.outcome = outcomeDoesNotFit
	return permanent(fmt.Errorf("does not fit on any live worker of model %s: %w", w.lm.name, w.largestExplanation(mine, promptTokens, maxTokens, fit)))
}

// largestExplanation is the planner's explanation for the fleet's largest worker of the
// model, which names it; fit (this worker's) when no other is live.
func (w *worker) largestExplanation(mine []jobs.Capability, promptTokens, maxTokens int, fit error) error {
	var largest *jobs.Capability
	for i, c := range mine {
		if largest == nil || c.MaxContext > largest.MaxContext {
			largest = &mine[i]
		}
	}
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
