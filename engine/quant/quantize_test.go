package quant

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// relRMSE is the root-mean-square reconstruction error relative to the data's RMS.
func relRMSE(x, y []float32) float64 {
	var e, s float64
	for i := range x {
		d := float64(x[i]) - float64(y[i])
		e += d * d
		s += float64(x[i]) * float64(x[i])
	}
	return math.Sqrt(e / s)
}

func TestQuantizeRoundTrip(t *testing.T) {
	// Bounds on the relative RMS error for Gaussian data. ggml's reference quantizers give
	// 0.00537 (Q8_0), 0.01778 (Q6_K) and 0.07147 (Q4_K) on the same kind of data (measured
	// with ggml's from_float_ref; we get 0.00527, 0.01756 and 0.07170).
	bounds := map[Type]float64{Q8_0: 0.0056, Q6_K: 0.0185, Q4_K: 0.074}
	rng := rand.New(rand.NewPCG(7, 8))
	const n = 64 * QK_K
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for _, typ := range []Type{Q8_0, Q4_K, Q6_K} {
		t.Run(typ.String(), func(t *testing.T) {
			q := make([]byte, typ.RowBytes(n))
			if err := Quantize(typ, x, q); err != nil {
				t.Fatal(err)
			}
			y := make([]float32, n)
			if err := Dequantize(typ, q, y); err != nil {
				t.Fatal(err)
			}
			e := relRMSE(x, y)
			t.Logf("%v: relative RMS error %.5f", typ, e)
			if !(e <= bounds[typ]) {
				t.Errorf("%v: relative RMS error %.5f > %.5f", typ, e, bounds[typ])
			}
			// Re-encoding what we decoded must not lose more: the grid is already there.
			q2 := make([]byte, len(q))
			if err := Quantize(typ, y, q2); err != nil {
				t.Fatal(err)
			}
			y2 := make([]float32, n)
			if err := Dequantize(typ, q2, y2); err != nil {
				t.Fatal(err)
			}
			if e2 := relRMSE(y, y2); !(e2 <= e/4) {
				t.Errorf("%v: re-quantizing dequantized data moved it by %.5f (first pass %.5f)", typ, e2, e)
			}
		})
	}
}

func TestQuantizeScaledAndEdgeData(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	cases := map[string]func(i int) float32{
		"zeros":    func(int) float32 { return 0 },
		"constant": func(int) float32 { return 3.5 },
		"positive": func(int) float32 { return float32(rng.Float64()) },
		"negative": func(int) float32 { return -float32(rng.Float64()) * 1e-3 },
		"spiky": func(i int) float32 {
			if i%97 == 0 {
				return 50
			}
			return float32(rng.NormFloat64()) * 1e-2
		},
		// Small enough that the f16 block scales are subnormal.
		"small": func(int) float32 { return float32(rng.NormFloat64()) * 1e-4 },
	}
	for name, gen := range cases {
		x := make([]float32, 4*QK_K)
		var amax float64
		for i := range x {
			x[i] = gen(i)
			amax = max(amax, math.Abs(float64(x[i])))
		}
		for _, typ := range []Type{Q8_0, Q4_K, Q6_K} {
			q := make([]byte, typ.RowBytes(len(x)))
			if err := Quantize(typ, x, q); err != nil {
				t.Fatal(err)
			}
			y := make([]float32, len(x))
			if err := Dequantize(typ, q, y); err != nil {
				t.Fatal(err)
			}
			// Every value must be finite and within a fraction of the row's range.
			for i := range y {
				if d := math.Abs(float64(y[i]) - float64(x[i])); !(d <= 0.15*amax+1e-30) {
					t.Fatalf("%s/%v: element %d: %g became %g", name, typ, i, x[i], y[i])
				}
			}
		}
	}
}

func TestQuantizeHalfTypesExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	x := make([]float32, 1000)
	for i := range x {
		// Values representable in both f16 and bf16: 8 significant bits, moderate exponent.
		x[i] = float32(math.Ldexp(float64(rng.IntN(256)-128), rng.IntN(16)-12))
	}
	for _, typ := range []Type{F32, F16, BF16} {
		q := make([]byte, typ.RowBytes(len(x)))
		if err := Quantize(typ, x, q); err != nil {
			t.Fatal(err)
		}
		y := make([]float32, len(x))
		if err := Dequantize(typ, q, y); err != nil {
			t.Fatal(err)
		}
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
				t.Fatalf("%v: %g came back as %g", typ, x[i], y[i])
			}
		}
	}
	// F16 of an f16-representable value is its exact encoding.
	q := make([]byte, 2)
	if err := Quantize(F16, []float32{-0.333251953125}, q); err != nil {
		t.Fatal(err)
	}
	if h := binary.LittleEndian.Uint16(q); h != 0xb555 {
		t.Errorf("F16(-0.333251953125) = %#04x, want 0xb555", h)
	}
}

func TestQuantizeRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		typ  Type
		n, b int
	}{
		{Q4_K, 100, 144}, {Q4_K, 256, 143}, {Q8_0, 32, 35}, {IQ2_XXS, 256, 66}, {Type(99), 1, 1},
	} {
		if err := Quantize(tc.typ, make([]float32, tc.n), make([]byte, tc.b)); err == nil {
			t.Errorf("Quantize(%v, %d floats, %d bytes) gave no error", tc.typ, tc.n, tc.b)
		}
	}
}

// TestRoundInt checks the fast rounding the encoders use against math.Round on every kind
// of float32: ties, values next to ties, large and tiny magnitudes, infinities excluded.
func TestRoundInt(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	vals := []float32{0, 0.5, -0.5, 1.5, -1.5, 2.5, 0.49999997, -0.49999997, 1 << 29, -(1 << 29), 1<<29 - 64, 3e9, -3e9}
	for range 100000 {
		v := float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(40)-10))
		vals = append(vals, v, math.Nextafter32(float32(int(v))+0.5, 0), float32(int(v))+0.5)
	}
	for _, v := range vals {
		if got, want := roundInt(v), int(math.Round(float64(v))); got != want {
			t.Fatalf("roundInt(%g) = %d, want %d", v, got, want)
		}
	}
}
