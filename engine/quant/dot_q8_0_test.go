package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// q8_0Case is a matrix of Q8_0 rows and activations quantized for it.
type q8_0Case struct {
	rows, a []byte
	nrows   int
}

// q8_0Cases are random rows with edge blocks — the extreme quants −128 and 127, zero and
// largest scales, the least subnormal scale — against activations with a zero block, a
// block of all ±127 and one of alternating signs, for row counts that take the four-row
// pass, its tail, or both, and for one block and several.
func q8_0Cases(rng *rand.Rand) []q8_0Case {
	var cs []q8_0Case
	for _, nb := range []int{1, 2, 7} {
		n := nb * 32
		x := randomVec(n, rng)
		if nb > 1 {
			clear(x[32:64])
		}
		if nb > 2 {
			for i := 64; i < 96; i++ {
				x[i] = 3
			}
			for i := 96; i < 128; i++ {
				x[i] = float32(1 - 2*(i&1))
			}
		}
		a := make([]byte, Q8_0.RowBytes(n))
		QuantizeQ8_0Ref(x, a)
		var data []byte
		for range 5 {
			data = append(data, randomRow(Q8_0, n, rng)...)
		}
		for _, fill := range []byte{0x80, 0x7f, 0x00, 0x81} {
			for _, d := range []uint16{0x7bff, 0x0001, 0x0000, 0xbc00} { // 65504, least subnormal, 0, −1
				row := make([]byte, Q8_0.RowBytes(n))
				for i := range row {
					row[i] = fill
				}
				for o := 0; o < len(row); o += 34 {
					binary.LittleEndian.PutUint16(row[o:], d)
				}
				data = append(data, row...)
			}
		}
		total := len(data) / len(a)
		for _, nr := range []int{1, 3, 4, 5, 8, 9, total} {
			cs = append(cs, q8_0Case{data[:nr*len(a)], a, nr})
		}
	}
	return cs
}

// checkRowsQ8_0 runs kernel on every case and reports the first number that is not
// dotRowsQ8_0Go's bit for bit, or that depends on the rows computed with it.
func checkRowsQ8_0(kernel func(rows, a []byte, out []float32), cs []q8_0Case) error {
	for _, c := range cs {
		rb := len(c.a)
		want := make([]float32, c.nrows)
		dotRowsQ8_0Go(c.rows, c.a, want)
		got := make([]float32, c.nrows)
		kernel(c.rows, c.a, got)
		one := make([]float32, 1)
		for r := range got {
			if math.Float32bits(got[r]) != math.Float32bits(want[r]) {
				return fmt.Errorf("%d rows of %d blocks: row %d: %g, want %g", c.nrows, rb/34, r, got[r], want[r])
			}
			kernel(c.rows[r*rb:(r+1)*rb], c.a, one)
			if math.Float32bits(one[0]) != math.Float32bits(want[r]) {
				return fmt.Errorf("%d blocks: row %d alone: %g, want %g", rb/34, r, one[0], want[r])
			}
		}
	}
	return nil
}

// TestDotRowsQ8_0 checks the machine's kernel (run under each REDLITE_CPU_FEATURES cap by
// TestCPUFeatureCaps) bit for bit against the pure-Go reference.
func TestDotRowsQ8_0(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 8))
	cs := q8_0Cases(rng)
	if err := checkRowsQ8_0(DotRowsQ8_0, cs); err != nil {
		t.Errorf("kernel %s: %v", KernelSet(), err)
	}
	t.Run("Broken", func(t *testing.T) {
		// A kernel that skips the last block of a row must be caught.
		broken := func(rows, a []byte, out []float32) {
			rb := len(a)
			for r := range out {
				w := rows[r*rb : (r+1)*rb]
				if rb > 34 {
					DotRowsQ8_0(w[:rb-34], a[:rb-34], out[r:r+1])
				} else {
					out[r] = 0
				}
			}
		}
		if err := checkRowsQ8_0(broken, cs); err == nil {
			t.Error("a kernel that skips a block passed")
		}
	})
	t.Run("Reference", func(t *testing.T) {
		// The reference itself is a dot product of the row with the dequantized activations.
		for _, c := range cs {
			rb := len(c.a)
			xd := make([]float32, rb/34*32)
			if err := Dequantize(Q8_0, c.a, xd); err != nil {
				t.Fatal(err)
			}
			out := make([]float32, c.nrows)
			dotRowsQ8_0Go(c.rows, c.a, out)
			for r := range out {
				want, mag := exactDot(t, Q8_0, c.rows[r*rb:(r+1)*rb], xd)
				if d := math.Abs(float64(out[r]) - want); !(d <= dotTol(mag)) {
					t.Errorf("%d blocks, row %d: %g, exact %g", rb/34, r, out[r], want)
				}
			}
		}
	})
}

// BenchmarkDotRowsQ8_0 compares the exact Q8_0 path with the 8-bit one, the quantization of
// x included, over 2048 columns: 128 rows stay in L2, 512 rows (1.1 MB) do not, 16384 rows
// (36 MB) come from memory, as a whole model's do in decode.
func BenchmarkDotRowsQ8_0(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 2048
	x := randomVec(n, rng)
	a := make([]byte, Q8_0.RowBytes(n))
	for _, rows := range []int{128, 512, 16384} {
		var data []byte
		for range rows {
			data = append(data, randomRow(Q8_0, n, rng)...)
		}
		out := make([]float32, rows)
		b.Run(fmt.Sprintf("%d/exact", rows), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				DotRows(Q8_0, data, x, out)
			}
		})
		b.Run(fmt.Sprintf("%d/int8", rows), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				QuantizeQ8_0Ref(x, a)
				DotRowsQ8_0(data, a, out)
			}
		})
	}
	b.Run("QuantizeQ8_0Ref", func(b *testing.B) {
		b.SetBytes(int64(4 * n))
		for b.Loop() {
			QuantizeQ8_0Ref(x, a)
		}
	})
}

// TestRoundHalfAway checks QuantizeQ8_0Ref's rounding against math.Round on halves, their
// neighbours and random values.
func TestRoundHalfAway(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var vs []float32
	for i := -300; i <= 300; i++ {
		h := float32(i) + 0.5
		vs = append(vs, h, math.Nextafter32(h, 0), math.Nextafter32(h, 1000), math.Nextafter32(h, -1000), float32(i))
	}
	vs = append(vs, 0.49999997, -0.49999997, 8388607.5, -8388607.5, 1e9, -1e9)
	for range 100000 {
		vs = append(vs, float32(rng.NormFloat64()*100))
	}
	for _, v := range vs {
		if got, want := roundHalfAway(v), int32(math.Round(float64(v))); got != want {
			t.Errorf("roundHalfAway(%v) = %d, want %d", v, got, want)
		}
	}
}

// TestQuantizeQ8_0Ref checks the machine's quantizer (run under each REDLITE_CPU_FEATURES
// cap by TestCPUFeatureCaps) bit for bit against the pure-Go one: random blocks of scales
// from 2⁻³⁰ to 2³⁰ (half-float scales subnormal, and beyond 65504), zero blocks, and blocks
// whose values land on halves after scaling.
func TestQuantizeQ8_0Ref(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	const nb = 400
	x := make([]float32, nb*32)
	for b := range nb {
		blk := x[32*b : 32*b+32]
		switch b % 5 {
		case 0:
			// zero
		case 1:
			// amax 127: d = 1, and every other value a half.
			for i := range blk {
				blk[i] = float32(rng.IntN(254)-127) + 0.5
			}
			blk[rng.IntN(32)] = 127
		default:
			s := math.Ldexp(1, rng.IntN(61)-30)
			for i := range blk {
				blk[i] = float32(rng.NormFloat64() * s)
			}
		}
	}
	got, want := make([]byte, nb*34), make([]byte, nb*34)
	QuantizeQ8_0Ref(x, got)
	quantizeQ8_0Go(x, want)
	for b := range nb {
		if g, w := got[34*b:34*b+34], want[34*b:34*b+34]; string(g) != string(w) {
			t.Errorf("kernel %s, block %d: %x, want %x", KernelSet(), b, g, w)
		}
	}
}
