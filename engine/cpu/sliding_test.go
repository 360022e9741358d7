package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// TestSlidingAttention checks windowed attention against float64 over the positions each
// token sees, p−window+1 … p, for a prefill chunk and single tokens, in a paged cache.
func TestSlidingAttention(t *testing.T) { testAttention(t, 37, false) }

// TestSinkAttention checks attention with sinks (a logit per head in the softmax's
// denominator) over the whole context and over a window.
func TestSinkAttention(t *testing.T) {
	t.Run("full", func(t *testing.T) { testAttention(t, 0, true) })
	t.Run("window", func(t *testing.T) { testAttention(t, 37, true) })
}

// testAttention compares SlidingAttention (window > 0) or SinkAttention (sinks) with
// float64 attention over the positions each token sees.
func testAttention(t *testing.T, window int, sinks bool) {
	rng := rand.New(rand.NewPCG(9, 10))
	const heads, kvHeads, hd = 4, 2, 64
	const scale = 0.125
	b := New(2)
	pool, err := b.NewKVPool(1, kvHeads, hd, 8, 64, ml.F32)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	cc, err := pool.Alloc(300)
	if err != nil {
		t.Fatal(err)
	}
	kc := cc.(*cache)
	row := kvHeads * hd
	total := 300
	k, v := randomTensor(rng, total, row).data, randomTensor(rng, total, row).data
	kc.store(0, 0, k, v)
	// Sinks from well below to well above the scores (about ±3 here).
	sk := []float32{-4, 0.5, 2, 6}
	sinkW, err := weightOf(b, "blk.0.attn_sinks.weight", quant.F32, []int{heads}, f32bytes(sk))
	if err != nil {
		t.Fatal(err)
	}
	for _, shape := range [][2]int{{0, 100}, {150, 64}, {299, 1}, {10, 1}} {
		pos0, n := shape[0], shape[1]
		q := randomTensor(rng, n, heads*hd).data
		c := b.NewContext().(*context)
		var out ml.Tensor
		if sinks {
			out = c.SinkAttention(hostTensor(q, n, heads, hd), kc, 0, pos0, scale, window, sinkW)
		} else {
			out = c.SlidingAttention(hostTensor(q, n, heads, hd), kc, 0, pos0, scale, window)
		}
		got := values(t, c, out)
		c.Close()
		for i := 0; i < n; i++ {
			p := pos0 + i
			for h := 0; h < heads; h++ {
				g := h / (heads / kvHeads)
				lo := 0
				if window > 0 {
					lo = max(0, p-window+1)
				}
				s := make([]float64, p+1-lo)
				m := math.Inf(-1)
				for j := range s {
					for d := 0; d < hd; d++ {
						s[j] += float64(q[(i*heads+h)*hd+d]) * float64(k[(lo+j)*row+g*hd+d])
					}
					s[j] *= scale
					m = max(m, s[j])
				}
				if sinks {
					m = max(m, float64(sk[h]))
				}
				var sum float64
				if sinks {
					sum = math.Exp(float64(sk[h]) - m)
				}
				for j := range s {
					s[j] = math.Exp(s[j] - m)
					sum += s[j]
				}
				for d := 0; d < hd; d++ {
					var want float64
					for j := range s {
						want += s[j] / sum * float64(v[(lo+j)*row+g*hd+d])
					}
					if e := got[(i*heads+h)*hd+d]; math.Abs(float64(e)-want) > 2e-5*(1+math.Abs(want)) {
						t.Fatalf("pos0 %d n %d: token %d head %d feature %d: %v, want %v", pos0, n, i, h, d, e, want)
					}
				}
			}
		}
	}
}
