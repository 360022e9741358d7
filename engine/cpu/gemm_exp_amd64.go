//go:build amd64 && !purego

package cpu

//go:noescape
func softmaxAVX512(x *float32, n int, scale float32)

//go:noescape
func swigluAVX512(out, gate, up *float32, n int)

//go:noescape
func dotStridedAVX512(a *float32, lda int, x *float32, n, rows int, out *float32)

//go:noescape
func weightedRowsAVX512(w *float32, rows int, a *float32, lda int, out *float32)

//go:noescape
func dotStridedF16AVX512(a *uint16, lda int, x *float32, n, rows int, out *float32)

//go:noescape
func weightedRowsF16AVX512(w *float32, rows int, a *uint16, lda int, out *float32)

//go:noescape
func sumSquaresAVX512(x *float32, n int) float64

//go:noescape
func scaleRowAVX512(dst, src *float32, n int, s float32, w *float32)

//go:noescape
func siluAVX512(out, x *float32, n int)

//go:noescape
func softmaxAVX2(x *float32, n int, scale float32)

//go:noescape
func swigluAVX2(out, gate, up *float32, n int)

//go:noescape
func siluAVX2(out, x *float32, n int)

//go:noescape
func sumSquaresAVX2(x *float32, n int) float64

//go:noescape
func scaleRowAVX2(dst, src *float32, n int, s float32, w *float32)

// useAVX512 selects the AVX-512 exponential kernels.
var useAVX512 = func() bool { _, avx512 := cpuFeatures(); return avx512 }()

// useAVX2 selects the AVX2 forms of the row kernels (softmax, SwiGLU, SiLU, sum of
// squares, scaling) where there is no AVX-512; the strided attention kernels have none.
var useAVX2 = func() bool { avx2, avx512 := cpuFeatures(); return avx2 && !avx512 }()

func softmax32(x []float32, scale float32) {
	switch {
	case len(x) == 0:
	case useAVX512:
		softmaxAVX512(&x[0], len(x), scale)
	case useAVX2:
		softmaxAVX2(&x[0], len(x), scale)
	default:
		softmaxGo(x, scale)
	}
}

func swiglu(out, g, u []float32) {
	if (!useAVX512 && !useAVX2) || len(out) == 0 {
		swigluGo(out, g, u)
		return
	}
	if len(g) != len(out) || len(u) != len(out) {
		panic("cpu: swiglu of unequal lengths")
	}
	if useAVX512 {
		swigluAVX512(&out[0], &g[0], &u[0], len(out))
	} else {
		swigluAVX2(&out[0], &g[0], &u[0], len(out))
	}
}

// scoresStrided sets out[r] = a[r·lda : r·lda+len(x)] · x for r < len(out).
func scoresStrided(a []float32, lda int, x []float32, out []float32) {
	n := len(x)
	if !useAVX512 || n%16 != 0 || n == 0 || len(out) == 0 {
		scoresStridedGo(a, lda, x, out)
		return
	}
	if len(a) < (len(out)-1)*lda+n {
		panic("cpu: scoresStrided out of bounds")
	}
	dotStridedAVX512(&a[0], lda, &x[0], n, len(out), &out[0])
}

// weightedRows sets out[i] = Σ_r w[r]·a[r·lda+i] for i < len(out), summed in r order.
func weightedRows(w []float32, a []float32, lda int, out []float32) {
	if !useAVX512 || len(out) != 128 || len(w) == 0 {
		weightedRowsGo(w, a, lda, out)
		return
	}
	if len(a) < (len(w)-1)*lda+128 {
		panic("cpu: weightedRows out of bounds")
	}
	weightedRowsAVX512(&w[0], len(w), &a[0], lda, &out[0])
}

// scoresStridedF16 is scoresStrided over rows of float16 bits, bit for bit as scoresStrided
// over the widened rows.
func scoresStridedF16(a []uint16, lda int, x []float32, out []float32) {
	n := len(x)
	if !useAVX512 || n%16 != 0 || n == 0 || len(out) == 0 {
		scoresStridedF16Go(a, lda, x, out)
		return
	}
	if len(a) < (len(out)-1)*lda+n {
		panic("cpu: scoresStridedF16 out of bounds")
	}
	dotStridedF16AVX512(&a[0], lda, &x[0], n, len(out), &out[0])
}

// weightedRowsF16 is weightedRows over rows of float16 bits, bit for bit as weightedRows
// over the widened rows.
func weightedRowsF16(w []float32, a []uint16, lda int, out []float32) {
	if !useAVX512 || len(out) != 128 || len(w) == 0 {
		weightedRowsF16Go(w, a, lda, out)
		return
	}
	if len(a) < (len(w)-1)*lda+128 {
		panic("cpu: weightedRowsF16 out of bounds")
	}
	weightedRowsF16AVX512(&w[0], len(w), &a[0], lda, &out[0])
}

// sumSquares is Σ float64(v·v) over x (in a different order of the float64 additions).
func sumSquares(x []float32) float64 {
	switch {
	case len(x) == 0:
		return 0
	case useAVX512:
		return sumSquaresAVX512(&x[0], len(x))
	case useAVX2:
		return sumSquaresAVX2(&x[0], len(x))
	}
	return sumSquaresGo(x)
}

// scaleRow sets dst[i] = src[i]·s·w[i] (w nil: src[i]·s).
func scaleRow(dst, src []float32, s float32, w []float32) {
	if (!useAVX512 && !useAVX2) || len(dst) == 0 {
		scaleRowGo(dst, src, s, w)
		return
	}
	if len(src) < len(dst) || (w != nil && len(w) < len(dst)) {
		panic("cpu: scaleRow of unequal lengths")
	}
	var wp *float32
	if w != nil {
		wp = &w[0]
	}
	if useAVX512 {
		scaleRowAVX512(&dst[0], &src[0], len(dst), s, wp)
	} else {
		scaleRowAVX2(&dst[0], &src[0], len(dst), s, wp)
	}
}

// siluRow sets out[i] = silu(x[i]).
func siluRow(out, x []float32) {
	if (!useAVX512 && !useAVX2) || len(out) == 0 {
		siluRowGo(out, x)
		return
	}
	if len(x) < len(out) {
		panic("cpu: siluRow of unequal lengths")
	}
	if useAVX512 {
		siluAVX512(&out[0], &x[0], len(out))
	} else {
		siluAVX2(&out[0], &x[0], len(out))
	}
}
