package engine

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/sample"
	"github.com/redlite/batch/engine/synth"
	"github.com/redlite/batch/grammar"
	"github.com/redlite/batch/grammar/grammartest"
)

func schemaMatcher(t testing.TB, m *Model, schema string) *grammar.Matcher {
	t.Helper()
	g, err := grammar.FromJSONSchema([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	p, err := grammar.Compile(g)
	if err != nil {
		t.Fatal(err)
	}
	v, err := m.GrammarVocab()
	if err != nil {
		t.Fatal(err)
	}
	return grammar.NewMatcher(p, v)
}

// TestConstrainedGenerate samples from a random-weight model, whose unconstrained output is
// noise, under each test schema and several seeds, in sessions and in one scheduler's
// batch: only the grammar can make every output a document the schema validates.
func TestConstrainedGenerate(t *testing.T) {
	m := loadModel(t, "tiny-qwen3-Q8_0.gguf")
	tok, err := m.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	prompt := tok.Encode("Reply in JSON:", false)
	const maxTokens = 1500
	opts := func(t *testing.T, schema string, seed uint64) GenerateOptions {
		p := sample.DefaultParams()
		p.Temperature, p.TopK, p.TopP, p.MinP, p.Seed = 1, 0, 1, 0, seed
		smp, err := sample.New(p)
		if err != nil {
			t.Fatal(err)
		}
		return GenerateOptions{MaxTokens: maxTokens, Sampler: smp, Vocab: tok, Stream: tok.NewStreamDecoder(), Grammar: schemaMatcher(t, m, schema)}
	}
	check := func(t *testing.T, name string, seed uint64, g Generation) {
		t.Helper()
		if g.FinishReason != FinishStop {
			t.Errorf("%s seed %d: finish %s after %d tokens: %.200q", name, seed, g.FinishReason, g.CompletionTokens, g.Text)
			return
		}
		if err := grammartest.Validate([]byte(grammartest.Schemas[name]), []byte(g.Text)); err != nil {
			t.Errorf("%s seed %d: %v", name, seed, err)
		}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range grammartest.Schemas {
			if !yield(n) {
				return
			}
		}
	})
	t.Run("session", func(t *testing.T) {
		for _, name := range names {
			for seed := range uint64(3) {
				s, err := m.NewSession(SessionOptions{Context: len(prompt) + maxTokens, KV: ml.F32})
				if err != nil {
					t.Fatal(err)
				}
				g, err := s.Generate(context.Background(), prompt, opts(t, grammartest.Schemas[name], seed))
				s.Close()
				if err != nil {
					t.Fatal(err)
				}
				check(t, name, seed, g)
			}
		}
	})
	// The control: the same sampling without the grammar gives no valid document.
	t.Run("unconstrained", func(t *testing.T) {
		for _, name := range names {
			o := opts(t, grammartest.Schemas[name], 0)
			o.Grammar, o.MaxTokens = nil, 64
			s, err := m.NewSession(SessionOptions{Context: len(prompt) + o.MaxTokens, KV: ml.F32})
			if err != nil {
				t.Fatal(err)
			}
			g, err := s.Generate(context.Background(), prompt, o)
			s.Close()
			if err != nil {
				t.Fatal(err)
			}
			if grammartest.Validate([]byte(grammartest.Schemas[name]), []byte(g.Text)) == nil {
				t.Errorf("%s: the random model's unconstrained output %q validates", name, g.Text)
			}
		}
	})
	// In one batch, the sequences of a schema share one compiled program (and so its states).
	t.Run("scheduler", func(t *testing.T) {
		sch, err := m.NewScheduler(SchedulerOptions{KV: ml.F32, Slots: 4, Blocks: 64, BlockSize: 128})
		if err != nil {
			t.Fatal(err)
		}
		defer sch.Close()
		v, err := m.GrammarVocab()
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for _, name := range names {
			g, err := grammar.FromJSONSchema([]byte(grammartest.Schemas[name]))
			if err != nil {
				t.Fatal(err)
			}
			prog := grammar.MustCompile(g)
			for seed := uint64(10); seed < 13; seed++ {
				o := opts(t, grammartest.Schemas[name], seed)
				o.Grammar = grammar.NewMatcher(prog, v)
				wg.Go(func() {
					g, err := sch.Generate(context.Background(), prompt, 0, o)
					if err != nil {
						t.Error(err)
						return
					}
					check(t, name, seed, g)
				})
			}
		}
		wg.Wait()
	})
}

// TestLogprobs checks each generated token's logprob (and its alternatives) against the
// log-softmax of the logits that `redlite logits` writes for the same tokens: one prefill of
// prompt and output with every position's logits.
func TestLogprobs(t *testing.T) {
	m := loadModel(t, "tiny-qwen3-Q8_0.gguf")
	tok, err := m.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	prompt := tok.Encode("The logprobs of", false)
	p := sample.DefaultParams()
	p.Temperature, p.Seed = 0.9, 7
	smp, err := sample.New(p)
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.NewSession(SessionOptions{Context: 256, KV: ml.F32})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g, err := s.Generate(context.Background(), prompt, GenerateOptions{MaxTokens: 24, Sampler: smp, Vocab: tok, Stream: tok.NewStreamDecoder(), Logprobs: true, TopLogprobs: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Logprobs) != len(g.Tokens) || len(g.Tokens) == 0 {
		t.Fatalf("%d logprobs for %d tokens", len(g.Logprobs), len(g.Tokens))
	}
	all := append(slices.Clone(prompt), g.Tokens...)
	ref, err := m.NewSession(SessionOptions{Context: len(all), KV: ml.F32})
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	logits, err := ref.Prefill(context.Background(), all, PrefillOptions{AllLogits: true})
	if err != nil {
		t.Fatal(err)
	}
	vocab := m.Config().Vocab
	for i, lp := range g.Logprobs {
		row := logits[(len(prompt)-1+i)*vocab : (len(prompt)+i)*vocab]
		want := logSoftmax(row)
		if lp.ID != g.Tokens[i] {
			t.Fatalf("token %d: logprob of %d, token %d", i, lp.ID, g.Tokens[i])
		}
		if d := math.Abs(float64(lp.Logprob) - want[lp.ID]); d > 1e-3 {
			t.Errorf("token %d (%d): logprob %v, log-softmax of the logits %v", i, lp.ID, lp.Logprob, want[lp.ID])
		}
		if len(lp.Top) != 5 {
			t.Fatalf("token %d: %d alternatives", i, len(lp.Top))
		}
		order := make([]int, vocab)
		for j := range order {
			order[j] = j
		}
		slices.SortStableFunc(order, func(a, b int) int { return -cmpFloat(want[a], want[b]) })
		for j, alt := range lp.Top {
			if d := math.Abs(float64(alt.Logprob) - want[alt.ID]); d > 1e-3 {
				t.Errorf("token %d alternative %d: %v, want %v", i, j, alt.Logprob, want[alt.ID])
			}
			if d := math.Abs(want[order[j]] - want[alt.ID]); d > 1e-5 {
				t.Errorf("token %d: alternative %d is %d (%v), the %d-th most likely is %d (%v)", i, j, alt.ID, want[alt.ID], j, order[j], want[order[j]])
			}
		}
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func logSoftmax(row []float32) []float64 {
	m := math.Inf(-1)
	for _, l := range row {
		m = math.Max(m, float64(l))
	}
	var sum float64
	for _, l := range row {
		sum += math.Exp(float64(l) - m)
	}
	out := make([]float64, len(row))
	for i, l := range row {
		out[i] = float64(l) - m - math.Log(sum)
	}
	return out
}

// BenchmarkConstrainedStep compares a decode step of the qwen3-0.6b synth (151,936 tokens)
// with and without a JSON Schema grammar masking its logits, and the grammar's own share
// (mask, sample, accept) alone. The synth (Q8_0, ~0.6 GB) is written once into the
// temporary directory and kept there for later runs.
func BenchmarkConstrainedStep(b *testing.B) {
	path := filepath.Join(os.TempDir(), "redlite-bench-qwen3-0.6b-q8_0.gguf")
	if _, err := os.Stat(path); err != nil {
		if _, err := synth.WriteFile(context.Background(), path, "qwen3-0.6b", synth.Options{Type: synth.Q8_0, Seed: 1}); err != nil {
			b.Fatal(err)
		}
	}
	m, err := Load(path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	tok, err := m.Tokenizer()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.GrammarVocab(); err != nil { // built once per model, outside the steps
		b.Fatal(err)
	}
	prompt := tok.Encode("Reply in JSON:", false)
	const capacity = 512
	schema := grammartest.Schemas["person"]
	run := func(b *testing.B, constrained, decode bool) {
		ctx := context.Background()
		var s *Session
		var t *generation
		var logits []float32
		open := func() {
			if s != nil {
				s.Close()
			}
			var err error
			if s, err = m.NewSession(SessionOptions{Context: capacity, KV: ml.F32}); err != nil {
				b.Fatal(err)
			}
			p := sample.DefaultParams()
			p.Seed = 3
			smp, _ := sample.New(p)
			o := GenerateOptions{MaxTokens: capacity, Sampler: smp, Vocab: tok, Stream: tok.NewStreamDecoder()}
			if constrained {
				o.Grammar = schemaMatcher(b, m, schema)
			}
			if t, err = newGeneration(o, len(prompt)); err != nil {
				b.Fatal(err)
			}
			if logits, err = s.Prefill(ctx, prompt, PrefillOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		open()
		// Picking (mask, sample, accept) and decoding are timed apart too, so that the
		// grammar's share of a step is measured under the same load as the step.
		var picking, decoding time.Duration
		b.ResetTimer()
		for b.Loop() {
			start := time.Now()
			id, err := t.pick(logits)
			picking += time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			if t.accept(id, s.Pos(), capacity-1) {
				b.StopTimer()
				open()
				b.StartTimer()
				continue
			}
			if decode {
				start := time.Now()
				if logits, err = s.Decode(ctx, id); err != nil {
					b.Fatal(err)
				}
				decoding += time.Since(start)
			}
		}
		b.StopTimer()
		s.Close()
		b.ReportMetric(float64(picking.Microseconds())/float64(b.N), "pick-µs/op")
		if decode {
			b.ReportMetric(100*picking.Seconds()/decoding.Seconds(), "pick-%-of-decode")
		}
	}
	b.Run("unconstrained", func(b *testing.B) { run(b, false, true) })
	b.Run("constrained", func(b *testing.B) { run(b, true, true) })
	// The grammar's share alone: the same logits every step (no decode), so the mask is
	// recomputed only where the grammar reaches a state it has not seen.
	b.Run("sample-only", func(b *testing.B) { run(b, false, false) })
	b.Run("grammar-only", func(b *testing.B) { run(b, true, false) })
	// The worst step: a state never seen, inside a string, where nearly every token is
	// allowed and the trie walk visits nearly the whole vocabulary.
	b.Run("fresh-mask", func(b *testing.B) {
		g, err := grammar.FromJSONSchema([]byte(schema))
		if err != nil {
			b.Fatal(err)
		}
		v, _ := m.GrammarVocab()
		logits := make([]float32, v.Size())
		for b.Loop() {
			b.StopTimer()
			p := grammar.MustCompile(g) // a new program: nothing learnt by the last one
			b.StartTimer()
			mt := grammar.NewMatcher(p, v)
			if err := mt.AcceptBytes([]byte(`{"name":"`)); err != nil {
				b.Fatal(err)
			}
			if err := mt.Mask(logits); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(v.TrieNodes()), "trie-nodes")
	})
	b.Run("vocab", func(b *testing.B) {
		for b.Loop() {
			grammar.NewVocab(m.Config().Vocab, func(id int32) string { return tok.Decode([]int32{id}) }, tok.EOG())
		}
	})
}
