package cpu

import (
	"fmt"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// dotTileRows is the rows dotted with every token of a small batch before the next rows.
const dotTileRows = 16

// int8TokenRun is the bytes of quantized activations a worker takes its rows through before
// the next tokens': half of a 512 KiB L2.
const int8TokenRun = 256 << 10

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
	case w.packed != nil && r0%quant.RepackRows == 0 && c.b.repacks(w.typ):
		c.matmulRepacked(w, r0, r1, x, n, out)
	case n > 1 && c.b.int8(w.typ) && quant.Int8Rows4(w.typ) && cols%quant.QK_K == 0:
		// 8-bit activations with a four-token kernel: cheaper than expanding the rows for
		// the float GEMM at any batch size. x is quantized once.
		acts, release := c.quantizeActs(x, n, cols)
		defer release()
		nb := cols / quant.QK_K
		c.tiles(rows, n, nb*quant.Q8KFloats*4, func(t0, t1, i0, tn int) {
			dotTileQ8K(w.typ, w.data[(r0+t0)*w.rowB:(r0+t1)*w.rowB], acts[i0*nb:], nb, tn, out[i0*rows+t0:], rows)
		})
	case w.typ == quant.Q8_0 && c.b.int8Q8_0():
		// Q8_0 with activations quantized to Q8_0, at every batch size, so that a token's
		// numbers never depend on the step it is computed in; four tokens per kernel call.
		acts, release := c.quantizeActsQ8_0(x, n, cols)
		defer release()
		ab := len(acts) / n
		c.tiles(rows, n, ab, func(t0, t1, i0, tn int) {
			dotTileQ8_0(w.data[(r0+t0)*w.rowB:(r0+t1)*w.rowB], acts[i0*ab:(i0+tn)*ab], tn, out[i0*rows+t0:], rows)
		})
	case n > c.b.fusedMaxTokens(w.typ) && !small:
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
	case c.b.int8(w.typ) && cols%quant.QK_K == 0:
		// 8-bit activations: x is quantized once for every row; then as below, one kernel
		// call per range of rows for one token, tiles of rows for a few.
		acts, release := c.quantizeActs(x, n, cols)
		defer release()
		nb := cols / quant.QK_K
		c.b.pool.parallel(rows, dotTileRows, func(lo, hi int) {
			if n == 1 {
				quant.DotRowsQ8K(w.typ, w.data[(r0+lo)*w.rowB:(r0+hi)*w.rowB], acts, out[lo:hi])
				return
			}
			for t0 := lo; t0 < hi; t0 += dotTileRows {
				t1 := min(t0+dotTileRows, hi)
				dotTileQ8K(w.typ, w.data[(r0+t0)*w.rowB:(r0+t1)*w.rowB], acts, nb, n, out[t0:], rows)
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
				dotTile(w.typ, w.data[(r0+t0)*w.rowB:(r0+t1)*w.rowB], x, cols, n, out[t0:], rows)
			}
		})
	}
}

// dotTile dots rows (a tile small enough to stay in L1) with n tokens x[i·cols …], writing
// token i's results at out[i·ldo …]: four tokens per kernel call where the type has a
// four-token kernel, each token's numbers exactly those it gets alone.
func dotTile(t quant.Type, rows []byte, x []float32, cols, n int, out []float32, ldo int) {
	nr := len(rows) / t.RowBytes(cols)
	i := 0
	for ; i+4 <= n; i += 4 {
		quant.DotRows4(t, rows, x[i*cols:(i+4)*cols], cols, out[i*ldo:], ldo)
	}
	for ; i < n; i++ {
		quant.DotRows(t, rows, x[i*cols:(i+1)*cols], out[i*ldo:i*ldo+nr])
	}
}

// matmulRepacked is matmul over w's repacked layout, whose groups of rows are tiles.
func (c *context) matmulRepacked(w *weight, r0, r1 int, x []float32, n int, out []float32) {
	rows, cols := r1-r0, w.cols
	if w.typ == quant.Q8_0 {
		acts, release := c.quantizeActsQ8_0(x, n, cols)
		defer release()
		ab := len(acts) / n
		c.tiles(rows, n, ab, func(t0, t1, i0, tn int) {
			quant.DotRepackedQ8_0(w.packed, cols, r0+t0, r0+t1, acts[i0*ab:(i0+tn)*ab], out[i0*rows+t0:], rows)
		})
		return
	}
	acts, release := c.quantizeActs(x, n, cols)
	defer release()
	nb := cols / quant.QK_K
	c.tiles(rows, n, nb*quant.Q8KFloats*4, func(t0, t1, i0, tn int) {
		quant.DotRepackedQ8K(w.typ, w.packed, cols, r0+t0, r0+t1, acts[i0*nb:(i0+tn)*nb], out[i0*rows+t0:], rows)
	})
}

// The repacked layout's groups of rows are the tiles of c.tiles.
var _ = [1]struct{}{}[dotTileRows-quant.RepackRows]

// tiles runs dot(t0, t1, i0, tn), rows [t0, t1) for tokens [i0, i0+tn), over rows [0, rows)
// and n tokens of tokenBytes of 8-bit activations each: workers take whole tiles of
// dotTileRows rows; one token goes through a worker's rows in one call, more by tiles,
// small enough for L1, each dotted with every token of a run whose activations stay in L2
// before the next tile.
func (c *context) tiles(rows, n, tokenBytes int, dot func(t0, t1, i0, tn int)) {
	run := max(4, int8TokenRun/tokenBytes/4*4)
	c.b.pool.parallel((rows+dotTileRows-1)/dotTileRows, 1, func(lo, hi int) {
		lo, hi = lo*dotTileRows, min(hi*dotTileRows, rows)
		if n == 1 {
			dot(lo, hi, 0, 1)
			return
		}
		for i0 := 0; i0 < n; i0 += run {
			tn := min(run, n-i0)
			for t0 := lo; t0 < hi; t0 += dotTileRows {
				dot(t0, min(t0+dotTileRows, hi), i0, tn)
			}
		}
	})
}
