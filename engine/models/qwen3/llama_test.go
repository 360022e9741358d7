package qwen3_test

import (
	"testing"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/internal/fixtures"
)

// TestLlamaParity covers Llama 3's layout: no q/k norms, RoPE on adjacent pairs divided by
// rope_freqs.weight, GQA 4:1, tied embeddings.
func TestLlamaParity(t *testing.T) { parity(t, "tiny-llama-F32") }

func TestLlamaLoadErrors(t *testing.T) {
	src := fixtures.Path(t, "models", "tiny-llama-F32.gguf")
	loadErrors(t, src, []loadErrorCase{
		{"Mixtral", nil, map[string]any{"llama.expert_count": uint32(8)},
			[]string{"expert_count 8: llama files with routed experts (Mixtral) are not supported"}},
		{"RopeFreqsShape", nil, map[string]any{"llama.rope.dimension_count": uint32(16)},
			[]string{"rope_freqs.weight has shape [16], want [8]"}},
		{"RopeScalingType", nil, map[string]any{"llama.rope.scaling.type": "longrope"},
			[]string{`rope.scaling.type "longrope" is not supported`}},
		{"RopeScalingFactor", nil, map[string]any{"llama.rope.scaling.factor": float32(-2)},
			[]string{"rope.scaling.factor -2 is not a positive number"}},
		{"Bias", nil, map[string]any{"blk.1.attn_q.bias": gguf.TensorInfo{Name: "blk.1.attn_q.bias", Dims: []uint64{256}, Type: quant.F32}},
			[]string{"blk.1.attn_q.bias: projection biases are not supported"}},
		{"MissingFFN", []string{"blk.0.ffn_up.weight"}, nil,
			[]string{"missing tensor blk.0.ffn_up.weight"}},
	})
}

// TestLlamaLinearRopeScaling: with rope.scaling.type linear and factor 4 every angle is a
// quarter (on top of rope_freqs), as llama.cpp's freq_scale 0.25; the logits move by up to
// 5 from the unscaled model's, so the 1e-4 bound sees the scaling.
func TestLlamaLinearRopeScaling(t *testing.T) {
	src := fixtures.Path(t, "models", "tiny-llama-F32.gguf")
	path := fixtures.Edit(t, src, nil, map[string]any{"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": float32(4)})
	m, err := engine.Load(path, engine.Options{CPUDot: "exact"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ref := fixtures.LoadLogits(t, "tiny-llama-F32", "seq64-nofa-kvf32-linear4")
	for _, chunk := range []int{1, 64} {
		d := fixtures.Compare(prefill(t, m, ref.Tokens, chunk, ml.F32), ref.Values, m.Config().Vocab)
		t.Logf("chunk %d vs llama.cpp: %v", chunk, d)
		if d.Max > 1e-4 {
			t.Errorf("chunk %d vs llama.cpp with linear rope scaling: %v, want max ≤ 1e-4", chunk, d)
		}
	}
}

// TestYaRN: with rope.scaling.type yarn, factor 4 and an original context of 64 positions,
// the 300-token sequence runs past the original context; our logits equal llama.cpp's with
// the same scaling at chunk sizes 1, 64 and whole, on Llama's layout (with rope_freqs) and
// on Qwen3's (NeoX pairs, rope.scaling.attn_factor 0.8). The planner may plan up to the
// stretched context.
func TestYaRN(t *testing.T) {
	for _, tc := range []struct {
		model string
		keys  map[string]any
	}{
		{"tiny-llama-F32", map[string]any{"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": float32(4),
			"llama.rope.scaling.original_context_length": uint32(64)}},
		{"tiny-qwen3-F32", map[string]any{"qwen3.rope.scaling.type": "yarn", "qwen3.rope.scaling.factor": float32(4),
			"qwen3.rope.scaling.original_context_length": uint32(64), "qwen3.rope.scaling.attn_factor": float32(0.8)}},
	} {
		t.Run(tc.model, func(t *testing.T) {
			path := fixtures.Edit(t, fixtures.Path(t, "models", tc.model+".gguf"), nil, tc.keys)
			m, err := engine.Load(path, engine.Options{CPUDot: "exact"})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ref := fixtures.LoadLogits(t, tc.model, "seq300-nofa-kvf32-yarn4")
			for _, chunk := range []int{1, 64, 0} {
				d := fixtures.Compare(prefill(t, m, ref.Tokens, chunk, ml.F32), ref.Values, m.Config().Vocab)
				t.Logf("chunk %d vs llama.cpp: %v", chunk, d)
				if d.Max > 1e-4 {
					t.Errorf("chunk %d vs llama.cpp with YaRN: %v, want max ≤ 1e-4", chunk, d)
				}
			}
		})
	}
	t.Run("Context", func(t *testing.T) {
		src := fixtures.Path(t, "models", "tiny-qwen3-F32.gguf")
		path := fixtures.Edit(t, src, nil, map[string]any{"qwen3.context_length": uint32(4096), "qwen3.rope.scaling.type": "yarn",
			"qwen3.rope.scaling.factor": float32(4), "qwen3.rope.scaling.original_context_length": uint32(4096)})
		m, err := engine.Load(path, engine.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if got := m.Config().ContextLength; got != 16384 {
			t.Errorf("context length %d, want 4 × 4096", got)
		}
	})
}
