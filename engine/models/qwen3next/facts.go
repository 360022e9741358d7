package qwen3next

import (
	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/engine/modelinfo"
)

// facts are the planner's sizes, computed once at load.
type facts struct {
	expert    []int64 // per layer
	slice     []int64 // one expert's gate+up+down per layer
	dense     int64
	recurrent int64
	mtp       int64
}

func newFacts(f *gguf.File, m *Model) facts {
	fc := facts{expert: make([]int64, m.cfg.Layers), slice: make([]int64, m.cfg.Layers)}
	for _, t := range f.Tensors {
		size := int64(t.Size)
		// The MTP blocks follow the m.cfg.Layers blocks of the main stack.
		switch i, role := modelinfo.TensorRole(t.Name, m.cfg.Layers); role {
		case modelinfo.RoleMTP:
			fc.mtp += size
		case modelinfo.RoleRoutedExpert:
			fc.expert[i] += size
			fc.slice[i] += size / int64(m.experts)
		default:
			fc.dense += size
		}
	}
	fc.recurrent = modelinfo.GatedDeltaNetStateBytes(int64(m.deltaCount), int64(m.hv), int64(m.dk), int64(m.dv), int64(m.convKernel), int64(m.convCh))
	return fc
}

func (m *Model) ExpertBytes() []int64 { return append([]int64(nil), m.facts.expert...) }

func (m *Model) ExpertTotalBytes() int64 {
	var t int64
	for _, b := range m.facts.expert {
		t += b
	}
	return t
}

func (m *Model) ExpertSliceBytes(l int) int64 {
	if l < 0 || l >= len(m.facts.slice) {
		return 0
	}
	return m.facts.slice[l]
}

func (m *Model) DenseBytes() int64 { return m.facts.dense }

func (m *Model) KVBytesPerPosition(dt ml.DType) int64 {
	return ml.KVBytesPerPosition(m.cfg.AttnLayers, m.cfg.KVHeads, m.cfg.HeadDim, m.cfg.HeadDim, dt)
}

func (m *Model) RecurrentBytes() int64 { return m.facts.recurrent }

// MTPBytes is the next-token-prediction block's weights (0 without one); not in DenseBytes.
func (m *Model) MTPBytes() int64 { return m.facts.mtp }

var _ model.Facts = (*Model)(nil)
