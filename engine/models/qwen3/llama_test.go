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
