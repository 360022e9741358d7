package metalkit

import (
	"fmt"
	"slices"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/kernels"
)

// The operations of ml.Context: each checks its shapes when issued, records its outputs and
// inputs (for the memory plan) and how to encode it. Encoding methods of the kernels of
// ops.metal are at the end; the matrix, attention and state kernels' are in their own files.

// Name hands t to the backend's Hook, when one is set, after the Compute that makes it: the
// tensor then keeps its bytes to the end of the pass, as an output does.
func (c *context) Name(t ml.Tensor, name string, layer int) ml.Tensor {
	if c.b.Hook == nil {
		return t
	}
	x := t.(*tensor)
	if r := x.root; r.ctx == c && !r.planned {
		r.keep = true
		c.named = append(c.named, named{x, name, layer})
	}
	return t
}

// named is a tensor given to Name, for the hook.
type named struct {
	t     *tensor
	name  string
	layer int
}

func (c *context) Input(data []float32, shape ...int) ml.Tensor {
	if ml.Numel(shape) != len(data) {
		panic(fmt.Sprintf("metalkit: input of %d values for shape %v", len(data), shape))
	}
	out := c.out(shape...)
	out.host = slices.Clone(data)
	c.record("input", false, nil, []*tensor{out})
	return out
}

func (c *context) InputIDs(ids []int32) ml.Tensor {
	v := make([]float32, len(ids))
	for i, id := range ids {
		v[i] = float32(id)
	}
	out := c.out(len(ids))
	out.host = v
	c.record("input ids", false, nil, []*tensor{out})
	return out
}

// rows2 views a tensor as [rows, last dimension].
func (t *tensor) rows2() (int, int) {
	last := t.shape[len(t.shape)-1]
	if last == 0 {
		return 0, 0
	}
	return t.n / last, last
}

func (c *context) Embed(table ml.Weight, ids ml.Tensor) ml.Tensor {
	w, it := table.(*weight), ids.(*tensor)
	if len(it.shape) != 1 {
		panic(fmt.Sprintf("metalkit: embed of ids %v (want [n])", it.shape))
	}
	n := it.shape[0]
	out := c.out(n, w.cols)
	c.record("embed", false, func(e *encoder) {
		e.getRows(w.typ, w.raw, w.cols, c.region(it), c.region(out), n)
	}, []*tensor{out}, it)
	return out
}

func (c *context) Argmax(x ml.Tensor) ml.Tensor {
	t := x.(*tensor)
	rows, d := t.rows2()
	out := c.out(rows)
	c.record("argmax", false, func(e *encoder) { e.argmax(c.region(t), c.region(out), rows, d) }, []*tensor{out}, t)
	return out
}

func (c *context) MatMul(wt ml.Weight, x ml.Tensor) ml.Tensor {
	w, t := wt.(*weight), x.(*tensor)
	n, d := t.rows2()
	if d != w.cols {
		panic(fmt.Sprintf("metalkit: matmul of %v by %s %v", t.shape, w.name, w.dims))
	}
	out := c.out(n, w.rows)
	if r := routeMPS(c.b.dev, c.b.MPS, w.typ, w.rows, w.cols, n); r.chunk > 0 {
		if !r.decode {
			c.record("matmul", false, func(e *encoder) {
				e.matMulMPS(r, w.typ, w.raw, w.rows, w.cols, c.region(t), c.region(out), n, Region{}, Region{})
			}, []*tensor{out}, t)
			return out
		}
		ids := c.iota(r.chunk)
		deq := &tensor{shape: []int{r.chunk, w.cols}, n: r.chunk * w.cols, ctx: c}
		deq.root = deq
		c.record("matmul", false, func(e *encoder) {
			e.matMulMPS(r, w.typ, w.raw, w.rows, w.cols, c.region(t), c.region(out), n, c.region(ids), c.region(deq))
		}, []*tensor{out}, t, ids)
		c.ops[len(c.ops)-1].temp = deq
		return out
	}
	c.record("matmul", false, func(e *encoder) {
		e.matMul(w.typ, w.raw, w.rows, w.cols, c.region(t), c.region(out), n)
	}, []*tensor{out}, t)
	return out
}

// iota returns an input of the float32 values 0..n-1, once per Compute and length: the
// row ids with which the get_rows kernel decodes a weight's first n rows (matMulMPS).
func (c *context) iota(n int) *tensor {
	if t, ok := c.iotas[n]; ok {
		return t
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i)
	}
	t := c.out(n)
	t.host = v
	c.record("row ids", false, nil, []*tensor{t})
	if c.iotas == nil {
		c.iotas = map[int]*tensor{}
	}
	c.iotas[n] = t
	return t
}

// vector returns w's float32 values, checking that it has one per element of the last
// dimension d.
func vector(w *weight, d int, op string) Region {
	if w.rows*w.cols != d {
		panic(fmt.Sprintf("metalkit: %s of rows of %d with %s %v", op, d, w.name, w.dims))
	}
	if w.vec.Len == 0 {
		panic(fmt.Sprintf("metalkit: %s with %s %v, larger than the vectors held as float32 (%d values)", op, w.name, w.dims, smallVector))
	}
	return w.vec
}

func (c *context) RMSNorm(x ml.Tensor, w ml.Weight, eps float32) ml.Tensor {
	t := x.(*tensor)
	rows, d := t.rows2()
	var wv Region
	if w != nil {
		wv = vector(w.(*weight), d, "rms norm")
	}
	out := c.out(t.shape...)
	c.record("rms norm", true, func(e *encoder) {
		xr := c.region(t)
		if w == nil {
			e.rmsNorm(xr, xr, false, c.region(out), rows, d, eps)
		} else {
			e.rmsNorm(xr, wv, true, c.region(out), rows, d, eps)
		}
	}, []*tensor{out}, t)
	return out
}

func (c *context) binary(name string, op int32, a, b ml.Tensor) ml.Tensor {
	x, y := a.(*tensor), b.(*tensor)
	if x.n != y.n {
		panic(fmt.Sprintf("metalkit: %s of shapes %v and %v", name, x.shape, y.shape))
	}
	out := c.out(x.shape...)
	args := kernels.BinaryF32Args{N: int32(x.n), Op: op}
	c.record(name, true, func(e *encoder) { e.binary(args, c.region(x), c.region(y), c.region(out)) }, []*tensor{out}, x, y)
	return out
}

func (c *context) Add(a, b ml.Tensor) ml.Tensor { return c.binary("add", kernels.BinaryAdd, a, b) }
func (c *context) Mul(a, b ml.Tensor) ml.Tensor { return c.binary("mul", kernels.BinaryMul, a, b) }
func (c *context) SwiGLU(gate, up ml.Tensor) ml.Tensor {
	return c.binary("swiglu", kernels.BinarySwiGLU, gate, up)
}

func (c *context) GeGLU(gate, up ml.Tensor) ml.Tensor {
	return c.binary("geglu", kernels.BinaryGeGLU, gate, up)
}

func (c *context) ClampedSwiGLU(gate, up ml.Tensor, alpha, limit float32) ml.Tensor {
	x, y := gate.(*tensor), up.(*tensor)
	if x.n != y.n {
		panic(fmt.Sprintf("metalkit: clamped swiglu of shapes %v and %v", x.shape, y.shape))
	}
	out := c.out(x.shape...)
	args := kernels.BinaryF32Args{N: int32(x.n), Op: kernels.BinaryClampedSwiGLU, Alpha: alpha, Limit: limit}
	c.record("clamped swiglu", true, func(e *encoder) { e.binary(args, c.region(x), c.region(y), c.region(out)) }, []*tensor{out}, x, y)
	return out
}

// SinkAttention runs attn_sinks: one SIMD group per token and head, the window and the sinks
// in the kernel.
func (c *context) SinkAttention(q ml.Tensor, cc ml.Cache, layer, pos0 int, scale float32, window int, sinks ml.Weight) ml.Tensor {
	return c.windowAttention(q, cc, layer, pos0, scale, window, vector(sinks.(*weight), q.Shape()[1], "sink attention"))
}

// windowAttention runs attn_sinks over the last window positions (0: all), with the sinks
// of sinks or none (the zero Region).
func (c *context) windowAttention(q ml.Tensor, cc ml.Cache, layer, pos0 int, scale float32, window int, sinks Region) ml.Tensor {
	kc := cc.(*cache)
	qt := q.(*tensor)
	if len(qt.shape) != 3 || qt.shape[2] != kc.pool.headDim || qt.shape[1]%kc.pool.kvHeads != 0 || layer < 0 || layer >= kc.pool.layers ||
		pos0 < 0 || pos0+qt.shape[0] > kc.capacity || window < 0 {
		panic(fmt.Sprintf("metalkit: window attention of q %v at %d of layer %d, window %d, over a cache of %d layers × %d × %d×%d",
			qt.shape, pos0, layer, window, kc.pool.layers, kc.capacity, kc.pool.kvHeads, kc.pool.headDim))
	}
	n, heads, hd := qt.shape[0], qt.shape[1], qt.shape[2]
	qt = c.kvQuery(qt, kc)
	out := c.out(n, heads*hd)
	c.record("window attention", false, func(e *encoder) {
		e.attentionSinks(c.region(qt), n, heads, kc, layer, pos0, scale, window, sinks, c.region(out))
	}, []*tensor{out}, qt)
	return c.kvOutput(out, kc.pool.dtype, hd)
}

// SlidingAttention runs as Attention while the window holds every position the batch
// sees, and past it through attn_sinks without sinks.
func (c *context) SlidingAttention(q ml.Tensor, cc ml.Cache, layer, pos0 int, scale float32, window int) ml.Tensor {
	if window < 1 {
		panic(fmt.Sprintf("metalkit: sliding attention with window %d", window))
	}
	if window >= pos0+q.Shape()[0] {
		return c.Attention(q, cc, layer, pos0, scale)
	}
	return c.windowAttention(q, cc, layer, pos0, scale, window, Region{})
}

func (c *context) Reshape(x ml.Tensor, shape ...int) ml.Tensor {
	t := x.(*tensor)
	if ml.Numel(shape) != t.n {
		panic(fmt.Sprintf("metalkit: reshape %v to %v", t.shape, shape))
	}
	return c.view(t, 0, slices.Clone(shape)...)
}

func (c *context) Rows(x ml.Tensor, start, n int) ml.Tensor {
	t := x.(*tensor)
	if len(t.shape) == 0 || start < 0 || n < 0 || start+n > t.shape[0] {
		panic(fmt.Sprintf("metalkit: rows [%d, %d) of %v", start, start+n, t.shape))
	}
	row := t.n / max(t.shape[0], 1)
	shape := append([]int{n}, t.shape[1:]...)
	return c.view(t, 4*int64(start*row), shape...)
}

// ropeTable returns a tensor of the cos and sin of positions pos0 … pos0+n−1's dims/2
// angles ([n, dims/2] of cos, then as many sin), made on the host once per Compute and
// shared by every layer. The angles are the CPU backend's (ml.RoPEAngles): computed on the
// device, a position of tens of thousands would lose the parity to float32 argument
// reduction, and the table is small (a decode step's is dims floats).
func (c *context) ropeTable(pos0, n int, r ml.RoPE) *tensor {
	key := r.TableKey(pos0, n)
	if t, ok := c.rope[key]; ok {
		return t
	}
	half := r.Dims / 2
	v := make([]float32, 2*n*half)
	cos, sin := v[:n*half], v[n*half:]
	for i := 0; i < n; i++ {
		ml.RoPEAngles(cos[i*half:(i+1)*half], sin[i*half:(i+1)*half], pos0+i, r)
	}
	t := c.out(2, n, half)
	t.host = v
	c.record("rope table", false, nil, []*tensor{t})
	if c.rope == nil {
		c.rope = map[ml.RoPETableKey]*tensor{}
	}
	c.rope[key] = t
	return t
}

func (c *context) RoPE(x ml.Tensor, pos0 int, r ml.RoPE) ml.Tensor {
	t := x.(*tensor)
	if len(t.shape) != 3 {
		panic(fmt.Sprintf("metalkit: rope wants [n, heads, headDim], got %v", t.shape))
	}
	n, heads, hd := t.shape[0], t.shape[1], t.shape[2]
	if r.Dims > hd || r.Dims%2 != 0 || r.Dims <= 0 {
		panic(fmt.Sprintf("metalkit: rope over %d of %d features", r.Dims, hd))
	}
	tab := c.ropeTable(pos0, n, r)
	out := c.out(t.shape...)
	c.record("rope", true, func(e *encoder) {
		e.rope(c.region(t), c.region(tab), c.region(out), n, heads, hd, r.Dims, r.NeoX)
	}, []*tensor{out}, t, tab)
	return out
}

func (c *context) StoreKV(cc ml.Cache, layer, pos0 int, k, v ml.Tensor) {
	kc := cc.(*cache)
	kt, vt := k.(*tensor), v.(*tensor)
	row := kc.pool.kvHeads * kc.pool.headDim
	if kt.n != vt.n || kt.n%row != 0 || layer < 0 || layer >= kc.pool.layers || pos0 < 0 || pos0+kt.n/row > kc.capacity {
		panic(fmt.Sprintf("metalkit: store k %v, v %v at %d of layer %d in a cache of %d layers × %d × %d×%d",
			kt.shape, vt.shape, pos0, layer, kc.pool.layers, kc.capacity, kc.pool.kvHeads, kc.pool.headDim))
	}
	n := kt.n / row
	c.record("store kv", false, func(e *encoder) { e.storeKV(kc, layer, pos0, n, c.region(kt), c.region(vt)) }, nil, kt, vt)
}

func (c *context) Attention(q ml.Tensor, cc ml.Cache, layer, pos0 int, scale float32) ml.Tensor {
	kc := cc.(*cache)
	qt := q.(*tensor)
	checkAttention(qt, kc, layer, pos0)
	n, heads, hd := qt.shape[0], qt.shape[1], qt.shape[2]
	qt = c.kvQuery(qt, kc)
	out := c.out(n, heads*hd)
	c.record("attention", false, func(e *encoder) {
		e.attention(c.region(qt), n, heads, kc, layer, pos0, scale, c.region(out))
	}, []*tensor{out}, qt)
	return c.kvOutput(out, kc.pool.dtype, hd)
}

func (c *context) LoadKV(cc ml.Cache, layer, pos0, n int) (ml.Tensor, ml.Tensor) {
	kc := cc.(*cache)
	if layer < 0 || layer >= kc.pool.layers || pos0 < 0 || n < 0 || pos0+n > kc.capacity {
		panic(fmt.Sprintf("metalkit: load of positions [%d, %d) of layer %d from a cache of %d layers × %d", pos0, pos0+n, layer, kc.pool.layers, kc.capacity))
	}
	k, v := c.out(n, kc.pool.kvHeads, kc.pool.headDim), c.out(n, kc.pool.kvHeads, kc.pool.headDim)
	c.record("load kv", false, func(e *encoder) { e.loadKV(kc, layer, pos0, n, c.region(k), c.region(v)) }, []*tensor{k, v})
	return k, v
}

func (c *context) unary(name string, op int32, s float32, x ml.Tensor) ml.Tensor {
	t := x.(*tensor)
	out := c.out(t.shape...)
	c.record(name, true, func(e *encoder) { e.unary(op, s, c.region(t), c.region(out), t.n) }, []*tensor{out}, t)
	return out
}

func (c *context) Sigmoid(x ml.Tensor) ml.Tensor {
	return c.unary("sigmoid", kernels.UnarySigmoid, 0, x)
}
func (c *context) SiLU(x ml.Tensor) ml.Tensor { return c.unary("silu", kernels.UnarySiLU, 0, x) }
func (c *context) Softplus(x ml.Tensor) ml.Tensor {
	return c.unary("softplus", kernels.UnarySoftplus, 0, x)
}
func (c *context) Scale(x ml.Tensor, s float32) ml.Tensor {
	return c.unary("scale", kernels.UnaryScale, s, x)
}

func (c *context) bcast(name string, op int32, x ml.Tensor, w ml.Weight) ml.Tensor {
	t := x.(*tensor)
	_, d := t.rows2()
	vec := vector(w.(*weight), d, name)
	out := c.out(t.shape...)
	c.record(name, true, func(e *encoder) { e.bcast(op, c.region(t), vec, c.region(out), t.n, d) }, []*tensor{out}, t)
	return out
}

func (c *context) AddVec(x ml.Tensor, w ml.Weight) ml.Tensor {
	return c.bcast("add vec", kernels.BinaryAdd, x, w)
}
func (c *context) MulVec(x ml.Tensor, w ml.Weight) ml.Tensor {
	return c.bcast("mul vec", kernels.BinaryMul, x, w)
}

func (c *context) L2Norm(x ml.Tensor, eps float32) ml.Tensor {
	t := x.(*tensor)
	rows, d := t.rows2()
	out := c.out(t.shape...)
	c.record("l2 norm", true, func(e *encoder) { e.l2Norm(c.region(t), c.region(out), rows, d, eps) }, []*tensor{out}, t)
	return out
}

func (c *context) Slice(x ml.Tensor, start, n int) ml.Tensor {
	t := x.(*tensor)
	rows, d := t.rows2()
	if start < 0 || n <= 0 || start+n > d {
		panic(fmt.Sprintf("metalkit: slice [%d, %d) of rows of %d", start, start+n, d))
	}
	shape := append(slices.Clone(t.shape[:len(t.shape)-1]), n)
	out := c.out(shape...)
	c.record("slice", false, func(e *encoder) {
		src := c.region(t)
		e.copy2D(src.Sub(4*int64(start), src.Len-4*int64(start)), c.region(out), rows, n, d, n)
	}, []*tensor{out}, t)
	return out
}

func (c *context) Concat(ts ...ml.Tensor) ml.Tensor {
	if len(ts) == 0 {
		panic("metalkit: concat of nothing")
	}
	first := ts[0].(*tensor)
	rows, _ := first.rows2()
	total := 0
	ins := make([]*tensor, len(ts))
	for i, x := range ts {
		t := x.(*tensor)
		r, d := t.rows2()
		if r != rows || len(t.shape) != len(first.shape) {
			panic(fmt.Sprintf("metalkit: concat of %v and %v", first.shape, t.shape))
		}
		ins[i] = t
		total += d
	}
	shape := append(slices.Clone(first.shape[:len(first.shape)-1]), total)
	out := c.out(shape...)
	c.record("concat", false, func(e *encoder) {
		dst := c.region(out)
		off := 0
		for _, t := range ins {
			_, d := t.rows2()
			e.copy2D(c.region(t), dst.Sub(4*int64(off), dst.Len-4*int64(off)), rows, d, d, total)
			off += d
		}
	}, []*tensor{out}, ins...)
	return out
}

func (c *context) Conv1DCausal(x ml.Tensor, wt ml.Weight, state ml.Tensor) ml.Tensor {
	xt, st, w := x.(*tensor), state.(*tensor), wt.(*weight)
	n, ch := xt.rows2()
	kernel := w.cols
	if len(w.dims) != 2 || w.rows != ch || len(st.shape) != 2 || st.shape[0] != kernel-1 || st.shape[1] != ch {
		panic(fmt.Sprintf("metalkit: conv of %v with %s %v and state %v", xt.shape, w.name, w.dims, st.shape))
	}
	wr, wtyp := w.raw, w.typ
	if w.vec.Len > 0 {
		wr, wtyp = w.vec, quant.F32
	}
	out := c.out(xt.shape...)
	c.record("conv1d", false, func(e *encoder) {
		e.conv1dCausal(c.region(xt), n, ch, wr, wtyp, kernel, c.region(st), c.region(out))
	}, []*tensor{out}, xt, st)
	return out
}

func (c *context) DeltaNet(q, k, v, g, beta, state ml.Tensor, scale float32) ml.Tensor {
	qt, kt, vt, gt, bt, st := q.(*tensor), k.(*tensor), v.(*tensor), g.(*tensor), beta.(*tensor), state.(*tensor)
	bad := len(qt.shape) != 3 || len(kt.shape) != 3 || len(vt.shape) != 3 || len(st.shape) != 3
	var n, kHeads, dk, vHeads, dv int
	if !bad {
		n, kHeads, dk, vHeads, dv = qt.shape[0], qt.shape[1], qt.shape[2], vt.shape[1], vt.shape[2]
		bad = !slices.Equal(qt.shape, kt.shape) || vt.shape[0] != n || vHeads%kHeads != 0 ||
			gt.n != n*vHeads || bt.n != n*vHeads || st.shape[0] != vHeads || st.shape[1] != dv || st.shape[2] != dk
	}
	if bad {
		panic(fmt.Sprintf("metalkit: delta rule with q %v, k %v, v %v, g %v, beta %v, state %v", qt.shape, kt.shape, vt.shape, gt.shape, bt.shape, st.shape))
	}
	out := c.out(n, vHeads, dv)
	c.record("delta net", false, func(e *encoder) {
		e.deltaNet(c.region(qt), c.region(kt), c.region(vt), c.region(gt), c.region(bt), c.region(st), n, kHeads, vHeads, dk, dv, scale, c.region(out))
	}, []*tensor{out}, qt, kt, vt, gt, bt, st)
	return out
}

func (c *context) Route(logits ml.Tensor, k int, norm bool) (ml.Tensor, ml.Tensor) {
	t := logits.(*tensor)
	n, experts := t.rows2()
	if k <= 0 || k > experts {
		panic(fmt.Sprintf("metalkit: route %d of %d experts", k, experts))
	}
	ids, weights := c.out(n, k), c.out(n, k)
	c.record("route", false, func(e *encoder) {
		e.route(c.region(t), c.region(ids), c.region(weights), n, experts, k, norm)
	}, []*tensor{ids, weights}, t)
	return ids, weights
}

func (c *context) MatMulExperts(wt ml.Weight, x, ids ml.Tensor) ml.Tensor {
	w := wt.(*weight)
	xt, it := x.(*tensor), ids.(*tensor)
	if len(w.dims) != 3 || len(it.shape) != 2 {
		panic(fmt.Sprintf("metalkit: expert product of %s %v with ids %v", w.name, w.dims, it.shape))
	}
	cols, rows, experts := w.dims[0], w.dims[1], w.dims[2]
	n, k := it.shape[0], it.shape[1]
	shared := len(xt.shape) == 2 && xt.shape[0] == n && xt.shape[1] == cols
	if !shared && !(len(xt.shape) == 3 && xt.shape[0] == n && xt.shape[1] == k && xt.shape[2] == cols) {
		panic(fmt.Sprintf("metalkit: expert product of %s %v with x %v and ids %v", w.name, w.dims, xt.shape, it.shape))
	}
	out := c.out(n, k, rows)
	call := &expertsCall{w, experts, rows, cols, xt, !shared, it, k, n, out}
	c.record("matmul experts", false, func(e *encoder) { c.encodeExperts(e, call, nil) }, []*tensor{out}, xt, it)
	c.ops[len(c.ops)-1].experts = call
	return out
}

func (c *context) WeightedSum(x, w ml.Tensor) ml.Tensor {
	xt, wt := x.(*tensor), w.(*tensor)
	if len(xt.shape) != 3 || len(wt.shape) != 2 || wt.shape[0] != xt.shape[0] || wt.shape[1] != xt.shape[1] {
		panic(fmt.Sprintf("metalkit: weighted sum of %v by %v", xt.shape, wt.shape))
	}
	n, k, d := xt.shape[0], xt.shape[1], xt.shape[2]
	out := c.out(n, d)
	c.record("weighted sum", false, func(e *encoder) {
		e.weightedSum(c.region(xt), c.region(wt), c.region(out), n, k, d)
	}, []*tensor{out}, xt, wt)
	c.ops[len(c.ops)-1].sum = &sumCall{xt, wt, out}
	return out
}

func (c *context) Assign(dst, src ml.Tensor) {
	d, s := dst.(*tensor), src.(*tensor)
	if d.n != s.n {
		panic(fmt.Sprintf("metalkit: assign %v to %v", s.shape, d.shape))
	}
	c.record("assign", false, func(e *encoder) { e.copy2D(c.region(s), c.region(d), 1, s.n, s.n, s.n) }, nil, d, s)
}

// --- encoding of the kernels of ops.metal ---

// opsThreads is the threadgroup size of the element-wise kernels (one thread per element)
// and the most threads of the row kernels (one threadgroup per row).
const opsThreads = 256

// elementGroups is the grid of an element-wise kernel over n elements.
func elementGroups(n int) [3]int { return [3]int{(n + opsThreads - 1) / opsThreads, 1, 1} }

// rowThreads is the threadgroup of a row kernel over rows of d values: whole SIMD groups,
// no more than the row has elements (short rows leave the rest idle), at most opsThreads.
func rowThreads(d int) [3]int { return [3]int{min(opsThreads, max(32, (d+31)/32*32)), 1, 1} }

var oneThreadgroup = [3]int{opsThreads, 1, 1}

func (e *encoder) unary(op int32, s float32, x, y Region, n int) {
	if n == 0 {
		return
	}
	e.dispatch("unary_f32", nil, elementGroups(n), oneThreadgroup, 0,
		device.Cost{Label: "element-wise", Read: 4 * int64(n), Written: 4 * int64(n), FLOPs: 4 * int64(n)},
		kernels.UnaryF32Args{N: int32(n), Op: op, Scale: s}, x, y)
}

func (e *encoder) binary(args kernels.BinaryF32Args, a, b, y Region) {
	n := int(args.N)
	if n == 0 {
		return
	}
	e.dispatch("binary_f32", nil, elementGroups(n), oneThreadgroup, 0,
		device.Cost{Label: "element-wise", Read: 8 * int64(n), Written: 4 * int64(n), FLOPs: int64(n)},
		args, a, b, y)
}

func (e *encoder) bcast(op int32, x, w, y Region, n, d int) {
	if n == 0 {
		return
	}
	e.dispatch("bcast_f32", nil, elementGroups(n), oneThreadgroup, 0,
		device.Cost{Label: "element-wise", Read: 4 * int64(n+d), Written: 4 * int64(n), FLOPs: int64(n)},
		kernels.BcastF32Args{N: int32(n), D: int32(d), Op: op}, x, w, y)
}

func (e *encoder) rmsNorm(x, w Region, hasW bool, y Region, rows, d int, eps float32) {
	if rows == 0 {
		return
	}
	e.dispatch("rms_norm_f32", nil, [3]int{rows, 1, 1}, rowThreads(d), 0,
		device.Cost{Label: "norm", Read: 4 * int64(rows*d+d), Written: 4 * int64(rows*d), FLOPs: 4 * int64(rows*d)},
		kernels.RMSNormF32Args{Rows: int32(rows), D: int32(d), Eps: eps, HasW: b2i(hasW)}, x, w, y)
}

func (e *encoder) l2Norm(x, y Region, rows, d int, eps float32) {
	if rows == 0 {
		return
	}
	e.dispatch("l2_norm_f32", nil, [3]int{rows, 1, 1}, rowThreads(d), 0,
		device.Cost{Label: "norm", Read: 4 * int64(rows*d), Written: 4 * int64(rows*d), FLOPs: 3 * int64(rows*d)},
		kernels.L2NormF32Args{Rows: int32(rows), D: int32(d), Eps: eps}, x, y)
}

func (e *encoder) rope(x, table, y Region, n, heads, hd, dims int, neox bool) {
	total := n * heads * hd
	if total == 0 {
		return
	}
	e.dispatch("rope_f32", nil, elementGroups(total), oneThreadgroup, 0,
		device.Cost{Label: "rope", Read: 4 * int64(total+n*dims), Written: 4 * int64(total), FLOPs: 3 * int64(n*heads*dims)},
		kernels.RoPEF32Args{N: int32(n), Heads: int32(heads), HeadDim: int32(hd), Dims: int32(dims), NeoX: b2i(neox)}, x, table, y)
}

func (e *encoder) route(logits, ids, weights Region, n, experts, k int, norm bool) {
	if n == 0 {
		return
	}
	e.dispatch("route_f32", nil, [3]int{n, 1, 1}, rowThreads(experts), (4*experts+15)/16*16,
		device.Cost{Label: "route", Read: 4 * int64(n*experts), Written: 8 * int64(n*k), FLOPs: int64(n * experts * (4 + k))},
		kernels.RouteF32Args{N: int32(n), Experts: int32(experts), K: int32(k), Norm: b2i(norm), MinSum: ml.MinRouteWeightSum},
		logits, ids, weights)
}

func (e *encoder) weightedSum(x, w, y Region, n, k, d int) {
	if n*d == 0 {
		return
	}
	e.dispatch("weighted_sum_f32", nil, elementGroups(n*d), oneThreadgroup, 0,
		device.Cost{Label: "moe sum", Read: 4 * int64(n*k*d+n*k), Written: 4 * int64(n*d), FLOPs: 2 * int64(n*k*d)},
		kernels.WeightedSumF32Args{N: int32(n), K: int32(k), D: int32(d)}, x, w, y)
}

func (e *encoder) argmax(x, ids Region, rows, d int) {
	if rows == 0 {
		return
	}
	e.dispatch("argmax_f32", nil, [3]int{rows, 1, 1}, rowThreads(d), 0,
		device.Cost{Label: "argmax", Read: 4 * int64(rows*d), Written: 4 * int64(rows)},
		kernels.ArgmaxF32Args{Rows: int32(rows), D: int32(d)}, x, ids)
}

// copy2D copies rows rows of cols values from x (rows srcStride apart) to y (dstStride apart).
func (e *encoder) copy2D(x, y Region, rows, cols, srcStride, dstStride int) {
	if rows*cols == 0 {
		return
	}
	e.dispatch("copy_f32", nil, elementGroups(rows*cols), oneThreadgroup, 0,
		device.Cost{Label: "copy", Read: 4 * int64(rows*cols), Written: 4 * int64(rows*cols)},
		kernels.CopyF32Args{Rows: int32(rows), Cols: int32(cols), SrcStride: int32(srcStride), DstStride: int32(dstStride)}, x, y)
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}
