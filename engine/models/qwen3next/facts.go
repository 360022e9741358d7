package qwen3next

import (
	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/engine/modelinfo"
)

// facts are the planner's sizes, computed once at load.
type facts struct {
	model.WeightFacts
	recurrent int64
}

func newFacts(f *gguf.File, m *Model) facts {
	// The MTP blocks follow the m.cfg.Layers blocks of the main stack.
	fc := facts{WeightFacts: model.NewWeightFacts(f, m.cfg.Layers, m.experts)}
	fc.recurrent = modelinfo.GatedDeltaNetStateBytes(int64(m.deltaCount), int64(m.hv), int64(m.dk), int64(m.dv), int64(m.convKernel), int64(m.convCh))
	return fc
}

func (m *Model) ExpertBytes() []int64 { return append([]int64(nil), m.facts.Expert...) }

func (m *Model) ExpertTotalBytes() int64 { return m.facts.ExpertTotal() }

func (m *Model) ExpertSliceBytes(l int) int64 { return m.facts.SliceOf(l) }

func (m *Model) DenseBytes() int64 { return m.facts.Dense }

func (m *Model) KVBytesPerPosition(dt ml.DType) int64 {
	return ml.KVBytesPerPosition(m.cfg.AttnLayers, m.cfg.KVHeads, m.cfg.HeadDim, m.cfg.HeadDim, dt)
}

func (m *Model) RecurrentBytes() int64 { return m.facts.recurrent }

// MTPBytes is the next-token-prediction block's weights (0 without one); not in DenseBytes.
func (m *Model) MTPBytes() int64 { return m.facts.MTP }

var _ model.Facts = (*Model)(nil)
