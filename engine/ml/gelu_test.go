package ml

import (
	"math"
	"testing"
)

// TestGELU: the tanh approximation to float16 precision, its limits outside ±10.
func TestGELU(t *testing.T) {
	for _, x := range []float32{-12, -10, -3.5, -1, -0.25, 0, 1e-3, 0.5, 1, 2.75, 9.99, 10, 42} {
		got := GELU(x)
		var want float64
		switch {
		case x <= -10:
			want = 0
		case x >= 10:
			want = float64(x)
		default:
			v := float64(x)
			want = 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*v*(1+0.044715*v*v)))
		}
		if d := math.Abs(float64(got) - want); d > 2e-3*math.Abs(want)+1e-6 {
			t.Errorf("GELU(%v) = %v, want %v", x, got, want)
		}
	}
}
