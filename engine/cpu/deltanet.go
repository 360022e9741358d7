package cpu

import (
	"fmt"
	"math"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// deltaChunk is the number of tokens the chunked delta rule handles at once (llama.cpp's
// chunked graph uses 64 too). Within a chunk the work is small matrix products; the state
// is read and written once per chunk instead of once per token.
const deltaChunk = 64

func (c *context) Conv1DCausal(x ml.Tensor, w ml.Weight, state ml.Tensor) ml.Tensor {
	xt, st, wt := x.(*tensor), state.(*tensor), w.(*weight)
	n, ch := xt.rows2()
	kernel := wt.cols
	if len(wt.dims) != 2 || wt.rows != ch || len(st.shape) != 2 || st.shape[0] != kernel-1 || st.shape[1] != ch {
		panic(fmt.Sprintf("cpu: conv of %v with %s %v and state %v", xt.shape, wt.name, wt.dims, st.shape))
	}
	kw := wt.f32
	if kw == nil {
		kw = make([]float32, kernel*ch)
		if err := quant.Dequantize(wt.typ, wt.data, kw); err != nil {
			panic(err)
		}
	}
	out := c.out(xt.shape...)
	c.record("conv1d", false, func() {
		// The window: kernel−1 remembered rows, then the new inputs.
		win := c.b.pool.scratch.get((kernel - 1 + n) * ch)
		defer c.b.pool.scratch.put(win)
		copy(win, st.data)
		copy(win[(kernel-1)*ch:], xt.data)
		c.b.pool.parallel(ch, 64, func(lo, hi int) {
			for t := 0; t < n; t++ {
				y := out.data[t*ch : (t+1)*ch]
				for ci := lo; ci < hi; ci++ {
					wr := kw[ci*kernel : (ci+1)*kernel]
					// Summed oldest first in float32, as ggml's ssm_conv does.
					var sum float32
					for i, wv := range wr {
						sum += win[(t+i)*ch+ci] * wv
					}
					y[ci] = sum
				}
			}
		})
		copy(st.data, win[n*ch:])
	}, []*tensor{out}, xt, st)
	return out
}

// deltaShapes checks DeltaNet's operands and returns its dimensions.
type deltaShapes struct {
	n, kHeads, vHeads, dk, dv int
}

func checkDelta(q, k, v, g, beta, state *tensor) deltaShapes {
	var s deltaShapes
	bad := len(q.shape) != 3 || len(k.shape) != 3 || len(v.shape) != 3 || len(state.shape) != 3
	if !bad {
		s = deltaShapes{n: q.shape[0], kHeads: q.shape[1], dk: q.shape[2], vHeads: v.shape[1], dv: v.shape[2]}
		bad = !sameShape(q.shape, k.shape) || v.shape[0] != s.n || s.vHeads%s.kHeads != 0 ||
			g.n != s.n*s.vHeads || beta.n != s.n*s.vHeads ||
			state.shape[0] != s.vHeads || state.shape[1] != s.dv || state.shape[2] != s.dk
	}
	if bad {
		panic(fmt.Sprintf("cpu: delta rule with q %v, k %v, v %v, g %v, beta %v, state %v", q.shape, k.shape, v.shape, g.shape, beta.shape, state.shape))
	}
	return s
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (c *context) DeltaNet(q, k, v, g, beta, state ml.Tensor, scale float32) ml.Tensor {
	// Decode and two-token speculative verification steps use the recurrent form, so a
	// verified step computes exactly what two single-token steps would.
	chunk := deltaChunk
	if q.Shape()[0] <= 2 {
		chunk = 1
	}
	return c.deltaNet(q.(*tensor), k.(*tensor), v.(*tensor), g.(*tensor), beta.(*tensor), state.(*tensor), scale, chunk)
}

// deltaNet evaluates the rule in chunks of at most chunk tokens; chunk 1 is the recurrent
// (token-by-token) form. Heads are independent and run in parallel.
func (c *context) deltaNet(q, k, v, g, beta, state *tensor, scale float32, chunk int) ml.Tensor {
	s := checkDelta(q, k, v, g, beta, state)
	out := c.out(s.n, s.vHeads, s.dv)
	c.record("delta net", false, func() { c.deltaRun(s, q, k, v, g, beta, state, scale, chunk, out) }, []*tensor{out}, q, k, v, g, beta, state)
	return out
}

func (c *context) deltaRun(s deltaShapes, q, k, v, g, beta, state *tensor, scale float32, chunk int, out *tensor) {
	group := s.vHeads / s.kHeads
	c.b.pool.parallel(s.vHeads, 1, func(lo, hi int) {
		var w *chunkWork
		if chunk > 1 {
			w = newChunkWork(min(chunk, s.n), s.dk, s.dv)
		}
		for h := lo; h < hi; h++ {
			hd := headData{s: s, h: h, kh: h / group, q: q.data, k: k.data, v: v.data, g: g.data, beta: beta.data,
				m: state.data[h*s.dv*s.dk : (h+1)*s.dv*s.dk], out: out.data, scale: scale}
			for t0 := 0; t0 < s.n; t0 += chunk {
				if chunk == 1 {
					hd.recurrent(t0)
				} else {
					hd.chunked(t0, min(chunk, s.n-t0), w)
				}
			}
		}
	})
}

// headData addresses one value head's inputs, state and output.
type headData struct {
	s                deltaShapes
	h, kh            int // value head, its key head
	q, k, v, g, beta []float32
	m                []float32 // state, [dv][dk]: m[j·dk+i] = S[i][j]
	out              []float32
	scale            float32
}

func (d *headData) qv(t int) []float32 {
	o := (t*d.s.kHeads + d.kh) * d.s.dk
	return d.q[o : o+d.s.dk]
}

func (d *headData) kv(t int) []float32 {
	o := (t*d.s.kHeads + d.kh) * d.s.dk
	return d.k[o : o+d.s.dk]
}

func (d *headData) vv(t int) []float32 {
	o := (t*d.s.vHeads + d.h) * d.s.dv
	return d.v[o : o+d.s.dv]
}

func (d *headData) ov(t int) []float32 {
	o := (t*d.s.vHeads + d.h) * d.s.dv
	return d.out[o : o+d.s.dv]
}

func (d *headData) gb(t int) (float32, float32) {
	return d.g[t*d.s.vHeads+d.h], d.beta[t*d.s.vHeads+d.h]
}

// recurrent applies the rule to token t:
//
//	S ← e^g·S;  δ = β·(v − Sᵀk);  S ← S + k·δᵀ;  o = scale·Sᵀq
func (d *headData) recurrent(t int) {
	dk := d.s.dk
	q, k, v, o := d.qv(t), d.kv(t), d.vv(t), d.ov(t)
	g, b := d.gb(t)
	decay := float32(math.Exp(float64(g)))
	for j := range v {
		row := d.m[j*dk : (j+1)*dk]
		for i := range row {
			row[i] *= decay
		}
		delta := (v[j] - quant.Dot(row, k)) * b
		quant.Axpy(delta, k, row)
		o[j] = quant.Dot(row, q) * d.scale
	}
}

// chunkWork is one worker's scratch for a chunk of c tokens.
type chunkWork struct {
	gam   []float32 // cumulative log decay Γ_t within the chunk
	kk    []float32 // [c][c] k_s·k_r (lower triangle) then the system's coefficients
	qk    []float32 // [c][c] q_t·k_s weighted by e^(Γ_t−Γ_s) (s ≤ t)
	wv    []float32 // [c][dv]
	wk    []float32 // [c][dk]
	u     []float32 // [c][dv] the deltas δ_s
	decay []float32 // [c] e^(Γ_c − Γ_s)
	eg    []float32 // [c] e^(Γ_s)
}

func newChunkWork(c, dk, dv int) *chunkWork {
	return &chunkWork{
		gam: make([]float32, c), kk: make([]float32, c*c), qk: make([]float32, c*c),
		wv: make([]float32, c*dv), wk: make([]float32, c*dk), u: make([]float32, c*dv),
		decay: make([]float32, c), eg: make([]float32, c),
	}
}

// chunked applies the rule to tokens t0 … t0+c−1 at once. With Γ_t the cumulative log decay
// inside the chunk and S₀ the state before it, the deltas δ_s of the recurrent form solve
// the unit lower-triangular system
//
//	δ_s + Σ_{r<s} β_s e^(Γ_s−Γ_r) (k_s·k_r) δ_r = β_s v_s − β_s e^(Γ_s) S₀ᵀk_s
//
// so δ = W_v − S₀ᵀ-applied W_k, where W = (I+A)⁻¹·[βv | βe^Γ k] by forward substitution.
// Then o_t = scale·(e^(Γ_t) S₀ᵀq_t + Σ_{s≤t} e^(Γ_t−Γ_s)(q_t·k_s) δ_s) and
// S = e^(Γ_c) S₀ + Σ_s e^(Γ_c−Γ_s) k_s δ_sᵀ. Every exponent is ≤ 0, so nothing overflows.
func (d *headData) chunked(t0, c int, w *chunkWork) {
	dk, dv := d.s.dk, d.s.dv
	var acc float32
	for t := 0; t < c; t++ {
		g, _ := d.gb(t0 + t)
		acc += g
		w.gam[t] = acc
	}
	// The system's coefficients A[s][r] and the masked, decayed q·k products.
	for s := 0; s < c; s++ {
		ks, qs := d.kv(t0+s), d.qv(t0+s)
		_, bs := d.gb(t0 + s)
		for r := 0; r < s; r++ {
			kr := d.kv(t0 + r)
			e := float32(math.Exp(float64(w.gam[s] - w.gam[r])))
			w.kk[s*c+r] = bs * e * quant.Dot(ks, kr)
			w.qk[s*c+r] = e * quant.Dot(qs, kr)
		}
		w.qk[s*c+s] = quant.Dot(qs, ks)
	}
	// Forward substitution for W_v and W_k together.
	for s := 0; s < c; s++ {
		_, bs := d.gb(t0 + s)
		eg := float32(math.Exp(float64(w.gam[s])))
		wvs, wks := w.wv[s*dv:(s+1)*dv], w.wk[s*dk:(s+1)*dk]
		for j, x := range d.vv(t0 + s) {
			wvs[j] = bs * x
		}
		for i, x := range d.kv(t0 + s) {
			wks[i] = bs * eg * x
		}
		for r := 0; r < s; r++ {
			a := -w.kk[s*c+r]
			quant.Axpy(a, w.wv[r*dv:(r+1)*dv], wvs)
			quant.Axpy(a, w.wk[r*dk:(r+1)*dk], wks)
		}
	}
	// One pass over the state rows (row j is S₀[:, j]): the deltas δ_s[j] = W_v[s][j] −
	// S₀[:, j]·W_k[s], the state's part of each output, and the row's update, so each row
	// is read and written once per chunk while it sits in L1.
	last := w.gam[c-1]
	for s := 0; s < c; s++ {
		w.decay[s] = float32(math.Exp(float64(last - w.gam[s])))
		w.eg[s] = float32(math.Exp(float64(w.gam[s])))
	}
	egLast := float32(math.Exp(float64(last)))
	for j := 0; j < dv; j++ {
		row := d.m[j*dk : (j+1)*dk]
		for s := 0; s < c; s++ {
			w.u[s*dv+j] = w.wv[s*dv+j] - quant.Dot(row, w.wk[s*dk:(s+1)*dk])
			d.ov(t0 + s)[j] = w.eg[s] * quant.Dot(row, d.qv(t0+s))
		}
		for i := range row {
			row[i] *= egLast
		}
		for s := 0; s < c; s++ {
			quant.Axpy(w.decay[s]*w.u[s*dv+j], d.kv(t0+s), row)
		}
	}
	// Intra-chunk outputs.
	for t := 0; t < c; t++ {
		o := d.ov(t0 + t)
		for s := 0; s <= t; s++ {
			quant.Axpy(w.qk[t*c+s], w.u[s*dv:(s+1)*dv], o)
		}
		for j := range o {
			o[j] *= d.scale
		}
	}
}
