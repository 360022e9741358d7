package qwen3_test

import (
	"math"
	"testing"

	"github.com/redlite/batch/internal/fixtures"
)

// FuzzLoadHyperparameters loads the qwen3moe and llama fixtures with the keys this package
// reads beyond qwen3's (expert counts and width, rope scaling type and factor, attention
// scale) set to arbitrary values: the loader refuses or loads, never panics, and what it
// loads has the shape the keys promised.
func FuzzLoadHyperparameters(f *testing.F) {
	f.Add(false, uint32(8), uint32(2), uint32(64), "linear", float32(4), float32(0))
	f.Add(false, uint32(8), uint32(0), uint32(0), "yarn", float32(-1), float32(0.125))
	f.Add(true, uint32(0), uint32(0), uint32(0), "none", float32(0), float32(0))
	f.Add(true, uint32(1<<31), uint32(9), uint32(1<<30), "", float32(math.NaN()), float32(math.Inf(1)))
	f.Fuzz(func(t *testing.T, llama bool, experts, used, ffExp uint32, scaling string, factor, scale float32) {
		file, arch := "tiny-qwen3moe-F32.gguf", "qwen3moe"
		if llama {
			file, arch = "tiny-llama-F32.gguf", "llama"
		}
		set := map[string]any{
			arch + ".expert_count":               experts,
			arch + ".expert_used_count":          used,
			arch + ".expert_feed_forward_length": ffExp,
			arch + ".rope.scaling.type":          scaling,
			arch + ".rope.scaling.factor":        factor,
			arch + ".attention.scale":            scale,
		}
		_, g, err := load(t, fixtures.Edit(t, fixtures.Path(t, "models", file), nil, set))
		if err != nil {
			return
		}
		if c := g.Config(); c.Arch != arch || c.Vocab != 512 || c.Layers != 2 {
			t.Errorf("loaded %+v", c)
		}
	})
}
