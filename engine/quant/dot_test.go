package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// scaleFields lists the byte offsets of the f16 scales inside a block, which random rows
// must keep finite (random bytes there would give Inf and NaN weights).
var scaleFields = map[Type][]int{
	Q4_0: {0}, Q5_0: {0}, Q8_0: {0}, IQ4_NL: {0},
	Q4_1: {0, 2}, Q5_1: {0, 2}, Q4_K: {0, 2}, Q5_K: {0, 2},
	Q2_K: {80, 82}, Q3_K: {108}, Q6_K: {208},
	IQ2_XXS: {0}, IQ2_XS: {0}, IQ2_S: {0}, IQ3_XXS: {0}, IQ3_S: {0}, IQ1_S: {0}, IQ4_XS: {0},
}

// randomRow makes a valid row of n elements of type t: random bytes with sane scales.
func randomRow(t Type, n int, rng *rand.Rand) []byte {
	row := make([]byte, t.RowBytes(n))
	for i := range row {
		row[i] = byte(rng.Uint32())
	}
	scale := func() uint16 {
		return F32ToF16(float32((0.5 + rng.Float64()) * math.Ldexp(1, -rng.IntN(8))))
	}
	ts := t.TypeSize()
	for o := 0; o < len(row); o += ts {
		b := row[o : o+ts]
		switch t {
		case F32:
			binary.LittleEndian.PutUint32(b, math.Float32bits(float32(rng.NormFloat64())))
		case F16:
			binary.LittleEndian.PutUint16(b, F32ToF16(float32(rng.NormFloat64())))
		case BF16:
			binary.LittleEndian.PutUint16(b, F32ToBF16(float32(rng.NormFloat64())))
		case MXFP4:
			b[0] = byte(118 + rng.IntN(13)) // scales 2^−10 … 2^2
		case IQ1_M:
			d := scale()
			for k := 0; k < 4; k++ {
				w := binary.LittleEndian.Uint16(b[48+2*k:])&0x0fff | (d>>(4*k)&0xf)<<12
				binary.LittleEndian.PutUint16(b[48+2*k:], w)
			}
		default:
			for _, off := range scaleFields[t] {
				binary.LittleEndian.PutUint16(b[off:], scale())
			}
		}
	}
	return row
}

func randomVec(n int, rng *rand.Rand) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func supportedTypes() []Type {
	var ts []Type
	for t := Type(0); t < 64; t++ {
		if Supported(t) {
			ts = append(ts, t)
		}
	}
	return ts
}

// exactDot is the dot of the dequantized row with x in float64, and Σ|w·x| for the bound.
func exactDot(t *testing.T, typ Type, row []byte, x []float32) (dot, mag float64) {
	t.Helper()
	w := make([]float32, len(x))
	if err := Dequantize(typ, row, w); err != nil {
		t.Fatal(err)
	}
	for i := range w {
		p := float64(w[i]) * float64(x[i])
		dot += p
		mag += math.Abs(p)
	}
	return dot, mag
}

// dotTol allows float32 rounding of n products summed in some order.
func dotTol(mag float64) float64 { return 5e-5*mag + 1e-30 }

func TestDotF32MatchesDequantizedDot(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, typ := range supportedTypes() {
		for _, n := range []int{256, 1024, 4096} {
			t.Run(fmt.Sprintf("%v/%d", typ, n), func(t *testing.T) {
				for trial := 0; trial < 4; trial++ {
					row, x := randomRow(typ, n, rng), randomVec(n, rng)
					want, mag := exactDot(t, typ, row, x)
					got := DotF32(typ, row, x)
					if d := math.Abs(float64(got) - want); !(d <= dotTol(mag)) {
						t.Errorf("trial %d: DotF32 = %g, exact %g (|diff| %g > %g)", trial, got, want, d, dotTol(mag))
					}
					if g := dotGeneric(typ, row, x); math.Abs(float64(g)-want) > dotTol(mag) {
						t.Errorf("trial %d: generic path = %g, exact %g", trial, g, want)
					}
				}
			})
		}
	}
}

// TestKernelsAsmVsGo checks the assembly kernels against the pure-Go ones (and so against
// each other's summation order only), with odd lengths for the plain kernels' tails.
func TestKernelsAsmVsGo(t *testing.T) {
	if !useAsm {
		t.Skip("no AVX2/FMA kernels on this machine or build")
	}
	if useAVX512 {
		// Check the AVX2 kernels too, which machines without AVX-512 run.
		t.Run("AVX2", func(t *testing.T) {
			useAVX512 = false
			defer func() { useAVX512 = true }()
			testKernelsAsmVsGo(t)
		})
	}
	testKernelsAsmVsGo(t)
}

func testKernelsAsmVsGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	close := func(t *testing.T, name string, asm, gov float32, mag float64) {
		t.Helper()
		if d := math.Abs(float64(asm) - float64(gov)); !(d <= dotTol(mag)) {
			t.Errorf("%s: asm %g, Go %g (|diff| %g)", name, asm, gov, d)
		}
	}
	for _, n := range []int{1, 31, 32, 33, 95, 256, 1000, 4096} {
		a, b := randomVec(n, rng), randomVec(n, rng)
		var mag float64
		for i := range a {
			mag += math.Abs(float64(a[i]) * float64(b[i]))
		}
		close(t, fmt.Sprintf("Dot/%d", n), dotF32(a, b), dotF32Go(a, b), mag)

		h := make([]uint16, n)
		F32ToF16Slice(h, a)
		close(t, fmt.Sprintf("F16/%d", n), dotF16(h, b), dotF16Go(h, b), mag)

		y1, y2 := randomVec(n, rng), make([]float32, n)
		copy(y2, y1)
		axpy(0.75, a, y1)
		axpyGo(0.75, a, y2)
		for i := range y1 {
			if math.Abs(float64(y1[i]-y2[i])) > 1e-6*(1+math.Abs(float64(y2[i]))) {
				t.Fatalf("Axpy/%d: element %d asm %g, Go %g", n, i, y1[i], y2[i])
			}
		}
	}
	kernels := []struct {
		typ       Type
		asm, pure func([]byte, []float32) float32
	}{
		{Q8_0, dotQ8_0, dotQ8_0Go},
		{Q4_K, dotQ4_K, dotQ4_KGo},
		{Q6_K, dotQ6_K, dotQ6_KGo},
		{IQ2_XXS, dotIQ2_XXS, dotIQ2_XXSGo},
		{Q5_K, dotQ5_K, dotQ5_KGo},
	}
	for _, k := range kernels {
		for _, n := range []int{256, 512, 768, 4096} {
			for trial := 0; trial < 8; trial++ {
				row, x := randomRow(k.typ, n, rng), randomVec(n, rng)
				_, mag := exactDot(t, k.typ, row, x)
				close(t, fmt.Sprintf("%v/%d", k.typ, n), k.asm(row, x), k.pure(row, x), mag)
			}
		}
	}
}

// All-zero bytes are a zero scale (or zero values) in every format.
func TestDotF32Zeroes(t *testing.T) {
	for _, typ := range supportedTypes() {
		n := typ.BlockSize() * 8
		if got := DotF32(typ, make([]byte, typ.RowBytes(n)), randomVec(n, rand.New(rand.NewPCG(5, 6)))); got != 0 {
			t.Errorf("%v: all-zero row gave %g", typ, got)
		}
		if got := DotF32(typ, nil, nil); got != 0 {
			t.Errorf("%v: empty row gave %g", typ, got)
		}
	}
}

func TestDotF32RejectsBadLengths(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("DotF32 with a short row did not panic")
		}
	}()
	DotF32(Q4_K, make([]byte, 143), make([]float32, 256))
}

// A plain-type row that is not word-aligned must still give the right answer.
func TestDotF32UnalignedPlainRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, typ := range []Type{F32, F16, BF16} {
		const n = 100
		row, x := randomRow(typ, n, rng), randomVec(n, rng)
		buf := make([]byte, len(row)+1)
		copy(buf[1:], row)
		want, mag := exactDot(t, typ, row, x)
		if got := DotF32(typ, buf[1:], x); math.Abs(float64(got)-want) > dotTol(mag) {
			t.Errorf("%v unaligned: %g, exact %g", typ, got, want)
		}
	}
}

// TestDotRows checks the multi-row entry point against DotF32 row by row, for every type.
func TestDotRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, typ := range supportedTypes() {
		for _, n := range []int{256, 1024} {
			const nrows = 5
			rb := typ.RowBytes(n)
			rows := make([]byte, 0, nrows*rb)
			for range nrows {
				rows = append(rows, randomRow(typ, n, rng)...)
			}
			x := randomVec(n, rng)
			out := make([]float32, nrows)
			DotRows(typ, rows, x, out)
			for r := range out {
				want := DotF32(typ, rows[r*rb:(r+1)*rb], x)
				_, mag := exactDot(t, typ, rows[r*rb:(r+1)*rb], x)
				if d := math.Abs(float64(out[r] - want)); d > dotTol(mag) {
					t.Errorf("%v/%d row %d: %v, DotF32 %v", typ, n, r, out[r], want)
				}
			}
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("DotRows accepted a buffer of the wrong length")
		}
	}()
	DotRows(Q8_0, make([]byte, 33), make([]float32, 32), make([]float32, 1))
}
