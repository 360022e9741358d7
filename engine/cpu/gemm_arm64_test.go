//go:build arm64 && !purego

package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/redlite/batch/engine/quant"
)

// TestNEONGemmBitExact checks the NEON micro-kernel against the Go one bit for bit: each
// 4×4 quarter of its 8×8 tile must equal gemm4x4Go's tile, for k around the 4-step loop's
// tails and at sizes the backend uses.
func TestNEONGemmBitExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	ks := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 16, 17, 64, 127, 300}
	for _, k := range ks {
		lda, ldb, ldc := k+3, 8+5, 8+2
		a := randomTensor(rng, 7*lda+k).data
		b := randomTensor(rng, (k-1)*ldb+8).data
		if k%2 == 1 {
			for i := range a {
				if i%5 == 0 {
					a[i] = float32(math.Copysign(0, float64(i%3-1)))
				}
			}
		}
		c := make([]float32, 7*ldc+8)
		for i := range c {
			c[i] = float32(math.NaN())
		}
		neonKernel.fn(k, a, lda, b, ldb, c, ldc)
		want := make([]float32, 16)
		for i0 := 0; i0 < 8; i0 += 4 {
			for j0 := 0; j0 < 8; j0 += 4 {
				gemm4x4Go(k, a[i0*lda:], lda, b[j0:], ldb, want, 4)
				for i := 0; i < 4; i++ {
					for j := 0; j < 4; j++ {
						got := c[(i0+i)*ldc+j0+j]
						if math.Float32bits(got) != math.Float32bits(want[i*4+j]) {
							t.Fatalf("k=%d: C[%d][%d] = %v, Go %v", k, i0+i, j0+j, got, want[i*4+j])
						}
					}
				}
			}
		}
	}
}

// TestNEONGemmWeightBitExact runs whole blocked products with the NEON and the Go kernel,
// whose outputs must agree bit for bit (their tiles differ: 8×8 and 4×4).
func TestNEONGemmWeightBitExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(73, 74))
	b := New(2)
	for _, typ := range []quant.Type{quant.F32, quant.Q4_K} {
		const rows, cols = 37, 256
		w := randomWeight(t, b, rng, typ, rows, cols)
		for _, n := range []int{1, 7, 9, 20} {
			t.Run(fmt.Sprintf("%v/n=%d", typ, n), func(t *testing.T) {
				x := randomTensor(rng, n, cols).data
				got, want := make([]float32, n*rows), make([]float32, n*rows)
				gemmWeight(b.pool, neonKernel, w, 0, rows, x, n, got)
				gemmWeight(b.pool, goKernel, w, 0, rows, x, n, want)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("element %d: NEON %v, Go %v", i, got[i], want[i])
					}
				}
			})
		}
	}
}

func TestGemmKernelChoice(t *testing.T) {
	if defaultKernel.name != "neon" {
		t.Errorf("default kernel %q, want neon", defaultKernel.name)
	}
}
