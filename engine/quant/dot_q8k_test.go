package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

func TestQuantizeQ8K(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	x := randomVec(3*QK_K, rng)
	clear(x[QK_K : 2*QK_K]) // an all-zero block
	x[17] = -9              // the largest magnitude maps to −127…
	x[2*QK_K+5] = 7.5       // …whatever its sign
	a := make([]Q8K, 3)
	QuantizeQ8K(x, a)
	if a[0].Qs[17] != -127 || math.Abs(float64(a[0].D*-127+9)) > 1e-6 {
		t.Errorf("block 0: largest value -9 stored as %d·%g", a[0].Qs[17], a[0].D)
	}
	if a[2].Qs[5] != -127 || math.Abs(float64(a[2].D*-127-7.5)) > 1e-6 {
		t.Errorf("block 2: largest value 7.5 stored as %d·%g", a[2].Qs[5], a[2].D)
	}
	if a[1] != (Q8K{}) {
		t.Errorf("zero block: %+v", a[1])
	}
	for i, b := range a {
		for j, q := range b.Qs {
			if v := float64(x[i*QK_K+j]); math.Abs(float64(b.D)*float64(q)-v) > math.Abs(float64(b.D))/2*1.0001 {
				t.Fatalf("block %d value %d: %g stored as %d·%g", i, j, v, q, b.D)
			}
		}
		for g, s := range b.Bsums {
			var want int16
			for _, q := range b.Qs[16*g : 16*g+16] {
				want += int16(q)
			}
			if s != want {
				t.Errorf("block %d group %d: sum %d, want %d", i, g, s, want)
			}
		}
	}
	// Ties go to even, as ggml's nearest_int.
	for v, want := range map[float32]int{2.5: 2, 3.5: 4, -2.5: -2, -3.5: -4, 0.49: 0, 126.6: 127} {
		if got := nearestInt(v); got != want {
			t.Errorf("nearestInt(%g) = %d, want %d", v, got, want)
		}
	}
}

// TestDotQ8K checks every 8-bit kernel against the float64 dot of the dequantized row with
// the dequantized activations (they must agree up to float rounding: the integer part is
// exact), and the assembly kernels against the pure-Go ones.
func TestDotQ8K(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const n, rows = 3 * QK_K, 5
	for _, typ := range []Type{Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_M, IQ4_XS} {
		t.Run(typ.String(), func(t *testing.T) {
			if !Int8Dot(typ) {
				t.Fatalf("no 8-bit kernel for %v", typ)
			}
			x := randomVec(n, rng)
			a := make([]Q8K, n/QK_K)
			QuantizeQ8K(x, a)
			xq := make([]float32, n)
			for i := range xq {
				xq[i] = a[i/QK_K].D * float32(a[i/QK_K].Qs[i%QK_K])
			}
			data := make([]byte, 0, rows*typ.RowBytes(n))
			for range rows {
				data = append(data, randomRow(typ, n, rng)...)
			}
			out := make([]float32, rows)
			DotRowsQ8K(typ, data, a, out)
			rb := typ.RowBytes(n)
			for r := range out {
				row := data[r*rb : (r+1)*rb]
				want, mag := exactDot(t, typ, row, xq)
				if d := math.Abs(float64(out[r]) - want); d > 1e-5*mag {
					t.Errorf("row %d: %g, want %g (Σ|w·x| %g)", r, out[r], want, mag)
				}
				if g := q8kDots[typ](row, a); math.Abs(float64(g-out[r])) > 1e-5*mag {
					t.Errorf("row %d: pure Go %g, DotRowsQ8K %g", r, g, out[r])
				}
			}
			// The 8-bit result stays near the exact one: the activations' rounding only.
			for r := range out {
				exact := DotF32(typ, data[r*rb:(r+1)*rb], x)
				_, mag := exactDot(t, typ, data[r*rb:(r+1)*rb], x)
				if math.Abs(float64(out[r]-exact)) > 0.02*mag {
					t.Errorf("row %d: 8-bit %g, exact %g (Σ|w·x| %g)", r, out[r], exact, mag)
				}
			}
		})
	}
}

// The four-token kernels must give each token exactly what DotRowsQ8K gives it alone: a
// job's numbers may not depend on what it is batched with.
func TestDotRows4Q8K(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, typ := range []Type{Q2_K, Q4_K, Q5_K, Q6_K, IQ2_XXS} {
		if !Int8Rows4(typ) {
			continue
		}
		for _, c := range [][2]int{{1, 1}, {3, 1}, {5, 4}, {16, 12}} {
			rows, nb := c[0], c[1]
			n := nb * QK_K
			data := make([]byte, 0, rows*typ.RowBytes(n))
			for range rows {
				data = append(data, randomRow(typ, n, rng)...)
			}
			a := make([]Q8K, 4*nb)
			x := randomVec(4*n, rng)
			x[3] = 0 // a zero block's D is 0
			QuantizeQ8K(x, a)
			ldo := rows + 3
			out := make([]float32, 3*ldo+rows+1)
			for i := range out {
				out[i] = -7 // between tokens and past the end: untouched
			}
			DotRows4Q8K(typ, data, a, out, ldo)
			want := make([]float32, rows)
			for i := 0; i < 4; i++ {
				DotRowsQ8K(typ, data, a[i*nb:(i+1)*nb], want)
				for r, w := range want {
					if g := out[i*ldo+r]; math.Float32bits(g) != math.Float32bits(w) {
						t.Fatalf("%v %d rows of %d blocks: token %d row %d: %g, alone %g", typ, rows, nb, i, r, g, w)
					}
				}
				for r := rows; r < ldo && i*ldo+r < len(out); r++ {
					if out[i*ldo+r] != -7 {
						t.Fatalf("%v: token %d wrote past its rows", typ, i)
					}
				}
			}
		}
	}
}

// The assembly kernels read Q8K at fixed offsets (dot_q8k_amd64.s's header).
func TestQ8KLayout(t *testing.T) {
	var b Q8K
	got := [...]uintptr{unsafe.Offsetof(b.D), unsafe.Offsetof(b.Qs), unsafe.Offsetof(b.Bsums), unsafe.Offsetof(b.Sums), unsafe.Sizeof(b)}
	if want := [...]uintptr{0, 4, 260, 292, 324}; got != want {
		t.Fatalf("Q8K offsets (D, Qs, Bsums, Sums, size) %v, want %v", got, want)
	}
}

// The assembly quantizer must give exactly the Go one's blocks: ties to even, the sign of
// the largest magnitude, zeros. Non-finite activations are only checked for the abs max:
// their quantized values are garbage either way.
func TestQuantizeQ8KForms(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	var blocks [][]float32
	for range 50 {
		blocks = append(blocks, randomVec(QK_K, rng))
	}
	ties := make([]float32, QK_K)
	for i := range ties {
		ties[i] = float32(i%253-126) + 0.5 // −125.5 … 126.5: with a scale of 1, all ties
	}
	ties[7] = -127 // vmax: iscale = 1
	blocks = append(blocks, ties)
	signs := make([]float32, QK_K)
	signs[3], signs[9], signs[20] = 2, -2, 1.5 // equal magnitudes: the first sets the sign
	blocks = append(blocks, signs, make([]float32, QK_K))
	for n, x := range blocks {
		if a, g := absMax256(x), absMax256Go(x); math.Float32bits(a) != math.Float32bits(g) {
			t.Fatalf("block %d: abs max %v, Go %v", n, a, g)
		}
		var got, want Q8K
		quantizeQ8KBlock(x, &got)
		want = quantizeQ8KGo(x)
		if got != want {
			t.Fatalf("block %d: quantized %v / %v, Go %v / %v", n, got.Qs, got.Bsums, want.Qs, want.Bsums)
		}
	}
	if got := quantizeQ8KGo(ties); got.D != 1 || got.Qs[0] != -126 || got.Qs[1] != -124 {
		t.Fatalf("ties: D %v, Qs %v…: want 1, −126 (−125.5 to even), −124 (−124.5)", got.D, got.Qs[:2])
	}
	nan := randomVec(QK_K, rng)
	nan[0], nan[100] = float32(math.NaN()), 1000
	if a, g := absMax256(nan), absMax256Go(nan); a != 1000 || g != 1000 {
		t.Fatalf("abs max with a NaN: %v, Go %v, want 1000", a, g)
	}
}

// quantizeQ8KGo is quantizeQ8KBlock through the pure-Go forms only.
func quantizeQ8KGo(x []float32) Q8K {
	var b Q8K
	quantizeQ8KWith(x, &b, absMax256Go, quantizeQsGo)
	return b
}

// TestDotQ8KAsm runs the assembly 8-bit kernels over more rows and blocks than TestDotQ8K,
// with the edge cases the random rows miss: an all-zero activation block (D = 0), blocks
// of activations at ±127 everywhere (the largest pair sums VPMADDUBSW must not saturate
// on), and rows whose every scale, min, index and sign field is all ones or all zeros,
// under the largest and smallest f16 block scales.
func TestDotQ8KAsm(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	const nb, nrand = 8, 31
	for _, typ := range []Type{Q2_K, Q4_K, Q5_K, Q6_K, IQ2_XXS} {
		t.Run(typ.String(), func(t *testing.T) {
			if !Int8Vector(typ) {
				t.Skip("no assembly kernel on this machine")
			}
			n := nb * QK_K
			x := randomVec(n, rng)
			clear(x[QK_K : 2*QK_K])
			for i := 2 * QK_K; i < 3*QK_K; i++ {
				x[i] = 3 // all 127 after quantization (or −127: the sign of the first)
			}
			for i := 3 * QK_K; i < 4*QK_K; i++ {
				x[i] = float32(1 - 2*(i&1))
			}
			a := make([]Q8K, nb)
			QuantizeQ8K(x, a)
			if a[1].D != 0 {
				t.Fatalf("zero block has D %g", a[1].D)
			}
			xq := make([]float32, n)
			for i := range xq {
				xq[i] = a[i/QK_K].D * float32(a[i/QK_K].Qs[i%QK_K])
			}
			rb := typ.RowBytes(n)
			var data []byte
			for range nrand {
				data = append(data, randomRow(typ, n, rng)...)
			}
			for _, fill := range []byte{0xff, 0x00, 0x55} {
				for _, d := range []uint16{0x7bff, 0x0001} { // 65504 and the least subnormal
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
			rows := len(data) / rb
			out := make([]float32, rows)
			DotRowsQ8K(typ, data, a, out)
			for r := range out {
				row := data[r*rb : (r+1)*rb]
				_, mag := exactDot(t, typ, row, xq)
				if g := q8kDots[typ](row, a); math.Abs(float64(g-out[r])) > 1e-5*mag || math.IsNaN(float64(out[r])) {
					t.Errorf("row %d: pure Go %g, assembly %g (Σ|w·x| %g)", r, g, out[r], mag)
				}
			}
			// One row of one block: the loops' shortest trip.
			one := make([]float32, 1)
			DotRowsQ8K(typ, data[:typ.TypeSize()], a[:1], one)
			if g := q8kDots[typ](data[:typ.TypeSize()], a[:1]); math.Abs(float64(g-one[0])) > 1e-5*math.Abs(float64(g))+1e-30 {
				t.Errorf("one block: pure Go %g, assembly %g", g, one[0])
			}
		})
	}
}
