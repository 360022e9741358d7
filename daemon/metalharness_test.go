package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/synth"
	"github.com/redlite/batch/engine/tokenizer"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/metalkit"
	"github.com/redlite/batch/metalkit/harness/harnesstest"
	"github.com/redlite/batch/planner"
)

// TestMetalHarnessJob runs a job end to end — Redis, the daemon, the engine — on the Metal
// backend with its kernels on the harness device (REDLITE_BACKEND=metal-harness), and checks
// its greedy text against the CPU backend's.
func TestMetalHarnessJob(t *testing.T) {
	harnesstest.Device(t) // without clang-16: fails under CI, skips elsewhere
	b := setup(t)
	cfg := b.cfg
	cfg.Backend = metalkit.KindHarness
	const prompt, maxTokens = "The harness runs Metal kernels on the CPU.", 8

	// The Metal kernels compute with float32 activations: the CPU's exact path.
	lm, err := loadModel(cfg.Model, "", engine.Options{Threads: 1, CPUDot: "exact"})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.close()
	want := greedy(t, lm, prompt, maxTokens)

	d := startDaemon(t, cfg, Observer{})
	job := enqueue(t, b.client, &jobs.Generate{Prompt: prompt, MaxTokens: ptr(maxTokens), Temperature: ptr(0.0)})
	res, err := waitResult(t, b.client, job.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Plan.Backend != metalkit.KindHarness {
		t.Errorf("result's plan.backend %q, want %s", res.Plan.Backend, metalkit.KindHarness)
	}
	if res.Text != want.Text || res.Usage.CompletionTokens != want.CompletionTokens {
		t.Errorf("metal-harness wrote %q (%d tokens); the CPU %q (%d)", res.Text, res.Usage.CompletionTokens, want.Text, want.CompletionTokens)
	}
	_, body := getURL(t, "http://"+d.HTTPAddr()+"/metrics")
	if !regexp.MustCompile(`redlite_build_info\{backend="metal-harness",`).MatchString(body) {
		t.Errorf("/metrics has no build info of backend metal-harness")
	}
}

// TestMetalHarnessBoundedExpertCache runs a MoE job on the Metal backend (harness device) of
// a worker whose limit is one MiB short of holding every expert: the plan takes a bounded
// expert cache, which the Metal backend now has (metalkit/experts.go), and the greedy text is
// the CPU's.
func TestMetalHarnessBoundedExpertCache(t *testing.T) {
	harnesstest.Device(t)
	b := setup(t)
	cfg := b.cfg
	cfg.Backend = metalkit.KindHarness
	cfg.Model = fixtures.Path(t, "models", "tiny-qwen3next-IQ2_XXS.gguf")
	const prompt, maxTokens = "Experts that do not all fit stay in a cache.", 6
	lm, err := loadModel(cfg.Model, "", engine.Options{Threads: 1, CPUDot: "exact"})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.close()
	ids := lm.tok.EncodeWith(prompt, tokenizer.EncodeOpts{AddSpecial: true})
	full, err := planner.Choose(planner.Job{PromptTokens: len(ids), MaxTokens: maxTokens, Policy: planner.Policy{MaxChunk: cfg.MaxChunk}},
		lm.profile, planner.DefaultCalibration(metalkit.KindHarness), planner.Budget{LimitMiB: 1 << 20, Source: planner.SourceOverride})
	if err != nil {
		t.Fatal(err)
	}
	want := greedy(t, lm, prompt, maxTokens)

	cfg.GPULimitMiB = full.NeedMiB - 1
	d := startDaemon(t, cfg, Observer{})
	job := enqueue(t, b.client, &jobs.Generate{Prompt: prompt, MaxTokens: ptr(maxTokens), Temperature: ptr(0.0)})
	res, err := waitResult(t, b.client, job.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Plan.Backend != metalkit.KindHarness || res.Plan.ExpertResidency != string(planner.ResidencyCache) || res.Plan.ExpertCacheMiB <= 0 {
		t.Errorf("plan %+v, want a bounded expert cache on %s", res.Plan, metalkit.KindHarness)
	}
	if res.Text != want.Text || res.Usage.CompletionTokens != want.CompletionTokens {
		t.Errorf("metal-harness with a bounded cache wrote %q (%d tokens); the CPU %q (%d)", res.Text, res.Usage.CompletionTokens, want.Text, want.CompletionTokens)
	}
	expertMisses(t, d)
}

// greedy is what lm generates greedily from prompt.
func greedy(t *testing.T, lm *loadedModel, prompt string, maxTokens int) engine.Generation {
	t.Helper()
	ids := lm.tok.EncodeWith(prompt, tokenizer.EncodeOpts{AddSpecial: true})
	s, err := lm.m.NewSession(engine.SessionOptions{Context: len(ids) + maxTokens})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g, err := s.Generate(context.Background(), ids, engine.GenerateOptions{MaxTokens: maxTokens, Vocab: lm.tok, Stream: lm.tok.NewStreamDecoder()})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// expertMisses fails unless the daemon's /metrics count expert cache misses: the cache was
// really used.
func expertMisses(t *testing.T, d *Daemon) {
	t.Helper()
	_, body := getURL(t, "http://"+d.HTTPAddr()+"/metrics")
	miss := regexp.MustCompile(`(?m)^redlite_expert_cache_lookups_total\{result="miss"\} ([0-9.e+]+)$`).FindStringSubmatch(body)
	if n, _ := strconv.ParseFloat(append(miss, "", "0")[1], 64); n <= 0 {
		t.Errorf("no expert cache misses in /metrics: %v", miss)
	}
}

// TestMetalHarnessMTPAndBatch runs greedy jobs of a model with an MTP head (the synthesized
// tiny-qwen3next-mtp) on REDLITE_BACKEND=metal-harness: alone on a worker of concurrency 1
// the plan takes MTP (self-speculative decoding on the Metal backend); on a worker of
// concurrency 2 the two jobs run batched, whose steps attend both sequences' decode tokens
// in one dispatch, and without MTP (a batch never drafts). Every text equals the CPU's
// greedy text without MTP.
func TestMetalHarnessMTPAndBatch(t *testing.T) {
	harnesstest.Device(t)
	if testing.Short() {
		t.Skip("qwen3next on the harness device (-short skips it)")
	}
	path := filepath.Join(t.TempDir(), "tiny-qwen3next-mtp.gguf")
	if _, err := synth.WriteFile(context.Background(), path, "tiny-qwen3next-mtp", synth.Options{Type: synth.Q8_0, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	prompts := []string{"The harness runs Metal kernels.", "Two jobs share a step."}
	const maxTokens = 6
	lm, err := loadModel(path, "", engine.Options{Threads: 1, CPUDot: "exact"})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.close()
	var want []string
	for _, p := range prompts {
		want = append(want, greedy(t, lm, p, maxTokens).Text)
	}
	for _, concurrency := range []int{1, 2} {
		t.Run(fmt.Sprintf("concurrency=%d", concurrency), func(t *testing.T) {
			b := setup(t)
			cfg := b.cfg
			cfg.Backend, cfg.Model, cfg.Concurrency = metalkit.KindHarness, path, concurrency
			startDaemon(t, cfg, Observer{})
			var ids []string
			for _, p := range prompts[:concurrency] {
				ids = append(ids, enqueue(t, b.client, &jobs.Generate{Prompt: p, MaxTokens: ptr(maxTokens), Temperature: ptr(0.0)}).ID)
			}
			most := 0
			for i, id := range ids {
				res, err := waitResult(t, b.client, id, nil)
				if err != nil {
					t.Fatal(err)
				}
				if res.Text != want[i] {
					t.Errorf("job %d: metal-harness wrote %q; the CPU without MTP %q", i, res.Text, want[i])
				}
				if res.Plan.Backend != metalkit.KindHarness || res.Plan.MTP != (concurrency == 1) {
					t.Errorf("job %d: plan on %s with MTP %v, want %s with MTP %v", i, res.Plan.Backend, res.Plan.MTP, metalkit.KindHarness, concurrency == 1)
				}
				most = max(most, res.Plan.Batch)
			}
			if concurrency > 1 && most < 2 {
				t.Errorf("the jobs never ran in one step (largest batch %d)", most)
			}
		})
	}
}
