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
func dotStridedAVX2(a *float32, lda int, x *float32, n, rows int, out *float32)

//go:noescape
func dotStridedF16AVX2(a *uint16, lda int, x *float32, n, rows int, out *float32)

//go:noescape
func weightedRowsAVX2(w *float32, rows int, a *float32, lda int, out *float32, n int)

//go:noescape
func weightedRowsF16AVX2(w *float32, rows int, a *uint16, lda int, out *float32, n int)

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

// useAVX2 selects the AVX2 forms of the row and strided kernels where there is no AVX-512
// (every caller tries AVX-512 first).
var useAVX2 = func() bool { avx2, _ := cpuFeatures(); return avx2 }()

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
	switch {
	case n == 0 || len(out) == 0:
	case useAVX512 && n%16 == 0:
		checkStrided(len(a), lda, n, len(out))
		dotStridedAVX512(&a[0], lda, &x[0], n, len(out), &out[0])
		return
	case useAVX2 && n%8 == 0:
		checkStrided(len(a), lda, n, len(out))
		dotStridedAVX2(&a[0], lda, &x[0], n, len(out), &out[0])
		return
	}
	scoresStridedGo(a, lda, x, out)
}

// scoresStridedF16 is scoresStrided over rows of float16 bits, bit for bit as scoresStrided
// over the widened rows.
func scoresStridedF16(a []uint16, lda int, x []float32, out []float32) {
	n := len(x)
	switch {
	case n == 0 || len(out) == 0:
	case useAVX512 && n%16 == 0:
		checkStrided(len(a), lda, n, len(out))
		dotStridedF16AVX512(&a[0], lda, &x[0], n, len(out), &out[0])
		return
	case useAVX2 && n%8 == 0:
		checkStrided(len(a), lda, n, len(out))
		dotStridedF16AVX2(&a[0], lda, &x[0], n, len(out), &out[0])
		return
	}
	scoresStridedF16Go(a, lda, x, out)
}

// weightedRows sets out[i] = Σ_r w[r]·a[r·lda+i] for i < len(out), summed in r order.
func weightedRows(w []float32, a []float32, lda int, out []float32) {
	n := len(out)
	switch {
	case len(w) == 0:
	case useAVX512 && n == 128:
		checkStrided(len(a), lda, n, len(w))
		weightedRowsAVX512(&w[0], len(w), &a[0], lda, &out[0])
		return
	case useAVX2 && n%64 == 0:
		checkStrided(len(a), lda, n, len(w))
		weightedRowsAVX2(&w[0], len(w), &a[0], lda, &out[0], n)
		return
	}
	weightedRowsGo(w, a, lda, out)
}

// weightedRowsF16 is weightedRows over rows of float16 bits, bit for bit as weightedRows
// over the widened rows.
func weightedRowsF16(w []float32, a []uint16, lda int, out []float32) {
	n := len(out)
	switch {
	case len(w) == 0:
	case useAVX512 && n == 128:
		checkStrided(len(a), lda, n, len(w))
		weightedRowsF16AVX512(&w[0], len(w), &a[0], lda, &out[0])
		return
	case useAVX2 && n%64 == 0:
		checkStrided(len(a), lda, n, len(w))
		weightedRowsF16AVX2(&w[0], len(w), &a[0], lda, &out[0], n)
		return
	}
	weightedRowsF16Go(w, a, lda, out)
}

// checkStrided refuses rows of n values every lda that run past a slice of length size.
func checkStrided(size, lda, n, rows int) {
	if size < (rows-1)*lda+n {
		panic("cpu: strided rows out of bounds")
	}
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
