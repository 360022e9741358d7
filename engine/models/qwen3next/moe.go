package qwen3next

import (
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
)

// ffn is the layer's feed-forward: qwen35's SwiGLU, or the mixture of experts.
func (m *Model) ffn(ctx ml.Context, b block, hn ml.Tensor, n int) ml.Tensor {
	if !m.v.moe {
		l := b.l
		return ctx.Name(ctx.MatMul(l.down, ctx.SwiGLU(ctx.MatMul(l.gate, hn), ctx.MatMul(l.up, hn))), "ffn_out", b.idx)
	}
	return m.moe(ctx, b, hn, n)
}

// moe is the routed experts (softmax router, top-k, weights renormalized to 1, SwiGLU
// experts) plus the SwiGLU shared expert scaled by sigmoid(w_shexp · x).
func (m *Model) moe(ctx ml.Context, b block, hn ml.Tensor, n int) ml.Tensor {
	l, i := b.l, b.idx
	routed := model.Experts{Router: l.router, Gate: l.gateExps, Up: l.upExps, Down: l.downExps}.Forward(ctx, hn, m.used, true, i)

	sh := ctx.MatMul(l.shDown, ctx.SwiGLU(ctx.MatMul(l.shGateFF, hn), ctx.MatMul(l.shUp, hn))) // [n, d]
	sg := ctx.Sigmoid(ctx.MatMul(l.shGate, hn))                                                // [n, 1]
	shared := ctx.Name(ctx.WeightedSum(ctx.Reshape(sh, n, 1, m.cfg.Embedding), sg), "ffn_shexp_gated", i)
	return ctx.Name(ctx.Add(routed, shared), "ffn_out", i)
}
