package qwen3next

import (
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
)

func (m *Model) Forward(ctx ml.Context, b model.Batch) ml.Tensor {
	return m.forward(ctx, b, ctx.InputIDs(b.Tokens))
}

// forward is Forward with the batch's token ids in ids [n], a tensor of the pass: the
// uploaded b.Tokens, or ids computed in the pass (Verify's draft).
func (m *Model) forward(ctx ml.Context, b model.Batch, ids ml.Tensor) ml.Tensor {
	runs := b.MustRuns()
	states := model.RunStates[*State](runs)
	n := len(b.Tokens)
	kvs := make([]ml.Cache, len(runs))
	for j, s := range states {
		kvs[j] = s.kv
	}

	x := ctx.Embed(m.tokenEmbd, ids) // [n, d]
	for i := range m.layers {
		l := &m.layers[i]
		// Mixer block: h = x + mixer(norm(x))
		xn := ctx.Name(ctx.RMSNorm(x, l.attnNorm, m.eps), "attn_norm", i)
		var a ml.Tensor
		if l.recurrent {
			a = m.deltaNet(ctx, runs, states, block{idx: i, slot: m.stateLayer[i], l: l}, xn, n)
		} else {
			a = m.attention(ctx, runs, kvs, block{idx: i, slot: m.cacheLayer[i], l: l}, xn, n)
		}
		h := ctx.Name(ctx.Add(a, x), "attn_residual", i)

		// Feed-forward block: out = h + ffn(norm(h))
		hn := ctx.Name(ctx.RMSNorm(h, l.postNorm, m.eps), "attn_post_norm", i)
		x = ctx.Name(ctx.Add(m.ffn(ctx, block{idx: i, l: l}, hn, n), h), "l_out", i)
	}
	rows := b.LogitRows()
	drafting := false
	for _, s := range states {
		drafting = drafting || s.mtp != nil
	}
	if !drafting {
		if len(rows) == 0 {
			return nil
		}
		x = ctx.Name(ctx.RMSNorm(model.GatherRows(ctx, x, rows), m.outputNorm, m.eps), "result_norm", -1)
		return ctx.Name(ctx.MatMul(m.output, x), "result_output", -1)
	}
	h := ctx.Name(ctx.RMSNorm(x, m.outputNorm, m.eps), "h_nextn", -1) // [n, d]
	for j, r := range runs {
		s := states[j]
		if s.mtp == nil {
			continue
		}
		// The MTP head follows the sequence: token t at position p is paired with the
		// hidden state of position p−1 (the one that predicted it).
		hr := model.RunRows(ctx, runs, j, h)
		prev := s.mtp.pending
		if r.N > 1 {
			d := m.cfg.Embedding
			flat := ctx.Concat(ctx.Reshape(prev, 1, d), ctx.Reshape(ctx.Rows(hr, 0, r.N-1), 1, (r.N-1)*d))
			prev = ctx.Reshape(flat, r.N, d)
		}
		m.mtpForward(ctx, s, model.RunRows(ctx, runs, j, ids), r.N, prev, r.Pos0, false)
		ctx.Assign(s.mtp.pending, ctx.Rows(hr, r.N-1, 1))
	}
	if len(rows) == 0 {
		return nil
	}
	return ctx.Name(ctx.MatMul(m.output, ctx.Name(model.GatherRows(ctx, h, rows), "result_norm", -1)), "result_output", -1)
}

// mtpForward runs the MTP head for tokens at pos0 … paired with hidden states h [n, d],
// writing its KV cache; with logits set it returns the head's logits for the last token,
// else nil.
func (m *Model) mtpForward(ctx ml.Context, s *State, ids ml.Tensor, n int, h ml.Tensor, pos0 int, logits bool) ml.Tensor {
	t, il := m.mtp, m.cfg.Layers
	embed := t.embed
	if embed == nil {
		embed = m.tokenEmbd
	}
	e := ctx.RMSNorm(ctx.Embed(embed, ids), t.enorm, m.eps)
	hn := ctx.RMSNorm(h, t.hnorm, m.eps)
	x := ctx.Name(ctx.MatMul(t.ehProj, ctx.Concat(e, hn)), "mtp_eh_proj", il) // [n, d]

	xn := ctx.RMSNorm(x, t.attnNorm, m.eps)
	b := block{idx: il, slot: 0, l: &t.layer} // the head's own one-layer cache
	if !logits {
		// Following the sequence only needs the head's keys and values.
		k, v := m.projectKV(ctx, b, xn, n)
		m.storeKV(ctx, s.mtp.kv, b, k, v, span{n, pos0})
		return nil
	}
	a := m.attention(ctx, []model.Run{{State: s, N: n, Pos0: pos0}}, []ml.Cache{s.mtp.kv}, b, xn, n)
	hr := ctx.Add(a, x)
	out := ctx.Name(ctx.Add(m.ffn(ctx, b, ctx.RMSNorm(hr, t.postNorm, m.eps), n), hr), "mtp_post_ffn", il)
	norm, head := t.headNorm, t.head
	if norm == nil {
		norm = m.outputNorm
	}
	if head == nil {
		head = m.output
	}
	out = ctx.RMSNorm(ctx.Rows(out, n-1, 1), norm, m.eps)
	return ctx.Name(ctx.MatMul(head, out), "mtp_result_output", il)
}

// block is the block an operation belongs to: idx names its tensors in dumps, slot is its
// layer in the KV cache (attention) or in the recurrent state (DeltaNet), l its weights.
type block struct {
	idx, slot int
	l         *layer
}

// span is the tokens of a pass: n of them, from position pos0.
type span struct{ n, pos0 int }
