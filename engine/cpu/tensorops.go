package cpu

import (
	"fmt"
	"math"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// Operations for hybrid/MoE models that are not specific to one layer type: element-wise
// maps, broadcasts, norms, slicing and state copies.

func (b *Backend) NewTensor(shape ...int) (ml.Tensor, error) {
	for _, d := range shape {
		if d <= 0 {
			return nil, fmt.Errorf("cpu: state tensor of shape %v", shape)
		}
	}
	return newTensor(append([]int(nil), shape...)...), nil
}

// Release drops a state tensor's memory. Pass tensors go with their context.
func (b *Backend) Release(t ml.Tensor) {
	x := t.(*tensor)
	if x.root != nil {
		panic("cpu: release of a pass tensor (they go with their context)")
	}
	x.data, x.freed = nil, true
}

// unary applies f to every element of x.
func (c *context) unary(name string, x ml.Tensor, f func(float32) float32) ml.Tensor {
	t := x.(*tensor)
	out := c.out(t.shape...)
	c.record(name, true, func() {
		c.b.pool.parallel(len(out.data), 1<<14, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				out.data[i] = f(t.data[i])
			}
		})
	}, []*tensor{out}, t)
	return out
}

func sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

// softplus switches to the identity above 20, where log(1+e^x) equals x in float32 (ggml
// does the same).
func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log(float64(1 + float32(math.Exp(float64(x))))))
}

func (c *context) Sigmoid(x ml.Tensor) ml.Tensor  { return c.unary("sigmoid", x, sigmoid) }
func (c *context) Softplus(x ml.Tensor) ml.Tensor { return c.unary("softplus", x, softplus) }

// SiLU runs whole stretches through siluRow (vectorised on AVX-512): it showed at 3% of a
// qwen3next profile as a per-element call of math.Exp.
func (c *context) SiLU(x ml.Tensor) ml.Tensor {
	t := x.(*tensor)
	out := c.out(t.shape...)
	c.record("silu", true, func() {
		c.b.pool.parallel(len(out.data), 1<<14, func(lo, hi int) {
			siluRow(out.data[lo:hi], t.data[lo:hi])
		})
	}, []*tensor{out}, t)
	return out
}

func (c *context) Scale(x ml.Tensor, s float32) ml.Tensor {
	return c.unary("scale", x, func(v float32) float32 { return v * s })
}

// vector returns w's values as float32 and checks that it has one per element of the last
// dimension d.
func vector(w ml.Weight, d int, op string) []float32 {
	wt := w.(*weight)
	if wt.rows*wt.cols != d {
		panic(fmt.Sprintf("cpu: %s of rows of %d with %s %v", op, d, wt.name, wt.dims))
	}
	if wt.f32 != nil {
		return wt.f32
	}
	v := make([]float32, d)
	if err := quant.Dequantize(wt.typ, wt.data, v); err != nil {
		panic(err)
	}
	return v
}

func (c *context) broadcast(x ml.Tensor, w ml.Weight, op string, f func(a, b float32) float32) ml.Tensor {
	t := x.(*tensor)
	rows, d := t.rows2()
	vec := vector(w, d, op)
	out := c.out(t.shape...)
	c.record(op, true, func() {
		c.b.pool.parallel(rows, 1<<12/d+1, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				src, dst := t.data[r*d:(r+1)*d], out.data[r*d:(r+1)*d]
				for i, v := range src {
					dst[i] = f(v, vec[i])
				}
			}
		})
	}, []*tensor{out}, t)
	return out
}

func (c *context) AddVec(x ml.Tensor, w ml.Weight) ml.Tensor {
	return c.broadcast(x, w, "add", func(a, b float32) float32 { return a + b })
}

func (c *context) MulVec(x ml.Tensor, w ml.Weight) ml.Tensor {
	return c.broadcast(x, w, "mul", func(a, b float32) float32 { return a * b })
}

func (c *context) L2Norm(x ml.Tensor, eps float32) ml.Tensor {
	t := x.(*tensor)
	rows, d := t.rows2()
	out := c.out(t.shape...)
	c.record("l2 norm", true, func() {
		c.b.pool.parallel(rows, 64, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				src, dst := t.data[r*d:(r+1)*d], out.data[r*d:(r+1)*d]
				// Squares summed in float64, as ggml does.
				var sum float64
				for _, v := range src {
					sum += float64(v * v)
				}
				s := 1 / max(float32(math.Sqrt(sum)), eps)
				for i, v := range src {
					dst[i] = v * s
				}
			}
		})
	}, []*tensor{out}, t)
	return out
}

func (c *context) Slice(x ml.Tensor, start, n int) ml.Tensor {
	t := x.(*tensor)
	rows, d := t.rows2()
	if start < 0 || n <= 0 || start+n > d {
		panic(fmt.Sprintf("cpu: slice [%d, %d) of rows of %d", start, start+n, d))
	}
	shape := append(append([]int(nil), t.shape[:len(t.shape)-1]...), n)
	out := c.out(shape...)
	c.record("slice", false, func() {
		for r := 0; r < rows; r++ {
			copy(out.data[r*n:(r+1)*n], t.data[r*d+start:])
		}
	}, []*tensor{out}, t)
	return out
}

func (c *context) Concat(ts ...ml.Tensor) ml.Tensor {
	if len(ts) == 0 {
		panic("cpu: concat of nothing")
	}
	first := ts[0].(*tensor)
	rows, _ := first.rows2()
	total := 0
	widths := make([]int, len(ts))
	ins := make([]*tensor, len(ts))
	for i, x := range ts {
		t := x.(*tensor)
		r, d := t.rows2()
		if r != rows || len(t.shape) != len(first.shape) {
			panic(fmt.Sprintf("cpu: concat of %v and %v", first.shape, t.shape))
		}
		widths[i], ins[i] = d, t
		total += d
	}
	shape := append(append([]int(nil), first.shape[:len(first.shape)-1]...), total)
	out := c.out(shape...)
	c.record("concat", false, func() {
		for r := 0; r < rows; r++ {
			off := r * total
			for i, t := range ins {
				d := widths[i]
				copy(out.data[off:off+d], t.data[r*d:(r+1)*d])
				off += d
			}
		}
	}, []*tensor{out}, ins...)
	return out
}

func (c *context) WeightedSum(x, w ml.Tensor) ml.Tensor {
	xt, wt := x.(*tensor), w.(*tensor)
	if len(xt.shape) != 3 || len(wt.shape) != 2 || wt.shape[0] != xt.shape[0] || wt.shape[1] != xt.shape[1] {
		panic(fmt.Sprintf("cpu: weighted sum of %v by %v", xt.shape, wt.shape))
	}
	n, k, d := xt.shape[0], xt.shape[1], xt.shape[2]
	out := c.out(n, d)
	c.record("weighted sum", false, func() {
		c.b.pool.parallel(n, 1<<12/(k*d)+1, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				dst := out.data[i*d : (i+1)*d]
				clear(dst) // the buffer is reused
				for j := 0; j < k; j++ {
					// Each slot is scaled, then added: llama.cpp's mul followed by adds.
					a := wt.data[i*k+j]
					src := xt.data[(i*k+j)*d : (i*k+j+1)*d]
					for e, v := range src {
						dst[e] += v * a
					}
				}
			}
		})
	}, []*tensor{out}, xt, wt)
	return out
}

func (c *context) LoadKV(cc ml.Cache, layer, pos0, n int) (ml.Tensor, ml.Tensor) {
	kc := cc.(*cache)
	if layer < 0 || layer >= kc.layers || pos0 < 0 || n < 0 || pos0+n > kc.capacity {
		panic(fmt.Sprintf("cpu: load of positions [%d, %d) of layer %d from a cache of %d layers × %d", pos0, pos0+n, layer, kc.layers, kc.capacity))
	}
	kc.check("load from")
	k, v := c.out(n, kc.kvHeads, kc.headDim), c.out(n, kc.kvHeads, kc.headDim)
	c.record("load kv", false, func() { kc.load(layer, pos0, n, k.data, v.data) }, []*tensor{k, v})
	return k, v
}

func (c *context) Assign(dst, src ml.Tensor) {
	d, s := dst.(*tensor), src.(*tensor)
	if d.n != s.n {
		panic(fmt.Sprintf("cpu: assign %v to %v", s.shape, d.shape))
	}
	c.record("assign", false, func() { copy(d.data, s.data) }, nil, d, s)
}
