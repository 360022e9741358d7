package engine

import (
	"context"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/internal/fixtures"
)

// reference is one llama.cpp logits case from the fixtures (fixtures.LoadLogits).
type reference struct {
	Tokens []int32
	Shape  []int
	logits []float32
}

func loadReference(t testing.TB, modelName, name string) reference {
	t.Helper()
	r := fixtures.LoadLogits(t, modelName, name)
	return reference{Tokens: r.Tokens, Shape: r.Shape, logits: r.Values}
}

// diff summarizes how far got is from want, per position (fixtures.Diff).
type diff struct {
	max, median float64 // max |Δ| overall, median over positions of the per-position max
	argmax      float64 // fraction of positions with the same argmax
	worst       int
}

func compare(got, want []float32, vocab int) diff {
	d := fixtures.Compare(got, want, vocab)
	return diff{max: d.Max, median: d.Median, argmax: d.Argmax, worst: d.Worst}
}

func (d diff) String() string {
	return fixtures.Diff{Max: d.max, Median: d.median, Argmax: d.argmax, Worst: d.worst}.String()
}

func allLogits(t testing.TB, m *Model, tokens []int32, chunk int, kv ml.DType) []float32 {
	t.Helper()
	s, err := m.NewSession(SessionOptions{Context: len(tokens), KV: kv})
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Prefill(context.Background(), tokens, PrefillOptions{Chunk: chunk, AllLogits: true})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// loadModel loads a fixture model on the CPU backend's exact dot path, the reference the
// parity tests hold tightest (TestInt8Parity covers the 8-bit path).
func loadModel(t testing.TB, file string) *Model {
	t.Helper()
	return loadModelDot(t, file, "exact")
}

func loadModelDot(t testing.TB, file, dot string) *Model {
	t.Helper()
	m, err := Load(fixtures.Path(t, "models", file), Options{CPUDot: dot})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestQwen3Parity compares every position's logits with llama.cpp's.
//
// Our engine computes in float32 on the dequantized weights, with attention in f32; that is
// what the *-nofa-kvf32 references (F32 file) and *-deqf32 references (quantized files) hold,
// so those are compared tightly. llama.cpp's default path quantizes activations to 8 bits
// before quantized products and runs flash attention in f16; against those references the
// bound is what the fixtures measured between the two llama.cpp paths.
func TestQwen3Parity(t *testing.T) {
	cases := []struct {
		model, exact string
		exactTol     float64 // max |Δ| against the exact reference
		defaultTol   float64 // max |Δ| against llama.cpp's defaults
		argmaxMin    float64 // argmax agreement with the defaults
	}{
		{"tiny-qwen3-F32", "nofa-kvf32", 1e-4, 0.02, 0.98},
		{"tiny-qwen3-Q8_0", "deqf32", 1e-4, 0.35, 0.9},
		{"tiny-qwen3-Q4_K_M", "deqf32", 1e-4, 0.45, 0.85},
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			m := loadModel(t, c.model+".gguf")
			vocab := m.Config().Vocab
			for _, seq := range []string{"seq8", "seq64"} {
				exact := loadReference(t, c.model, seq+"-"+c.exact)
				def := loadReference(t, c.model, seq)
				for _, chunk := range []int{1, 7, 64, 0} {
					got := allLogits(t, m, exact.Tokens, chunk, ml.F32)
					d := compare(got, exact.logits, vocab)
					t.Logf("%s chunk %d vs %s: %v", seq, chunk, c.exact, d)
					if d.max > c.exactTol {
						t.Errorf("%s chunk %d vs %s: %v, want max ≤ %g", seq, chunk, c.exact, d, c.exactTol)
					}
					dd := compare(got, def.logits, vocab)
					if dd.max > c.defaultTol || dd.argmax < c.argmaxMin {
						t.Errorf("%s chunk %d vs llama.cpp defaults: %v, want max ≤ %g and argmax ≥ %g", seq, chunk, dd, c.defaultTol, c.argmaxMin)
					}
				}
				// The f16 cache rounds K and V; llama.cpp measured up to 0.005 (F32) and 0.23
				// (Q4_K_M) between its f16 and f32 caches.
				got := allLogits(t, m, exact.Tokens, 0, ml.F16)
				d := compare(got, exact.logits, vocab)
				t.Logf("%s f16 KV vs %s: %v", seq, c.exact, d)
				if d.max > 0.02 {
					t.Errorf("%s f16 KV vs %s: %v, want max ≤ 0.02", seq, c.exact, d)
				}
			}
		})
	}
}
