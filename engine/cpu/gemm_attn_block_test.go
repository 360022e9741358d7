package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/redlite/batch/engine/ml"
)

// longCache is a cache of total positions holding keys that grow with the position, so that
// each block of a streaming softmax raises the running max, and random values.
func longCache(t testing.TB, rng *rand.Rand, b *Backend, dt ml.DType, layers, kvHeads, hd, total int) *cache {
	cc, err := b.NewCache(layers, kvHeads, hd, total, dt)
	if err != nil {
		t.Fatal(err)
	}
	kc := cc.(*cache)
	row := kvHeads * hd
	k := randomTensor(rng, total, row).data
	for p := 0; p < total; p++ {
		f := 1 + 2*float32(p)/float32(total)
		for i := range k[p*row : (p+1)*row] {
			k[p*row+i] *= f
		}
	}
	for l := 0; l < layers; l++ {
		kc.store(l, 0, k, randomTensor(rng, total, row).data)
	}
	return kc
}

// TestAttentionGemmBlocks checks chunks that span several blocks of positions (a long
// context, a chunk across a block boundary, a chunk longer than a block) against float64
// and against the per-position form run one token at a time, for both cache precisions.
func TestAttentionGemmBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	const heads, kvHeads, hd, layer = 2, 1, 64, 0
	const scale = 0.125
	b := New(2)
	c := b.NewContext().(*context)
	for _, dt := range []ml.DType{ml.F32, ml.F16} {
		shapes := [][2]int{{attnBlock - 12, 40}, {0, 2*attnBlock + 6}, {4096 - 24, 24}}
		if testing.Short() {
			// Under -short (the emulated arm64 run) only the chunk across a block boundary:
			// the long ones take minutes there.
			shapes = shapes[:1]
		}
		for _, shape := range shapes {
			pos0, n := shape[0], shape[1]
			kc := longCache(t, rng, b, dt, 1, kvHeads, hd, pos0+n)
			q := randomTensor(rng, n, heads*hd).data
			want := refAttention(q, n, heads, hd, kc, layer, pos0, scale)
			perPos := make([]float32, 0, n*heads*hd)
			for i := 0; i < n; i++ {
				qi := hostTensor(q[i*heads*hd:(i+1)*heads*hd], 1, heads, hd)
				perPos = append(perPos, values(t, c, c.Attention(qi, kc, layer, pos0+i, scale))...)
			}
			for i, w := range want {
				if math.Abs(float64(perPos[i])-w) > 1e-5*(1+math.Abs(w)) {
					t.Fatalf("%v pos0=%d n=%d: per-position element %d: %v, want %v", dt, pos0, n, i, perPos[i], w)
				}
			}
			for _, kern := range gemmKernels {
				t.Run(fmt.Sprintf("%v/%s/pos0=%d/n=%d", dt, kern.name, pos0, n), func(t *testing.T) {
					if !useAttentionGemm(kern, n, hd) {
						t.Skip("shape not for attentionGemm")
					}
					got := make([]float32, n*heads*hd)
					attentionGemm(b.pool, kern, q, n, heads, hd, kc, layer, pos0, scale, got)
					for i, w := range want {
						if math.Abs(float64(got[i])-w) > 1e-5*(1+math.Abs(w)) {
							t.Fatalf("element %d: %v, want %v", i, got[i], w)
						}
						if d := math.Abs(float64(got[i] - perPos[i])); d > 1e-5*(1+math.Abs(w)) {
							t.Fatalf("element %d: %v, per-position form %v", i, got[i], perPos[i])
						}
					}
				})
			}
		}
	}
}

// TestAttentionGemmScratchBounded checks that the largest buffer a chunk's attention takes
// from the scratch pool does not depend on how many positions the cache holds.
func TestAttentionGemmScratchBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	const heads, kvHeads, hd, n = 4, 2, 64, 16
	for _, dt := range []ml.DType{ml.F32, ml.F16} {
		largest := map[int]int{}
		totals := []int{1024, 8192, 65536}
		if testing.Short() {
			totals = []int{1024, 2048, 4096} // still several blocks of positions, quick under emulation
		}
		for _, total := range totals {
			b := New(2)
			kc := longCache(t, rng, b, dt, 1, kvHeads, hd, total)
			q := randomTensor(rng, n, heads*hd).data
			out := make([]float32, n*heads*hd)
			attentionGemm(b.pool, defaultKernel, q, n, heads, hd, kc, 0, total-n, 0.125, out)
			b.pool.scratch.mu.Lock()
			for _, f := range b.pool.scratch.free {
				largest[total] = max(largest[total], cap(f))
			}
			b.pool.scratch.mu.Unlock()
		}
		if largest[1024] == 0 || largest[totals[1]] != largest[1024] || largest[totals[2]] != largest[1024] {
			t.Errorf("%v: largest scratch buffer by context length %v, want one size", dt, largest)
		}
		t.Logf("%v: largest scratch buffer by context length %v floats", dt, largest)
	}
}

// BenchmarkAttentionLong times a 512-token chunk's attention at the end of an 8K context in
// one layer of Qwen3-0.6B's shape, with an f16 cache.
func BenchmarkAttentionLong(b *testing.B) {
	rng := rand.New(rand.NewPCG(23, 24))
	const heads, kvHeads, hd, n, total = 16, 8, 128, 512, 8192
	be := New(0)
	kc := longCache(b, rng, be, ml.F16, 1, kvHeads, hd, total)
	q := hostTensor(randomTensor(rng, n, heads*hd).data, n, heads, hd)
	for b.Loop() {
		computeAttention(b, be, q, kc, 0, total-n)
	}
}

// BenchmarkDecodeAttention times one token's attention at depth 4,096 in Qwen3-0.6B's
// shape (16 heads over 8 kv heads of 128), layer after layer of a 28-layer cache, so that
// the keys and values come from memory as in a decode step (llama-bench's tg @ d4096).
func BenchmarkDecodeAttention(b *testing.B) {
	rng := rand.New(rand.NewPCG(27, 28))
	const heads, kvHeads, hd, layers, depth = 16, 8, 128, 28, 4096
	for _, dt := range []ml.DType{ml.F16, ml.F32, ml.Q8_0} {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%v/t=%d", dt, threads), func(b *testing.B) {
				be := New(threads)
				kc := longCache(b, rng, be, dt, layers, kvHeads, hd, depth+1)
				q := hostTensor(randomTensor(rng, 1, heads*hd).data, 1, heads, hd)
				b.SetBytes(kc.Bytes() / layers)
				layer := 0
				for b.Loop() {
					computeAttention(b, be, q, kc, layer, depth)
					layer = (layer + 1) % layers
				}
			})
		}
	}
}

// TestArgmaxScaled checks the grouped search against a plain one over lengths around the
// group of 16, with the max in every place, ties and both signs of scale.
func TestArgmaxScaled(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	for n := 1; n < 70; n++ {
		for trial := 0; trial < 20; trial++ {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.IntN(7) - 3) // small integers: many ties
			}
			for _, scale := range []float32{0.125, -0.5} {
				want := 0
				for j, v := range x {
					if v*scale > x[want]*scale {
						want = j
					}
				}
				if got := argmaxScaled(x, scale); got != want {
					t.Fatalf("%v scaled by %v: argmax %d, want %d", x, scale, got, want)
				}
			}
		}
	}
}
