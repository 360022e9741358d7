package ml

import (
	"math"

	"github.com/redlite/batch/engine/quant"
)

// GELU is the tanh approximation of GELU, 0.5·x·(1 + tanh(√(2/π)·x·(1 + 0.044715·x²))),
// as llama.cpp's CPU backend evaluates it (ggml's GGML_GELU_FP16 table): 0 for x ≤ −10, x
// for x ≥ 10, else computed in float32 on x rounded to float16 and the result rounded to
// float16. Backends compute this function, so that a model's logits stay within 1e-5 of
// llama.cpp's instead of the float16 table's 1e-3.
func GELU(x float32) float32 {
	switch {
	case x <= -10:
		return 0
	case x >= 10:
		return x
	}
	h := quant.F16ToF32(quant.F32ToF16(x))
	const a, s = float32(0.044715), float32(0.79788456080286535587989211986876)
	// Each product rounded on its own (no fused multiply-add), in C's order.
	inner := 1 + float32(float32(a*h)*h)
	t := float32(float32(s*h) * inner)
	y := float32(float32(0.5*h) * (1 + float32(math.Tanh(float64(t)))))
	return quant.F16ToF32(quant.F32ToF16(y))
}
