package engine

import (
	"context"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/redlite/batch/engine/cpu"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/internal/fixtures"
)

// TestSchedulerExpertCache runs four sequences together through a scheduler whose backend
// holds a quarter of the routed experts in its bounded cache, shared by every sequence of
// each step: every greedy continuation equals the one the same batch gets with every expert
// resident, and the cache really missed and evicted (and never holds more than its capacity
// once the steps are over). Run with -race: the scheduler's passes, the pool's goroutines and
// the counters read from outside share the cache.
func TestSchedulerExpertCache(t *testing.T) {
	for _, name := range []string{"tiny-qwen3next-IQ2_XXS", "tiny-qwen3moe-F32"} {
		t.Run(name, func(t *testing.T) {
			resident := loadModelDot(t, name+".gguf", "auto")
			total := resident.Graph.(model.Facts).ExpertTotalBytes()
			b := cpu.New(0)
			if err := b.SetExpertCache(total / 4); err != nil {
				t.Fatal(err)
			}
			cached, err := Load(fixtures.Path(t, "models", name+".gguf"), Options{Backend: b, CPUDot: "auto"})
			if err != nil {
				t.Fatal(err)
			}
			defer cached.Close()
			vocab := resident.Config().Vocab
			rng := rand.New(rand.NewPCG(5, 6))
			prompts := [][]int32{randomTokens(rng, 90, vocab), randomTokens(rng, 7, vocab), randomTokens(rng, 33, vocab), randomTokens(rng, 1, vocab)}
			want := batchGreedy(t, resident, prompts, 20)
			// Read while the steps run: the daemon's metrics do.
			stop := make(chan struct{})
			var reads sync.WaitGroup
			reads.Add(1)
			go func() {
				defer reads.Done()
				for {
					select {
					case <-stop:
						return
					default:
						_ = b.ExpertStats()
					}
				}
			}()
			got := batchGreedy(t, cached, prompts, 20)
			close(stop)
			reads.Wait()
			for i := range prompts {
				if !slices.Equal(got[i], want[i]) {
					t.Errorf("sequence %d: with a quarter of the experts cached %v, all resident %v", i, got[i], want[i])
				}
			}
			st := b.ExpertStats()
			// A step of four sequences touches about half of each layer's experts; a quarter
			// of them stays (least recently used order would keep none to the next step).
			t.Logf("cache of %d of %d expert bytes: %+v", total/4, total, st)
			if st.Misses == 0 || st.Evictions == 0 || st.Bytes > st.Capacity {
				t.Errorf("cache stats %+v: want misses and evictions within capacity %d", st, total/4)
			}
		})
	}
}

// batchGreedy generates maxTokens greedy tokens for each prompt, all admitted in the same
// step of one scheduler of len(prompts) slots, in the order given: the batches (and so the
// arithmetic) are then the same on every run.
func batchGreedy(t *testing.T, m *Model, prompts [][]int32, maxTokens int) [][]int32 {
	t.Helper()
	tok, err := m.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	sch, err := m.NewScheduler(SchedulerOptions{KV: ml.F32, Slots: len(prompts), Blocks: 4 * len(prompts), BlockSize: 64, StepTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer sch.Close()
	out := make([][]int32, len(prompts))
	errs := make([]error, len(prompts))
	var wg sync.WaitGroup
	sch.Pause()
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := sch.Generate(context.Background(), p, 0, GenerateOptions{MaxTokens: maxTokens, Stream: tok.NewStreamDecoder()})
			out[i], errs[i] = g.Tokens, err
		}()
		for sch.Waiting() < i+1 {
			runtime.Gosched()
		}
	}
	sch.Resume()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("sequence %d: %v", i, err)
		}
	}
	return out
}
