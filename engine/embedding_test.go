package engine

import (
	"testing"

	"github.com/redlite/batch/engine/cpu"
	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/internal/fixtures"
)

// TestEmbeddingNotRepacked: a model with its own output matrix binds its token embedding
// as stored (model.Binder.Embedding), since only lookups read it; every other matrix the
// machine's 8-bit kernels would repack is repacked. Tied, the embedding is the output
// matrix and is repacked too.
func TestEmbeddingNotRepacked(t *testing.T) {
	checked := 0
	for _, name := range fixtures.Models(t) {
		m := loadModelDot(t, name+".gguf", "auto")
		cb, ok := m.Backend.(*cpu.Backend)
		if !ok {
			t.Fatalf("%s: backend %s", name, m.Backend.Name())
		}
		var want, embd int64
		_, separate := m.File.Tensor("output.weight")
		for _, ti := range m.File.Tensors {
			dims := make([]int, len(ti.Dims))
			for i, d := range ti.Dims {
				dims[i] = int(d)
			}
			n := int64(cb.RepackedBytes(ti.Type, dims))
			if ti.Name == "token_embd.weight" {
				embd = n
				if separate {
					continue
				}
			}
			want += n
		}
		if got := m.HostWeightBytes(); got != want {
			t.Errorf("%s: %d bytes repacked, want %d (output matrix of its own: %v, embedding's layout %d)", name, got, want, separate, embd)
		}
		if separate && embd > 0 {
			checked++
		}
	}
	t.Logf("%d models with an embedding the kernels would repack beside their own output matrix", checked)
	if checked == 0 && quant.Int8Repacked(quant.Q8_0) {
		t.Error("no fixture has an embedding the kernels would repack beside its own output matrix: the test checks nothing")
	}
}
