package ml

import "math"

// ClampedSwiGLU is gpt-oss's gated activation of one gate and up value, as llama.cpp's CPU
// backend computes swiglu_oai in float32: g = min(gate, limit), u = clamp(up, −limit,
// limit), g/(1 + e^(−alpha·g))·(u + 1). Backends compute this function.
func ClampedSwiGLU(gate, up, alpha, limit float32) float32 {
	g := min(gate, limit)
	u := min(max(up, -limit), limit)
	e := float32(math.Exp(float64(float32(alpha * -g))))
	return float32(g/(1+e)) * (u + 1)
}
