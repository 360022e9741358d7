package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// Weight bytes per second is the figure that matters: decode is bound by streaming the
// weights, so b.SetBytes is the row's size in its own format.

var benchSink float32

func BenchmarkDotF32(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{1024, 4096} {
		x := randomVec(n, rng)
		for _, typ := range supportedTypes() {
			row := randomRow(typ, n, rng)
			b.Run(fmt.Sprintf("%v/%d", typ, n), func(b *testing.B) {
				b.SetBytes(int64(len(row)))
				for b.Loop() {
					benchSink += DotF32(typ, row, x)
				}
			})
		}
	}
}

// BenchmarkDotF32PureGo times the pure-Go kernels that the assembly replaces on amd64.
func BenchmarkDotF32PureGo(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	kernels := map[Type]func([]byte, []float32) float32{Q8_0: dotQ8_0Go, Q4_K: dotQ4_KGo, Q6_K: dotQ6_KGo}
	for _, n := range []int{1024, 4096} {
		x := randomVec(n, rng)
		for _, typ := range []Type{F16, Q8_0, Q4_K, Q6_K} {
			row := randomRow(typ, n, rng)
			k := kernels[typ]
			if typ == F16 {
				h := make([]uint16, n)
				for i := range h {
					h[i] = uint16(row[2*i]) | uint16(row[2*i+1])<<8
				}
				k = func([]byte, []float32) float32 { return dotF16Go(h, x) }
			}
			b.Run(fmt.Sprintf("%v/%d", typ, n), func(b *testing.B) {
				b.SetBytes(int64(len(row)))
				for b.Loop() {
					benchSink += k(row, x)
				}
			})
		}
	}
}

func BenchmarkDot(b *testing.B) {
	rng := rand.New(rand.NewPCG(2, 2))
	for _, n := range []int{1024, 4096} {
		x, y := randomVec(n, rng), randomVec(n, rng)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			for b.Loop() {
				benchSink += Dot(x, y)
			}
		})
		b.Run(fmt.Sprintf("%d/PureGo", n), func(b *testing.B) {
			b.SetBytes(int64(4 * n))
			for b.Loop() {
				benchSink += dotF32Go(x, y)
			}
		})
	}
}

// BenchmarkDotQ8_0Int8Act measures the alternative ggml uses: quantize the activations to
// Q8_0 once per vector and multiply in integers. Compare with BenchmarkDotF32/Q8_0; the
// quantization of x is paid once per activation vector, shared by all rows.
func BenchmarkDotQ8_0Int8Act(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 3))
	for _, n := range []int{1024, 4096} {
		row := randomRow(Q8_0, n, rng)
		x := randomVec(n, rng)
		xq := make([]byte, Q8_0.RowBytes(n))
		if err := Quantize(Q8_0, x, xq); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("dot/%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(row)))
			for b.Loop() {
				benchSink += dotQ8_0Q8_0(row, xq)
			}
		})
		b.Run(fmt.Sprintf("quantize-x/%d", n), func(b *testing.B) {
			for b.Loop() {
				_ = Quantize(Q8_0, x, xq)
			}
		})
	}
}

func TestDotQ8_0Int8Act(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, n := range []int{32, 256, 4096} {
		row, x := randomRow(Q8_0, n, rng), randomVec(n, rng)
		xq := make([]byte, Q8_0.RowBytes(n))
		if err := Quantize(Q8_0, x, xq); err != nil {
			t.Fatal(err)
		}
		xd := make([]float32, n)
		if err := Dequantize(Q8_0, xq, xd); err != nil {
			t.Fatal(err)
		}
		want, mag := exactDot(t, Q8_0, row, xd)
		for name, got := range map[string]float32{"dispatch": dotQ8_0Q8_0(row, xq), "go": dotQ8_0Q8_0Go(row, xq)} {
			if d := math.Abs(float64(got) - want); !(d <= dotTol(mag)) {
				t.Errorf("%s/%d: %g, exact %g", name, n, got, want)
			}
		}
	}
}

func BenchmarkDequantize(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 5))
	const n = 4096
	dst := make([]float32, n)
	for _, typ := range supportedTypes() {
		row := randomRow(typ, n, rng)
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(len(row)))
			for b.Loop() {
				_ = Dequantize(typ, row, dst)
			}
		})
	}
}

func BenchmarkDotIQ2_XXSPureGo(b *testing.B) {
	rng := rand.New(rand.NewPCG(6, 6))
	for _, n := range []int{1024, 4096} {
		row, x := randomRow(IQ2_XXS, n, rng), randomVec(n, rng)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(len(row)))
			for b.Loop() {
				benchSink += dotIQ2_XXSGo(row, x)
			}
		})
	}
}

// BenchmarkQuantize is the encoders `redlite synth` runs for every weight.
func BenchmarkQuantize(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := make([]float32, 64*QK_K)
	for i := range src {
		src[i] = float32(rng.NormFloat64()) * 0.02
	}
	for _, t := range []Type{Q8_0, Q4_K, Q6_K} {
		dst := make([]byte, t.RowBytes(len(src)))
		b.Run(t.String(), func(b *testing.B) {
			b.SetBytes(int64(4 * len(src)))
			for b.Loop() {
				if err := Quantize(t, src, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDotQ8K compares, per type, the exact path (DotRows of float32 activations) with
// the 8-bit one (QuantizeQ8K once, then DotRowsQ8K) over a 512-row × 2048 matrix: a decode
// step's product (one thread's share), the quantization paid once for all rows as in the
// CPU backend. Bytes are the weights'. Int8Faster's table is read off this benchmark.
// Types with an assembly 8-bit kernel also run the pure-Go one (int8go).
func BenchmarkDotQ8K(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 5))
	const n, rows = 2048, 512
	x := randomVec(n, rng)
	a := make([]Q8K, n/QK_K)
	out := make([]float32, rows)
	for _, t := range []Type{Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_M, IQ4_XS} {
		var data []byte
		for range rows {
			data = append(data, randomRow(t, n, rng)...)
		}
		b.Run(t.String()+"/exact", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				DotRows(t, data, x, out)
			}
		})
		b.Run(t.String()+"/int8", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				QuantizeQ8K(x, a)
				DotRowsQ8K(t, data, a, out)
			}
		})
		if !Int8Vector(t) {
			continue
		}
		// The pure-Go kernel the assembly one replaces, for what the assembly gains.
		b.Run(t.String()+"/int8go", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			rb := len(data) / rows
			for b.Loop() {
				QuantizeQ8K(x, a)
				for r := range out {
					out[r] = q8kDots[t](data[r*rb:(r+1)*rb], a)
				}
			}
		})
	}
	b.Run("QuantizeQ8K", func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			QuantizeQ8K(x, a)
		}
	})
}

// BenchmarkDotRows4Q8K compares four tokens through the four-token kernel with the same
// four one at a time, over a tile of 16 rows as the CPU backend's matmul takes them.
func BenchmarkDotRows4Q8K(b *testing.B) {
	rng := rand.New(rand.NewPCG(6, 6))
	const n, rows = 1024, 16
	a := make([]Q8K, 4*n/QK_K)
	QuantizeQ8K(randomVec(4*n, rng), a)
	out := make([]float32, 4*rows)
	for _, t := range []Type{Q2_K, Q4_K, Q5_K, Q6_K, IQ2_XXS} {
		if !Int8Rows4(t) {
			continue
		}
		var data []byte
		for range rows {
			data = append(data, randomRow(t, n, rng)...)
		}
		nb := n / QK_K
		b.Run(t.String()+"/one", func(b *testing.B) {
			b.SetBytes(int64(4 * len(data)))
			for b.Loop() {
				for i := range 4 {
					DotRowsQ8K(t, data, a[i*nb:(i+1)*nb], out[i*rows:(i+1)*rows])
				}
			}
		})
		b.Run(t.String()+"/four", func(b *testing.B) {
			b.SetBytes(int64(4 * len(data)))
			for b.Loop() {
				DotRows4Q8K(t, data, a, out, rows)
			}
		})
	}
}
