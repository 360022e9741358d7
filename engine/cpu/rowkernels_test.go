package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// ulps is the distance between two float32 values in units in the last place.
func ulps(a, b float32) float64 {
	if a == b {
		return 0
	}
	return math.Abs(float64(a)-float64(b)) / float64(math.Nextafter32(float32(math.Abs(float64(b))), float32(math.Inf(1)))-float32(math.Abs(float64(b))))
}

func TestSoftmax(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{1, 5, 16, 17, 40, 513} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * 30)
		}
		x[0] = -2000 // underflows to 0
		want := append([]float32(nil), x...)
		softmaxGo(want, 0.125)
		softmax32(x, 0.125)
		for i := range x {
			if u := ulps(x[i], want[i]); u > 3 || (want[i] == 0) != (x[i] == 0) {
				t.Fatalf("n=%d: element %d = %v, want %v (%g ulp)", n, i, x[i], want[i], u)
			}
		}
	}
}

func TestSwiGLU(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{1, 15, 16, 33, 3072} {
		g, u := make([]float32, n), make([]float32, n)
		for i := range g {
			g[i] = float32(rng.NormFloat64() * 8)
			u[i] = float32(rng.NormFloat64())
		}
		g[0] = 200 // e^−g underflows: silu is g
		if n > 1 {
			g[1] = -200 // e^−g overflows: silu is −0
		}
		got, want := make([]float32, n), make([]float32, n)
		swiglu(got, g, u)
		swigluGo(want, g, u)
		for i := range got {
			if ulps(got[i], want[i]) > 4 {
				t.Fatalf("n=%d: silu(%v)·%v = %v, want %v", n, g[i], u[i], got[i], want[i])
			}
		}
		siluRow(got, g)
		siluRowGo(want, g)
		for i := range got {
			if ulps(got[i], want[i]) > 4 {
				t.Fatalf("n=%d: silu(%v) = %v, want %v", n, g[i], got[i], want[i])
			}
		}
	}
}

func TestStridedKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, c := range [][2]int{{1, 128}, {2, 128}, {7, 128}, {130, 128}, {3, 8}, {5, 64}, {9, 136}, {33, 256}} {
		rows, n := c[0], c[1]
		const lda = 1024
		a := randomTensor(rng, (rows-1)*lda+n).data
		x := randomTensor(rng, n).data
		got, want := make([]float32, rows), make([]float32, rows)
		scoresStrided(a, lda, x, got)
		scoresStridedGo(a, lda, x, want)
		for r := range got {
			if math.Abs(float64(got[r]-want[r])) > 1e-4*(1+math.Abs(float64(want[r]))) {
				t.Fatalf("rows %d: score %d = %v, want %v", rows, r, got[r], want[r])
			}
		}
		w := randomTensor(rng, rows).data
		o1, o2 := make([]float32, n), make([]float32, n)
		weightedRows(w, a, lda, o1)
		weightedRowsGo(w, a, lda, o2)
		for i := range o1 {
			if math.Abs(float64(o1[i]-o2[i])) > 1e-4*(1+math.Abs(float64(o2[i]))) {
				t.Fatalf("rows %d: output %d = %v, want %v", rows, i, o1[i], o2[i])
			}
		}
	}
}

// The f16 kernels must give exactly what the float32 ones give over the widened rows: an
// f16 cache then attends as an f32 cache holding the same values does.
func TestStridedF16Kernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	for _, n := range []int{16, 64, 128, 256} {
		for _, rows := range []int{1, 2, 7, 130} {
			lda := 4 * n
			a32 := randomTensor(rng, (rows-1)*lda+n).data
			a16 := make([]uint16, len(a32))
			quant.F32ToF16Slice(a16, a32)
			quant.F16ToF32Slice(a32, a16)
			x := randomTensor(rng, n).data
			got, want := make([]float32, rows), make([]float32, rows)
			scoresStridedF16(a16, lda, x, got)
			scoresStrided(a32, lda, x, want)
			if !equal32(got, want) {
				t.Fatalf("n %d rows %d: f16 scores %v, want %v", n, rows, got, want)
			}
			scoresStridedF16Go(a16, lda, x, got)
			scoresStridedGo(a32, lda, x, want)
			if !equal32(got, want) {
				t.Fatalf("n %d rows %d: Go f16 scores %v, want %v", n, rows, got, want)
			}
			w := randomTensor(rng, rows).data
			o1, o2 := make([]float32, n), make([]float32, n)
			weightedRowsF16(w, a16, lda, o1)
			weightedRows(w, a32, lda, o2)
			if !equal32(o1, o2) {
				t.Fatalf("n %d rows %d: f16 weighted rows differ", n, rows)
			}
			weightedRowsF16Go(w, a16, lda, o1)
			weightedRowsGo(w, a32, lda, o2)
			if !equal32(o1, o2) {
				t.Fatalf("n %d rows %d: Go f16 weighted rows differ", n, rows)
			}
		}
	}
}

func TestRowKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	for _, n := range []int{1, 15, 16, 17, 128, 1000} {
		x := randomTensor(rng, n).data
		got, want := sumSquares(x), sumSquaresGo(x)
		if math.Abs(got-want) > 1e-12*want {
			t.Fatalf("n=%d: sum of squares %v, want %v", n, got, want)
		}
		w := randomTensor(rng, n).data
		for _, ww := range [][]float32{nil, w} {
			d1, d2 := make([]float32, n+1), make([]float32, n+1)
			d1[n], d2[n] = 7, 7 // past the end: untouched
			scaleRow(d1[:n], x, 0.3, ww)
			scaleRowGo(d2[:n], x, 0.3, ww)
			if !equal32(d1, d2) {
				t.Fatalf("n=%d w=%v: scaled row differs", n, ww != nil)
			}
		}
	}
}

// TestRoPETableReuse checks that a second rotation of the same positions in a context (the
// next layer's) uses the cached table and still rotates correctly.
func TestRoPETableReuse(t *testing.T) {
	c := New(2).NewContext().(*context)
	r := ml.RoPE{Dims: 4, Base: 10000, NeoX: true}
	x := hostTensor([]float32{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}, 3, 1, 4)
	a := values(t, c, c.RoPE(x, 5, r))
	b := values(t, c, c.RoPE(x, 5, r))
	if len(c.rope) != 1 || !equal32(a, b) {
		t.Fatalf("tables %d, rotations %v and %v", len(c.rope), a, b)
	}
	// Position 5, pair (0, 2) at angle 5: (1, 3) rotated.
	cos, sin := math.Cos(5), math.Sin(5)
	if w := 1*cos - 3*sin; math.Abs(float64(a[0])-w) > 1e-5 {
		t.Fatalf("rotated %v, want %v", a[0], w)
	}
}

// rowForms is one implementation of the row kernels, called with rows of length ≥ 1.
type rowForms struct {
	name       string
	softmax    func(x []float32, scale float32)
	swiglu     func(out, g, u []float32)
	silu       func(out, x []float32)
	sumSquares func(x []float32) float64
	scaleRow   func(dst, src []float32, s float32, w []float32)
}

var goRowForms = rowForms{"go", softmaxGo, swigluGo, siluRowGo, sumSquaresGo, scaleRowGo}

// guarded returns a row of n floats inside a buffer whose elements either side of it hold a
// sentinel, for checkGuard to see that a kernel kept within the row.
func guarded(n int) (buf, row []float32) {
	buf = make([]float32, n+2)
	buf[0], buf[n+1] = math.Float32frombits(0x7fc0dead), math.Float32frombits(0x7fc0beef)
	return buf, buf[1 : n+1]
}

func checkGuard(t *testing.T, what string, buf []float32) {
	t.Helper()
	if math.Float32bits(buf[0]) != 0x7fc0dead || math.Float32bits(buf[len(buf)-1]) != 0x7fc0beef {
		t.Fatalf("%s wrote outside its row", what)
	}
}

var rowLengths = []int{1, 7, 8, 9, 15, 16, 17, 128, 1000}

// TestRowKernelForms checks every assembly form of the row kernels against the Go forms,
// over lengths around the vector widths and at the ends of e^x's range.
func TestRowKernelForms(t *testing.T) {
	forms := asmRowForms()
	if len(forms) == 0 {
		t.Skip("no assembly row kernels on this CPU")
	}
	rng := rand.New(rand.NewPCG(31, 32))
	inf := float32(math.Inf(1))
	for _, f := range forms {
		for _, n := range rowLengths {
			// Softmax rows: random; −Inf and far below the maximum (exactly 0); all equal;
			// one huge (one-hot); a ramp of scaled differences 0, −1, …, −119 through the
			// denormals to 0; all far below 0, where a maximum taken over lanes past the end
			// (0) would make every exponential 0.
			cases := make([][]float32, 6)
			for c := range cases {
				cases[c] = make([]float32, n)
			}
			for i := range n {
				cases[0][i] = float32(rng.NormFloat64() * 30)
				cases[1][i] = float32(rng.NormFloat64() * 30)
				switch i % 5 {
				case 1:
					cases[1][i] = -inf
				case 3:
					cases[1][i] = -1e30
				}
				cases[3][i] = float32(rng.NormFloat64() * 1e3)
				cases[4][i] = float32(-8 * (i % 120))
				cases[5][i] = float32(-2000 + rng.NormFloat64()*30)
			}
			cases[0][0] = -2000
			cases[3][n/2] = 1e30
			for c, x := range cases {
				buf, got := guarded(n)
				copy(got, x)
				want := append([]float32(nil), x...)
				softmaxGo(want, 0.125)
				f.softmax(got, 0.125)
				checkGuard(t, f.name+" softmax", buf)
				for i := range got {
					if u := ulps(got[i], want[i]); u > 3 || (want[i] == 0) != (got[i] == 0) {
						t.Fatalf("%s softmax n=%d case %d: element %d = %v, want %v (%g ulp)", f.name, n, c, i, got[i], want[i], u)
					}
				}
			}

			// SiLU and SwiGLU: e^−g overflowing (silu −0), underflowing (silu g), near
			// both ends, zeros of both signs.
			specials := []float32{200, -200, 0, float32(math.Copysign(0, -1)), 88, -88, 89, -89, 87.5, -87.5, -95, 1e-30, 30, -30}
			g, u := make([]float32, n), make([]float32, n)
			for i := range g {
				g[i] = float32(rng.NormFloat64() * 8)
				u[i] = float32(rng.NormFloat64())
			}
			copy(g, specials)
			buf, got := guarded(n)
			want := make([]float32, n)
			f.swiglu(got, g, u)
			checkGuard(t, f.name+" swiglu", buf)
			swigluGo(want, g, u)
			for i := range got {
				if ulps(got[i], want[i]) > 4 || math.Signbit(float64(got[i])) != math.Signbit(float64(want[i])) {
					t.Fatalf("%s n=%d: silu(%v)·%v = %v, want %v", f.name, n, g[i], u[i], got[i], want[i])
				}
			}
			f.silu(got, g)
			checkGuard(t, f.name+" silu", buf)
			siluRowGo(want, g)
			for i := range got {
				if ulps(got[i], want[i]) > 4 || math.Signbit(float64(got[i])) != math.Signbit(float64(want[i])) {
					t.Fatalf("%s n=%d: silu(%v) = %v, want %v", f.name, n, g[i], got[i], want[i])
				}
			}

			// Sums of squares: random, zero, and squares near the top of float32.
			for c, scale := range []float64{1, 0, 1e18} {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(rng.NormFloat64() * scale)
				}
				got, want := f.sumSquares(x), sumSquaresGo(x)
				if math.Abs(got-want) > 1e-12*want || (want == 0) != (got == 0) {
					t.Fatalf("%s n=%d case %d: sum of squares %v, want %v", f.name, n, c, got, want)
				}
			}

			// Scaling: bit for bit, with and without weights, and in place.
			x := randomTensor(rng, n).data
			x[0] = 3e38 // overflows
			w := randomTensor(rng, n).data
			for _, ww := range [][]float32{nil, w} {
				buf, got := guarded(n)
				want := make([]float32, n)
				f.scaleRow(got, x, 0.3, ww)
				checkGuard(t, f.name+" scaleRow", buf)
				scaleRowGo(want, x, 0.3, ww)
				if !equal32(got, want) {
					t.Fatalf("%s n=%d w=%v: scaled row %v, want %v", f.name, n, ww != nil, got, want)
				}
				f.scaleRow(got, got, 0.7, ww)
				scaleRowGo(want, want, 0.7, ww)
				if !equal32(got, want) {
					t.Fatalf("%s n=%d w=%v: row scaled in place differs", f.name, n, ww != nil)
				}
			}
		}
	}

	// The e^x of every form is the same function, bit for bit: silu, which sums nothing,
	// shows it.
	if len(forms) > 1 {
		n := 1000
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * 40)
		}
		a, b := make([]float32, n), make([]float32, n)
		forms[0].silu(a, x)
		for _, f := range forms[1:] {
			f.silu(b, x)
			if !equal32(a, b) {
				t.Fatalf("silu of %s and %s differ", forms[0].name, f.name)
			}
		}
	}
}

// BenchmarkRowKernels times each form of softmax and SwiGLU over a 4096-long row (a long
// context's attention scores, an MLP's hidden row).
func BenchmarkRowKernels(b *testing.B) {
	const n = 4096
	rng := rand.New(rand.NewPCG(33, 34))
	x, g, u, out := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 30)
		g[i] = float32(rng.NormFloat64() * 8)
		u[i] = float32(rng.NormFloat64())
	}
	for _, f := range append([]rowForms{goRowForms}, asmRowForms()...) {
		b.Run("softmax/"+f.name, func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				f.softmax(x, 0.125)
			}
		})
		b.Run("swiglu/"+f.name, func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				f.swiglu(out, g, u)
			}
		})
		b.Run("sumSquares/"+f.name, func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				f.sumSquares(u)
			}
		})
	}
}
