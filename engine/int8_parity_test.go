package engine

import (
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// TestInt8Parity runs every fixture model on the CPU backend's 8-bit activation path
// (REDLITE_CPU_DOT=int8) and holds it to the bounds the exact path has against llama.cpp's
// default path — which is itself the 8-bit path, so ours should land at least as close.
// Chunks of 1 and 5 tokens take the dot-product kernels (decode, a few sequences); larger
// batches run the GEMM, which is exact on either path.
func TestInt8Parity(t *testing.T) {
	cases := []struct {
		model             string
		maxTol, medianTol float64
		argmaxMin         float64
	}{
		// qwen3: TestQwen3Parity's bounds against the defaults.
		{"tiny-qwen3-F32", 0.02, 0.02, 0.98},
		{"tiny-qwen3-Q8_0", 0.35, 0.35, 0.9},
		{"tiny-qwen3-Q4_K_M", 0.45, 0.45, 0.85},
		// qwen3next: TestQwen3NextParity's.
		{"tiny-qwen3next-F16", 0.03, 0.01, 0.98},
		{"tiny-qwen3next-Q8_0", 2.5, 0.35, 0.7},
		{"tiny-qwen3next-IQ2_XXS", 2.5, 0.35, 0.7},
		{"tiny-qwen3next-IQ3_XXS", 2.5, 0.35, 0.7},
		{"tiny-qwen3next-legacy-IQ2_XXS", 2.5, 0.35, 0.7},
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			t.Parallel()
			m := loadModelDot(t, c.model+".gguf", "int8")
			exactModel := loadModel(t, c.model+".gguf")
			vocab := m.Config().Vocab
			int8Types := false
			for _, ti := range m.File.Tensors {
				if ti.Type.BlockSize() == 256 || ti.Type == quant.Q8_0 {
					int8Types = true
				}
			}
			for _, seq := range []string{"seq8", "seq64"} {
				def := loadReference(t, c.model, seq)
				exact := allLogits(t, exactModel, def.Tokens, 1, ml.F32)
				de := compare(exact, def.logits, vocab)
				for _, chunk := range []int{1, 5} {
					got := allLogits(t, m, def.Tokens, chunk, ml.F32)
					d := compare(got, def.logits, vocab)
					t.Logf("%s chunk %d int8 vs llama.cpp defaults: %v (exact path: %v)", seq, chunk, d, de)
					if d.max > c.maxTol || d.median > c.medianTol || d.argmax < c.argmaxMin {
						t.Errorf("%s chunk %d int8 vs llama.cpp defaults: %v, want max ≤ %g, median ≤ %g, argmax ≥ %g",
							seq, chunk, d, c.maxTol, c.medianTol, c.argmaxMin)
					}
					// The path must really have run: the 8-bit kernels round the activations.
					if chunk == 1 && int8Types && compare(got, exact, vocab).max == 0 {
						t.Errorf("%s: the int8 path gave the exact path's logits", seq)
					}
				}
			}
		})
	}
}
