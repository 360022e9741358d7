package qwen3next_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/modelinfo"
	"github.com/redlite/batch/engine/models/qwen3next"
	"github.com/redlite/batch/engine/synth"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/internal/modeltest"
)

// The Qwen3.5 hybrids (testdata/fixtures/README.md §12): qwen3next's graph with separate
// β/α projections, key heads tiled over value heads, and a SwiGLU feed-forward (qwen35) or
// qwen3next's experts (qwen35moe).
func TestQwen35Parity(t *testing.T)    { modeltest.Parity(t, "tiny-qwen35-F32") }
func TestQwen35MoEParity(t *testing.T) { modeltest.Parity(t, "tiny-qwen35moe-F32") }

// TestQwen35Facts: the planner's terms add up to each file, experts only in qwen35moe,
// and modelinfo reads the same state sizes.
func TestQwen35Facts(t *testing.T) {
	for _, tc := range []struct {
		file    string
		experts bool
	}{{"tiny-qwen35-F32", false}, {"tiny-qwen35moe-F32", true}} {
		t.Run(tc.file, func(t *testing.T) {
			f, g, err := load(t, fixtures.Path(t, "models", tc.file+".gguf"))
			if err != nil {
				t.Fatal(err)
			}
			m := g.(*qwen3next.Model)
			var total, exps int64
			for _, ti := range f.Tensors {
				total += int64(ti.Size)
				if strings.Contains(ti.Name, "_exps.") {
					exps += int64(ti.Size)
				}
			}
			if m.DenseBytes()+m.ExpertTotalBytes() != total || m.ExpertTotalBytes() != exps {
				t.Errorf("dense %d + experts %d, want %d + %d", m.DenseBytes(), m.ExpertTotalBytes(), total-exps, exps)
			}
			if (exps > 0) != tc.experts {
				t.Errorf("file has %d expert bytes, want experts %v", exps, tc.experts)
			}
			c := m.Config()
			// 1 attention layer of 4 × 2 KV heads × (64 + 64) × 4 bytes.
			if c.Layers != 4 || c.AttnLayers != 1 || m.KVBytesPerPosition(ml.F32) != 1024 {
				t.Errorf("%d layers, %d attention, KV %d bytes per position; want 4, 1, 1024", c.Layers, c.AttnLayers, m.KVBytesPerPosition(ml.F32))
			}
			// 3 DeltaNet layers × (4 value heads × 32 × 32 state + 3 × 256 conv) × 4 bytes.
			if want := int64(3 * (4*32*32 + 3*256) * 4); m.RecurrentBytes() != want {
				t.Errorf("RecurrentBytes %d, want %d", m.RecurrentBytes(), want)
			}
			// `redlite info` and the planner read the same sizes from the file alone.
			info, err := modelinfo.Inspect(f)
			if err != nil {
				t.Fatal(err)
			}
			if mem := info.Memory; int64(mem.KVBytesPerPositionF32) != m.KVBytesPerPosition(ml.F32) ||
				int64(mem.KVBytesPerPositionF16) != m.KVBytesPerPosition(ml.F16) || int64(mem.RecurrentBytesPerSequence) != m.RecurrentBytes() {
				t.Errorf("modelinfo %+v, the model KV %d / %d, recurrent %d", mem, m.KVBytesPerPosition(ml.F32), m.KVBytesPerPosition(ml.F16), m.RecurrentBytes())
			}
		})
	}
}

// TestQwen35LoadErrors: a broken file is refused naming what is wrong.
func TestQwen35LoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		drop       []string
		set        map[string]any
		want       []string
	}{
		{"MissingBeta", "tiny-qwen35-F32", []string{"blk.2.ssm_beta.weight"}, nil, []string{"blk.2.ssm_beta.weight"}},
		{"MissingFFN", "tiny-qwen35-F32", []string{"blk.3.ffn_down.weight"}, nil, []string{"blk.3.ffn_down.weight"}},
		{"MissingExperts", "tiny-qwen35moe-F32", []string{"blk.0.ffn_gate_exps.weight"}, nil, []string{"blk.0.ffn_gate_exps.weight"}},
		{"FourthAxis", "tiny-qwen35-F32", nil, map[string]any{"qwen35.rope.dimension_sections": []int32{2, 2, 2, 2}},
			[]string{"rope.dimension_sections", "fourth position axis"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := load(t, fixtures.Edit(t, fixtures.Path(t, "models", tc.file+".gguf"), tc.drop, tc.set))
			if err == nil {
				t.Fatal("the broken file loaded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestQwen35SynthShapes: the released models' layouts (sparse files of zeros) load with the
// sizes their summaries promise, and modelinfo agrees with the model on the state sizes.
func TestQwen35SynthShapes(t *testing.T) {
	for _, tc := range []struct {
		shape                               string
		layers, attn, embd, heads, kv, exps int
	}{
		{"qwen3.5-9b", 32, 8, 4096, 16, 4, 0},
		{"qwen3.5-35b-a3b", 40, 10, 2048, 16, 2, 256},
		{"qwen3.5-mini", 8, 2, 4096, 16, 4, 0},
		{"qwen3.5moe-mini", 8, 2, 2048, 16, 2, 64},
	} {
		t.Run(tc.shape, func(t *testing.T) {
			if testing.Short() && !strings.HasSuffix(tc.shape, "-mini") {
				t.Skip("-short: the minis have the same layers")
			}
			path := filepath.Join(t.TempDir(), tc.shape+".gguf")
			if _, err := synth.WriteFile(context.Background(), path, tc.shape, synth.Options{Type: synth.Q8_0, Layout: true}); err != nil {
				t.Fatal(err)
			}
			f, g, err := load(t, path)
			if err != nil {
				t.Fatal(err)
			}
			m := g.(*qwen3next.Model)
			c := m.Config()
			if c.Layers != tc.layers || c.AttnLayers != tc.attn || c.Embedding != tc.embd || c.Heads != tc.heads || c.KVHeads != tc.kv || c.HeadDim != 256 {
				t.Errorf("config %+v", c)
			}
			if (tc.exps > 0) != (m.ExpertTotalBytes() > 0) {
				t.Errorf("expert bytes %d with %d experts", m.ExpertTotalBytes(), tc.exps)
			}
			// Per attention layer 4 or 2 KV heads × (256 + 256) × 4 bytes.
			if want := int64(tc.attn * tc.kv * 512 * 4); m.KVBytesPerPosition(ml.F32) != want {
				t.Errorf("KV per position %d, want %d", m.KVBytesPerPosition(ml.F32), want)
			}
			info, err := modelinfo.Inspect(f)
			if err != nil {
				t.Fatal(err)
			}
			if int64(info.Memory.RecurrentBytesPerSequence) != m.RecurrentBytes() || int64(info.Memory.KVBytesPerPositionF32) != m.KVBytesPerPosition(ml.F32) {
				t.Errorf("modelinfo %+v, model recurrent %d", info.Memory, m.RecurrentBytes())
			}
		})
	}
}

// FuzzQwen35Hyperparameters loads tiny-qwen35 with the keys only the Qwen3.5 variants read
// or read differently (the rotary sections, the DeltaNet head counts, the feed-forward
// width) set to arbitrary values: the loader refuses or loads, never panics, and what it
// loads has the file's shape.
func FuzzQwen35Hyperparameters(f *testing.F) {
	f.Add(int32(3), int32(3), int32(2), int32(0), uint32(2), uint32(4), uint32(128))
	f.Add(int32(11), int32(11), int32(10), int32(0), uint32(2), uint32(4), uint32(128))
	f.Add(int32(-1), int32(0), int32(0), int32(9), uint32(0), uint32(3), uint32(0))
	f.Add(int32(1<<30), int32(1<<30), int32(1<<30), int32(1<<30), uint32(1<<31), uint32(1<<31), uint32(1<<31))
	f.Fuzz(func(t *testing.T, s0, s1, s2, s3 int32, groups, rank, ff uint32) {
		set := map[string]any{
			"qwen35.rope.dimension_sections": []int32{s0, s1, s2, s3},
			"qwen35.ssm.group_count":         groups,
			"qwen35.ssm.time_step_rank":      rank,
			"qwen35.feed_forward_length":     ff,
		}
		_, g, err := load(t, fixtures.Edit(t, fixtures.Path(t, "models", "tiny-qwen35-F32.gguf"), nil, set))
		if err != nil {
			return
		}
		if c := g.Config(); c.Arch != "qwen35" || c.Vocab != 512 || c.Layers != 4 {
			t.Errorf("loaded %+v", c)
		}
	})
}
