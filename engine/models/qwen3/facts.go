package qwen3

import (
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
)

func (m *Model) ExpertBytes() []int64 { return append([]int64(nil), m.facts.Expert...) }

func (m *Model) ExpertTotalBytes() int64 { return m.facts.ExpertTotal() }

func (m *Model) ExpertSliceBytes(l int) int64 { return m.facts.SliceOf(l) }

func (m *Model) DenseBytes() int64 { return m.facts.Dense }

func (m *Model) KVBytesPerPosition(dt ml.DType) int64 {
	return ml.KVBytesPerPosition(m.cfg.AttnLayers, m.cfg.KVHeads, m.cfg.HeadDim, m.cfg.HeadDim, dt)
}

// RecurrentBytes is 0: these layers keep no state but the KV cache.
func (m *Model) RecurrentBytes() int64 { return 0 }

func (m *Model) MTPBytes() int64 { return m.facts.MTP }

var _ model.Facts = (*Model)(nil)
