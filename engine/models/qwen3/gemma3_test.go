package qwen3_test

import (
	"math"
	"testing"

	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/internal/modeltest"
)

// TestGemma3Parity covers Gemma 3's layout: embeddings scaled by √d, q/k norms, queries
// scaled by 1/√head_dim, two sliding-window layers (window 32, RoPE base 10000) and a global
// one (base 10⁶, linear scaling 8), norms after attention and after the GeGLU feed-forward,
// tied output.
//
// The bound is llama.cpp's own: its CPU GELU looks the gate up in a float16 table, so a gate
// that differs in its last bit (another summation order) can move a step of float16, 1e-3
// relative. llama.cpp's n_ubatch 1 run is up to 5.4e-4 (median 4e-5) from its whole batch on
// these sequences; ours lands within 7.6e-4 (median 5.3e-5) of both.
func TestGemma3Parity(t *testing.T) { modeltest.ParityWithin(t, "tiny-gemma3-F32", 1e-3, 1e-4) }

func TestGemma3LoadErrors(t *testing.T) {
	src := fixtures.Path(t, "models", "tiny-gemma3-F32.gguf")
	loadErrors(t, src, []loadErrorCase{
		{"Softcap", nil, map[string]any{"gemma3.final_logit_softcapping": float32(30)},
			[]string{"final_logit_softcapping 30: logit softcapping is not supported"}},
		{"Window", nil, map[string]any{"gemma3.attention.sliding_window": uint32(1 << 30)},
			[]string{"attention.sliding_window 1073741824 is not within [0, 16777216]"}},
		{"Pattern", nil, map[string]any{"gemma3.attention.sliding_window_pattern": uint32(1 << 20)},
			[]string{"attention.sliding_window_pattern 1048576 is not within [0, 6]"}},
		{"BaseSWA", nil, map[string]any{"gemma3.rope.freq_base_swa": float32(-1)},
			[]string{"rope.freq_base_swa -1 is not a positive number"}},
		{"MissingPostNorm", []string{"blk.2.post_ffw_norm.weight"}, nil,
			[]string{"missing tensor blk.2.post_ffw_norm.weight"}},
	})
}

// FuzzLoadGemma3 sets gemma3's own keys to arbitrary values: the loader refuses or loads,
// never panics.
func FuzzLoadGemma3(f *testing.F) {
	f.Add(uint32(32), uint32(3), float32(1e4), float32(0))
	f.Add(uint32(0), uint32(0), float32(0), float32(30))
	f.Add(uint32(1<<31), uint32(1<<31), float32(math.NaN()), float32(math.Inf(-1)))
	f.Fuzz(func(t *testing.T, window, pattern uint32, baseSWA, softcap float32) {
		set := map[string]any{
			"gemma3.attention.sliding_window":         window,
			"gemma3.attention.sliding_window_pattern": pattern,
			"gemma3.rope.freq_base_swa":               baseSWA,
			"gemma3.final_logit_softcapping":          softcap,
		}
		_, g, err := load(t, fixtures.Edit(t, fixtures.Path(t, "models", "tiny-gemma3-F32.gguf"), nil, set))
		if err != nil {
			return
		}
		if c := g.Config(); c.Arch != "gemma3" || c.Layers != 3 {
			t.Errorf("loaded %+v", c)
		}
	})
}
