package ml

import "math"

// RoPEAngles writes the cos and sin of position pos's r.Dims/2 rotation angles
// θ_k = pos·base^(−2k/Dims) / Factors[k] · Scale: θ built by repeated float32
// multiplication, then divided and scaled in float32 in that order, as ggml's cache builds
// it, cos and sin taken in float64 and rounded. Every backend rotates by these
// values, so their RoPE agrees to the rounding of the rotation itself.
func RoPEAngles(cos, sin []float32, pos int, r RoPE) {
	half := r.Dims / 2
	thetaScale := float32(math.Pow(float64(r.Base), -2/float64(r.Dims)))
	theta := float32(pos)
	for k := 0; k < half; k++ {
		a := theta
		if len(r.Factors) > 0 {
			a /= r.Factors[k]
		}
		if r.Scale != 0 {
			a *= r.Scale
		}
		cos[k] = float32(math.Cos(float64(a)))
		sin[k] = float32(math.Sin(float64(a)))
		theta *= thetaScale
	}
}
