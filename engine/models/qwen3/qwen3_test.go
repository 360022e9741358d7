package qwen3_test

import (
	"strings"
	"testing"

	"github.com/redlite/batch/engine/cpu"
	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/engine/models/qwen3"
	"github.com/redlite/batch/internal/fixtures"
)

func load(t *testing.T, path string) (*gguf.File, model.Graph, error) {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	g, err := qwen3.Load(f, cpu.New(1))
	return f, g, err
}

// TestLoad reads the fixture's shape back from its header: the graph's config is the file's.
func TestLoad(t *testing.T) {
	f, g, err := load(t, fixtures.Path(t, "models", "tiny-qwen3-F32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	c := g.Config()
	for key, got := range map[string]int{"block_count": c.Layers, "embedding_length": c.Embedding,
		"attention.head_count": c.Heads, "attention.head_count_kv": c.KVHeads, "context_length": c.ContextLength} {
		want, err := f.Int("qwen3." + key)
		if err != nil {
			t.Fatal(err)
		}
		if int64(got) != want {
			t.Errorf("%s = %d, want the header's %d", key, got, want)
		}
	}
	if c.AttnLayers != c.Layers {
		t.Errorf("AttnLayers = %d, want every one of %d layers", c.AttnLayers, c.Layers)
	}
	embd, _ := f.Tensor("token_embd.weight")
	if c.Vocab != int(embd.Dims[1]) {
		t.Errorf("Vocab = %d, want token_embd's %d rows", c.Vocab, embd.Dims[1])
	}
}

// TestLoadErrors: a broken file is refused with every problem named, by layer and tensor.
func TestLoadErrors(t *testing.T) {
	src := fixtures.Path(t, "models", "tiny-qwen3-F32.gguf")
	loadErrors(t, src, []loadErrorCase{
		{"MissingTensors", []string{"blk.1.attn_k.weight", "output_norm.weight"}, nil,
			[]string{"missing tensor blk.1.attn_k.weight", "missing tensor output_norm.weight"}},
		{"KVHeads", nil, map[string]any{"qwen3.attention.head_count_kv": uint32(3)},
			[]string{"not a multiple of head_count_kv 3"}},
		{"RopeDims", nil, map[string]any{"qwen3.rope.dimension_count": uint32(7)},
			[]string{"rope.dimension_count 7 does not fit"}},
		{"NoBlocks", nil, map[string]any{"qwen3.block_count": uint32(0)},
			[]string{"must be positive"}},
		{"RopeScalingType", nil, map[string]any{"qwen3.rope.scaling.type": "longrope"},
			[]string{`rope.scaling.type "longrope" is not supported (none, linear and yarn are)`}},
		{"YaRNOriginalContext", nil, map[string]any{"qwen3.rope.scaling.type": "yarn", "qwen3.rope.scaling.factor": float32(4),
			"qwen3.rope.scaling.original_context_length": uint32(0)},
			[]string{"rope.scaling.original_context_length 0 is not within [1, 16777216]"}},
		{"YaRNAttnFactor", nil, map[string]any{"qwen3.rope.scaling.type": "yarn", "qwen3.rope.scaling.attn_factor": float32(-1)},
			[]string{"rope.scaling.attn_factor -1 is not a positive number"}},
	})
}

// loadErrorCase is a fixture edited (tensors dropped, keys set) and what the error must say.
type loadErrorCase struct {
	name string
	drop []string
	set  map[string]any
	want []string
}

func loadErrors(t *testing.T, src string, cases []loadErrorCase) {
	for _, tc := range cases {
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
