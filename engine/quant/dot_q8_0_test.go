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

// checkRows4Q8_0 runs a four-token kernel on every case, the case's activations as the
// first token and three random ones after them, and reports the first number that is not
// dotRowsQ8_0Go's for that token alone, bit for bit.
func checkRows4Q8_0(kernel func(rows, a []byte, out []float32, ldo int), cs []q8_0Case, rng *rand.Rand) error {
	for _, c := range cs {
		rb := len(c.a)
		a := append([]byte(nil), c.a...)
		for range 3 {
			t := make([]byte, rb)
			QuantizeQ8_0Ref(randomVec(rb/34*32, rng), t)
			a = append(a, t...)
		}
		ldo := c.nrows + 3
		got := make([]float32, 3*ldo+c.nrows)
		kernel(c.rows, a, got, ldo)
		want := make([]float32, c.nrows)
		for i := range 4 {
			dotRowsQ8_0Go(c.rows, a[i*rb:(i+1)*rb], want)
			for r := range want {
				if g := got[i*ldo+r]; math.Float32bits(g) != math.Float32bits(want[r]) {
					return fmt.Errorf("%d rows of %d blocks: token %d, row %d: %g, want %g", c.nrows, rb/34, i, r, g, want[r])
				}
			}
		}
	}
	return nil
}

// TestDotRows4Q8_0 checks the machine's four-token kernel (under each REDLITE_CPU_FEATURES
// cap by TestCPUFeatureCaps) bit for bit against the one-token reference.
func TestDotRows4Q8_0(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 10))
	cs := q8_0Cases(rng)
	if err := checkRows4Q8_0(DotRows4Q8_0, cs, rng); err != nil {
		t.Errorf("kernel %s: %v", KernelSet(), err)
	}
	t.Run("Broken", func(t *testing.T) {
		// A kernel that gives the last token the third one's numbers must be caught.
		broken := func(rows, a []byte, out []float32, ldo int) {
			DotRows4Q8_0(rows, a, out, ldo)
			copy(out[3*ldo:], out[2*ldo:2*ldo+len(rows)/(len(a)/4)])
		}
		if err := checkRows4Q8_0(broken, cs, rng); err == nil {
			t.Error("a kernel that repeats a token passed")
		}
	})
}

// checkRepackedQ8_0 runs DotRepackedQ8_0 on every case for one to five tokens (the case's
// activations and random ones), over all rows and from the second group on, with corrupt
// applied to the repacked bytes, and reports the first number that is not dotRowsQ8_0Go's
// for that token alone, bit for bit, or an output written outside the rows.
func checkRepackedQ8_0(cs []q8_0Case, rng *rand.Rand, corrupt func([]byte)) error {
	for _, c := range cs {
		rb := len(c.a)
		cols := rb / 34 * 32
		packed := Repack(Q8_0, c.rows, c.nrows, cols)
		corrupt(packed)
		a := append([]byte(nil), c.a...)
		for n := 1; n <= 5; n++ {
			if n > 1 {
				t := make([]byte, rb)
				QuantizeQ8_0Ref(randomVec(cols, rng), t)
				a = append(a, t...)
			}
			for r0 := 0; r0 < c.nrows; r0 += RepackRows {
				nr := c.nrows - r0
				ldo := nr + 2
				out := make([]float32, (n-1)*ldo+nr+1)
				for i := range out {
					out[i] = -7
				}
				DotRepackedQ8_0(packed, cols, r0, c.nrows, a, out, ldo)
				want := make([]float32, nr)
				for i := range n {
					dotRowsQ8_0Go(c.rows[r0*rb:], a[i*rb:(i+1)*rb], want)
					for r := range nr {
						if g := out[i*ldo+r]; math.Float32bits(g) != math.Float32bits(want[r]) {
							return fmt.Errorf("%d rows of %d blocks from row %d, %d tokens: token %d, row %d: %g, want %g", c.nrows, rb/34, r0, n, i, r0+r, g, want[r])
						}
					}
					for r := nr; r < ldo && i*ldo+r < len(out); r++ {
						if out[i*ldo+r] != -7 {
							return fmt.Errorf("%d rows, %d tokens: token %d wrote past its rows", c.nrows, n, i)
						}
					}
				}
			}
		}
	}
	return nil
}

// TestRepackedQ8_0 checks the repacked Q8_0 kernels, where the machine has them, bit for
// bit against the one-token Go reference, and that a flipped bit of the repacked rows is
// caught.
func TestRepackedQ8_0(t *testing.T) {
	if !Int8Repacked(Q8_0) {
		t.Skipf("kernel set %s has no repacked Q8_0 kernels", KernelSet())
	}
	rng := rand.New(rand.NewPCG(31, 11))
	cs := q8_0Cases(rng)
	if err := checkRepackedQ8_0(cs, rng, func([]byte) {}); err != nil {
		t.Error(err)
	}
	t.Run("Broken", func(t *testing.T) {
		if err := checkRepackedQ8_0(cs, rng, func(p []byte) { p[len(p)/2] ^= 0x10 }); err == nil {
			t.Error("a flipped bit of the repacked rows passed")
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

// BenchmarkRepackedQ8_0 compares, over 2,048 columns, the exact Q8_0 row kernel, the 8-bit
// row kernel and the repacked one for one token and eight (the quantization of x included
// in the 8-bit ones): 128 rows stay in L2, 16,384 (36 MB) come from memory, as decode's do.
func BenchmarkRepackedQ8_0(b *testing.B) {
	if !Int8Repacked(Q8_0) {
		b.Skipf("kernel set %s has no repacked Q8_0 kernels", KernelSet())
	}
	rng := rand.New(rand.NewPCG(5, 7))
	const n = 2048
	ab := Q8_0.RowBytes(n)
	x := randomVec(8*n, rng)
	a := make([]byte, 8*ab)
	for _, rows := range []int{128, 16384} {
		var data []byte
		for range rows {
			data = append(data, randomRow(Q8_0, n, rng)...)
		}
		packed := Repack(Q8_0, data, rows, n)
		out := make([]float32, 8*rows)
		for _, tok := range []int{1, 8} {
			b.Run(fmt.Sprintf("%d/%d/exact", rows, tok), func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					for i := range tok {
						DotRows(Q8_0, data, x[i*n:(i+1)*n], out[i*rows:(i+1)*rows])
					}
				}
			})
			b.Run(fmt.Sprintf("%d/%d/rows", rows, tok), func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					QuantizeQ8_0Ref(x[:tok*n], a[:tok*ab])
					i := 0
					for ; i+4 <= tok; i += 4 {
						DotRows4Q8_0(data, a[i*ab:(i+4)*ab], out[i*rows:], rows)
					}
					for ; i < tok; i++ {
						DotRowsQ8_0(data, a[i*ab:(i+1)*ab], out[i*rows:(i+1)*rows])
					}
				}
			})
			b.Run(fmt.Sprintf("%d/%d/repacked", rows, tok), func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					QuantizeQ8_0Ref(x[:tok*n], a[:tok*ab])
					DotRepackedQ8_0(packed, n, 0, rows, a[:tok*ab], out, rows)
				}
			})
		}
	}
}
