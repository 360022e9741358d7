//go:build amd64 && !purego

package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// vnniCase is a set of activations and rows with the edges the random ones miss: an
// all-zero activation block (D = 0), blocks at ±127 everywhere and alternating ±1, rows
// whose every byte is 0xff, 0x00 or 0x55 under the largest and least f16 scales.
func vnniCase(t *testing.T, typ Type, nb, ntok, nrand int, rng *rand.Rand) (data []byte, a []Q8K) {
	t.Helper()
	n := nb * QK_K
	x := randomVec(ntok*n, rng)
	clear(x[QK_K : 2*QK_K])
	for i := 2 * QK_K; i < 3*QK_K && i < len(x); i++ {
		x[i] = 3
	}
	for i := 3 * QK_K; i < 4*QK_K && i < len(x); i++ {
		x[i] = float32(1 - 2*(i&1))
	}
	for i := len(x) - QK_K; i < len(x); i++ {
		x[i] = -2.5
	}
	a = make([]Q8K, ntok*nb)
	QuantizeQ8K(x, a)
	rb := typ.RowBytes(n)
	for range nrand {
		data = append(data, randomRow(typ, n, rng)...)
	}
	for _, fill := range []byte{0xff, 0x00, 0x55} {
		for _, d := range []uint16{0x7bff, 0x0001} {
			row := make([]byte, rb)
			for i := range row {
				row[i] = fill
			}
			for o := 0; o < rb; o += typ.TypeSize() {
				for _, off := range scaleFields[typ] {
					binary.LittleEndian.PutUint16(row[o+off:], d)
				}
			}
			data = append(data, row...)
		}
	}
	return data, a
}

// TestVNNIKernels checks every AVX-512 VNNI kernel bit for bit against the pure-Go kernel,
// token by token, on random rows and the edge rows and blocks of vnniCase, for one block
// and several, one row and many.
func TestVNNIKernels(t *testing.T) {
	if !useVNNI {
		t.Skip("no AVX-512 VNNI on this machine")
	}
	for _, k := range vnniKernels {
		t.Run(k.name, func(t *testing.T) {
			if err := checkVNNIKernel(t, k, func([]byte) {}); err != "" {
				t.Error(err)
			}
		})
	}
}

// TestVNNIKernelsCanFail flips one weight bit in the middle of the rows a kernel sees and
// expects the comparison of TestVNNIKernels to notice.
func TestVNNIKernelsCanFail(t *testing.T) {
	if !useVNNI {
		t.Skip("no AVX-512 VNNI on this machine")
	}
	for _, k := range vnniKernels {
		t.Run(k.name, func(t *testing.T) {
			if err := checkVNNIKernel(t, k, func(data []byte) { data[len(data)/2] ^= 0x10 }); err == "" {
				t.Fatal("a corrupted row went unnoticed")
			}
		})
	}
}

type vnniKernel struct {
	name string
	typ  Type
	ntok int // tokens per call
	// run computes out[i·ldo + r] for the ntok tokens of a and every row of rows.
	run func(rows []byte, a []Q8K, nb, nr int, out []float32, ldo int)
}

// checkVNNIKernel runs k over vnniCase, with corrupt applied to the rows the kernel sees
// (not to those the Go kernel sees), and returns the first difference.
func checkVNNIKernel(t *testing.T, k vnniKernel, corrupt func([]byte)) string {
	rng := rand.New(rand.NewPCG(31, uint64(k.ntok)))
	for _, c := range [][2]int{{1, 1}, {1, 5}, {4, 3}, {12, 1}, {5, 2}, {2, 26}, {3, 30}} {
		nb, nrand := c[0], c[1]
		data, a := vnniCase(t, k.typ, nb, max(k.ntok, 4), nrand, rng)
		a = a[:k.ntok*nb]
		rb := k.typ.RowBytes(nb * QK_K)
		nr := len(data) / rb
		seen := append([]byte(nil), data...)
		corrupt(seen)
		ldo := nr + 3
		out := make([]float32, (k.ntok-1)*ldo+nr+1)
		for i := range out {
			out[i] = -7 // between tokens and past the end: untouched
		}
		k.run(seen, a, nb, nr, out, ldo)
		for i := range k.ntok {
			for r := range nr {
				want := q8kDots[k.typ](data[r*rb:(r+1)*rb], a[i*nb:(i+1)*nb])
				if g := out[i*ldo+r]; math.Float32bits(g) != math.Float32bits(want) {
					return fmt.Sprintf("%d blocks, token %d row %d: %g, Go %g", nb, i, r, g, want)
				}
			}
			for r := nr; r < ldo && i*ldo+r < len(out); r++ {
				if out[i*ldo+r] != -7 {
					return fmt.Sprintf("%d blocks: token %d wrote past its rows", nb, i)
				}
			}
		}
	}
	return ""
}

var vnniKernels []vnniKernel

// repackedKernel is a vnniKernel over the repacked layout of the rows.
func repackedKernel(name string, typ Type, ntok int) vnniKernel {
	return vnniKernel{name, typ, ntok, func(rows []byte, a []Q8K, nb, nr int, out []float32, ldo int) {
		packed := Repack(typ, rows, nr, nb*QK_K)
		for i := 0; i < ntok; i += 4 {
			k := min(4, ntok-i)
			dotRepacked(typ, packed, nb, nr, a[i*nb:(i+k)*nb], k, out[i*ldo:], ldo)
		}
	}}
}

func init() {
	vnniKernels = append(vnniKernels,
		repackedKernel("Q4_Kx16/4", Q4_K, 4),
		repackedKernel("Q4_Kx16/1", Q4_K, 1),
		repackedKernel("Q4_Kx16/7", Q4_K, 7),
		repackedKernel("Q5_Kx16/4", Q5_K, 4),
		repackedKernel("Q5_Kx16/1", Q5_K, 1),
		repackedKernel("Q5_Kx16/7", Q5_K, 7),
		repackedKernel("Q6_Kx16/4", Q6_K, 4),
		repackedKernel("Q6_Kx16/1", Q6_K, 1),
		repackedKernel("Q6_Kx16/7", Q6_K, 7))
}

// BenchmarkRepacked times the repacked kernels on the tile of BenchmarkVNNIKernels: 16 rows
// of 1,024 values, 8 tokens, four at a time and one at a time.
func BenchmarkRepacked(b *testing.B) {
	if !useVNNI {
		b.Skip("no AVX-512 VNNI on this machine")
	}
	rng := rand.New(rand.NewPCG(7, 7))
	const n, rows = 1024, 16
	nb := n / QK_K
	a := make([]Q8K, 8*nb)
	QuantizeQ8K(randomVec(8*n, rng), a)
	out := make([]float32, 8*rows)
	for _, t := range []Type{Q4_K, Q5_K, Q6_K} {
		var data []byte
		for range rows {
			data = append(data, randomRow(t, n, rng)...)
		}
		packed := Repack(t, data, rows, n)
		b.Run(t.String()+"/avx2", func(b *testing.B) {
			for b.Loop() {
				for i := 0; i < 8; i += 4 {
					dotRows4Q8K(t, data, a[i*nb:(i+4)*nb], rows, out[i*rows:], rows)
				}
			}
		})
		for _, k := range []int{4, 1} {
			b.Run(fmt.Sprintf("%v/%d", t, k), func(b *testing.B) {
				for b.Loop() {
					for i := 0; i < 8; i += k {
						dotRepacked(t, packed, nb, rows, a[i*nb:(i+k)*nb], k, out[i*rows:], rows)
					}
				}
			})
		}
	}
}
