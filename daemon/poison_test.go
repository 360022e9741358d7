package daemon

import (
	"context"
	"log/slog"
	"regexp"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/cpu"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/internal/testlog"
	"github.com/redlite/batch/jobs"
)

// poisonBackend is the CPU backend with one fault planted: a forward pass whose token ids
// contain poison uploads ids past the end of the embedding table instead, so that the CPU
// backend's own Embed panics inside its parallel loop, on the pool's helper goroutines as
// well as the caller. It stands for any operation that panics mid-pass on a job's input.
type poisonBackend struct {
	*cpu.Backend
	poison int32
}

func (b *poisonBackend) NewContext() ml.Context {
	return &poisonContext{Context: b.Backend.NewContext(), poison: b.poison}
}

type poisonContext struct {
	ml.Context
	poison int32
}

func (c *poisonContext) InputIDs(ids []int32) ml.Tensor {
	if slices.Contains(ids, c.poison) {
		bad := make([]int32, len(ids))
		for i := range bad {
			bad[i] = 1<<20 + int32(i) // past any test vocabulary
		}
		ids = bad
	}
	return c.Context.InputIDs(ids)
}

var poisonError = regexp.MustCompile(`^engine fault: engine: forward pass: cpu: embed failed: panic: cpu: token id 10485[0-9]{2} outside token_embd.weight`)

// TestPoisonJob checks that a job whose forward pass panics inside a parallel loop of the
// CPU backend becomes a retried engine fault (the pass's error), archived when its retries
// are spent, while the daemon goes on serving the jobs after it.
func TestPoisonJob(t *testing.T) {
	b := setup(t)
	lm, err := loadModel(b.model, "", engine.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	const goodPrompt, poisonPrompt = "Once upon a time", "Once upon a time there was a poison apple"
	good := lm.tok.Encode(goodPrompt, false)
	var poison int32 = -1
	for _, id := range lm.tok.Encode(poisonPrompt, false) {
		if !slices.Contains(good, id) {
			poison = id
			break
		}
	}
	lm.close()
	if poison < 0 {
		t.Fatal("the poison prompt has no token the good one lacks")
	}

	cfg := b.cfg
	cfg.Threads = 2 // a pool with a helper goroutine
	d, err := New(cfg, Options{Logger: testlog.New(t, slog.LevelDebug), Registry: prometheus.NewRegistry(),
		Backend: &poisonBackend{Backend: cpu.New(2), poison: poison}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		d.Shutdown()
		t.Fatal(err)
	}
	t.Cleanup(d.Shutdown)

	bad := enqueue(t, b.client, &jobs.Generate{Prompt: poisonPrompt, MaxTokens: ptr(4)}, jobs.MaxRetry(1))
	st := waitFor(t, b.client, bad.ID, "archived", func(st jobs.Status) bool { return st.State == jobs.StateArchived })
	// Whichever goroutine reaches a bad id first reports it: any of the planted ids.
	if st.Retried != 1 || !poisonError.MatchString(st.LastError) {
		t.Errorf("poison job: retried %d, last error %q", st.Retried, st.LastError)
	}

	next := enqueue(t, b.client, &jobs.Generate{Prompt: goodPrompt, MaxTokens: ptr(4)})
	res, err := waitResult(t, b.client, next.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.CompletionTokens == 0 {
		t.Errorf("the job after the poison one: %+v", res)
	}
}
