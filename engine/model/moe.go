package model

import "github.com/redlite/batch/engine/ml"

// Experts are one layer's routed experts: the router (GGUF {d, E}) and the SwiGLU experts'
// gate and up ({d, ff, E}) and down ({ff, d, E}) matrices.
type Experts struct {
	Router, Gate, Up, Down ml.Weight
}

// Forward is the routed-expert FFN of x [n, d] as llama.cpp's softmax-gated MoE computes
// it: softmax over the router's logits, the used most probable experts, their weights
// renormalized to sum 1 when norm is set, SwiGLU experts, the weighted sum: [n, d].
// layer names the intermediates in dumps.
func (e Experts) Forward(ctx ml.Context, x ml.Tensor, used int, norm bool, layer int) ml.Tensor {
	logits := ctx.Name(ctx.MatMul(e.Router, x), "ffn_moe_logits", layer) // [n, E]
	ids, w := ctx.Route(logits, used, norm)                              // [n, k] each
	gate := ctx.MatMulExperts(e.Gate, x, ids)                            // [n, k, ff]
	up := ctx.MatMulExperts(e.Up, x, ids)
	y := ctx.MatMulExperts(e.Down, ctx.SwiGLU(gate, up), ids) // [n, k, d]
	return ctx.Name(ctx.WeightedSum(y, w), "ffn_moe_out", layer)
}
