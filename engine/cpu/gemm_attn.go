package cpu

import (
	"math"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// Causal attention of a batch of tokens as two GEMMs per head and tile of mr tokens:
// S = Q·Kᵀ over the positions the tile can see, a row softmax with the causal mask, then
// O = P·V. The positions go by in blocks of attnBlock, so that the keys packed k-major and
// the values widened from f16 (the B operands of the two products) take memory bounded by
// the block, not by the context. Within a block the arithmetic is the per-position form's:
// each score is one float32 dot product times the scale, each output one float32 sum of p·v
// over the block's positions. Blocks combine by the streaming (flash-attention) softmax: per
// query row a running max and a running sum of exponentials, the output so far rescaled
// when the max grows. A context of one block is computed exactly as before.

// attnBlock is the number of positions per block: a multiple of every kernel's nr, small
// enough that a kv head's packed keys (attnBlock·hd floats) stay in L2.
const attnBlock = 512

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
	row := kvHeads * hd // floats per position in the cache
	// Blocks of positions never cross a block of the cache (a lone sequence's cache is one
	// block, so it goes by attnBlock).
	block := kc.attnRun()
	panels := (block + nr - 1) / nr
	tiles := (n + mr - 1) / mr
	single := total <= block // one block: a plain softmax, no state to combine

	// Kᵀ of a block per kv head g: panel pn holds key b0+pn·nr+j, feature d at
	// [(g·panels+pn)·hd+d]·nr+j.
	kp := p.scratch.get(kvHeads * panels * hd * nr)
	defer p.scratch.put(kp)
	// V of a block as float32 rows of kvHeads·hd (f16 caches only).
	var vw []float32
	if kc.dtype != ml.F32 {
		vw = p.scratch.get(block * row)
		defer p.scratch.put(vw)
	}
	// The streaming softmax's state per token and head: running max and sum.
	state := p.scratch.get(2 * n * heads)
	defer p.scratch.put(state)
	runMax, runSum := state[:n*heads], state[n*heads:]

	for b0 := 0; b0 < total; b0 += block {
		bn := min(block, total-b0)
		bp := (bn + nr - 1) / nr
		p.parallel(kvHeads*bp, 1, func(lo, hi int) {
			buf := make([]float32, hd)
			for job := lo; job < hi; job++ {
				g, pn := job/bp, job%bp
				dst := kp[(g*panels+pn)*hd*nr : (g*panels+pn+1)*hd*nr]
				jn := min(nr, bn-pn*nr)
				if jn < nr {
					clear(dst)
				}
				for j := 0; j < jn; j++ {
					k := kc.key(layer, b0+pn*nr+j, g, buf)
					for d, v := range k {
						dst[d*nr+j] = v
					}
				}
			}
		})
		var v []float32
		switch kc.dtype {
		case ml.F32:
			_, v = kc.span32(layer, b0, b0+bn)
		case ml.Q8_0:
			v = vw[:bn*row]
			_, v8 := kc.span8(layer, b0, b0+bn)
			rb := int(ml.Q8_0.RowBytes(row))
			p.parallel(bn, 64, func(lo, hi int) {
				dequantQ8(v[lo*row:hi*row], v8[lo*rb:hi*rb])
			})
		default:
			v = vw[:bn*row]
			_, v16 := kc.span16(layer, b0, b0+bn)
			p.parallel(bn, 64, func(lo, hi int) {
				quant.F16ToF32Slice(v[lo*row:hi*row], v16[lo*row:hi*row])
			})
		}

		// Tiles whose last token is before b0 see nothing of this block.
		first := 0
		if b0 > pos0 {
			first = (b0 - pos0) / mr
		}
		live := tiles - first
		p.parallel(live*heads, 1, func(lo, hi int) {
			s := p.scratch.get(mr * attnBlock)
			defer p.scratch.put(s)
			qt := make([]float32, mr*hd)
			ot := make([]float32, mr*nr)
			ob := make([]float32, mr*hd)
			bmax, bsum := make([]float64, mr), make([]float64, mr)
			for job := lo; job < hi; job++ {
				// Last tiles first: they see the most positions, and the cheap ones balance the end.
				tile, h := tiles-1-job/heads, job%heads
				g := h / group
				t0 := tile * mr
				mt := min(mr, n-t0)
				last := pos0 + t0 + mt // the tile sees positions [0, last)
				w := min(last, b0+bn) - b0
				for i := 0; i < mr; i++ {
					if i < mt {
						copy(qt[i*hd:(i+1)*hd], q[((t0+i)*heads+h)*hd:])
					} else {
						clear(qt[i*hd : (i+1)*hd])
					}
				}
				np := (w + nr - 1) / nr
				kg := kp[g*panels*hd*nr:]
				for pn := 0; pn < np; pn++ {
					kern.fn(hd, qt, hd, kg[pn*hd*nr:], nr, s[pn*nr:], attnBlock)
				}
				for i := 0; i < mr; i++ {
					r := s[i*attnBlock : i*attnBlock+w]
					see := pos0 + t0 + i + 1 - b0 // causal: positions 0 … pos0+t0+i
					if i >= mt || see <= 0 {
						clear(r)
						continue
					}
					see = min(see, w)
					if single {
						softmax32(r[:see], scale)
						clear(r[see:])
						continue
					}
					// The block's max and sum of exponentials: softmax32 leaves exp(0)·(1/sum)
					// at the max, so the sum is the reciprocal of what it left there.
					arg := argmaxScaled(r[:see], scale)
					bmax[i] = float64(r[arg] * scale)
					softmax32(r[:see], scale)
					bsum[i] = 1 / float64(r[arg])
					clear(r[see:])
				}
				if b0 == 0 {
					// Every row sees position 0: the first block's output is the output so far.
					for d0 := 0; d0 < hd; d0 += nr {
						dst := out[(t0*heads+h)*hd+d0:]
						if mt == mr {
							kern.fn(w, s, attnBlock, v[g*hd+d0:], row, dst, heads*hd)
							continue
						}
						kern.fn(w, s, attnBlock, v[g*hd+d0:], row, ot, nr)
						for i := 0; i < mt; i++ {
							copy(dst[i*heads*hd:i*heads*hd+nr], ot[i*nr:(i+1)*nr])
						}
					}
					if !single {
						for i := 0; i < mt; i++ {
							st := (t0+i)*heads + h
							runMax[st], runSum[st] = float32(bmax[i]), float32(bsum[i])
						}
					}
					continue
				}
				for d0 := 0; d0 < hd; d0 += nr {
					kern.fn(w, s, attnBlock, v[g*hd+d0:], row, ot, nr)
					for i := 0; i < mt; i++ {
						copy(ob[i*hd+d0:i*hd+d0+nr], ot[i*nr:(i+1)*nr])
					}
				}
				for i := 0; i < mt; i++ {
					if pos0+t0+i+1 <= b0 {
						continue
					}
					st := (t0+i)*heads + h
					dst := out[st*hd : (st+1)*hd]
					// out holds the normalized output of the blocks so far, runSum their
					// exponentials relative to runMax; weigh it and this block by their sums
					// relative to the new max.
					m := max(float64(runMax[st]), bmax[i])
					a := float64(runSum[st]) * math.Exp(float64(runMax[st])-m)
					b := bsum[i] * math.Exp(bmax[i]-m)
					l := a + b
					fa, fb := float32(a/l), float32(b/l)
					for d, x := range ob[i*hd : (i+1)*hd] {
						dst[d] = dst[d]*fa + x*fb
					}
					runMax[st], runSum[st] = float32(m), float32(l)
				}
			}
		})
	}
}

// argmaxScaled returns the index of the largest x·scale (the first of equals), the value
// softmax32 subtracts. The max goes by groups of 16 without a branch per element; only the
// group that raised it is searched again.
func argmaxScaled(x []float32, scale float32) int {
	if scale <= 0 {
		arg := 0
		for j, v := range x {
			if v*scale > x[arg]*scale {
				arg = j
			}
		}
		return arg
	}
	// With a positive scale, x·scale orders as x does (rounding is monotonic).
	m, g := x[0], 0
	j := 0
	for ; j+16 <= len(x); j += 16 {
		c := x[j : j+16 : j+16]
		a := max(max(max(c[0], c[1]), max(c[2], c[3])), max(max(c[4], c[5]), max(c[6], c[7])))
		b := max(max(max(c[8], c[9]), max(c[10], c[11])), max(max(c[12], c[13]), max(c[14], c[15])))
		if a = max(a, b); a > m {
			m, g = a, j
		}
	}
	arg := -1
	for k := j; k < len(x); k++ {
		if x[k] > m {
			m, arg = x[k], k
		}
	}
	if arg >= 0 {
		return arg
	}
	for k := g; k < len(x); k++ {
		if x[k] == m {
			return k
		}
	}
	return g // NaN
}
