package engine

import (
	"testing"

	"github.com/redlite/batch/engine/ml"
)

// TestMXFP4Parity runs tiny-qwen3moe and tiny-gpt-oss with their routed experts in MXFP4
// (testdata/fixtures/README.md §13, §14) against llama.cpp: within 1e-4 of its exact f32
// run on the dequantized weights at chunk sizes 1, 64 and whole, and no further from its
// default run (8-bit activations, f16 flash attention) than that exact run is, plus 0.01.
func TestMXFP4Parity(t *testing.T) {
	for _, name := range []string{"tiny-qwen3moe-MXFP4", "tiny-gpt-oss-MXFP4"} {
		t.Run(name, func(t *testing.T) { mxfp4Parity(t, name) })
	}
}

func mxfp4Parity(t *testing.T, name string) {
	m := loadModel(t, name+".gguf")
	vocab := m.Config().Vocab
	for _, seq := range []string{"seq8", "seq64", "seq300"} {
		exact := loadReference(t, name, seq+"-deqf32")
		def := loadReference(t, name, seq)
		own := compare(exact.logits, def.logits, vocab) // llama.cpp's exact path vs its default
		for _, chunk := range []int{1, 64, 0} {
			got := allLogits(t, m, exact.Tokens, chunk, ml.F32)
			d := compare(got, exact.logits, vocab)
			t.Logf("%s chunk %d vs deqf32: %v", seq, chunk, d)
			if d.max > 1e-4 {
				t.Errorf("%s chunk %d vs llama.cpp's exact reference: %v, want max ≤ 1e-4", seq, chunk, d)
			}
			if dd := compare(got, def.logits, vocab); dd.max > own.max+0.01 || dd.median > own.median+0.01 || dd.argmax < own.argmax-0.01 {
				t.Errorf("%s chunk %d vs llama.cpp's defaults: %v; its exact path is %v", seq, chunk, dd, own)
			}
		}
	}
}
