package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlite/batch/internal/testlog"
	"github.com/redlite/batch/jobs"
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
// block is free at the end), and the wall time is reported beside the one-at-a-time run.
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
			waitUntil(t, "every KV block back in the pool", func() bool { return sched.FreeBlocks() == d.w.pool.Blocks })
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
