package cpu

import (
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// Causal attention of a batch of tokens as two GEMMs per head and tile of mr tokens:
// S = Q·Kᵀ over the positions the tile can see, a row softmax with the causal mask, then
// O = P·V. Keys are packed k-major per kv head once per call (the B operand of the first
// product); values are the B operand of the second as they lie in the cache (f32) or after
// one conversion (f16). The arithmetic is the per-position form's: each score is one float32
// dot product times the scale, each output one float32 sum of p·v over positions.

// useAttentionGemm reports whether n tokens of head size hd go through attentionGemm: it
// needs whole panels of the head dimension, and pays once a tile is half full.
func useAttentionGemm(kern gemmKernel, n, hd int) bool {
	return hd%kern.nr == 0 && 2*n >= kern.mr
}

func attentionGemm(p *pool, kern gemmKernel, q []float32, n, heads, hd int, kc *cache, layer, pos0 int, scale float32, out []float32) {
	mr, nr := kern.mr, kern.nr
	kvHeads := kc.kvHeads
	group := heads / kvHeads
	total := pos0 + n
	panels := (total + nr - 1) / nr
	ldS := panels * nr
	row := kvHeads * hd // floats per position in the cache

	// Kᵀ per kv head g: panel pn holds key p = pn·nr+j, feature d at [(g·panels+pn)·hd+d]·nr+j.
	kp := p.scratch.get(kvHeads * panels * hd * nr)
	defer p.scratch.put(kp)
	p.parallel(kvHeads*panels, 1, func(lo, hi int) {
		buf := make([]float32, hd)
		for job := lo; job < hi; job++ {
			g, pn := job/panels, job%panels
			dst := kp[job*hd*nr : (job+1)*hd*nr]
			jn := min(nr, total-pn*nr)
			if jn < nr {
				clear(dst)
			}
			for j := 0; j < jn; j++ {
				k := kc.key(layer, pn*nr+j, g, buf)
				for d, v := range k {
					dst[d*nr+j] = v
				}
			}
		}
	})

	// V as float32 rows of kvHeads·hd.
	var v []float32
	if kc.dtype == ml.F32 {
		v = kc.v32[layer][:total*row]
	} else {
		v = p.scratch.get(total * row)
		defer p.scratch.put(v)
		p.parallel(total, 64, func(lo, hi int) {
			quant.F16ToF32Slice(v[lo*row:hi*row], kc.v16[layer][lo*row:hi*row])
		})
	}

	tiles := (n + mr - 1) / mr
	jobs := tiles * heads
	p.parallel(jobs, 1, func(lo, hi int) {
		s := p.scratch.get(mr * ldS)
		defer p.scratch.put(s)
		qt := make([]float32, mr*hd)
		ot := make([]float32, mr*nr)
		for job := lo; job < hi; job++ {
			// Last tiles first: they see the most positions, and the cheap ones balance the end.
			tile, h := tiles-1-job/heads, job%heads
			g := h / group
			t0 := tile * mr
			mt := min(mr, n-t0)
			for i := 0; i < mr; i++ {
				if i < mt {
					copy(qt[i*hd:(i+1)*hd], q[((t0+i)*heads+h)*hd:])
				} else {
					clear(qt[i*hd : (i+1)*hd])
				}
			}
			last := pos0 + t0 + mt // the tile sees positions [0, last)
			np := (last + nr - 1) / nr
			kg := kp[g*panels*hd*nr:]
			for pn := 0; pn < np; pn++ {
				kern.fn(hd, qt, hd, kg[pn*hd*nr:], nr, s[pn*nr:], ldS)
			}
			for i := 0; i < mr; i++ {
				r := s[i*ldS : i*ldS+last]
				if i >= mt {
					clear(r)
					continue
				}
				see := pos0 + t0 + i + 1 // causal: positions 0 … pos0+t0+i
				softmax32(r[:see], scale)
				clear(r[see:])
			}
			for d0 := 0; d0 < hd; d0 += nr {
				dst := out[(t0*heads+h)*hd+d0:]
				if mt == mr {
					kern.fn(last, s, ldS, v[g*hd+d0:], row, dst, heads*hd)
					continue
				}
				kern.fn(last, s, ldS, v[g*hd+d0:], row, ot, nr)
				for i := 0; i < mt; i++ {
					copy(dst[i*heads*hd:i*heads*hd+nr], ot[i*nr:(i+1)*nr])
				}
			}
		}
	})
}
