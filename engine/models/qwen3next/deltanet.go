package qwen3next

import (
	"math"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
)

// deltaNet is a Gated DeltaNet layer: project to q, k, v (and the output gate z), run them
// through the causal conv and SiLU, L2-normalize q and k, apply the gated delta rule with
// per-head decay g = softplus(α + dt_bias)·A and write strength β = sigmoid(b), then the
// gated RMSNorm (norm(o)·silu(z)) and the output projection. qwen35 differs only in where
// β and α come from and in which key head a value head reads.
func (m *Model) deltaNet(ctx ml.Context, runs []model.Run, states []*State, b block, xn ml.Tensor, n int) ml.Tensor {
	hk, hv, dk, dv := m.hk, m.hv, m.dk, m.dv
	l, i, j := b.l, b.idx, b.slot
	r := hv / hk
	var qkv, z ml.Tensor
	if l.qkv != nil {
		qkv = ctx.MatMul(l.qkv, xn) // [n, C]: q | k | v
		z = ctx.MatMul(l.z, xn)     // [n, hv·dv]
	} else {
		// Legacy layout: per key head q, k, v of its r value heads, z of them.
		mixed := ctx.Reshape(ctx.MatMul(l.in, xn), n, hk, 2*dk+2*r*dv)
		q := ctx.Reshape(ctx.Slice(mixed, 0, dk), n, hk*dk)
		k := ctx.Reshape(ctx.Slice(mixed, dk, dk), n, hk*dk)
		v := ctx.Reshape(ctx.Slice(mixed, 2*dk, r*dv), n, hv*dv)
		z = ctx.Reshape(ctx.Slice(mixed, 2*dk+r*dv, r*dv), n, hv*dv)
		qkv = ctx.Concat(q, k, v)
	}
	ctx.Name(qkv, "qkv_mixed", i)
	ctx.Name(z, "z", i)

	var beta, alpha ml.Tensor // [n, hv] each
	if l.ba != nil {
		ba := ctx.Reshape(ctx.MatMul(l.ba, xn), n, hk, 2*r) // per key head: β of its r heads | α of them
		beta = ctx.Sigmoid(ctx.Reshape(ctx.Slice(ba, 0, r), n, hv))
		alpha = ctx.Reshape(ctx.Slice(ba, r, r), n, hv)
	} else {
		beta = ctx.Sigmoid(ctx.MatMul(l.beta, xn))
		alpha = ctx.MatMul(l.alpha, xn)
	}
	g := ctx.MulVec(ctx.Softplus(ctx.AddVec(alpha, l.dtBias)), l.a) // log decay ≤ 0
	ctx.Name(g, "gate", i)

	// The conv window and the delta rule's state are the sequence's own: per run.
	o := model.PerRun(ctx, runs, func(ri int, r model.Run) ml.Tensor {
		s := states[ri]
		conv := ctx.SiLU(ctx.Conv1DCausal(model.RunRows(ctx, runs, ri, qkv), l.conv, s.conv[j])) // [r.N, C]
		ctx.Name(conv, "conv_output_silu", i)
		q := ctx.L2Norm(ctx.Reshape(ctx.Slice(conv, 0, hk*dk), r.N, hk, dk), m.eps)
		k := ctx.L2Norm(ctx.Reshape(ctx.Slice(conv, hk*dk, hk*dk), r.N, hk, dk), m.eps)
		v := ctx.Reshape(ctx.Slice(conv, 2*hk*dk, hv*dv), r.N, hv, dv)
		if m.v.qwen35 && hv != hk {
			q, k = m.tileHeads(ctx, q, r.N), m.tileHeads(ctx, k, r.N)
		}
		gr, br := model.RunRows(ctx, runs, ri, g), model.RunRows(ctx, runs, ri, beta)
		return ctx.DeltaNet(q, k, v, gr, br, s.delta[j], float32(1/math.Sqrt(float64(dk)))) // [r.N, hv, dv]
	})
	// The delta rule's output ("attn_output" is full attention's projection, not this).
	ctx.Name(o, "delta_output", i)

	o = ctx.Mul(ctx.Reshape(ctx.RMSNorm(o, l.norm, m.eps), n, hv*dv), ctx.SiLU(z))
	ctx.Name(o, "final_output", i)
	return ctx.Name(ctx.MatMul(l.out, o), "linear_attn_out", i)
}

// tileHeads repeats the hk key heads of x [n, hk, dk] hv/hk times, [n, hv, dk]: value head
// h of Qwen3.5 reads key head h mod hk, where DeltaNet's own sharing reads h / (hv/hk).
func (m *Model) tileHeads(ctx ml.Context, x ml.Tensor, n int) ml.Tensor {
	flat := ctx.Reshape(x, n, m.hk*m.dk)
	copies := make([]ml.Tensor, m.hv/m.hk)
	for i := range copies {
		copies[i] = flat
	}
	return ctx.Reshape(ctx.Concat(copies...), n, m.hv, m.dk)
}
