package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMXFP4Dot: the machine's MXFP4 dot product equals the Go reference bit for bit (on
// rows as long as gpt-oss's 2880 and odd block counts), and the reference equals the float64
// dot of the dequantized row to rounding.
func TestMXFP4Dot(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 4))
	for _, n := range []int{32, 64, 96, 256, 2880, 4096} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			for trial := range 8 {
				row, x := randomRow(MXFP4, n, rng), randomVec(n, rng)
				ref := dotMXFP4Go(row, x)
				if got := DotF32(MXFP4, row, x); math.Float32bits(got) != math.Float32bits(ref) {
					t.Errorf("trial %d: DotF32 %g (%#08x), the Go reference %g (%#08x)", trial, got, math.Float32bits(got), ref, math.Float32bits(ref))
				}
				want, mag := exactDot(t, MXFP4, row, x)
				if d := math.Abs(float64(ref) - want); !(d <= dotTol(mag)) {
					t.Errorf("trial %d: reference %g, exact %g (|diff| %g)", trial, ref, want, d)
				}
			}
		})
	}
}

// TestE8M0Half: every exponent byte's half scale is 2^(e−128), the subnormal ones included.
func TestE8M0Half(t *testing.T) {
	for e := range 256 {
		if got, want := e8m0Half(byte(e)), float32(math.Ldexp(1, e-128)); got != want {
			t.Errorf("e8m0Half(%d) = %g, want %g", e, got, want)
		}
	}
}
