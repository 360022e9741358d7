//go:build amd64 && !purego

package cpu

// asmRowForms lists the assembly row kernels this CPU runs, whichever the dispatch picks,
// so that the AVX2 ones are checked on an AVX-512 machine too.
func asmRowForms() []rowForms {
	avx2, avx512 := cpuFeatures()
	var fs []rowForms
	if avx512 {
		fs = append(fs, rowForms{
			name:       "avx512",
			softmax:    func(x []float32, s float32) { softmaxAVX512(&x[0], len(x), s) },
			swiglu:     func(out, g, u []float32) { swigluAVX512(&out[0], &g[0], &u[0], len(out)) },
			silu:       func(out, x []float32) { siluAVX512(&out[0], &x[0], len(out)) },
			sumSquares: func(x []float32) float64 { return sumSquaresAVX512(&x[0], len(x)) },
			scaleRow: func(dst, src []float32, s float32, w []float32) {
				scaleRowAVX512(&dst[0], &src[0], len(dst), s, first(w))
			},
		})
	}
	if avx2 {
		fs = append(fs, rowForms{
			name:       "avx2",
			softmax:    func(x []float32, s float32) { softmaxAVX2(&x[0], len(x), s) },
			swiglu:     func(out, g, u []float32) { swigluAVX2(&out[0], &g[0], &u[0], len(out)) },
			silu:       func(out, x []float32) { siluAVX2(&out[0], &x[0], len(out)) },
			sumSquares: func(x []float32) float64 { return sumSquaresAVX2(&x[0], len(x)) },
			scaleRow: func(dst, src []float32, s float32, w []float32) {
				scaleRowAVX2(&dst[0], &src[0], len(dst), s, first(w))
			},
		})
	}
	return fs
}

func first(w []float32) *float32 {
	if w == nil {
		return nil
	}
	return &w[0]
}
