package qwen3next

import (
	"github.com/redlite/batch/engine/ml"
)

// moe is the routed experts (softmax router, top-k, weights renormalized to 1, SwiGLU
// experts) plus the SwiGLU shared expert scaled by sigmoid(w_shexp · x).
func (m *Model) moe(ctx ml.Context, b block, hn ml.Tensor, n int) ml.Tensor {
	l, i := b.l, b.idx
	logits := ctx.Name(ctx.MatMul(l.router, hn), "ffn_moe_logits", i) // [n, E]
	ids, w := ctx.Route(logits, m.used, true)                         // [n, k] each
	gate := ctx.MatMulExperts(l.gateExps, hn, ids)                    // [n, k, ff]
	up := ctx.MatMulExperts(l.upExps, hn, ids)
	y := ctx.MatMulExperts(l.downExps, ctx.SwiGLU(gate, up), ids) // [n, k, d]
	routed := ctx.Name(ctx.WeightedSum(y, w), "ffn_moe_out", i)   // [n, d]

	sh := ctx.MatMul(l.shDown, ctx.SwiGLU(ctx.MatMul(l.shGateFF, hn), ctx.MatMul(l.shUp, hn))) // [n, d]
	sg := ctx.Sigmoid(ctx.MatMul(l.shGate, hn))                                                // [n, 1]
	shared := ctx.Name(ctx.WeightedSum(ctx.Reshape(sh, n, 1, m.cfg.Embedding), sg), "ffn_shexp_gated", i)
	return ctx.Name(ctx.Add(routed, shared), "ffn_out", i)
}
