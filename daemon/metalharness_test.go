package daemon

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/engine/tokenizer"
	"github.com/redlite/batch/jobs"
	"github.com/redlite/batch/metalkit"
	"github.com/redlite/batch/metalkit/harness/harnesstest"
)

// TestMetalHarnessJob runs a job end to end — Redis, the daemon, the engine — on the Metal
// backend with its kernels on the harness device (REDLITE_BACKEND=metal-harness), and checks
// its greedy text against the CPU backend's. While an operation of the Metal backend is not
// implemented (metalkit/pending.go, until the matrix and attention kernels are merged) the
// test skips, saying which.
func TestMetalHarnessJob(t *testing.T) {
	if err := metalPending(t); err != nil {
		t.Skipf("the Metal backend cannot run a forward pass yet: %v", err)
	}
	b := setup(t)
	cfg := b.cfg
	cfg.Backend = metalkit.KindHarness
	const prompt, maxTokens = "The harness runs Metal kernels on the CPU.", 8

	// What the CPU backend generates greedily.
	lm, err := loadModel(cfg.Model, "", engine.Options{Threads: 1})
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

// metalPending runs a pass of the operations every model needs on the Metal backend over the
// harness and returns the "not implemented yet" error of an operation still pending.
func metalPending(t *testing.T) error {
	be := metalkit.New(harnesstest.Device(t))
	// On a page, as the file mappings Map takes start.
	const page = 16 << 10
	buf := make([]byte, 2*page)
	data := buf[page-int(uintptr(unsafe.Pointer(&buf[0]))%page):][:4*8*8]
	m, err := be.Map(data)
	if err != nil {
		t.Fatal(err)
	}
	w, err := be.Weight(m, "w", quant.F32, []int{8, 8}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx := be.NewContext()
	defer ctx.Close()
	ctx.MatMul(w, ctx.Embed(w, ctx.InputIDs([]int32{1})))
	if c, err := be.NewCache(1, 1, 8, 4, ml.F32); err != nil {
		if strings.Contains(err.Error(), "not implemented yet") {
			return err
		}
		t.Fatal(err)
	} else {
		c.Free()
	}
	if err := ctx.Compute(); err != nil && strings.Contains(err.Error(), "not implemented yet") {
		return err
	}
	return nil
}
