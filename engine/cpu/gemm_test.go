package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// refDot is the dot product in float64 and the sum of the magnitudes of its terms, which
// bounds the rounding error of any float32 summation order.
func refDot(a, b []float32) (dot, mag float64) {
	for i := range a {
		p := float64(a[i]) * float64(b[i])
		dot += p
		mag += math.Abs(p)
	}
	return dot, mag
}

// closeTo reports whether a float32 sum of k terms is within rounding of the exact value.
func closeTo(got float32, dot, mag float64, k int) bool {
	return math.Abs(float64(got)-dot) <= 2*float64(k)*0x1p-24*mag+1e-30
}

func TestGemmKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, kern := range gemmKernels {
		for _, k := range []int{1, 7, 64, 300} {
			t.Run(fmt.Sprintf("%s/k=%d", kern.name, k), func(t *testing.T) {
				mr, nr := kern.mr, kern.nr
				lda, ldb, ldc := k+3, nr+5, nr+2
				a := randomTensor(rng, (mr-1)*lda+k).data
				b := randomTensor(rng, (k-1)*ldb+nr).data
				c := make([]float32, (mr-1)*ldc+nr)
				for i := range c {
					c[i] = float32(math.NaN()) // must be overwritten
				}
				kern.fn(k, a, lda, b, ldb, c, ldc)
				col := make([]float32, k)
				for i := 0; i < mr; i++ {
					for j := 0; j < nr; j++ {
						for kk := range col {
							col[kk] = b[kk*ldb+j]
						}
						dot, mag := refDot(a[i*lda:i*lda+k], col)
						if got := c[i*ldc+j]; !closeTo(got, dot, mag, k) {
							t.Fatalf("C[%d][%d] = %v, want %v", i, j, got, dot)
						}
					}
				}
			})
		}
	}
}

// randomWeight quantizes a random rows×cols matrix to typ and binds it.
func randomWeight(t testing.TB, b *Backend, rng *rand.Rand, typ quant.Type, rows, cols int) *weight {
	t.Helper()
	src := randomTensor(rng, rows*cols).data
	data := make([]byte, typ.RowBytes(rows*cols))
	if err := quant.Quantize(typ, src, data); err != nil {
		t.Fatal(err)
	}
	w, err := weightOf(b, fmt.Sprintf("blk.0.%v.weight", typ), typ, []int{cols, rows}, data)
	if err != nil {
		t.Fatal(err)
	}
	return w.(*weight)
}

// TestGemmWeight checks the blocked product against float64 dot products of the dequantized
// rows, for every kernel, with row counts and token counts that leave partial tiles.
func TestGemmWeight(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	b := New(2)
	for _, typ := range []quant.Type{quant.F32, quant.F16, quant.Q8_0, quant.Q4_K, quant.Q6_K} {
		const rows, cols = 77, 512
		w := randomWeight(t, b, rng, typ, rows, cols)
		deq := make([]float32, rows*cols)
		if err := quant.Dequantize(typ, w.data, deq); err != nil {
			t.Fatal(err)
		}
		for _, kern := range gemmKernels {
			for _, n := range []int{1, 5, 16, 33, 49, 70} {
				for _, span := range [][2]int{{0, rows}, {13, 50}} {
					t.Run(fmt.Sprintf("%v/%s/n=%d/rows=%d-%d", typ, kern.name, n, span[0], span[1]), func(t *testing.T) {
						x := randomTensor(rng, n, cols).data
						r0, r1 := span[0], span[1]
						out := make([]float32, n*(r1-r0))
						gemmWeight(b.pool, kern, w, r0, r1, x, n, out)
						for i := 0; i < n; i++ {
							for r := r0; r < r1; r++ {
								dot, mag := refDot(deq[r*cols:(r+1)*cols], x[i*cols:(i+1)*cols])
								if got := out[i*(r1-r0)+r-r0]; !closeTo(got, dot, mag, cols) {
									t.Fatalf("token %d row %d: %v, want %v", i, r, got, dot)
								}
							}
						}
					})
				}
			}
		}
	}
}

var benchSink float32

// BenchmarkGemmKernel times one micro-kernel tile with operands in cache; the figure to
// compare with the core's peak is GFLOP/s (2·mr·nr·k per call).
func BenchmarkGemmKernel(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const k = 1024
	for _, kern := range gemmKernels {
		b.Run(kern.name, func(b *testing.B) {
			a := randomTensor(rng, kern.mr*k).data
			bp := randomTensor(rng, kern.nr*k).data
			c := make([]float32, kern.mr*kern.nr)
			for b.Loop() {
				kern.fn(k, a, k, bp, kern.nr, c, kern.nr)
			}
			b.ReportMetric(float64(2*kern.mr*kern.nr*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			benchSink += c[0]
		})
	}
}

// BenchmarkMatMul times the backend's matrix product of a Qwen3-0.6B-sized weight (1024 →
// 3072) for a prefill batch (GEMM) and a single token (GEMV), one and two threads.
func BenchmarkMatMul(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	const rows, cols = 3072, 1024
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_K} {
		for _, threads := range []int{1, 2} {
			be := New(threads)
			w := randomWeight(b, be, rng, typ, rows, cols)
			for _, n := range []int{1, 2, 8, 64, 512} {
				x := randomTensor(rng, n, cols)
				b.Run(fmt.Sprintf("%v/t=%d/n=%d", typ, threads, n), func(b *testing.B) {
					b.SetBytes(int64(len(w.data)))
					for b.Loop() {
						computeMatMul(b, be, w, x)
					}
					b.ReportMetric(float64(2*rows*cols*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

func TestPackPanels(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	p := newPool(2)
	for _, shape := range [][3]int{{1, 5, 16}, {33, 40, 32}, {64, 1024, 32}, {40, 48, 32}, {16, 32, 32}} {
		n, k, nr := shape[0], shape[1], shape[2]
		x := randomTensor(rng, n*k).data
		panels := (n + nr - 1) / nr
		dst := make([]float32, panels*nr*k)
		for i := range dst {
			dst[i] = float32(math.NaN())
		}
		last := nr
		if n%nr != 0 && n%nr <= nr/2 {
			last = nr / 2
		}
		packPanels(p, dst, x, n, k, nr, last)
		for pn := 0; pn < panels; pn++ {
			w := nr
			if pn == panels-1 {
				w = last
			}
			for kk := 0; kk < k; kk++ {
				for j := 0; j < w; j++ {
					var want float32
					if t0 := pn*nr + j; t0 < n {
						want = x[t0*k+kk]
					}
					if got := dst[pn*nr*k+kk*w+j]; got != want {
						t.Fatalf("n=%d k=%d: panel %d feature %d token %d = %v, want %v", n, k, pn, kk, j, got, want)
					}
				}
			}
		}
	}
}

func BenchmarkPackPanels(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 3))
	const n, k, nr = 512, 1024, 32
	x := randomTensor(rng, n*k).data
	dst := make([]float32, n*k)
	p := newPool(1)
	b.SetBytes(n * k * 4)
	for b.Loop() {
		packPanels(p, dst, x, n, k, nr, nr)
	}
}

// randomBlocks is a weight of random bytes with the f16 scales of each block set to small
// finite values: quick to make at sizes where quantizing would take long.
func randomBlocks(t testing.TB, b *Backend, rng *rand.Rand, typ quant.Type, rows, cols int) *weight {
	t.Helper()
	data := make([]byte, typ.RowBytes(rows*cols))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	scales := map[quant.Type][]int{quant.Q8_0: {0}, quant.Q4_K: {0, 2}, quant.Q6_K: {208}, quant.IQ2_XXS: {0}, quant.Q5_K: {0, 2}}[typ]
	for o := 0; o < len(data); o += typ.TypeSize() {
		for _, off := range scales {
			h := quant.F32ToF16(float32(0.001 + 0.01*rng.Float64()))
			data[o+off], data[o+off+1] = byte(h), byte(h>>8)
		}
	}
	w, err := weightOf(b, fmt.Sprintf("blk.0.%v.weight", typ), typ, []int{cols, rows}, data)
	if err != nil {
		t.Fatal(err)
	}
	return w.(*weight)
}

// BenchmarkGEMV times one token through a weight the size of Qwen3-0.6B's output matrix
// (151,936 × 1024), which does not fit any cache: the figure is weight bytes per second
// streamed from memory.
func BenchmarkGEMV(b *testing.B) {
	rng := rand.New(rand.NewPCG(9, 10))
	const rows, cols = 151936, 1024
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q6_K} {
		for _, threads := range []int{1, 2} {
			be := New(threads)
			w := randomBlocks(b, be, rng, typ, rows, cols)
			x := randomTensor(rng, 1, cols)
			b.Run(fmt.Sprintf("%v/t=%d", typ, threads), func(b *testing.B) {
				b.SetBytes(int64(len(w.data)))
				for b.Loop() {
					computeMatMul(b, be, w, x)
				}
			})
		}
	}
}

// BenchmarkMemoryRead is the ceiling of BenchmarkGEMV and of every decode step: 1 GiB of
// float32 read once by the pool's threads (each value dotted with itself, one FMA per
// eight values), bytes per second from memory. A decode whose weight bytes × tokens/s come
// near it cannot be made faster by its kernels, only by reading fewer bytes.
func BenchmarkMemoryRead(b *testing.B) {
	data := make([]float32, 1<<28)
	for i := range data {
		data[i] = 1
	}
	for _, threads := range []int{1, 2} {
		p := newPool(threads)
		b.Run(fmt.Sprintf("t=%d", threads), func(b *testing.B) {
			b.SetBytes(int64(len(data) * 4))
			const chunk = 1 << 16
			for b.Loop() {
				p.parallel(len(data)/chunk, 16, func(lo, hi int) {
					quant.Dot(data[lo*chunk:hi*chunk], data[lo*chunk:hi*chunk])
				})
			}
		})
	}
}

// computeMatMul runs one product in a context of its own.
func computeMatMul(b *testing.B, be *Backend, w ml.Weight, x ml.Tensor) {
	compute(b, be, func(c ml.Context) { c.MatMul(w, x) })
}

// compute records operations in a context of its own and runs them: a context runs what
// it records at Compute, so recording alone would time nothing.
func compute(b *testing.B, be *Backend, record func(ml.Context)) {
	c := be.NewContext()
	defer c.Close()
	record(c)
	if err := c.Compute(); err != nil {
		b.Fatal(err)
	}
}
