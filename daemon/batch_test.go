package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/internal/testlog"
	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/metalkit"
	"github.com/redlite/batch/metalkit/harness/harnesstest"
	"github.com/redlite/batch/planner"
)

// batchJobs are greedy jobs of mixed lengths: their texts are reproducible, so the batch's
// results can be compared with the same jobs run one at a time.
func batchJobs() []*jobs.Generate {
	var out []*jobs.Generate
	for i, n := range []int{8, 40, 3, 64, 16, 100, 24, 5} {
		prompt := fmt.Sprintf("Job %d: %s", i, strings.Repeat("the quick brown fox jumps over the lazy dog ", 1+i*5))
		out = append(out, &jobs.Generate{Prompt: prompt, MaxTokens: ptr(n), Temperature: ptr(0.0)})
	}
	return out
}

// TestBatchedWorker enqueues 8 jobs of mixed lengths at once on one worker of concurrency 4
// and a long job that is cancelled while the others run: all 8 complete with the text the
// same jobs give on a worker of concurrency 1, their plans name the pool and a batch of
// several sequences, the cancelled job stops within a step and its blocks go back (every
// block is free or held by the prefix cache at the end), and the wall time is reported beside the one-at-a-time run.
//
// The tiny fixture model is all per-operation overhead, so its times say nothing of speed;
// REDLITE_TEST_BATCH_MODEL names a bigger GGUF to measure them on (a synth qwen3-0.6b, say).
func TestBatchedWorker(t *testing.T) {
	b := setup(t)
	run := func(concurrency int, cancelOne bool) ([]jobs.Result, time.Duration) {
		cfg := b.cfg
		cfg.Concurrency = concurrency
		if m := os.Getenv("REDLITE_TEST_BATCH_MODEL"); m != "" {
			cfg.Model, cfg.GPULimitMiB = m, 16384
		}
		d := startDaemon(t, cfg, Observer{})
		defer d.Shutdown()
		var long jobs.Job
		if cancelOne {
			long = enqueue(t, b.client, longGenerate())
			waitFor(t, b.client, long.ID, "the long job to decode", func(st jobs.Status) bool {
				return st.Progress != nil && st.Progress.Generated > 0
			})
		}
		start := time.Now()
		var ids []string
		for _, g := range batchJobs() {
			ids = append(ids, enqueue(t, b.client, g).ID)
		}
		if cancelOne {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := b.client.Cancel(ctx, long.ID); err != nil {
				t.Fatal(err)
			}
		}
		var out []jobs.Result
		for _, id := range ids {
			res, err := waitResult(t, b.client, id, nil)
			if err != nil {
				t.Fatalf("job %s: %v", id, err)
			}
			out = append(out, res)
		}
		wall := time.Since(start)
		if cancelOne {
			res, err := waitResult(t, b.client, long.ID, nil)
			if res.FinishReason != jobs.FinishCancelled || res.Usage.CompletionTokens >= jobs.MaxMaxTokens {
				t.Errorf("cancelled job: finish %q after %d tokens (%v)", res.FinishReason, res.Usage.CompletionTokens, err)
			}
			sched := d.w.sched
			// The prefix cache keeps the blocks of the prompts' whole blocks; the rest are free.
			waitUntil(t, "every KV block back in the pool or the prefix cache", func() bool {
				return sched.FreeBlocks()+sched.PrefixStats().KVBlocks == d.w.pool.Blocks
			})
		}
		return out, wall
	}
	batched, batchWall := run(4, true)
	alone, aloneWall := run(1, false)
	most := 0
	for i := range batched {
		got, want := batched[i], alone[i]
		if got.Text != want.Text || got.Usage != want.Usage || got.FinishReason != want.FinishReason {
			t.Errorf("job %d: batched %q (%+v, %s), alone %q (%+v, %s)", i, got.Text, got.Usage, got.FinishReason, want.Text, want.Usage, want.FinishReason)
		}
		p := got.Plan
		if p.Slots != 4 || p.BlockSize <= 0 || p.PoolBlocks <= 0 || p.Batch < 1 || p.Batch > 4 {
			t.Errorf("job %d: plan %+v, want 4 slots, the pool and the batch it ran in", i, p)
		}
		most = max(most, p.Batch)
	}
	if most < 2 {
		t.Errorf("no job ran beside another (largest batch %d)", most)
	}
	t.Logf("8 jobs: %v batched on 4 slots, %v one at a time (%.2f×)", batchWall.Round(time.Millisecond), aloneWall.Round(time.Millisecond), aloneWall.Seconds()/batchWall.Seconds())
}

// TestBatchedWorkerTooSmall: a worker whose limit cannot hold one KV block per slot refuses
// to start, naming the setting to change, and its Shutdown returns.
func TestBatchedWorkerTooSmall(t *testing.T) {
	b := setup(t)
	cfg := b.cfg
	cfg.Concurrency = 4
	cfg.GPULimitMiB = 1
	d, err := New(cfg, Options{Logger: testlog.New(t, slog.LevelDebug), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	err = d.Start(context.Background())
	d.Shutdown()
	if err == nil || !strings.Contains(err.Error(), "REDLITE_CONCURRENCY") {
		t.Errorf("start: %v, want a refusal naming REDLITE_CONCURRENCY", err)
	}
}

// TestBatchedWorkerExpertCache runs a batching worker (concurrency 4) on the smallest limit
// on which its pool holds the experts in a bounded cache (planner.PlanPool: every expert
// resident would leave a slot fewer than planner.PoolMinSlotContext positions): the worker's
// capabilities and every result's plan name the pool's cache; four greedy jobs in one batch
// give the texts the same jobs give on a batching worker with every expert resident; the
// cache missed and evicted, and its misses reach /metrics. On the CPU backend, and on the
// Metal backend with its kernels on the harness device once that backend has a bounded
// cache (ml.ExpertResidency).
func TestBatchedWorkerExpertCache(t *testing.T) {
	t.Run("cpu", func(t *testing.T) { testBatchedWorkerExpertCache(t, "cpu") })
	t.Run(metalkit.KindHarness, func(t *testing.T) {
		if testing.Short() {
			t.Skip("two batches of kernels on the harness device take minutes")
		}
		harnesstest.Device(t) // without clang-16: fails under CI, skips elsewhere
		testBatchedWorkerExpertCache(t, metalkit.KindHarness)
	})
}

func testBatchedWorkerExpertCache(t *testing.T, backend string) {
	b := setup(t)
	cfg := b.cfg
	cfg.Backend = backend
	cfg.Concurrency = 4
	cfg.Model = fixtures.Path(t, "models", "tiny-qwen3next-IQ2_XXS.gguf")
	// A pool beside a cache is f16 (it leaves the larger cache): so is the resident one here,
	// so that the runs differ in where expert bytes are read from alone.
	cfg.KV = "f16"
	be, err := metalkit.Open(cfg.Backend, cfg.Threads, cfg.Switches)
	if err != nil {
		t.Fatal(err)
	}
	lm, err := loadModel(cfg.Model, "", engine.Options{Backend: be, Threads: cfg.Threads, CPUDot: cfg.CPUDot})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.close()
	if _, ok := lm.m.Backend.(ml.ExpertResidency); !ok {
		t.Skipf("backend %s has no bounded expert cache (ml.ExpertResidency): its pools keep every expert resident", backend)
	}
	// The limit: the smallest on which the pool holds the experts in a cache, below the need
	// of every expert resident beside the minimum pool (in f16).
	cal, policy := planner.DefaultCalibration(lm.m.Backend.Name()), must(cfg.policy())
	full, err := planner.Estimate(planner.Config{Context: planner.PoolMinSlotContext, Slots: cfg.Concurrency, KV: ml.F16,
		Chunk: engine.DefaultStepTokens, Residency: planner.ResidencyFull, PrefixCacheBytes: policy.PrefixCacheMiB * planner.MiB}, lm.profile, cal)
	if err != nil {
		t.Fatal(err)
	}
	margin := withHostWeights(planner.Budget{MarginMiB: cfg.MarginMiB}, lm.m.HostWeightBytes()).MarginMiB
	cacheLimit := int64(0)
	for limit := full.NeedMiB() - 1 + margin; ; limit-- {
		c := cfg
		c.GPULimitMiB = limit
		budget := withHostWeights(must(DeviceBudget(c)), lm.m.HostWeightBytes())
		pool, err := planPool(c, lm, cal, budget, policy)
		if err != nil || pool.Residency != planner.ResidencyCache {
			break
		}
		cacheLimit = limit
	}
	if cacheLimit == 0 {
		t.Fatalf("no limit below %d MiB gives a pool with a cache", full.NeedMiB()+margin)
	}
	// Greedy jobs whose prompts fit one step together, all admitted in the same step: the
	// batches are then the same in both runs, whatever order asynq hands the jobs over in, so
	// the texts must be too (a batch's logits are within 1e-4 of a sequence's alone, which
	// would let a near-tie of this random model flip between differently made batches).
	var todo []*jobs.Generate
	for i, n := range []int{24, 40, 8, 32} {
		prompt := fmt.Sprintf("Job %d: %s", i, strings.Repeat("the quick brown fox jumps over the lazy dog ", 1+i))
		todo = append(todo, &jobs.Generate{Prompt: prompt, MaxTokens: ptr(n), Temperature: ptr(0.0)})
	}
	run := func(limit int64) (*Daemon, []jobs.Result) {
		cfg := cfg
		cfg.GPULimitMiB = limit
		d := startDaemon(t, cfg, Observer{})
		sched := d.w.sched
		sched.Pause()
		var ids []string
		for _, g := range todo {
			ids = append(ids, enqueue(t, b.client, g).ID)
		}
		waitUntil(t, "every job waiting for the batch", func() bool { return sched.Waiting() == len(todo) })
		sched.Resume()
		var out []jobs.Result
		for i, id := range ids {
			res, err := waitResult(t, b.client, id, nil)
			if err != nil {
				t.Fatalf("job %d: %v", i, err)
			}
			out = append(out, res)
		}
		return d, out
	}
	resident, want := run(cfg.GPULimitMiB)
	if p := resident.w.pool; p.Residency != planner.ResidencyFull || p.KV != ml.F16 {
		t.Fatalf("pool %+v at %d MiB, want every expert resident", p, cfg.GPULimitMiB)
	}
	resident.Shutdown()

	cfg.GPULimitMiB = cacheLimit
	d, got := run(cfg.GPULimitMiB)
	pool := d.w.pool
	if pool.Residency != planner.ResidencyCache || pool.ExpertCacheBytes < lm.profile.MinCacheBytes() || pool.SlotContext != planner.PoolMinSlotContext {
		t.Fatalf("pool %+v at %d MiB, want a bounded cache beside %d positions per slot", pool, cfg.GPULimitMiB, planner.PoolMinSlotContext)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	caps, err := b.client.Capabilities(ctx)
	if err != nil || len(caps) != 1 || caps[0].ExpertResidency != "cache" || caps[0].ExpertCacheMiB != pool.ExpertCacheBytes/planner.MiB {
		t.Errorf("capabilities %+v (%v), want the pool's cache of %d MiB", caps, err, pool.ExpertCacheBytes/planner.MiB)
	}
	most := 0
	for i, res := range got {
		if res.Text != want[i].Text || res.Usage != want[i].Usage {
			t.Errorf("job %d: with the pool's cache %q (%+v), every expert resident %q (%+v)", i, res.Text, res.Usage, want[i].Text, want[i].Usage)
		}
		p := res.Plan
		if p.ExpertResidency != string(planner.ResidencyCache) || p.ExpertCacheMiB != int(pool.ExpertCacheBytes/planner.MiB) || p.Slots != 4 || p.NeedMiB > int(cfg.GPULimitMiB) {
			t.Errorf("job %d: plan %+v, want the pool's cache of %d MiB", i, p, pool.ExpertCacheBytes/planner.MiB)
		}
		most = max(most, p.Batch)
	}
	if most != len(todo) {
		t.Errorf("largest batch %d, want all %d jobs in one", most, len(todo))
	}
	_, body := getURL(t, "http://"+d.HTTPAddr()+"/metrics")
	for _, result := range []string{"miss", "hit"} {
		m := regexp.MustCompile(`(?m)^redlite_expert_cache_lookups_total\{result="` + result + `"\} ([0-9.e+]+)$`).FindStringSubmatch(body)
		n, _ := strconv.ParseFloat(append(m, "", "0")[1], 64)
		if result == "miss" && n <= 0 {
			t.Errorf("no expert cache misses in /metrics: %v", m)
		}
		t.Logf("expert cache lookups, %s: %v", result, n)
	}
	es := d.lm.expertStats()
	if es.Capacity != pool.ExpertCacheBytes || es.Evictions == 0 || es.Bytes > es.Capacity {
		t.Errorf("the worker's cache %+v, want evictions within the pool's %d bytes", es, pool.ExpertCacheBytes)
	}
	t.Logf("%d MiB: a cache of %d of %d expert bytes: %+v", cfg.GPULimitMiB, pool.ExpertCacheBytes, lm.profile.ExpertCacheBytes, es)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
