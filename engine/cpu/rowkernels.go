package cpu

import (
	"math"

	"github.com/redlite/batch/engine/quant"
)

// The row kernels of attention and the feed-forward block (softmax, SwiGLU, strided
// scores and weighted rows over a KV cache, RMS sums, scaled and SiLU rows) in Go; the
// amd64 assembly forms are in rowkernels_amd64.s, each the same bits or within the bound
// its test states.

// softmaxGo replaces x by softmax(x·scale) computed as ggml does: s = x·scale, the
// exponentials of s − max(s) in float32, their sum in float64, then one multiplication by
// float32(1/sum). The assembly version's exponentials are within 1 ulp of these.
func softmaxGo(x []float32, scale float32) { softmaxSink(x, scale, float32(math.Inf(-1))) }

// softmaxSink is softmaxGo with one more term in the denominator, e^sink, as ggml's
// soft_max with sinks computes it: the maximum includes sink, which is not scaled. A sink
// of −∞ adds exactly 0: the plain softmax.
func softmaxSink(x []float32, scale, sink float32) {
	m := sink
	for i, v := range x {
		x[i] = v * scale
		m = max(m, x[i])
	}
	var sum float64
	for i, v := range x {
		e := float32(math.Exp(float64(v - m)))
		x[i] = e
		sum += float64(e)
	}
	sum += float64(float32(math.Exp(float64(sink - m))))
	inv := float32(1 / sum)
	for i := range x {
		x[i] *= inv
	}
}

// swigluGo writes silu(g[i])·u[i] to out[i].
func swigluGo(out, g, u []float32) {
	g, u = g[:len(out)], u[:len(out)]
	for i := range out {
		out[i] = silu(g[i]) * u[i]
	}
}

func scoresStridedGo(a []float32, lda int, x []float32, out []float32) {
	for r := range out {
		out[r] = quant.Dot(a[r*lda:r*lda+len(x)], x)
	}
}

func weightedRowsGo(w []float32, a []float32, lda int, out []float32) {
	clear(out)
	for r, v := range w {
		quant.Axpy(v, a[r*lda:r*lda+len(out)], out)
	}
}

// scoresStridedF16Go and weightedRowsF16Go widen one row at a time and do what the float32
// forms do with it.
func scoresStridedF16Go(a []uint16, lda int, x []float32, out []float32) {
	var b [256]float32 // a head's row: decode should not allocate
	buf := b[:]
	if len(x) > len(b) {
		buf = make([]float32, len(x))
	}
	buf = buf[:len(x)]
	for r := range out {
		quant.F16ToF32Slice(buf, a[r*lda:r*lda+len(x)])
		out[r] = quant.Dot(buf, x)
	}
}

func weightedRowsF16Go(w []float32, a []uint16, lda int, out []float32) {
	var b [256]float32
	buf := b[:]
	if len(out) > len(b) {
		buf = make([]float32, len(out))
	}
	buf = buf[:len(out)]
	clear(out)
	for r, v := range w {
		quant.F16ToF32Slice(buf, a[r*lda:r*lda+len(out)])
		quant.Axpy(v, buf, out)
	}
}

// sumSquaresGo is Σ float64(v·v): each square rounded to float32, summed in float64.
func sumSquaresGo(x []float32) float64 {
	var sum float64
	for _, v := range x {
		sum += float64(v * v)
	}
	return sum
}

// scaleRowGo sets dst[i] = src[i]·s·w[i] (w nil: src[i]·s), rounding after each product.
func scaleRowGo(dst, src []float32, s float32, w []float32) {
	src = src[:len(dst)]
	if w == nil {
		for i, v := range src {
			dst[i] = v * s
		}
		return
	}
	w = w[:len(dst)]
	for i, v := range src {
		dst[i] = v * s * w[i]
	}
}

// siluRowGo sets out[i] = silu(x[i]).
func siluRowGo(out, x []float32) {
	x = x[:len(out)]
	for i, v := range x {
		out[i] = silu(v)
	}
}
