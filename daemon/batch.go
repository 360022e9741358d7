package daemon

import (
	"fmt"
	"os"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/planner"
)

// A worker with REDLITE_CONCURRENCY > 1 runs its jobs together (continuous batching): the
// engine's scheduler holds one KV pool, which the planner sizes when the worker starts, and
// every handler submits its job to it and waits. A job is admitted when a slot is free and
// the pool has the blocks for its prompt + max_tokens; until then it waits in the worker
// with its asynq lease kept alive (asynq extends it while the handler runs), for at most
// REDLITE_ADMISSION_TIMEOUT, after which the attempt fails unrun and asynq retries the job
// after its back-off, on whichever worker is free then. A job that the
// pool could never hold, even alone, is refused as one that does not fit. With
// REDLITE_CONCURRENCY 1 a job runs alone in a session of its own, planned per job (MTP,
// chunk, KV precision and expert residency chosen for it).

// planPool sizes the KV pool of a batching worker (nil for REDLITE_CONCURRENCY 1) and
// chooses how it holds the experts: a bounded cache only on a backend that has one
// (ml.ExpertResidency). It runs before the worker's capabilities are published: the pool
// bounds the longest job.
func planPool(cfg Config, lm *loadedModel, cal planner.Calibration, budget planner.Budget, policy planner.Policy) (*planner.Pool, error) {
	if cfg.Concurrency <= 1 {
		return nil, nil
	}
	if _, ok := lm.m.Backend.(ml.ExpertResidency); !ok {
		policy.ExpertCache = planner.CacheNever
	}
	pool, err := planner.PlanPool(lm.profile, cal, budget, policy, cfg.Concurrency, engine.DefaultStepTokens, engine.DefaultBlockSize)
	if err != nil {
		return nil, fmt.Errorf("batch of %d slots: %w", cfg.Concurrency, err)
	}
	return &pool, nil
}

// batchPolicy is the policy a job of the pool is planned with: alone on the worker, in the
// pool's precision, without MTP, with every expert resident or (when the pool has a bounded
// cache) a cache. The pool's blocks, not this plan, bound what a job may hold (planBatched).
func batchPolicy(policy planner.Policy, pool *planner.Pool) planner.Policy {
	policy.KV, policy.DisableMTP, policy.ExpertCache = planner.ForceKV(pool.KV), true, planner.CacheNever
	if pool.Residency == planner.ResidencyCache {
		policy.ExpertCache = planner.CacheAllow
	}
	return policy
}

// prefixCacheOn reports whether a worker with pool (nil: one job at a time) has a prefix
// cache: a batching worker unless REDLITE_PREFIX_CACHE_MIB is 0, a worker of one job at a time
// only with REDLITE_PREFIX_CACHE_DIR.
func prefixCacheOn(cfg Config, pool *planner.Pool) bool {
	if pool != nil {
		return cfg.PrefixCacheMiB > 0
	}
	return cfg.PrefixCacheMiB > 0 && cfg.PrefixCacheDir != ""
}

// startPrefixStore makes the sessions' prefix cache of a worker running one job at a time.
// Its snapshots hold a whole state (KV entries too, 268 MiB for Qwen3-Next after 4,096
// tokens), so they live in REDLITE_PREFIX_CACHE_DIR only: a job's plan already takes the
// device's memory, and nothing in memory has to be planned beside it. Without the
// directory, such a worker has no prefix cache.
func (w *worker) startPrefixStore() error {
	if !prefixCacheOn(w.cfg, w.pool) {
		return nil
	}
	o := engine.PrefixCacheOptions{Dir: w.cfg.PrefixCacheDir, MaxDiskBytes: w.cfg.PrefixCacheDiskMiB << 20}
	store, err := w.lm.m.NewPrefixStore(engine.DefaultBlockSize, o)
	if err != nil {
		return configErr(fmt.Errorf("REDLITE_PREFIX_CACHE_DIR: %w", err))
	}
	w.prefixes = store
	return nil
}

// startBatching sizes the backend's expert cache as the pool says (one cache, shared by
// every sequence of every step) and starts the scheduler on the planned pool.
func (w *worker) startBatching() error {
	pool := *w.pool
	if err := w.lm.setExpertCache(pool.Residency, pool.ExpertCacheBytes); err != nil {
		return fmt.Errorf("batch of %d slots: %w", pool.Slots, err)
	}
	experts := w.lm.expertStats()
	var sched *engine.Scheduler
	o := engine.SchedulerOptions{
		KV: pool.KV, Slots: pool.Slots, Blocks: pool.Blocks, BlockSize: pool.BlockSize, StepTokens: pool.StepTokens,
		MaxWait: w.cfg.AdmissionTimeout,
		OnStep: func(s engine.StepStats) {
			w.m.batchSize.Observe(float64(s.Sequences))
			w.m.stepSeconds.Observe(s.Duration.Seconds())
			w.m.kvBlocks.WithLabelValues("free").Set(float64(s.FreeBlocks))
			w.m.kvBlocks.WithLabelValues("used").Set(float64(pool.Blocks - s.FreeBlocks))
			// The cache is the worker's, not a job's: its lookups are counted per step.
			now := w.lm.expertStats()
			w.m.countExperts(experts, now)
			experts = now
			w.m.prefix.observe(sched.PrefixStats(), pool.Breakdown.KVBytesPerPosition*int64(pool.BlockSize))
		},
	}
	if prefixCacheOn(w.cfg, w.pool) {
		// The planner planned the pool around this bound (planner.Policy.PrefixCacheMiB).
		o.Prefix = &engine.PrefixCacheOptions{MaxBytes: w.cfg.PrefixCacheMiB << 20, Dir: w.cfg.PrefixCacheDir, MaxDiskBytes: w.cfg.PrefixCacheDiskMiB << 20}
	}
	if o.Prefix != nil && o.Prefix.Dir != "" {
		// A directory that cannot be made is a configuration error (exit 2).
		if err := os.MkdirAll(o.Prefix.Dir, 0o755); err != nil {
			return configErr(fmt.Errorf("REDLITE_PREFIX_CACHE_DIR: %w", err))
		}
	}
	sched, err := w.lm.m.NewScheduler(o)
	if err != nil {
		return fmt.Errorf("batch scheduler: %w", err)
	}
	w.m.kvBlocks.WithLabelValues("free").Set(float64(pool.Blocks))
	w.m.kvBlocks.WithLabelValues("used").Set(0)
	w.sched = sched
	w.log.Info("batching", "slots", pool.Slots, "kv", pool.KV, "block_size", pool.BlockSize, "blocks", pool.Blocks,
		"positions_per_slot", pool.SlotContext, "step_tokens", pool.StepTokens, "experts", pool.Residency,
		"expert_cache_mib", pool.ExpertCacheBytes/planner.MiB, "need_mib", pool.NeedMiB, "limit_mib", pool.LimitMiB)
	return nil
}
