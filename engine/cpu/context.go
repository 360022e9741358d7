package cpu

import (
	"fmt"
	"math"
	"strconv"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// context records the operations of one pass and runs them at Compute (pass.go).
type context struct {
	b *Backend
	// rope caches the rotation tables of the positions of this pass: every layer rotates
	// its queries and keys by the same angles.
	rope map[ml.RoPETableKey]*ropeTable

	ops  []op
	made []*tensor // pass tensors (outputs and views), in order
	next int       // first operation not run yet
	seen int       // tensors of made already looked at by Compute
	err  error     // the first failure; the pass is over
}

func (c *context) Name(t ml.Tensor, name string, layer int) ml.Tensor {
	if hook := c.b.Hook; hook != nil {
		x := t.(*tensor)
		c.record("name "+name, false, func() { hook(name, layer, x.shape, x.data) }, nil, x)
		c.ops[len(c.ops)-1].observe = true
	}
	return t
}

func (c *context) Input(data []float32, shape ...int) ml.Tensor {
	if ml.Numel(shape) != len(data) {
		panic(fmt.Sprintf("cpu: input of %d values for shape %v", len(data), shape))
	}
	out := c.out(shape...)
	out.data = append([]float32(nil), data...)
	c.record("input", false, func() {}, []*tensor{out})
	return out
}

func (c *context) InputIDs(ids []int32) ml.Tensor {
	v := make([]float32, len(ids))
	for i, id := range ids {
		v[i] = float32(id)
	}
	out := c.out(len(ids))
	out.data = v
	c.record("input ids", false, func() {}, []*tensor{out})
	return out
}

func (c *context) Embed(table ml.Weight, ids ml.Tensor) ml.Tensor {
	w := table.(*weight)
	it := ids.(*tensor)
	if len(it.shape) != 1 {
		panic(fmt.Sprintf("cpu: embed of ids %v (want [n])", it.shape))
	}
	out := c.out(it.shape[0], w.cols)
	c.record("embed", false, func() {
		c.b.pool.parallel(it.n, 4, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				v := it.data[i]
				id := int(v)
				if id < 0 || id >= w.rows || float32(id) != v {
					panic(fmt.Sprintf("cpu: token id %s outside %s's %d rows", strconv.FormatFloat(float64(v), 'f', -1, 32), w.name, w.rows))
				}
				dst := out.data[i*w.cols : (i+1)*w.cols]
				if w.f32 != nil {
					copy(dst, w.f32[id*w.cols:])
					continue
				}
				if err := quant.Dequantize(w.typ, w.row(id), dst); err != nil {
					panic(err)
				}
			}
		})
	}, []*tensor{out}, it)
	return out
}

func (c *context) Argmax(x ml.Tensor) ml.Tensor {
	t := x.(*tensor)
	rows, _ := t.rows2()
	out := c.out(rows)
	c.record("argmax", false, func() {
		_, d := t.rows2()
		for r := 0; r < rows; r++ {
			row := t.data[r*d : (r+1)*d]
			best := 0
			for i, v := range row {
				if v > row[best] {
					best = i
				}
			}
			out.data[r] = float32(best)
		}
	}, []*tensor{out}, t)
	return out
}

func (c *context) Reshape(x ml.Tensor, shape ...int) ml.Tensor {
	t := x.(*tensor)
	if ml.Numel(shape) != t.n {
		panic(fmt.Sprintf("cpu: reshape %v to %v", t.shape, shape))
	}
	return c.view(t, 0, shape...)
}

func (c *context) Rows(x ml.Tensor, start, n int) ml.Tensor {
	t := x.(*tensor)
	row := t.n / t.shape[0]
	if start < 0 || n < 0 || start+n > t.shape[0] {
		panic(fmt.Sprintf("cpu: rows [%d, %d) of %v", start, start+n, t.shape))
	}
	shape := append([]int{n}, t.shape[1:]...)
	return c.view(t, start*row, shape...)
}

func (c *context) elementwise(name string, a, b ml.Tensor, f func(x, y float32) float32) ml.Tensor {
	x, y := a.(*tensor), b.(*tensor)
	if x.n != y.n {
		panic(fmt.Sprintf("cpu: element-wise op on shapes %v and %v", x.shape, y.shape))
	}
	out := c.out(x.shape...)
	c.record(name, true, func() {
		c.b.pool.parallel(len(out.data), 1<<14, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				out.data[i] = f(x.data[i], y.data[i])
			}
		})
	}, []*tensor{out}, x, y)
	return out
}

func (c *context) Add(a, b ml.Tensor) ml.Tensor {
	return c.elementwise("add", a, b, func(x, y float32) float32 { return x + y })
}

func (c *context) Mul(a, b ml.Tensor) ml.Tensor {
	return c.elementwise("mul", a, b, func(x, y float32) float32 { return x * y })
}

func (c *context) GeGLU(gate, up ml.Tensor) ml.Tensor {
	return c.glu("geglu", gate, up, func(out, g, u []float32) {
		for i := range out {
			out[i] = ml.GELU(g[i]) * u[i]
		}
	})
}

func (c *context) SwiGLU(gate, up ml.Tensor) ml.Tensor { return c.glu("swiglu", gate, up, swiglu) }

func (c *context) ClampedSwiGLU(gate, up ml.Tensor, alpha, limit float32) ml.Tensor {
	return c.glu("clamped swiglu", gate, up, func(out, g, u []float32) {
		for i := range out {
			out[i] = ml.ClampedSwiGLU(g[i], u[i], alpha, limit)
		}
	})
}

// glu records f(out, gate, up) over parts of the tensors in parallel: a gated activation.
func (c *context) glu(name string, gate, up ml.Tensor, f func(out, g, u []float32)) ml.Tensor {
	g, u := gate.(*tensor), up.(*tensor)
	if g.n != u.n {
		panic(fmt.Sprintf("cpu: %s of shapes %v and %v", name, g.shape, u.shape))
	}
	out := c.out(g.shape...)
	c.record(name, true, func() {
		c.b.pool.parallel(len(out.data), 1<<14, func(lo, hi int) {
			f(out.data[lo:hi], g.data[lo:hi], u.data[lo:hi])
		})
	}, []*tensor{out}, g, u)
	return out
}

func silu(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }

func (c *context) RMSNorm(x ml.Tensor, w ml.Weight, eps float32) ml.Tensor {
	t := x.(*tensor)
	rows, d := t.rows2()
	var scale []float32
	if w != nil {
		scale = w.(*weight).f32
		if len(scale) != d {
			panic(fmt.Sprintf("cpu: rms norm of rows of %d with weight %s of %d", d, w.Name(), len(scale)))
		}
	}
	out := c.out(t.shape...)
	c.record("rms norm", true, func() {
		c.b.pool.parallel(rows, 64, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				src, dst := t.data[r*d:(r+1)*d], out.data[r*d:(r+1)*d]
				// The sum of squares in float64, as ggml does, so long rows lose nothing.
				sum := sumSquares(src)
				s := float32(1 / math.Sqrt(float64(float32(sum/float64(d))+eps)))
				scaleRow(dst, src, s, scale)
			}
		})
	}, []*tensor{out}, t)
	return out
}

// ropeTable holds cos and sin of n positions' dims/2 angles, position-major.
type ropeTable struct{ cos, sin []float32 }

// ropeTable returns the rotation table of positions pos0 … pos0+n−1.
func (c *context) ropeTable(pos0, n int, r ml.RoPE) *ropeTable {
	key := r.TableKey(pos0, n)
	if t, ok := c.rope[key]; ok {
		return t
	}
	half := r.Dims / 2
	t := &ropeTable{cos: make([]float32, n*half), sin: make([]float32, n*half)}
	c.b.pool.parallel(n, 16, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			ml.RoPEAngles(t.cos[i*half:(i+1)*half], t.sin[i*half:(i+1)*half], pos0+i, r)
		}
	})
	if c.rope == nil {
		c.rope = map[ml.RoPETableKey]*ropeTable{}
	}
	c.rope[key] = t
	return t
}

func (c *context) RoPE(x ml.Tensor, pos0 int, r ml.RoPE) ml.Tensor {
	t := x.(*tensor)
	if len(t.shape) != 3 {
		panic(fmt.Sprintf("cpu: rope wants [n, heads, headDim], got %v", t.shape))
	}
	n, heads, hd := t.shape[0], t.shape[1], t.shape[2]
	if r.Dims > hd || r.Dims%2 != 0 {
		panic(fmt.Sprintf("cpu: rope over %d of %d features", r.Dims, hd))
	}
	out := c.out(t.shape...)
	// Each head's pair (a, b) is read before either is written, so the output may share
	// the input's buffer.
	c.record("rope", true, func() {
		tab := c.ropeTable(pos0, n, r)
		half := r.Dims / 2
		c.b.pool.parallel(n, 4, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				cos, sin := tab.cos[i*half:(i+1)*half], tab.sin[i*half:(i+1)*half]
				for h := 0; h < heads; h++ {
					src := t.data[(i*heads+h)*hd : (i*heads+h+1)*hd]
					v := out.data[(i*heads+h)*hd : (i*heads+h+1)*hd]
					copy(v[r.Dims:], src[r.Dims:])
					for k := 0; k < half; k++ {
						a, b := 2*k, 2*k+1
						if r.NeoX {
							a, b = k, k+half
						}
						x0, x1 := src[a], src[b]
						v[a] = x0*cos[k] - x1*sin[k]
						v[b] = x0*sin[k] + x1*cos[k]
					}
				}
			}
		})
	}, []*tensor{out}, t)
	return out
}

func (c *context) StoreKV(cc ml.Cache, layer, pos0 int, k, v ml.Tensor) {
	kc := cc.(*cache)
	kt, vt := k.(*tensor), v.(*tensor)
	if kt.n != vt.n || kt.n%(kc.kvHeads*kc.headDim) != 0 {
		panic(fmt.Sprintf("cpu: store k %v, v %v in a cache of %d×%d", kt.shape, vt.shape, kc.kvHeads, kc.headDim))
	}
	kc.check("store in")
	c.record("store kv", false, func() {
		if kc.rotK == 0 {
			kc.store(layer, pos0, kt.data, vt.data)
			return
		}
		// A rotated cache rotates a copy first: decode should not allocate.
		buf := c.b.pool.scratch.get(len(kt.data))
		defer c.b.pool.scratch.put(buf)
		kc.storeWith(layer, pos0, kt.data, vt.data, buf)
	}, nil, kt, vt)
}

func (c *context) Attention(q ml.Tensor, cc ml.Cache, layer, pos0 int, scale float32) ml.Tensor {
	kc := cc.(*cache)
	qt := q.(*tensor)
	n, heads, hd := qt.shape[0], qt.shape[1], qt.shape[2]
	if hd != kc.headDim || heads%kc.kvHeads != 0 {
		panic(fmt.Sprintf("cpu: attention of q %v over a cache of %d×%d", qt.shape, kc.kvHeads, kc.headDim))
	}
	kc.check("attend over")
	out := c.out(n, heads*hd)
	c.record("attention", false, func() { c.attention(qt, kc, layer, pos0, scale, 0, nil, out) }, []*tensor{out}, qt)
	return out
}

func (c *context) SlidingAttention(q ml.Tensor, cc ml.Cache, layer, pos0 int, scale float32, window int) ml.Tensor {
	kc := cc.(*cache)
	qt := q.(*tensor)
	n, heads, hd := qt.shape[0], qt.shape[1], qt.shape[2]
	if hd != kc.headDim || heads%kc.kvHeads != 0 || window < 1 {
		panic(fmt.Sprintf("cpu: sliding attention of q %v over a cache of %d×%d, window %d", qt.shape, kc.kvHeads, kc.headDim, window))
	}
	kc.check("attend over")
	if window >= pos0+n {
		window = 0 // every position is in every window
	}
	out := c.out(n, heads*hd)
	c.record("sliding attention", false, func() { c.attention(qt, kc, layer, pos0, scale, window, nil, out) }, []*tensor{out}, qt)
	return out
}

func (c *context) SinkAttention(q ml.Tensor, cc ml.Cache, layer, pos0 int, scale float32, window int, sinks ml.Weight) ml.Tensor {
	kc := cc.(*cache)
	qt := q.(*tensor)
	n, heads, hd := qt.shape[0], qt.shape[1], qt.shape[2]
	sk := sinks.(*weight).f32
	if hd != kc.headDim || heads%kc.kvHeads != 0 || window < 0 || len(sk) != heads {
		panic(fmt.Sprintf("cpu: sink attention of q %v over a cache of %d×%d, window %d, %d sinks", qt.shape, kc.kvHeads, kc.headDim, window, len(sk)))
	}
	kc.check("attend over")
	if window >= pos0+n {
		window = 0
	}
	out := c.out(n, heads*hd)
	c.record("sink attention", false, func() { c.attention(qt, kc, layer, pos0, scale, window, sk, out) }, []*tensor{out}, qt)
	return out
}

// attention attends each token at position p to positions max(0, p−window+1) … p, or to
// all of 0 … p when window is 0; sinks, when not nil, holds each query head's sink logit.
func (c *context) attention(qt *tensor, kc *cache, layer, pos0 int, scale float32, window int, sinks []float32, out *tensor) {
	n, heads, hd := qt.shape[0], qt.shape[1], qt.shape[2]
	q := qt.data
	if kc.dtype == ml.Q8_0 {
		// As llama.cpp does: the queries are rotated as the keys were (rotK), and meet
		// q8_0 keys as q8_0 blocks themselves (the key type's vec_dot_type), so the
		// products are those of the two rounded rows. The output comes back from the
		// values' rotation.
		q = c.b.pool.scratch.get(len(qt.data))
		defer c.b.pool.scratch.put(q)
		c.b.pool.parallel(n*heads, 16, func(lo, hi int) {
			r := q[lo*hd : hi*hd]
			copy(r, qt.data[lo*hd:hi*hd])
			hadamardRows(r, kc.rotK)
			roundQ8_0(r, r)
		})
		defer c.b.pool.parallel(n*heads, 16, func(lo, hi int) {
			hadamardRows(out.data[lo*hd:hi*hd], kc.rotV)
		})
	}
	if window == 0 && sinks == nil && useAttentionGemm(defaultKernel, n, hd) {
		attentionGemm(c.b.pool, defaultKernel, q, n, heads, hd, kc, layer, pos0, scale, out.data)
		return
	}
	// A job is one token and a share of the query heads of one kv head: the positions go by
	// in tiles whose keys (then values) stay in L1 while the share's heads read them, so a
	// group of heads reads the cache once. A kv head's heads are split only as far as the
	// threads need jobs.
	group := heads / kc.kvHeads
	split := min(group, max(1, (c.b.pool.threads+n*kc.kvHeads-1)/(n*kc.kvHeads)))
	share := (group + split - 1) / split
	split = (group + share - 1) / share
	c.b.pool.parallel(n*kc.kvHeads*split, 1, func(lo, hi int) {
		// One scratch buffer for the scores and a row: this runs once per layer and
		// token, and decode should not allocate.
		buf := c.b.pool.scratch.get(share*(pos0+n) + hd)
		defer c.b.pool.scratch.put(buf)
		for job := lo; job < hi; job++ {
			i, g, part := job/(kc.kvHeads*split), job/split%kc.kvHeads, job%split
			h0 := g*group + part*share
			nh := min(share, (g+1)*group-h0)
			m := pos0 + i + 1 // causal: attend to positions 0 … pos0+i
			s0 := 0           // … from the window's first
			if window > 0 {
				s0 = max(0, m-window)
			}
			scores, acc := buf[:nh*m], buf[share*(pos0+n):]
			head := func(j int) []float32 { return q[(i*heads+h0+j)*hd : (i*heads+h0+j+1)*hd] }
			// By tiles within one block of the cache; a lone sequence's cache is one block.
			for p := s0; p < m; {
				e := min(kc.run(p, m), p+decodeTile)
				for j := range nh {
					kc.scores(layer, g, p, head(j), scores[j*m+p:j*m+e])
				}
				p = e
			}
			for j := range nh {
				if sinks != nil {
					softmaxSink(scores[j*m+s0:(j+1)*m], scale, sinks[h0+j])
					continue
				}
				softmax32(scores[j*m+s0:(j+1)*m], scale)
			}
			for p := s0; p < m; {
				e := min(kc.run(p, m), p+decodeTile)
				for j := range nh {
					dst := out.data[(i*heads+h0+j)*hd : (i*heads+h0+j+1)*hd]
					if p == s0 {
						kc.weighted(layer, g, p, scores[j*m+p:j*m+e], dst)
						continue
					}
					kc.weighted(layer, g, p, scores[j*m+p:j*m+e], acc)
					for d, x := range acc {
						dst[d] += x
					}
				}
				p = e
			}
		}
	})
}

// decodeTile is the positions decode attention takes at a time: 64 keys of a kv head, up
// to 32 KiB, stay in L1 while the heads that share them go by.
const decodeTile = 64
