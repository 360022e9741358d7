package daemon

import (
	"fmt"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/planner"
)

// Every plan this worker makes goes through planFor: a job alone in a session of its own
// plan (concurrency 1), or in the batch scheduler's pool (batch.go).

// planFor plans a job of promptTokens + maxTokens as this worker would run it.
func (w *worker) planFor(promptTokens, maxTokens int) (planner.Plan, error) {
	if w.sched != nil {
		return w.planBatched(promptTokens, maxTokens)
	}
	return w.planSession(promptTokens, maxTokens)
}

// maxPrompt is the longest prompt this worker can plan with maxTokens to generate (0: none).
func (w *worker) maxPrompt(maxTokens int) int {
	lo, hi := 0, 1<<22 // beyond any trained context: the planner refuses it
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if _, err := w.planFor(mid, maxTokens); err == nil {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// planSession asks the planner for a job of promptTokens + maxTokens on this worker.
func (w *worker) planSession(promptTokens, maxTokens int) (planner.Plan, error) {
	job := planner.Job{PromptTokens: promptTokens, MaxTokens: maxTokens, Slots: w.cfg.Concurrency, Policy: w.policy}
	return planner.Choose(job, w.lm.profile, w.cal, w.budget)
}

// planBatched plans a job for the pool: alone on this worker with the pool's precision (the
// planner explains a job that could never fit), and within the pool's blocks.
func (w *worker) planBatched(promptTokens, maxTokens int) (planner.Plan, error) {
	plan, err := planner.Choose(planner.Job{PromptTokens: promptTokens, MaxTokens: maxTokens, Policy: batchPolicy(w.policy, w.pool)}, w.lm.profile, w.cal, w.budget)
	if err != nil {
		return plan, err
	}
	if need := ml.BlocksFor(plan.Context, w.pool.BlockSize); need > w.pool.Blocks {
		return plan, fmt.Errorf("%w: %s positions of prompt + max_tokens need %d KV blocks of %d, and this worker's pool (%d slots) holds %d: it takes at most %s",
			planner.ErrDoesNotFit, planner.Commas(int64(plan.Context)), need, w.pool.BlockSize, w.pool.Slots, w.pool.Blocks,
			planner.Commas(int64(w.pool.Positions())))
	}
	plan.Slots, plan.Chunk, plan.NeedMiB = w.pool.Slots, w.pool.StepTokens, w.pool.NeedMiB
	plan.Residency, plan.ExpertCacheBytes = w.pool.Residency, w.pool.ExpertCacheBytes
	return plan, nil
}
