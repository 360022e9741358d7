package engine

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/internal/fixtures"
)

// hostileAllocLimit is what loading a hostile header may allocate, far below the gigabytes
// the values ask for.
const hostileAllocLimit = 256 << 20

// TestHostileHeaders: hyperparameters that would size tables of gigabytes (or loop for
// minutes) are refused by Load with an error naming the key, before anything is sized by
// them. It logs how long each refusal took.
func TestHostileHeaders(t *testing.T) {
	// One tiny tensor in a far block: the highest block index bounds nothing.
	farBlock := gguf.TensorInfo{Type: quant.F32, Dims: []uint64{1}}
	for _, c := range []struct {
		name, file, says string
		set              map[string]any
	}{
		{"BlockCount2^30", "tiny-qwen3-Q4_K_M.gguf", "block_count = 1073741824", map[string]any{"qwen3.block_count": uint32(1 << 30)}},
		{"BlockCount2^24", "tiny-qwen3-Q4_K_M.gguf", "block_count = 16777216", map[string]any{"qwen3.block_count": uint32(1 << 24)}},
		{"BlockCountMax", "tiny-qwen3-Q4_K_M.gguf", "block_count = 4294967295", map[string]any{"qwen3.block_count": uint32(1<<32 - 1)}},
		{"BlockCount2^62", "tiny-qwen3-Q4_K_M.gguf", "block_count = 4611686018427387904", map[string]any{"qwen3.block_count": uint64(1 << 62)}},
		{"BlockCountNegative", "tiny-qwen3-Q4_K_M.gguf", "block_count = -5", map[string]any{"qwen3.block_count": int32(-5)}},
		{"BlockCountOneMore", "tiny-qwen3-Q4_K_M.gguf", "block_count = 3", map[string]any{"qwen3.block_count": uint32(3)}},
		{"BlockCountFarTensor", "tiny-qwen3-Q4_K_M.gguf", "block_count = 1073741824", map[string]any{"qwen3.block_count": uint32(1 << 30), "blk.1073741823.x.weight": farBlock}},
		{"EmbeddingLength", "tiny-qwen3-Q4_K_M.gguf", "embedding_length = 1073741824", map[string]any{"qwen3.embedding_length": uint32(1 << 30)}},
		{"HeadCount", "tiny-qwen3-Q4_K_M.gguf", "attention.head_count = 2147483647", map[string]any{"qwen3.attention.head_count": uint32(1<<31 - 1)}},
		{"KeyLength", "tiny-qwen3-Q4_K_M.gguf", "attention.key_length = 16777216", map[string]any{"qwen3.attention.key_length": uint32(1 << 24)}},
		{"FeedForward", "tiny-qwen3-Q4_K_M.gguf", "feed_forward_length = 4611686018427387904", map[string]any{"qwen3.feed_forward_length": uint64(1 << 62)}},
		{"ContextLength", "tiny-qwen3-Q4_K_M.gguf", "context_length = 1099511627776", map[string]any{"qwen3.context_length": uint64(1 << 40)}},
		{"HeadsTimesDim", "tiny-qwen3-Q4_K_M.gguf", "head_count × key_length", map[string]any{"qwen3.attention.head_count": uint32(512), "qwen3.attention.key_length": uint32(512)}},
		{"NextBlockCount2^30", "tiny-qwen3next-IQ2_XXS.gguf", "block_count = 1073741824", map[string]any{"qwen3next.block_count": uint32(1 << 30)}},
		{"NextExperts", "tiny-qwen3next-IQ2_XXS.gguf", "expert_count = 1073741824", map[string]any{"qwen3next.expert_count": uint32(1 << 30)}},
		{"NextStateSize", "tiny-qwen3next-IQ2_XXS.gguf", "ssm.state_size = 1073741824", map[string]any{"qwen3next.ssm.state_size": uint32(1 << 30)}},
		{"NextNegativeNextN", "tiny-qwen3next-IQ2_XXS.gguf", "nextn_predict_layers", map[string]any{"qwen3next.nextn_predict_layers": int32(-1 << 30)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := fixtures.Edit(t, fixtures.Path(t, "models", c.file), nil, c.set)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			m, err := Load(path, Options{})
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if err == nil {
				m.Close()
				t.Fatal("loaded")
			}
			if !errors.Is(err, model.ErrModel) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("got %v, want a model.ErrModel saying %q", err, c.says)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > hostileAllocLimit {
				t.Errorf("allocated %d MiB to refuse it", n>>20)
			}
			t.Logf("refused in %v: %v", took, err)
		})
	}
}
