// Package modeltest holds the checks every architecture's tests run against llama.cpp's
// logits (testdata/fixtures): one definition, called by each model package's tests.
package modeltest

import (
	"context"
	"testing"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/internal/fixtures"
)

// Parity compares every position's logits of model (an F32 fixture) with llama.cpp's for
// seq8, seq64 and seq300, prefilled token by token, in chunks of 64 and whole, on the CPU's
// exact dot path.
//
// Bounds, from testdata/fixtures/README.md §8: against the exact references (flash
// attention off, f32 KV: what we compute) an f32 engine lands within about 1e-4, the bound
// TestQwen3Parity holds tiny-qwen3-F32 to; llama.cpp's own token-by-token run is within 6e-6
// of them. Against llama.cpp's defaults (f16 flash attention) 0.02 and argmax agreement
// 0.98, as for tiny-qwen3-F32; llama.cpp's two paths differ by at most 0.0047 on these files.
func Parity(t *testing.T, model string) { ParityWithin(t, model, 1e-4, 1e-4) }

// ParityWithin is Parity with other bounds against the exact references: maxDiff for every
// logit, median for the median position's largest difference (gemma3's float16 GELU needs
// them wider).
func ParityWithin(t *testing.T, model string, maxDiff, median float64) {
	m, err := engine.Load(fixtures.Path(t, "models", model+".gguf"), engine.Options{CPUDot: "exact"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	vocab := m.Config().Vocab
	for _, seq := range []string{"seq8", "seq64", "seq300"} {
		exact := fixtures.LoadLogits(t, model, seq+"-nofa-kvf32")
		def := fixtures.LoadLogits(t, model, seq)
		for _, chunk := range []int{1, 64, 0} {
			got := Prefill(t, m, exact.Tokens, chunk, ml.F32)
			d := fixtures.Compare(got, exact.Values, vocab)
			t.Logf("%s chunk %d vs nofa-kvf32: %v", seq, chunk, d)
			if d.Max > maxDiff || d.Median > median {
				t.Errorf("%s chunk %d vs llama.cpp's exact reference: %v, want max ≤ %g, median ≤ %g", seq, chunk, d, maxDiff, median)
			}
			if dd := fixtures.Compare(got, def.Values, vocab); dd.Max > 0.02 || dd.Argmax < 0.98 {
				t.Errorf("%s chunk %d vs llama.cpp's defaults: %v, want max ≤ 0.02 and argmax ≥ 0.98", seq, chunk, dd)
			}
			if chunk == 1 && seq != "seq300" { // llama.cpp's own token-by-token run
				ub1 := fixtures.LoadLogits(t, model, seq+"-nofa-kvf32-ub1")
				if d := fixtures.Compare(got, ub1.Values, vocab); d.Max > maxDiff || d.Median > median {
					t.Errorf("%s chunk 1 vs llama.cpp's n_ubatch 1: %v, want max ≤ %g, median ≤ %g", seq, d, maxDiff, median)
				}
			}
		}
		// The f16 cache rounds K and V: llama.cpp moves by up to 0.005 between its own.
		got := Prefill(t, m, exact.Tokens, 0, ml.F16)
		if d := fixtures.Compare(got, exact.Values, vocab); d.Max > 0.02 {
			t.Errorf("%s f16 KV vs nofa-kvf32: %v, want max ≤ 0.02", seq, d)
		}
	}
}

// Prefill runs ids through a fresh session of m in chunks of chunk (0: whole) with a kv
// cache and returns every position's logits.
func Prefill(t *testing.T, m *engine.Model, ids []int32, chunk int, kv ml.DType) []float32 {
	t.Helper()
	s, err := m.NewSession(engine.SessionOptions{Context: len(ids), KV: kv})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.Prefill(context.Background(), ids, engine.PrefillOptions{Chunk: chunk, AllLogits: true})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
