//go:build arm64 && !purego

package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestNEONKernelsBitExact checks every NEON kernel against the Go kernel it replaces, bit
// for bit, on random rows of many lengths and several rows per call. It runs on arm64
// machines and, in CI, under qemu-aarch64.
func TestNEONKernelsBitExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 62))
	trials := 6
	if testing.Short() {
		trials = 2
	}
	pure := map[Type]func([]byte, []float32) float32{
		Q8_0: dotQ8_0Go, Q4_K: dotQ4_KGo, Q6_K: dotQ6_KGo, IQ2_XXS: dotIQ2_XXSGo,
	}
	for _, typ := range []Type{Q8_0, Q4_K, Q6_K, IQ2_XXS} {
		fn, bs := neonTable.kernelFor(typ)
		if fn == nil {
			t.Errorf("%v: no NEON kernel", typ)
			continue
		}
		for _, nb := range []int{1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33} {
			n := nb * bs
			for trial := 0; trial < trials; trial++ {
				nrows := 1 + trial%4
				rows := make([]byte, 0, nrows*typ.RowBytes(n))
				for range nrows {
					rows = append(rows, randomRow(typ, n, rng)...)
				}
				x := randomVec(n, rng)
				if trial == 1 {
					// Zeros of either sign, and values far apart in size.
					for i := range x {
						switch i % 7 {
						case 0:
							x[i] = 0
						case 3:
							x[i] = float32(math.Copysign(0, -1))
						case 5:
							x[i] *= 1e6
						}
					}
				}
				out := make([]float32, nrows)
				fn(&rows[0], &x[0], nb, nrows, &out[0])
				rb := typ.RowBytes(n)
				for r, got := range out {
					want := pure[typ](rows[r*rb:(r+1)*rb], x)
					if math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%v, %d blocks, row %d of %d: NEON %v (%#08x), Go %v (%#08x)",
							typ, nb, r, nrows, got, math.Float32bits(got), want, math.Float32bits(want))
					}
				}
			}
		}
	}
}

// TestKernelTableChoice checks that the CPU's table is the NEON one: every arm64 CPU Go
// supports has Advanced SIMD.
func TestKernelTableChoice(t *testing.T) {
	if kernels.name != "neon" {
		t.Errorf("kernel table %q, want neon", kernels.name)
	}
}
