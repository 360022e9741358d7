package model

import "github.com/redlite/batch/engine/ml"

// Experts are one layer's routed experts: the router (GGUF {d, E}) and the SwiGLU experts'
// gate and up ({d, ff, E}) and down ({ff, d, E}) matrices.
type Experts struct {
	Router, Gate, Up, Down ml.Weight
	// Biases (gpt-oss), nil where a file has none: the router's (GGUF dims {E}) and each
	// expert's projections' ({ff, E} for gate and up, {d, E} for down).
	RouterBias, GateBias, UpBias, DownBias ml.Weight
	// Limit > 0 makes the experts gpt-oss's clamped SwiGLU with Alpha and Limit
	// (ml.Context.ClampedSwiGLU) instead of SwiGLU.
	Alpha, Limit float32
}

// Forward is the routed-expert FFN of x [n, d] as llama.cpp's softmax-gated MoE computes
// it: softmax over the router's logits, the used most probable experts, their weights
// renormalized to sum 1 when norm is set, SwiGLU experts, the weighted sum: [n, d].
// layer names the intermediates in dumps. gpt-oss's softmax over the chosen experts'
// logits (SOFTMAX_WEIGHT) is the renormalized case: the same weights up to rounding.
func (e Experts) Forward(ctx ml.Context, x ml.Tensor, used int, norm bool, layer int) ml.Tensor {
	logits := ctx.MatMul(e.Router, x) // [n, E]
	if e.RouterBias != nil {
		logits = ctx.AddVec(logits, e.RouterBias)
	}
	logits = ctx.Name(logits, "ffn_moe_logits", layer)
	ids, w := ctx.Route(logits, used, norm)                                     // [n, k] each
	gate := expertBias(ctx, ctx.MatMulExperts(e.Gate, x, ids), e.GateBias, ids) // [n, k, ff]
	up := expertBias(ctx, ctx.MatMulExperts(e.Up, x, ids), e.UpBias, ids)
	var act ml.Tensor
	if e.Limit > 0 {
		act = ctx.ClampedSwiGLU(gate, up, e.Alpha, e.Limit)
	} else {
		act = ctx.SwiGLU(gate, up)
	}
	y := expertBias(ctx, ctx.MatMulExperts(e.Down, act, ids), e.DownBias, ids) // [n, k, d]
	return ctx.Name(ctx.WeightedSum(y, w), "ffn_moe_out", layer)
}

// expertBias adds to y [n, k, m] the bias row of the expert in each slot, as ggml's add_id:
// the bias {m, E} is a table whose rows Embed looks up by expert id. A nil b adds nothing.
func expertBias(ctx ml.Context, y ml.Tensor, b ml.Weight, ids ml.Tensor) ml.Tensor {
	if b == nil {
		return y
	}
	s, k := y.Shape(), ids.Shape()
	rows := ctx.Embed(b, ctx.Reshape(ids, k[0]*k[1]))
	return ctx.Add(y, ctx.Reshape(rows, s...))
}
