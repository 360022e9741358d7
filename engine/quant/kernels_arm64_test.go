//go:build arm64 && !purego

package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"
)

// TestNEONKernelsBitExact checks every NEON kernel against the Go kernel it replaces, bit
// for bit, on random rows of many lengths and several rows per call. It runs on arm64
// machines and, in CI, under qemu-aarch64.
func TestNEONKernelsBitExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 62))
	trials := 6
	if testing.Short() {
		trials = 3
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
		for _, nb := range []int{1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33, q4kSumsOnStack + 3} {
			n := nb * bs
			for trial := 0; trial < trials; trial++ {
				nrows := 1 + trial%4
				rows := make([]byte, 0, nrows*typ.RowBytes(n))
				for range nrows {
					rows = append(rows, randomRow(typ, n, rng)...)
				}
				if trial == 2 {
					// Negative and subnormal scales (the f16 fields of every other block).
					for o := 0; o < len(rows); o += 2 * typ.TypeSize() {
						for k, off := range scaleFields[typ] {
							h := uint16(0x8000) | uint16(rng.IntN(0x400))
							if k == 1 {
								h = 0x8000 | 0x3c00 // −1
							}
							binary.LittleEndian.PutUint16(rows[o+off:], h)
						}
					}
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

// TestNEONQ8_0Q8_0BitExact checks the integer-product kernels, with and without SDOT,
// against dotQ8_0Q8_0Go, including the extreme quants ±127 and −128.
func TestNEONQ8_0Q8_0BitExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(63, 64))
	kerns := map[string]func(w, a *byte, nblocks int) float32{"neon": neonTable.q8_0q8_0}
	if cpu.ARM64.HasASIMDDP {
		kerns["sdot"] = sdotTable.q8_0q8_0
	} else {
		t.Log("no FEAT_DotProd on this CPU: the SDOT kernel is not tested")
	}
	for name, fn := range kerns {
		for _, nb := range []int{1, 2, 3, 8, 31} {
			for trial := 0; trial < 3; trial++ {
				w := randomRow(Q8_0, nb*32, rng)
				a := randomRow(Q8_0, nb*32, rng)
				if trial == 2 {
					for i := range w {
						if i%34 >= 2 {
							w[i], a[i] = 0x80, byte(127*(i%2)+0x80*(1-i%2))
						}
					}
				}
				got, want := fn(&w[0], &a[0], nb), dotQ8_0Q8_0Go(w, a)
				if math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("%s, %d blocks: %v, Go %v", name, nb, got, want)
				}
			}
		}
	}
}

// TestKernelTableChoice checks that the table follows the CPU's features: Advanced SIMD
// on every arm64 CPU Go supports, SDOT where the CPU has it.
func TestKernelTableChoice(t *testing.T) {
	want := "neon"
	if cpu.ARM64.HasASIMDDP {
		want = "neon+sdot"
	}
	if kernels.name != want {
		t.Errorf("kernel table %q, want %q", kernels.name, want)
	}
	t.Logf("kernel table %q", kernels.name)
}

// TestNEONRows4BitExact checks the four-token kernels against the Go kernel token by token,
// with rows long enough for the Q4_K sums to leave the stack buffer.
func TestNEONRows4BitExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(65, 66))
	pure := map[Type]func([]byte, []float32) float32{Q8_0: dotQ8_0Go, Q4_K: dotQ4_KGo, Q6_K: dotQ6_KGo}
	for typ, fn := range map[Type]rows4Kernel{Q8_0: neonTable.q8_0x4, Q4_K: neonTable.q4_Kx4, Q6_K: neonTable.q6_Kx4} {
		bs := typ.BlockSize()
		for _, nb := range []int{1, 2, 5, q4kSumsOnStack/4 + 1, 3 * q4kSumsOnStack / 4} {
			cols, nrows, ldo := nb*bs, 1+nb%3, 5
			rb := typ.RowBytes(cols)
			var rows []byte
			for range nrows {
				rows = append(rows, randomRow(typ, cols, rng)...)
			}
			x := randomVec(4*cols+7, rng) // xstride = cols; a few floats past the last token
			out := make([]float32, 3*ldo+nrows)
			fn(&rows[0], &x[0], cols, nb, nrows, &out[0], ldo)
			for i := 0; i < 4; i++ {
				for r := 0; r < nrows; r++ {
					want := pure[typ](rows[r*rb:(r+1)*rb], x[i*cols:(i+1)*cols])
					if got := out[i*ldo+r]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%v, %d blocks: token %d row %d: %v, Go %v", typ, nb, i, r, got, want)
					}
				}
			}
		}
	}
}
