package qwen3_test

import (
	"math"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/engine/modelinfo"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/internal/modeltest"
)

// TestGPTOSSParity covers gpt-oss's layout: biases on q, k, v and o, attention sinks,
// sliding-window layers (window 16) alternating with global ones, YaRN (factor 4 over an
// original context of 128, which seq300 runs past), routed experts with biased router and
// projections, softmax over the chosen experts and the clamped SwiGLU. Ours is within 1e-5
// (median 2.6e-6) of llama.cpp's exact run at every chunk size.
func TestGPTOSSParity(t *testing.T) { modeltest.ParityWithin(t, "tiny-gpt-oss-F32", 2e-5, 5e-6) }

func TestGPTOSSLoadErrors(t *testing.T) {
	src := fixtures.Path(t, "models", "tiny-gpt-oss-F32.gguf")
	loadErrors(t, src, []loadErrorCase{
		{"NoWindow", nil, map[string]any{"gpt-oss.attention.sliding_window": uint32(0)},
			[]string{"attention.sliding_window 0 is not within [1, 16777216]"}},
		{"Pattern", nil, map[string]any{"gpt-oss.attention.sliding_window_pattern": uint32(1 << 20)},
			[]string{"attention.sliding_window_pattern 1048576 is not within [0, 4]"}},
		{"BaseSWA", nil, map[string]any{"gpt-oss.rope.freq_base_swa": float32(-1)},
			[]string{"rope.freq_base_swa -1 is not a positive number"}},
		{"Used", nil, map[string]any{"gpt-oss.expert_used_count": uint32(9)},
			[]string{"expert_used_count 9 must be in 1 … expert_count 8"}},
		{"MissingSinks", []string{"blk.1.attn_sinks.weight"}, nil,
			[]string{"missing tensor blk.1.attn_sinks.weight"}},
		{"MissingExpertBias", []string{"blk.3.ffn_down_exps.bias"}, nil,
			[]string{"missing tensor blk.3.ffn_down_exps.bias"}},
	})
}

// FuzzLoadGPTOSS sets gpt-oss's own keys to arbitrary values: the loader refuses or loads,
// never panics.
func FuzzLoadGPTOSS(f *testing.F) {
	f.Add(uint32(16), uint32(2), float32(1.5e5), float32(4), uint32(128))
	f.Add(uint32(0), uint32(0), float32(0), float32(0), uint32(0))
	f.Add(uint32(1<<31), uint32(1<<31), float32(math.NaN()), float32(math.Inf(-1)), uint32(1<<31))
	f.Fuzz(func(t *testing.T, window, pattern uint32, baseSWA, factor float32, orig uint32) {
		set := map[string]any{
			"gpt-oss.attention.sliding_window":             window,
			"gpt-oss.attention.sliding_window_pattern":     pattern,
			"gpt-oss.rope.freq_base_swa":                   baseSWA,
			"gpt-oss.rope.scaling.factor":                  factor,
			"gpt-oss.rope.scaling.original_context_length": orig,
		}
		_, g, err := load(t, fixtures.Edit(t, fixtures.Path(t, "models", "tiny-gpt-oss-F32.gguf"), nil, set))
		if err != nil {
			return
		}
		if c := g.Config(); c.Arch != "gpt-oss" || c.Layers != 4 {
			t.Errorf("loaded %+v", c)
		}
	})
}

// TestGPTOSSFacts: the planner's facts of the loaded model are modelinfo's of the file (the
// experts with their biases, the rest dense; a KV cache for all four layers, sliding or
// not, as the cache holds every position of every layer).
func TestGPTOSSFacts(t *testing.T) {
	f, g, err := load(t, fixtures.Path(t, "models", "tiny-gpt-oss-F32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := modelinfo.Inspect(f)
	if err != nil {
		t.Fatal(err)
	}
	facts := g.(model.Facts)
	if uint64(facts.ExpertTotalBytes()) != info.Memory.ExpertBytes || uint64(facts.DenseBytes()) != info.Memory.DenseBytes {
		t.Errorf("experts %d, dense %d; modelinfo says %d and %d", facts.ExpertTotalBytes(), facts.DenseBytes(), info.Memory.ExpertBytes, info.Memory.DenseBytes)
	}
	// Per layer: gate, up and down of 8 experts (128×32 each) and their biases (32, 32, 128).
	const perLayer = 8 * (3*128*32 + 32 + 32 + 128) * 4
	for l, b := range facts.ExpertBytes() {
		if b != perLayer || facts.ExpertSliceBytes(l) != perLayer/8 {
			t.Errorf("layer %d: %d expert bytes, slice %d; want %d and %d", l, b, facts.ExpertSliceBytes(l), perLayer, perLayer/8)
		}
	}
	// 4 layers × 2 KV heads × (64 + 64) values.
	for _, c := range []struct {
		dt   ml.DType
		want uint64
	}{{ml.F32, info.Memory.KVBytesPerPositionF32}, {ml.F16, info.Memory.KVBytesPerPositionF16}, {ml.Q8_0, info.Memory.KVBytesPerPositionQ8_0}} {
		if got := facts.KVBytesPerPosition(c.dt); uint64(got) != c.want || c.want == 0 {
			t.Errorf("KVBytesPerPosition(%s) = %d, modelinfo %d", c.dt, got, c.want)
		}
	}
	if facts.KVBytesPerPosition(ml.F32) != 4*2*128*4 {
		t.Errorf("KVBytesPerPosition(f32) = %d, want %d", facts.KVBytesPerPosition(ml.F32), 4*2*128*4)
	}
}
