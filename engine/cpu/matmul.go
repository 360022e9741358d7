package cpu

import (
	"fmt"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// fusedMaxTokens is the batch size up to which each row is dotted straight from its
// quantized bytes; beyond it, expanding rows to float32 once and running the GEMM is
// cheaper. It depends on the type: the types with fast dot and fast expansion kernels cross
// over at 3 tokens; Q5_K, whose expansion is plain Go, later; the types without a fused dot
// kernel expand every block for every token anyway, so the GEMM wins from 2 tokens.
func fusedMaxTokens(t quant.Type) int {
	switch t {
	case quant.F32, quant.F16, quant.Q8_0, quant.Q4_K, quant.Q6_K, quant.IQ2_XXS:
		return 2
	case quant.Q5_K:
		return 8
	}
	return 1
}

// dotTileRows is the rows dotted with every token of a small batch before the next rows.
const dotTileRows = 16

func (c *context) MatMul(wt ml.Weight, x ml.Tensor) ml.Tensor {
	w := wt.(*weight)
	t := x.(*tensor)
	n, d := t.rows2()
	if d != w.cols {
		panic(fmt.Sprintf("cpu: matmul of %v by %s %v", t.shape, w.name, w.dims))
	}
	out := c.out(n, w.rows)
	c.record("matmul", false, func() { c.matmul(w, 0, w.rows, t.data, n, out.data) }, []*tensor{out}, t)
	return out
}

// matmul computes out[i][r−r0] = row r · x[i] for rows [r0, r1) of w and n tokens.
func (c *context) matmul(w *weight, r0, r1 int, x []float32, n int, out []float32) {
	rows, cols := r1-r0, w.cols
	small := w.f32 != nil && len(w.f32) == w.rows*w.cols && len(w.f32) <= smallVector
	switch {
	case n > fusedMaxTokens(w.typ) && !small:
		gemmWeight(c.b.pool, defaultKernel, w, r0, r1, x, n, out)
	case w.f32 != nil && len(w.f32) == w.rows*w.cols:
		// Matrices small enough to be expanded at load (and F32 ones at one or two tokens):
		// plain dot products, the same for every batch size.
		c.b.pool.parallel(rows, 8, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				wr := w.f32[(r0+r)*cols : (r0+r+1)*cols]
				for i := 0; i < n; i++ {
					out[i*rows+r] = quant.Dot(wr, x[i*cols:(i+1)*cols])
				}
			}
		})
	default:
		c.b.pool.parallel(rows, 8, func(lo, hi int) {
			// Tiles of rows small enough to stay in L1 while every token is dotted with
			// them: a few tokens (a decode step of several sequences) read the weights from
			// memory once, as one token does.
			tile := dotTileRows
			if n == 1 {
				tile = hi - lo
			}
			for t0 := lo; t0 < hi; t0 += tile {
				t1 := min(t0+tile, hi)
				data := w.data[(r0+t0)*w.rowB : (r0+t1)*w.rowB]
				for i := 0; i < n; i++ {
					quant.DotRows(w.typ, data, x[i*cols:(i+1)*cols], out[i*rows+t0:i*rows+t1])
				}
			}
		})
	}
}
