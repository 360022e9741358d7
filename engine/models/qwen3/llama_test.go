package qwen3_test

import (
	"testing"

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
		{"MissingFFN", []string{"blk.0.ffn_up.weight"}, nil,
			[]string{"missing tensor blk.0.ffn_up.weight"}},
	})
}
