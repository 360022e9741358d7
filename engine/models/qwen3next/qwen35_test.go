package qwen3next_test

import (
	"strings"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/engine/models/qwen3next"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/internal/modeltest"
)

// The Qwen3.5 hybrids (testdata/fixtures/README.md §12): qwen3next's graph with separate
// β/α projections, key heads tiled over value heads, and a SwiGLU feed-forward (qwen35) or
// qwen3next's experts (qwen35moe).
func TestQwen35Parity(t *testing.T)    { modeltest.Parity(t, "tiny-qwen35-F32") }
func TestQwen35MoEParity(t *testing.T) { modeltest.Parity(t, "tiny-qwen35moe-F32") }

// TestQwen35Facts: the planner's terms add up to each file, experts only in qwen35moe.
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
			var _ model.Facts = m
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
