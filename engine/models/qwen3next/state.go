package qwen3next

import (
	"fmt"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
)

// State is one sequence: the KV cache of the full-attention layers and, per DeltaNet layer,
// the conv window [kernel−1, C] and the delta-rule state [hv, dv, dk].
type State struct {
	m     *Model
	kv    ml.Cache
	conv  []ml.Tensor
	delta []ml.Tensor
	mtp   *mtpState // set by EnableDraft
	b     ml.Backend
}

// mtpState is the MTP head's part of a sequence: its one-layer KV cache, the main model's
// last hidden state (paired with the next token), and copies of the recurrent states for
// rolling back a rejected draft.
type mtpState struct {
	kv      ml.Cache
	pending ml.Tensor // [1, d]
	saved   []ml.Tensor
}

func (m *Model) NewState(b ml.Backend, capacity int, kv ml.DType) (model.State, error) {
	c, err := b.NewCache(m.cfg.AttnLayers, m.cfg.KVHeads, m.cfg.HeadDim, capacity, kv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.v.arch, err)
	}
	return m.newState(b, c)
}

func (m *Model) NewKVPool(b ml.Backend, blocks, blockSize int, kv ml.DType) (ml.KVPool, error) {
	p, err := b.NewKVPool(m.cfg.AttnLayers, m.cfg.KVHeads, m.cfg.HeadDim, blocks, blockSize, kv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.v.arch, err)
	}
	return p, nil
}

func (m *Model) NewPooledState(b ml.Backend, pool ml.KVPool, capacity int) (model.State, error) {
	c, err := pool.Alloc(capacity)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.v.arch, err)
	}
	return m.newState(b, c)
}

func (m *Model) NewStateOn(b ml.Backend, c ml.Cache) (model.State, error) { return m.newState(b, c) }

func (s *State) KV() ml.Cache { return s.kv }

func (s *State) SaveRecurrent(b ml.Backend) ([]byte, error) {
	out, err := model.AppendTensors(nil, b, s.ownRecurrent()...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.m.v.arch, err)
	}
	return out, nil
}

func (s *State) RestoreRecurrent(b ml.Backend, data []byte) error {
	rest, err := model.RestoreTensors(data, b, s.ownRecurrent()...)
	if err != nil {
		return fmt.Errorf("%s: %w", s.m.v.arch, err)
	}
	if len(rest) != 0 {
		return fmt.Errorf("%s: recurrent state has %d bytes too many", s.m.v.arch, len(rest))
	}
	return nil
}

// ownRecurrent is the main model's recurrent state, without the MTP head's.
func (s *State) ownRecurrent() []ml.Tensor {
	return append(append([]ml.Tensor(nil), s.conv...), s.delta...)
}

// newState adds the recurrent state (one per sequence: llama.cpp's per-slot ssm state) to
// the KV cache c.
func (m *Model) newState(b ml.Backend, c ml.Cache) (model.State, error) {
	s := &State{m: m, b: b, kv: c}
	for range m.deltaCount {
		conv, err := b.NewTensor(m.convKernel-1, m.convCh)
		if err == nil {
			s.conv = append(s.conv, conv)
			var delta ml.Tensor
			delta, err = b.NewTensor(m.hv, m.dv, m.dk)
			if err == nil {
				s.delta = append(s.delta, delta)
			}
		}
		if err != nil {
			s.Free()
			return nil, fmt.Errorf("%s: %w", m.v.arch, err)
		}
	}
	return s, nil
}

func (s *State) Capacity() int { return s.kv.Capacity() }

func (s *State) Bytes() int64 {
	n := s.kv.Bytes() + s.m.RecurrentBytes()
	if s.mtp != nil {
		n += s.mtp.kv.Bytes() + s.m.RecurrentBytes() + 2*int64(s.m.cfg.Embedding)*4
	}
	return n
}

func (s *State) Snapshot(b ml.Backend, pos int) ([]byte, error) {
	out, err := model.AppendKV(nil, b, s.kv, s.m.cfg.AttnLayers, pos)
	if err == nil {
		out, err = model.AppendTensors(out, b, s.conv...)
	}
	if err == nil {
		out, err = model.AppendTensors(out, b, s.delta...)
	}
	if err == nil && s.mtp != nil {
		out, err = model.AppendKV(out, b, s.mtp.kv, 1, pos)
		if err == nil {
			out, err = model.AppendTensors(out, b, s.mtp.pending)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.m.v.arch, err)
	}
	return out, nil
}

// Free releases the caches and every state tensor, the MTP head's included.
func (s *State) Free() {
	s.kv.Free()
	for _, t := range s.recurrent() {
		s.b.Release(t)
	}
	if s.mtp != nil {
		s.mtp.kv.Free()
		for _, t := range s.mtp.saved {
			s.b.Release(t)
		}
	}
	s.conv, s.delta, s.mtp = nil, nil, nil
}

func (s *State) Restore(b ml.Backend, pos int, data []byte) error {
	c := s.m.cfg
	rest, err := model.RestoreKV(data, b, s.kv, c.AttnLayers, pos, c.KVHeads, c.HeadDim)
	if err == nil {
		rest, err = model.RestoreTensors(rest, b, s.conv...)
	}
	if err == nil {
		rest, err = model.RestoreTensors(rest, b, s.delta...)
	}
	if err == nil && s.mtp != nil {
		rest, err = model.RestoreKV(rest, b, s.mtp.kv, 1, pos, c.KVHeads, c.HeadDim)
		if err == nil {
			rest, err = model.RestoreTensors(rest, b, s.mtp.pending)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", s.m.v.arch, err)
	}
	if len(rest) != 0 {
		return fmt.Errorf("%s: snapshot has %d bytes past its states", s.m.v.arch, len(rest))
	}
	return nil
}
