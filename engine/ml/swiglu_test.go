package ml

import "testing"

func TestClampedSwiGLU(t *testing.T) {
	const alpha, limit = 1.702, 7
	for _, c := range []struct{ g, u, want float32 }{
		{0, 3, 0},
		{100, 0, 7},        // the gate clamps at limit: 7·sigmoid(11.9)≈7
		{-100, 5, 0},       // sigmoid of a large negative is 0
		{1, -100, -5.0748}, // up clamps at −limit: sigmoid(1.702)·(−7+1)
	} {
		got := ClampedSwiGLU(c.g, c.u, alpha, limit)
		if d := got - c.want; d > 1e-2 || d < -1e-2 {
			t.Errorf("ClampedSwiGLU(%v, %v) = %v, want ≈%v", c.g, c.u, got, c.want)
		}
	}
}
