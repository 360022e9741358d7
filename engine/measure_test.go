package engine

import (
	"context"
	"testing"

	"github.com/redlite/batch/engine/ml"
)

func TestMeasureAllocation(t *testing.T) {
	m := loadModel(t, "tiny-qwen3next-IQ2_XXS.gguf")
	small, err := m.MeasureAllocation(context.Background(), SessionOptions{Context: 512, KV: ml.F32}, 256)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("512/256 f32: %+v", small)
	// One full-attention layer, one KV head of 256: K and V are 2 KiB per position in f32.
	if small.KVBytes != 512*2048 || small.WeightsBytes < 4<<20 || small.StateBytes <= 0 || small.ScratchBytes <= 0 {
		t.Errorf("implausible allocation %+v", small)
	}
	big, err := m.MeasureAllocation(context.Background(), SessionOptions{Context: 1024, KV: ml.F16}, 512)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("1024/512 f16: %+v", big)
	if big.KVBytes != 1024*1024 || big.StateBytes != small.StateBytes || big.ScratchBytes <= small.ScratchBytes {
		t.Errorf("doubling the chunk and the context: %+v then %+v", small, big)
	}
	if _, err := m.MeasureAllocation(context.Background(), SessionOptions{Context: 100, KV: ml.F32}, 200); err == nil {
		t.Error("chunk above the context: no error")
	}
}
