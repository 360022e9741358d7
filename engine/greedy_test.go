package engine

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/sample"
)

// TestGreedyMatchesLlamaCpp decodes seq8 greedily and compares the ids with llama.cpp's
// (testdata/greedy-seq8.json). Our arithmetic is llama.cpp's flash-attention-off, f32-KV path
// on the dequantized weights, so that is the continuation we must reproduce exactly; for the
// F32 model llama.cpp's default path gives the same ids too.
func TestGreedyMatchesLlamaCpp(t *testing.T) {
	raw, err := os.ReadFile("testdata/greedy-seq8.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Prompt   []int32 `json:"prompt"`
		NPredict int     `json:"n_predict"`
		Models   map[string]struct {
			Default   []int32 `json:"default"`
			NoFAKVF32 []int32 `json:"nofa_kvf32"`
		} `json:"models"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	for name, want := range ref.Models {
		t.Run(name, func(t *testing.T) {
			m := loadModel(t, name+".gguf")
			s, err := m.NewSession(SessionOptions{Context: len(ref.Prompt) + ref.NPredict, KV: ml.F32})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			logits, err := s.Prefill(ctx, ref.Prompt, PrefillOptions{Chunk: 3})
			if err != nil {
				t.Fatal(err)
			}
			var got []int32
			for len(got) < ref.NPredict {
				id, err := sample.Argmax(logits)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, id)
				if logits, err = s.Decode(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(got, want.NoFAKVF32) {
				t.Errorf("greedy ids differ from llama.cpp (flash attention off, f32 KV):\n got %v\nwant %v", got, want.NoFAKVF32)
			}
			if name == "tiny-qwen3-F32" && !slices.Equal(got, want.Default) {
				t.Errorf("greedy ids differ from llama.cpp's default path:\n got %v\nwant %v", got, want.Default)
			}
		})
	}
}
