package qwen3next_test

import (
	"strings"
	"testing"

	"github.com/redlite/batch/engine/cpu"
	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/engine/models/qwen3next"
	"github.com/redlite/batch/internal/fixtures"
)

func load(t *testing.T, path string) (*gguf.File, model.Graph, error) {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	g, err := qwen3next.Load(f, cpu.New(1))
	return f, g, err
}

// TestFacts: the planner's terms add up to the file — every tensor byte is dense, routed
// experts or MTP, and nothing is counted twice.
func TestFacts(t *testing.T) {
	f, g, err := load(t, fixtures.Path(t, "models", "tiny-qwen3next-F16.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	m := g.(*qwen3next.Model)
	var total int64
	for _, ti := range f.Tensors {
		total += int64(ti.Size)
	}
	if got := m.DenseBytes() + m.ExpertTotalBytes() + m.MTPBytes(); got != total {
		t.Errorf("dense %d + experts %d + mtp %d = %d, want the file's %d tensor bytes", m.DenseBytes(), m.ExpertTotalBytes(), m.MTPBytes(), got, total)
	}
	var slices int64
	experts, _ := f.Int("qwen3next.expert_count")
	for l, b := range m.ExpertBytes() {
		if b == 0 {
			continue
		}
		slices += m.ExpertSliceBytes(l) * experts
	}
	if slices != m.ExpertTotalBytes() {
		t.Errorf("expert slices × %d experts = %d, want %d", experts, slices, m.ExpertTotalBytes())
	}
	c := m.Config()
	if c.AttnLayers == 0 || c.AttnLayers >= c.Layers {
		t.Errorf("%d attention layers of %d: a hybrid has both kinds", c.AttnLayers, c.Layers)
	}
	if f32, f16 := m.KVBytesPerPosition(ml.F32), m.KVBytesPerPosition(ml.F16); f32 != 2*f16 || f16 != int64(c.AttnLayers*c.KVHeads*2*c.HeadDim*2) {
		t.Errorf("KV per position f32 %d, f16 %d for %d layers × %d heads × %d", f32, f16, c.AttnLayers, c.KVHeads, c.HeadDim)
	}
	if m.RecurrentBytes() <= 0 {
		t.Errorf("RecurrentBytes = %d", m.RecurrentBytes())
	}
}

// TestLoadErrors: a broken file is refused naming the layer and tensor or key at fault.
func TestLoadErrors(t *testing.T) {
	src := fixtures.Path(t, "models", "tiny-qwen3next-F16.gguf")
	for _, tc := range []struct {
		name string
		drop []string
		set  map[string]any
		want []string
	}{
		{"MissingDeltaNetTensor", []string{"blk.1.ssm_dt.bias"}, nil, []string{"blk.1.ssm_dt"}},
		{"MissingExperts", []string{"blk.1.ffn_up_exps.weight", "blk.1.ssm_out.weight"}, nil,
			[]string{"blk.1.ffn_up_exps.weight", "blk.1.ssm_out.weight"}},
		{"ExpertsUsed", nil, map[string]any{"qwen3next.expert_used_count": uint32(99)}, []string{"expert_used_count"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := load(t, fixtures.Edit(t, src, tc.drop, tc.set))
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
