package cpu

import (
	"fmt"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// fusedMaxTokens is the batch size up to which each row is dotted straight from its
// quantized bytes, a tile of rows with every token in turn (see matmul); beyond it expanding
// rows to float32 once and running the GEMM is cheaper, below it the GEMM would fill few of
// its micro-kernel's 12 rows. The types without a fused dot kernel expand every block for
// every token anyway, so the GEMM wins from 2 tokens.
func fusedMaxTokens(t quant.Type) int {
	switch t {
	case quant.F32, quant.F16, quant.Q8_0, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.IQ2_XXS:
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
	case n == 1:
		c.b.pool.parallel(rows, 8, func(lo, hi int) {
			data := w.data[(r0+lo)*w.rowB : (r0+hi)*w.rowB]
			quant.DotRows(w.typ, data, x, out[lo:hi])
		})
	default:
		// A few tokens (a decode step of several sequences): each tile of rows, small enough
		// to stay in L1, is dotted with every token before the next tile — four tokens per
		// kernel call where the type has a four-token kernel, which converts each block
		// once for the four — so the weights are read from memory once. Every token's
		// numbers are exactly those it gets alone.
		c.b.pool.parallel(rows, dotTileRows, func(lo, hi int) {
			for t0 := lo; t0 < hi; t0 += dotTileRows {
				t1 := min(t0+dotTileRows, hi)
				data := w.data[(r0+t0)*w.rowB : (r0+t1)*w.rowB]
				i := 0
				for ; i+4 <= n; i += 4 {
					quant.DotRows4(w.typ, data, x[i*cols:(i+4)*cols], cols, out[i*rows+t0:], rows)
				}
				for ; i < n; i++ {
					quant.DotRows(w.typ, data, x[i*cols:(i+1)*cols], out[i*rows+t0:i*rows+t1])
				}
			}
		})
	}
}
