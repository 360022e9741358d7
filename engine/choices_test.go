package engine

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/sample"
)

// TestGenerateN asks for three completions of one prompt, alone in a session and in the
// batch scheduler (two slots, so the third waits for one): each completion must be the one
// its seed stream gives the prompt alone, the first the one of the request without n, the
// three must differ when sampled and be equal when greedy, and the scheduler must read the
// prompt once.
func TestGenerateN(t *testing.T) {
	for _, name := range []string{"tiny-qwen3-Q8_0", "tiny-qwen3next-Q8_0"} {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name+".gguf")
			tok, err := m.Tokenizer()
			if err != nil {
				t.Fatal(err)
			}
			prompt := randomTokens(rand.New(rand.NewPCG(3, 4)), 200, m.Config().Vocab)
			const n, maxTokens = 3, 12
			opts := func(greedy bool) []GenerateOptions {
				os := make([]GenerateOptions, n)
				for i := range os {
					os[i] = GenerateOptions{MaxTokens: maxTokens, Stream: tok.NewStreamDecoder()}
					if !greedy {
						smp, err := sample.New(sample.Params{Temperature: 1, TopP: 1, Seed: 42, Stream: uint64(i)})
						if err != nil {
							t.Fatal(err)
						}
						os[i].Sampler = smp
					}
				}
				return os
			}
			session := func() *Session {
				s, err := m.NewSession(SessionOptions{Context: len(prompt) + maxTokens, KV: ml.F32})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Close)
				return s
			}
			alone := make([][]int32, n)
			for i, o := range opts(false) {
				g, err := session().Generate(context.Background(), prompt, o)
				if err != nil {
					t.Fatal(err)
				}
				alone[i] = g.Tokens
			}
			for i := range n {
				for j := range i {
					if slices.Equal(alone[i], alone[j]) {
						t.Fatalf("seed streams %d and %d sampled the same tokens %v", j, i, alone[i])
					}
				}
			}
			check := func(how string, gs []Generation, err error, want [][]int32) {
				t.Helper()
				if err != nil {
					t.Fatalf("%s: %v", how, err)
				}
				if len(gs) != n {
					t.Fatalf("%s: %d generations, want %d", how, len(gs), n)
				}
				for i, g := range gs {
					if !slices.Equal(g.Tokens, want[i]) {
						t.Errorf("%s: completion %d is %v, want %v", how, i, g.Tokens, want[i])
					}
					if g.PromptTokens != len(prompt) || g.FinishReason == "" {
						t.Errorf("%s: completion %d: %d prompt tokens, finish %q", how, i, g.PromptTokens, g.FinishReason)
					}
				}
			}
			gs, err := session().GenerateN(context.Background(), prompt, opts(false))
			check("session", gs, err, alone)
			greedy, err := session().GenerateN(context.Background(), prompt, opts(true))
			check("session, greedy", greedy, err, [][]int32{greedy[0].Tokens, greedy[0].Tokens, greedy[0].Tokens})

			var mu sync.Mutex
			fed := 0
			sch, err := m.NewScheduler(SchedulerOptions{KV: ml.F32, Slots: 2, Blocks: 8, BlockSize: 64, StepTokens: 64,
				OnStep: func(s StepStats) { mu.Lock(); fed += s.Tokens; mu.Unlock() }})
			if err != nil {
				t.Fatal(err)
			}
			defer sch.Close()
			gs, err = sch.GenerateN(context.Background(), prompt, 0, opts(false))
			check("scheduler", gs, err, alone)
			if gs[1].Batch < 2 {
				t.Errorf("completion 1 ran in steps of at most %d sequences; want it decoded beside another", gs[1].Batch)
			}
			mu.Lock()
			// Every completion feeds its tokens but the last; the prompt is fed once.
			want := len(prompt)
			for _, g := range gs {
				want += len(g.Tokens) - 1
			}
			if fed > want+n {
				t.Errorf("the steps fed %d tokens, want about %d: the prompt once and each completion's tokens", fed, want)
			}
			mu.Unlock()
			gs, err = sch.GenerateN(context.Background(), prompt, 0, opts(true))
			check("scheduler, greedy", gs, err, [][]int32{greedy[0].Tokens, greedy[0].Tokens, greedy[0].Tokens})
			if free := sch.FreeBlocks(); free != 8 {
				t.Errorf("%d of 8 KV blocks free after every completion ended", free)
			}
		})
	}
}

// BenchmarkGenerateN compares three completions of a 1,000-token prompt as one GenerateN
// (one prefill, three forks decoding together) with three Generate calls side by side in
// the same scheduler (three prefills).
func BenchmarkGenerateN(b *testing.B) {
	m := loadModel(b, "tiny-qwen3-Q8_0.gguf")
	tok, err := m.Tokenizer()
	if err != nil {
		b.Fatal(err)
	}
	prompt := randomTokens(rand.New(rand.NewPCG(5, 6)), 1000, m.Config().Vocab)
	const n, maxTokens = 3, 16
	opts := func() []GenerateOptions {
		os := make([]GenerateOptions, n)
		for i := range os {
			os[i] = GenerateOptions{MaxTokens: maxTokens, Stream: tok.NewStreamDecoder()}
		}
		return os
	}
	sch, err := m.NewScheduler(SchedulerOptions{KV: ml.F32, Slots: n, Blocks: 3 * 5, BlockSize: 256})
	if err != nil {
		b.Fatal(err)
	}
	defer sch.Close()
	b.Run("OnePrefill", func(b *testing.B) {
		for b.Loop() {
			if _, err := sch.GenerateN(context.Background(), prompt, 0, opts()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ThreeRequests", func(b *testing.B) {
		for b.Loop() {
			var wg sync.WaitGroup
			for _, o := range opts() {
				wg.Go(func() {
					if _, err := sch.Generate(context.Background(), prompt, 0, o); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
		}
	})
}
