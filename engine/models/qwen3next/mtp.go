package qwen3next

import (
	"errors"
	"fmt"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
)

// ErrNoMTP is returned when drafting is asked of a file without an MTP block.
var ErrNoMTP = errors.New("the file has no MTP (nextn_predict_layers) block")

// HasMTP says whether the file carries a next-token-prediction block.
func (m *Model) HasMTP() bool { return m.mtp != nil }

func (m *Model) EnableDraft(b ml.Backend, st model.State) error {
	if m.mtp == nil {
		return fmt.Errorf("%s: %w", m.v.arch, ErrNoMTP)
	}
	s := st.(*State)
	if s.mtp != nil {
		return nil
	}
	c := m.cfg
	kv, err := b.NewCache(1, c.KVHeads, c.HeadDim, s.kv.Capacity(), s.kv.DType())
	if err != nil {
		return fmt.Errorf("%s: MTP cache: %w", m.v.arch, err)
	}
	ms := &mtpState{kv: kv}
	if ms.pending, err = b.NewTensor(1, c.Embedding); err != nil {
		return fmt.Errorf("%s: %w", m.v.arch, err)
	}
	// Room to checkpoint everything recurrent() lists once s.mtp is set.
	for _, t := range append(append(append([]ml.Tensor(nil), s.conv...), s.delta...), ms.pending) {
		cp, err := b.NewTensor(t.Shape()...)
		if err != nil {
			return fmt.Errorf("%s: %w", m.v.arch, err)
		}
		ms.saved = append(ms.saved, cp)
	}
	s.mtp = ms
	return nil
}

// recurrent lists the state that a Forward call overwrites rather than appends to.
func (s *State) recurrent() []ml.Tensor {
	ts := append(append([]ml.Tensor(nil), s.conv...), s.delta...)
	if s.mtp != nil {
		ts = append(ts, s.mtp.pending)
	}
	return ts
}

func (m *Model) Draft(ctx ml.Context, st model.State, token int32, pos int) ml.Tensor {
	s := st.(*State)
	return m.mtpForward(ctx, s, ctx.InputIDs([]int32{token}), 1, s.mtp.pending, pos, true)
}

func (m *Model) Verify(ctx ml.Context, st model.State, token int32, draft ml.Tensor, pos int) ml.Tensor {
	ids := ctx.Concat(ctx.InputIDs([]int32{token}), draft) // [2]
	b := model.Single(st, []int32{token, 0}, pos, true)    // the draft's id is in ids
	return m.forward(ctx, b, ids)
}

func (m *Model) Checkpoint(ctx ml.Context, st model.State) {
	s := st.(*State)
	for i, t := range s.recurrent() {
		ctx.Assign(s.mtp.saved[i], t)
	}
}

func (m *Model) Rollback(ctx ml.Context, st model.State) {
	s := st.(*State)
	for i, t := range s.recurrent() {
		ctx.Assign(t, s.mtp.saved[i])
	}
}

var _ model.Drafter = (*Model)(nil)
