package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/internal/fixtures"
)

// batchSeq is one sequence of TestBatchParity: its tokens, the step it starts at and the
// tokens it feeds per step.
type batchSeq struct {
	name   string
	tokens []int32
	start  int
	chunk  int
}

func randomTokens(rng *rand.Rand, n, vocab int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(rng.IntN(vocab - 3)) // the tiny vocabulary's last ids are control tokens
	}
	return ids
}

// TestBatchParity runs sequences of different lengths together, started at staggered steps
// and fed in chunks of different sizes, all in the same forward passes over one KV pool of
// small, scattered blocks. Every token's logits must be within the parity tolerances of the
// sequence run alone, and seq8 and seq64 within them of llama.cpp's exact references, for
// every fixture model and both KV precisions.
func TestBatchParity(t *testing.T) {
	files := fixtures.Models(t)
	if testing.Short() {
		files = []string{"tiny-qwen3-Q8_0", "tiny-qwen3moe-F32", "tiny-llama-F32", "tiny-gemma3-F32", "tiny-qwen3next-Q8_0", "tiny-qwen35moe-F32", "tiny-gpt-oss-F32"}
	}
	for _, name := range files {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name+".gguf")
			vocab := m.Config().Vocab
			rng := rand.New(rand.NewPCG(7, 8))
			refs := map[string]reference{}
			for _, seq := range []string{"seq8", "seq64"} {
				exact := "deqf32"
				if strings.HasSuffix(name, "-F32") {
					exact = "nofa-kvf32"
				}
				refs[seq] = loadReference(t, name, seq+"-"+exact)
			}
			seqs := []batchSeq{
				{"seq300", randomTokens(rng, 300, vocab), 0, 97},
				{"seq8", refs["seq8"].Tokens, 1, 3},
				{"seq64", refs["seq64"].Tokens, 1, 64},
				{"r1", randomTokens(rng, 1, vocab), 2, 1},
				{"r37", randomTokens(rng, 37, vocab), 3, 5},
				{"r150", randomTokens(rng, 150, vocab), 4, 150},
			}
			for _, kv := range ml.KVTypes {
				got := runBatched(t, m, seqs, kv)
				tol := fixtures.BatchTolerance(name, kv)
				for _, q := range seqs {
					alone := allLogits(t, m, q.tokens, 0, kv)
					d := compare(got[q.name], alone, vocab)
					t.Logf("%s %s KV batched vs alone: %v", q.name, kv, d)
					if d.max > tol {
						t.Errorf("%s %s KV: batched logits vs the sequence alone: %v, want max ≤ %g", q.name, kv, d, tol)
					}
					if ref, ok := refs[q.name]; ok && kv == ml.F32 {
						if d := compare(got[q.name], ref.logits, vocab); d.max > tol {
							t.Errorf("%s: batched logits vs llama.cpp's exact reference: %v, want max ≤ %g", q.name, d, tol)
						}
					}
				}
			}
		})
	}
}

// runBatched feeds seqs as the description says and returns every token's logits per
// sequence.
func runBatched(t *testing.T, m *Model, seqs []batchSeq, kv ml.DType) map[string][]float32 {
	t.Helper()
	vocab := m.Config().Vocab
	pool, err := m.Graph.NewKVPool(m.Backend, 40, 64, kv)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	// Scatter the pool's free list, so each sequence's blocks are out of order.
	hold, err := pool.Alloc(64 * 7)
	if err != nil {
		t.Fatal(err)
	}
	states := make([]model.State, len(seqs))
	fed := make([]int, len(seqs))
	out := map[string][]float32{}
	for step := 0; ; step++ {
		if step == 2 {
			hold.Free()
		}
		var b model.Batch
		var in []int
		for i, q := range seqs {
			if step < q.start || fed[i] == len(q.tokens) {
				continue
			}
			if states[i] == nil {
				if states[i], err = m.Graph.NewPooledState(m.Backend, pool, len(q.tokens)); err != nil {
					t.Fatal(err)
				}
				defer states[i].Free()
			}
			n := min(q.chunk, len(q.tokens)-fed[i])
			b = b.Add(states[i], q.tokens[fed[i]:fed[i]+n], fed[i], true)
			for j := len(b.Logits) - n; j < len(b.Logits); j++ {
				b.Logits[j] = true
			}
			in = append(in, i)
		}
		if len(in) == 0 {
			return out
		}
		ctx := m.Backend.NewContext()
		x := m.Graph.Forward(ctx, b)
		if err := ctx.Compute(); err != nil {
			t.Fatal(err)
		}
		logits, err := ctx.Read(x)
		ctx.Close()
		if err != nil {
			t.Fatal(err)
		}
		row := 0
		for _, i := range in {
			n := min(seqs[i].chunk, len(seqs[i].tokens)-fed[i])
			out[seqs[i].name] = append(out[seqs[i].name], logits[row*vocab:(row+n)*vocab]...)
			row += n
			fed[i] += n
		}
	}
}

// TestSchedulerGreedy submits sequences at staggered moments to a scheduler of fewer slots
// than sequences, with one cancelled while the others run: every other greedy continuation
// equals the one its prompt gets alone, the cancelled one ends as cancelled, and every KV
// block is back in the pool at the end.
func TestSchedulerGreedy(t *testing.T) {
	for _, name := range []string{"tiny-qwen3-Q8_0", "tiny-qwen3moe-F32", "tiny-llama-F32", "tiny-qwen3next-Q8_0"} {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name+".gguf")
			tok, err := m.Tokenizer()
			if err != nil {
				t.Fatal(err)
			}
			vocab := m.Config().Vocab
			rng := rand.New(rand.NewPCG(11, 12))
			prompts := [][]int32{randomTokens(rng, 300, vocab), randomTokens(rng, 8, vocab), randomTokens(rng, 64, vocab),
				randomTokens(rng, 1, vocab), randomTokens(rng, 129, vocab), randomTokens(rng, 20, vocab)}
			const maxTokens = 24
			alone := make([][]int32, len(prompts))
			for i, p := range prompts {
				s, err := m.NewSession(SessionOptions{Context: len(p) + maxTokens, KV: ml.F32})
				if err != nil {
					t.Fatal(err)
				}
				g, err := s.Generate(context.Background(), p, GenerateOptions{MaxTokens: maxTokens, Stream: tok.NewStreamDecoder()})
				s.Close()
				if err != nil {
					t.Fatal(err)
				}
				alone[i] = g.Tokens
			}

			var mu sync.Mutex
			var steps []StepStats
			sch, err := m.NewScheduler(SchedulerOptions{KV: ml.F32, Slots: 4, Blocks: 12, BlockSize: 64, StepTokens: 100,
				OnStep: func(s StepStats) { mu.Lock(); steps = append(steps, s); mu.Unlock() }})
			if err != nil {
				t.Fatal(err)
			}
			defer sch.Close()
			gens := make([]Generation, len(prompts)+1)
			errs := make([]error, len(prompts)+1)
			var wg sync.WaitGroup
			for i, p := range prompts {
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Duration(i) * 5 * time.Millisecond)
					gens[i], errs[i] = sch.Generate(context.Background(), p, 0, GenerateOptions{MaxTokens: maxTokens, Stream: tok.NewStreamDecoder()})
				}()
			}
			// A sequence cancelled once it has generated a few tokens.
			ctx, cancel := context.WithCancel(context.Background())
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := len(prompts)
				gens[c], errs[c] = sch.Generate(ctx, prompts[2], 0, GenerateOptions{MaxTokens: 100, Stream: tok.NewStreamDecoder(),
					OnToken: func(n int, _ string) {
						if n == 3 {
							cancel()
						}
					}})
			}()
			wg.Wait()
			for i := range prompts {
				if errs[i] != nil {
					t.Fatalf("sequence %d: %v", i, errs[i])
				}
				if !slices.Equal(gens[i].Tokens, alone[i]) {
					t.Errorf("sequence %d (%d prompt tokens): batched %v, alone %v", i, len(prompts[i]), gens[i].Tokens, alone[i])
				}
			}
			c := len(prompts)
			if !errors.Is(errs[c], context.Canceled) || gens[c].FinishReason != FinishCancelled || len(gens[c].Tokens) < 3 || len(gens[c].Tokens) > 4 {
				t.Errorf("cancelled sequence: %d tokens, finish %q, error %v; want 3 (one step late at most), cancelled", len(gens[c].Tokens), gens[c].FinishReason, errs[c])
			}
			if free := sch.FreeBlocks(); free != 12 {
				t.Errorf("%d of 12 KV blocks free after every sequence ended", free)
			}
			sch.Close() // no step runs after this
			most := 0
			for _, s := range steps {
				most = max(most, s.Sequences)
				if s.Tokens > 100 {
					t.Errorf("a step of %d tokens, over the budget of 100", s.Tokens)
				}
			}
			if most < 2 || most > 4 {
				t.Errorf("at most %d sequences in a step, want several and at most the 4 slots", most)
			}
		})
	}
}

// TestSchedulerRefuses checks the errors a scheduler gives without running anything.
func TestSchedulerRefuses(t *testing.T) {
	m := loadModel(t, "tiny-qwen3-Q8_0.gguf")
	tok, _ := m.Tokenizer()
	sch, err := m.NewScheduler(SchedulerOptions{KV: ml.F16, Slots: 2, Blocks: 4, BlockSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	o := GenerateOptions{MaxTokens: 10, Stream: tok.NewStreamDecoder()}
	if _, err := sch.Generate(context.Background(), make([]int32, 300), 0, o); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a sequence larger than the pool: %v, want ErrTooLarge", err)
	}
	if _, err := sch.Generate(context.Background(), []int32{1, 99999}, 0, o); !errors.Is(err, ErrBadToken) {
		t.Errorf("a token outside the vocabulary: %v, want ErrBadToken", err)
	}
	sch.Close()
	if _, err := sch.Generate(context.Background(), []int32{1}, 0, o); !errors.Is(err, ErrSchedulerClosed) {
		t.Errorf("after Close: %v, want ErrSchedulerClosed", err)
	}

	// One slot, busy: the second sequence gives up after MaxWait, having run nothing.
	sch, err = m.NewScheduler(SchedulerOptions{KV: ml.F32, Slots: 1, Blocks: 40, BlockSize: 64, MaxWait: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sch.Close()
	ctx, cancel := context.WithCancel(context.Background())
	busy := make(chan error, 1)
	go func() {
		// Far more tokens than can be generated in MaxWait: only the cancel below ends it.
		_, err := sch.Generate(ctx, []int32{1, 2, 3}, 0, GenerateOptions{MaxTokens: 2500, Stream: tok.NewStreamDecoder()})
		busy <- err
	}()
	for sch.FreeBlocks() == 40 {
		time.Sleep(time.Millisecond)
	}
	g, err := sch.Generate(context.Background(), []int32{4, 5}, 0, o)
	if !errors.Is(err, ErrAdmissionTimeout) || g.Queued < 30*time.Millisecond || g.CompletionTokens != 0 {
		t.Errorf("waiting past MaxWait: %v after %v with %d tokens, want ErrAdmissionTimeout after 30ms and none", err, g.Queued, g.CompletionTokens)
	}
	cancel()
	if err := <-busy; !errors.Is(err, context.Canceled) {
		t.Errorf("the busy sequence, cancelled: %v", err)
	}
	if false {
		t.Errorf("after Close: %v, want ErrSchedulerClosed", err)
	}
}

// TestSchedulerPanic: a panic in one sequence's callback (here its progress hook) fails that
// sequence with a *ml.PanicError carrying the stack; the sequence beside it completes.
func TestSchedulerPanic(t *testing.T) {
	m := loadModel(t, "tiny-qwen3-Q8_0.gguf")
	tok, _ := m.Tokenizer()
	sch, err := m.NewScheduler(SchedulerOptions{KV: ml.F32, Slots: 2, Blocks: 4, BlockSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer sch.Close()
	sch.Pause()
	errs := make(chan error, 2)
	go func() {
		_, err := sch.Generate(context.Background(), []int32{1, 2, 3}, 0, GenerateOptions{MaxTokens: 5, Stream: tok.NewStreamDecoder(),
			OnPrefill: func(int, int) { panic("boom") }})
		errs <- err
	}()
	var good Generation
	go func() {
		var err error
		good, err = sch.Generate(context.Background(), []int32{4, 5, 6}, 0, GenerateOptions{MaxTokens: 5, Stream: tok.NewStreamDecoder()})
		errs <- err
	}()
	for sch.Waiting() < 2 {
		time.Sleep(time.Millisecond)
	}
	sch.Resume()
	var panicked, fine int
	for range 2 {
		var pe *ml.PanicError
		switch err := <-errs; {
		case errors.As(err, &pe) && pe.Value == "boom" && len(pe.Stack) > 0:
			panicked++
		case err == nil:
			fine++
		default:
			t.Errorf("unexpected error %v", err)
		}
	}
	if panicked != 1 || fine != 1 || good.CompletionTokens != 5 {
		t.Errorf("%d panicked, %d fine (%d tokens); want one each, 5 tokens", panicked, fine, good.CompletionTokens)
	}
	if sch.FreeBlocks() != 4 {
		t.Errorf("%d of 4 blocks free", sch.FreeBlocks())
	}
}
