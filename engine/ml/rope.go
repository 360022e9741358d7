package ml

import "math"

// RoPEAngles writes the cos and sin of position pos's r.Dims/2 rotation angles
// θ_k = pos·base^(−2k/Dims) / Factors[k] · Scale: θ built by repeated float32
// multiplication, then divided and scaled in float32 in that order, as ggml's cache builds
// it, cos and sin taken in float64 and rounded. Every backend rotates by these
// values, so their RoPE agrees to the rounding of the rotation itself.
//
// With YaRN (r.YaRN.OrigContext > 0) the angle is ggml's rope_yarn with ext_factor 1: the
// scaled and unscaled angles mixed by a ramp that is 1 (unscaled) for the pairs below the
// correction dim of BetaFast and 0 (scaled) above that of BetaSlow, and cos and sin
// multiplied by AttnFactor·(1 + 0.1·ln(1/Scale)); every step in float32 as ggml has it.
func RoPEAngles(cos, sin []float32, pos int, r RoPE) {
	half := r.Dims / 2
	thetaScale := float32(math.Pow(float64(r.Base), -2/float64(r.Dims)))
	theta := float32(pos)
	y := r.YaRN
	var lo, hi, mscale float32
	if y.OrigContext > 0 {
		lo, hi = yarnCorrDims(r.Dims, y.OrigContext, r.Base, y.BetaFast, y.BetaSlow)
		mscale = y.AttnFactor * (1 + 0.1*logf(1/r.Scale))
	}
	for k := 0; k < half; k++ {
		a := theta
		if len(r.Factors) > 0 {
			a /= r.Factors[k]
		}
		switch {
		case y.OrigContext > 0:
			mix := 1 - min(1, max(0, (float32(k)-lo)/max(0.001, hi-lo)))
			a = float32(r.Scale*a*(1-mix)) + float32(a*mix) // no fused multiply-add: ggml rounds each product
		case r.Scale != 0:
			a *= r.Scale
		}
		c, s := float32(math.Cos(float64(a))), float32(math.Sin(float64(a)))
		if y.OrigContext > 0 {
			c, s = c*mscale, s*mscale
		}
		cos[k], sin[k] = c, s
		theta *= thetaScale
	}
}

// yarnCorrDims are the first and last pair YaRN's ramp runs between: the pairs that turn
// beta_fast and beta_slow times over the original context, floored and ceiled into
// [0, dims−1] (ggml_rope_yarn_corr_dims).
func yarnCorrDims(dims, origContext int, base, betaFast, betaSlow float32) (lo, hi float32) {
	corr := func(turns float32) float32 {
		return float32(dims) * logf(float32(origContext)/(turns*2*math.Pi)) / (2 * logf(base))
	}
	lo = max(0, float32(math.Floor(float64(corr(betaFast)))))
	hi = min(float32(dims-1), float32(math.Ceil(float64(corr(betaSlow)))))
	return lo, hi
}

func logf(x float32) float32 { return float32(math.Log(float64(x))) }
