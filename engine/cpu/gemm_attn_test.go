package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/redlite/batch/engine/ml"
)

// refAttention is causal attention in float64 over the cache as the backend stores it.
func refAttention(q []float32, n, heads, hd int, kc *cache, layer, pos0 int, scale float32) []float64 {
	group := heads / kc.kvHeads
	out := make([]float64, n*heads*hd)
	kbuf, vbuf := make([]float32, hd), make([]float32, hd)
	for i := 0; i < n; i++ {
		for h := 0; h < heads; h++ {
			qv := q[(i*heads+h)*hd:]
			see := pos0 + i + 1
			s := make([]float64, see)
			m := math.Inf(-1)
			for p := range s {
				k := kc.key(layer, p, h/group, kbuf)
				for d := 0; d < hd; d++ {
					s[p] += float64(qv[d]) * float64(k[d])
				}
				s[p] *= float64(scale)
				m = max(m, s[p])
			}
			var sum float64
			for p := range s {
				s[p] = math.Exp(s[p] - m)
				sum += s[p]
			}
			for p := range s {
				v := kc.value(layer, p, h/group, vbuf)
				for d := 0; d < hd; d++ {
					out[(i*heads+h)*hd+d] += s[p] / sum * float64(v[d])
				}
			}
		}
	}
	return out
}

// TestAttentionGemm checks the batched attention of every kernel against float64, for both
// cache precisions, a prefix already in the cache and a last tile that is not full.
func TestAttentionGemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	const heads, kvHeads, layer = 4, 2, 1
	b := New(2)
	for _, dt := range []ml.DType{ml.F32, ml.F16} {
		for _, kern := range gemmKernels {
			for _, shape := range [][3]int{{0, 37, 64}, {21, 13, 64}, {5, 1, 64}, {40, 1, 128}, {3, 2, 128}} {
				pos0, n, hd := shape[0], shape[1], shape[2]
				t.Run(fmt.Sprintf("%v/%s/pos0=%d/n=%d/hd=%d", dt, kern.name, pos0, n, hd), func(t *testing.T) {
					cc, err := b.NewCache(2, kvHeads, hd, pos0+n+3, dt)
					if err != nil {
						t.Fatal(err)
					}
					kc := cc.(*cache)
					k := randomTensor(rng, pos0+n, kvHeads*hd).data
					v := randomTensor(rng, pos0+n, kvHeads*hd).data
					kc.store(layer, 0, k, v)
					q := randomTensor(rng, n, heads*hd).data
					const scale = 0.125
					got := make([]float32, n*heads*hd)
					if useAttentionGemm(kern, n, hd) {
						attentionGemm(b.pool, kern, q, n, heads, hd, kc, layer, pos0, scale, got)
					} else {
						c := b.NewContext().(*context)
						got = values(t, c, c.Attention(hostTensor(q, n, heads, hd), kc, layer, pos0, scale))
					}
					want := refAttention(q, n, heads, hd, kc, layer, pos0, scale)
					for i, w := range want {
						if math.Abs(float64(got[i])-w) > 1e-5*(1+math.Abs(w)) {
							t.Fatalf("element %d: %v, want %v", i, got[i], w)
						}
					}
				})
			}
		}
	}
}

// BenchmarkAttention times a 512-token prefill's attention in one layer of Qwen3-0.6B's
// shape (16 heads over 8 kv heads of 128).
func BenchmarkAttention(b *testing.B) {
	rng := rand.New(rand.NewPCG(17, 18))
	const heads, kvHeads, hd, n = 16, 8, 128, 512
	be := New(0)
	cc, _ := be.NewCache(1, kvHeads, hd, n, ml.F32)
	kc := cc.(*cache)
	kc.store(0, 0, randomTensor(rng, n, kvHeads*hd).data, randomTensor(rng, n, kvHeads*hd).data)
	q := hostTensor(randomTensor(rng, n, heads*hd).data, n, heads, hd)
	for b.Loop() {
		computeAttention(b, be, q, kc, 0, 0)
	}
}

// computeAttention runs one attention of q at pos0 over layer of kc.
func computeAttention(b *testing.B, be *Backend, q ml.Tensor, kc *cache, layer, pos0 int) {
	compute(b, be, func(c ml.Context) { c.Attention(q, kc, layer, pos0, 0.088) })
}

// TestDecodeAttention checks the few-token attention, whose jobs are shares of a kv head's
// query heads over tiles of positions, against float64: groups of 1 to 8 heads, split
// across 1 to 4 threads, over several tiles.
func TestDecodeAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	const layer = 0
	for _, dt := range []ml.DType{ml.F32, ml.F16} {
		for _, shape := range [][5]int{{1, 1, 200, 1, 128}, {8, 1, 130, 2, 64}, {16, 2, 300, 1, 256}, {8, 8, 64, 1, 128}, {6, 2, 70, 3, 64}} {
			heads, kvHeads, pos0, n, hd := shape[0], shape[1], shape[2], shape[3], shape[4]
			for _, threads := range []int{1, 2, 3, 4} {
				t.Run(fmt.Sprintf("%v/%d-%d/pos0=%d/n=%d/hd=%d/threads=%d", dt, heads, kvHeads, pos0, n, hd, threads), func(t *testing.T) {
					b := New(threads)
					cc, err := b.NewCache(1, kvHeads, hd, pos0+n, dt)
					if err != nil {
						t.Fatal(err)
					}
					kc := cc.(*cache)
					kc.store(layer, 0, randomTensor(rng, pos0+n, kvHeads*hd).data, randomTensor(rng, pos0+n, kvHeads*hd).data)
					q := randomTensor(rng, n, heads*hd).data
					const scale = 0.125
					c := b.NewContext().(*context)
					got := values(t, c, c.Attention(hostTensor(q, n, heads, hd), kc, layer, pos0, scale))
					want := refAttention(q, n, heads, hd, kc, layer, pos0, scale)
					for i, w := range want {
						if math.Abs(float64(got[i])-w) > 1e-5*(1+math.Abs(w)) {
							t.Fatalf("element %d: %v, want %v", i, got[i], w)
						}
					}
				})
			}
		}
	}
}
