package model

import (
	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/modelinfo"
)

// WeightFacts are a file's weight bytes as the planner counts them (model.Facts), by
// modelinfo.TensorRole: the routed experts per layer and one expert's slice of them, the
// MTP blocks after the main stack, and the dense rest.
type WeightFacts struct {
	Expert []int64 // per layer
	Slice  []int64 // one expert's gate+up+down per layer
	Dense  int64
	MTP    int64
}

// NewWeightFacts sums f's tensors for a main stack of layers blocks with experts routed
// experts per MoE layer (0 for a dense model).
func NewWeightFacts(f *gguf.File, layers, experts int) WeightFacts {
	w := WeightFacts{Expert: make([]int64, layers), Slice: make([]int64, layers)}
	for _, t := range f.Tensors {
		size := int64(t.Size)
		switch i, role := modelinfo.TensorRole(t.Name, layers); role {
		case modelinfo.RoleMTP:
			w.MTP += size
		case modelinfo.RoleRoutedExpert:
			if i >= 0 && i < layers && experts > 0 {
				w.Expert[i] += size
				w.Slice[i] += size / int64(experts)
				continue
			}
			w.Dense += size
		default:
			w.Dense += size
		}
	}
	return w
}

// ExpertTotal is the sum of the per-layer expert bytes.
func (w WeightFacts) ExpertTotal() int64 {
	var t int64
	for _, b := range w.Expert {
		t += b
	}
	return t
}

// SliceOf is layer l's expert slice, 0 outside the stack.
func (w WeightFacts) SliceOf(l int) int64 {
	if l < 0 || l >= len(w.Slice) {
		return 0
	}
	return w.Slice[l]
}
