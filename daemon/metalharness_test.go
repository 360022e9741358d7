package daemon

import (
	"context"
	"regexp"
	"testing"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/tokenizer"
	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/metalkit"
	"github.com/redlite/batch/metalkit/harness/harnesstest"
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

	// What the CPU backend generates greedily.
	// The Metal kernels compute with float32 activations: the CPU's exact path.
	lm, err := loadModel(cfg.Model, "", engine.Options{Threads: 1, CPUDot: "exact"})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.close()
	ids := lm.tok.EncodeWith(prompt, tokenizer.EncodeOpts{AddSpecial: true})
	s, err := lm.m.NewSession(engine.SessionOptions{Context: len(ids) + maxTokens})
	if err != nil {
		t.Fatal(err)
	}
	want, err := s.Generate(context.Background(), ids, engine.GenerateOptions{MaxTokens: maxTokens, Vocab: lm.tok, Stream: lm.tok.NewStreamDecoder()})
	s.Close()
	if err != nil {
		t.Fatal(err)
	}

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
