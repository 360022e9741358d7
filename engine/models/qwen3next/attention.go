package qwen3next

import (
	"math"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
)

// attention is gated full attention: softmax attention of normed, partially rotated q and k,
// multiplied by sigmoid of a gate that the q projection carries beside each head's query.
// Each run of the batch rotates its own positions and attends over its own cache, kvs[run].
func (m *Model) attention(ctx ml.Context, runs []model.Run, kvs []ml.Cache, b block, xn ml.Tensor, n int) ml.Tensor {
	c, l, i := m.cfg, b.l, b.idx
	hd := c.HeadDim
	qg := ctx.Reshape(ctx.MatMul(l.q, xn), n, c.Heads, 2*hd)                       // per head: query | gate
	q := ctx.RMSNorm(ctx.Slice(qg, 0, hd), l.qNorm, m.eps)                         // [n, H, hd], per-head norm
	gate := ctx.Name(ctx.Reshape(ctx.Slice(qg, hd, hd), n, c.Heads*hd), "gate", i) // [n, H·hd]
	k, v := m.projectKV(ctx, b, xn, n)
	// Every run's keys are stored and queries rotated before any attends, so that the
	// batch's q, k and v are gone by then and several runs hold no more than one.
	qr := make([]ml.Tensor, len(runs))
	for j, r := range runs {
		m.storeKV(ctx, kvs[j], b, model.RunRows(ctx, runs, j, k), model.RunRows(ctx, runs, j, v), span{r.N, r.Pos0})
		qr[j] = ctx.Name(ctx.RoPE(model.RunRows(ctx, runs, j, q), r.Pos0, m.rope), "Qcur", i) // rotate the first rope.Dims
	}
	att := model.Attend(ctx, runs, qr, kvs, b.slot, float32(1/math.Sqrt(float64(hd))))
	a := ctx.Name(ctx.Mul(att, ctx.Sigmoid(gate)), "attn_gated", i) // [n, H·hd]
	return ctx.Name(ctx.MatMul(l.o, a), "attn_output", i)
}

// projectKV projects xn to normalized keys (not yet rotated) and values, [n, KV, hd] each.
func (m *Model) projectKV(ctx ml.Context, b block, xn ml.Tensor, n int) (k, v ml.Tensor) {
	c, l := m.cfg, b.l
	k = ctx.RMSNorm(ctx.Reshape(ctx.MatMul(l.k, xn), n, c.KVHeads, c.HeadDim), l.kNorm, m.eps)
	v = ctx.Reshape(ctx.MatMul(l.v, xn), n, c.KVHeads, c.HeadDim)
	return k, v
}

// storeKV rotates the keys of a span and writes them and the values to the block's layer
// of kv.
func (m *Model) storeKV(ctx ml.Context, kv ml.Cache, b block, k, v ml.Tensor, sp span) {
	k = ctx.Name(ctx.RoPE(k, sp.pos0, m.rope), "Kcur", b.idx)
	ctx.StoreKV(kv, b.slot, sp.pos0, k, v)
}
