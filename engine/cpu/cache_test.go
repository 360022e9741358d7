package cpu

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/ml"
)

// TestPagedAttention fills a sequence's cache drawn from a shared pool, whose blocks are
// scattered (other sequences took and gave back blocks first), and checks stores, loads and
// attention — per position and as chunks — against float64, in every precision.
func TestPagedAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const heads, kvHeads, hd, layers = 4, 2, 64, 2
	const scale = 0.125
	b := New(2)
	blockSizes := []int{64, 256}
	if testing.Short() {
		blockSizes = blockSizes[:1] // the float64 reference is quadratic: keep -short (the emulated arm64 run) quick
	}
	for _, dt := range []ml.DType{ml.F32, ml.F16, ml.Q8_0} {
		for _, bs := range blockSizes {
			pool, err := b.NewKVPool(layers, kvHeads, hd, 24, bs, dt)
			if err != nil {
				t.Fatal(err)
			}
			// Scatter: take blocks for three sequences, give back the middle one's and the
			// first one's, so the next cache's table is out of order.
			a, _ := pool.Alloc(3 * bs)
			m, _ := pool.Alloc(5 * bs)
			z, _ := pool.Alloc(2 * bs)
			m.Free()
			a.Free()
			defer z.Free()
			total := 7*bs + 5
			cc, err := pool.Alloc(total)
			if err != nil {
				t.Fatal(err)
			}
			kc := cc.(*cache)
			if kc.Capacity() != 8*bs || pool.FreeBlocks() != 24-2-8 {
				t.Fatalf("capacity %d, %d blocks free", kc.Capacity(), pool.FreeBlocks())
			}
			row := kvHeads * hd
			k, v := randomTensor(rng, total, row).data, randomTensor(rng, total, row).data
			// Stored in pieces that cross blocks.
			for p0 := 0; p0 < total; p0 += 97 {
				n := min(97, total-p0)
				kc.store(1, p0, k[p0*row:(p0+n)*row], v[p0*row:(p0+n)*row])
			}
			gk, gv := make([]float32, total*row), make([]float32, total*row)
			kc.load(1, 0, total, gk, gv)
			for i := range k {
				tol := float32(0)
				switch dt {
				case ml.F16:
					tol = 1e-3 * (1 + float32(math.Abs(float64(k[i]))) + float32(math.Abs(float64(v[i]))))
				case ml.Q8_0:
					// The heads of 64 are stored rotated (ml.KVRotations): half a step of the
					// rotated group's scale max|Hx|/127 (plus the float16 rounding of the
					// scale) on each of 64 values, of which each loaded value sums 1/8.
					g0 := i / 64 * 64
					rk, rv := append([]float32(nil), k[g0:g0+64]...), append([]float32(nil), v[g0:g0+64]...)
					hadamardRows(rk, 64)
					hadamardRows(rv, 64)
					tol = 8 * 0.57 * max(absMax(rk), absMax(rv)) / 127
				}
				if d := gk[i] - k[i]; d > tol || -d > tol {
					t.Fatalf("%v bs %d: key %d loaded %v, stored %v", dt, bs, i, gk[i], k[i])
				}
				if d := gv[i] - v[i]; d > tol || -d > tol {
					t.Fatalf("%v bs %d: value %d loaded %v, stored %v", dt, bs, i, gv[i], v[i])
				}
			}
			c := b.NewContext().(*context)
			for _, shape := range [][2]int{{total - 1, 1}, {bs - 3, 40}, {0, total}} {
				pos0, n := shape[0], shape[1]
				q := randomTensor(rng, n, heads*hd).data
				qr := q
				if dt == ml.Q8_0 {
					// The queries meet the stored keys rotated and rounded as they are.
					qr = append([]float32(nil), q...)
					hadamardRows(qr, kc.rotK)
					roundQ8_0(qr, qr)
				}
				want := refAttention(qr, n, heads, hd, kc, 1, pos0, scale)
				if dt == ml.Q8_0 {
					// … and the output comes back from the values' rotation.
					w32 := make([]float32, len(want))
					for i, w := range want {
						w32[i] = float32(w)
					}
					hadamardRows(w32, kc.rotV)
					for i, w := range w32 {
						want[i] = float64(w)
					}
				}
				got := values(t, c, c.Attention(hostTensor(q, n, heads, hd), kc, 1, pos0, scale))
				for i, w := range want {
					if math.Abs(float64(got[i])-w) > 2e-5*(1+math.Abs(w)) {
						t.Fatalf("%v bs %d pos0 %d n %d: element %d: %v, want %v", dt, bs, pos0, n, i, got[i], w)
					}
				}
				c.Close()
				c = b.NewContext().(*context)
			}
			c.Close()
			cc.Free()
			cc.Free() // harmless
			if pool.FreeBlocks() != 22 {
				t.Fatalf("%d blocks free after the cache's Free, want 22", pool.FreeBlocks())
			}
			if _, err := pool.Alloc(23 * bs); !errors.Is(err, ml.ErrPoolFull) {
				t.Fatalf("allocation past the pool: %v, want ErrPoolFull", err)
			}
			pool.Free()
		}
	}
}

func absMax(x []float32) float32 {
	var m float32
	for _, v := range x {
		m = max(m, float32(math.Abs(float64(v))))
	}
	return m
}

// TestHadamardRows: the transform is Sylvester's matrix with entries ±1/√n and undoes
// itself; ml.KVRotations picks llama.cpp's sizes; a q8_0 pool refuses heads that are not whole blocks.
func TestHadamardRows(t *testing.T) {
	const n = 64
	rng := rand.New(rand.NewPCG(5, 6))
	x := make([]float32, 2*n)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	y := append([]float32(nil), x...)
	hadamardRows(y, n)
	for r := 0; r < 2; r++ {
		for i := 0; i < n; i++ {
			var want float64
			for j := 0; j < n; j++ {
				h := 1.0
				for b := i & j; b != 0; b &= b - 1 {
					h = -h
				}
				want += h * float64(x[r*n+j]) / 8
			}
			if math.Abs(float64(y[r*n+i])-want) > 1e-5 {
				t.Fatalf("row %d element %d: %v, want %v", r, i, y[r*n+i], want)
			}
		}
	}
	hadamardRows(y, n)
	for i := range x {
		if math.Abs(float64(y[i]-x[i])) > 1e-6 {
			t.Fatalf("twice: element %d is %v, was %v", i, y[i], x[i])
		}
	}
	if _, err := New(1).NewKVPool(1, 1, 80, 1, 16, ml.Q8_0); err == nil || !strings.Contains(err.Error(), "a head of 80 features is not a whole number of q8_0 blocks of 32") {
		t.Errorf("a q8_0 pool of heads of 80: %v", err)
	}
	for _, c := range []struct {
		dt       ml.DType
		hd, k, v int
	}{{ml.Q8_0, 32, 0, 0}, {ml.Q8_0, 64, 64, 64}, {ml.Q8_0, 96, 0, 0}, {ml.Q8_0, 192, 64, 64}, {ml.Q8_0, 256, 256, 64}, {ml.F16, 256, 0, 0}} {
		if k, v := ml.KVRotations(c.dt, c.hd); k != c.k || v != c.v {
			t.Errorf("ml.KVRotations(%v, %d) = %d, %d; want %d, %d", c.dt, c.hd, k, v, c.k, c.v)
		}
	}
}
