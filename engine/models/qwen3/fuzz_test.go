package qwen3_test

import (
	"math"
	"testing"

	"github.com/redlite/batch/internal/fixtures"
)

// FuzzLoadHyperparameters loads the qwen3moe and llama fixtures with the keys this package
// reads beyond qwen3's (expert counts and width, rope scaling type, factor, YaRN's original
// context and attention factor, attention scale) set to arbitrary values: the loader refuses or loads, never panics, and what it
// loads has the shape the keys promised.
func FuzzLoadHyperparameters(f *testing.F) {
	f.Add(false, uint32(8), uint32(2), uint32(64), "linear", float32(4), uint32(0), float32(1), float32(0))
	f.Add(false, uint32(8), uint32(0), uint32(0), "yarn", float32(-1), uint32(64), float32(1), float32(0.125))
	f.Add(true, uint32(0), uint32(0), uint32(0), "yarn", float32(4), uint32(64), float32(0.8), float32(0))
	f.Add(true, uint32(0), uint32(0), uint32(0), "yarn", float32(1e-30), uint32(1<<31), float32(math.Inf(1)), float32(0))
	f.Add(true, uint32(0), uint32(0), uint32(0), "none", float32(0), uint32(0), float32(0), float32(0))
	f.Add(true, uint32(1<<31), uint32(9), uint32(1<<30), "", float32(math.NaN()), uint32(1), float32(math.NaN()), float32(math.Inf(1)))
	f.Fuzz(func(t *testing.T, llama bool, experts, used, ffExp uint32, scaling string, factor float32, orig uint32, attn, scale float32) {
		file, arch := "tiny-qwen3moe-F32.gguf", "qwen3moe"
		if llama {
			file, arch = "tiny-llama-F32.gguf", "llama"
		}
		set := map[string]any{
			arch + ".expert_count":                         experts,
			arch + ".expert_used_count":                    used,
			arch + ".expert_feed_forward_length":           ffExp,
			arch + ".rope.scaling.type":                    scaling,
			arch + ".rope.scaling.factor":                  factor,
			arch + ".rope.scaling.original_context_length": orig,
			arch + ".rope.scaling.attn_factor":             attn,
			arch + ".attention.scale":                      scale,
		}
		_, g, err := load(t, fixtures.Edit(t, fixtures.Path(t, "models", file), nil, set))
		if err != nil {
			return
		}
		if c := g.Config(); c.Arch != arch || c.Vocab != 512 || c.Layers != 2 || c.ContextLength <= 0 {
			t.Errorf("loaded %+v", c)
		}
	})
}
