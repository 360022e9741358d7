package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/redlite/batch/engine/ml"
)

// TestSlidingAttention checks windowed attention against float64 over the positions each
// token sees, p−window+1 … p, for a prefill chunk and single tokens, in a paged cache.
func TestSlidingAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const heads, kvHeads, hd, window = 4, 2, 64, 37
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
	for _, shape := range [][2]int{{0, 100}, {150, 64}, {299, 1}, {10, 1}} {
		pos0, n := shape[0], shape[1]
		q := randomTensor(rng, n, heads*hd).data
		c := b.NewContext().(*context)
		got := values(t, c, c.SlidingAttention(hostTensor(q, n, heads, hd), kc, 0, pos0, scale, window))
		c.Close()
		for i := 0; i < n; i++ {
			p := pos0 + i
			for h := 0; h < heads; h++ {
				g := h / (heads / kvHeads)
				lo := max(0, p-window+1)
				s := make([]float64, p+1-lo)
				m := math.Inf(-1)
				for j := range s {
					for d := 0; d < hd; d++ {
						s[j] += float64(q[(i*heads+h)*hd+d]) * float64(k[(lo+j)*row+g*hd+d])
					}
					s[j] *= scale
					m = max(m, s[j])
				}
				var sum float64
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
