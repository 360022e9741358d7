//go:build amd64 && !purego

package cpu

//go:noescape
func softmaxAVX512(x *float32, n int, scale float32)

//go:noescape
func swigluAVX512(out, gate, up *float32, n int)

// useAVX512 selects the AVX-512 exponential kernels.
var useAVX512 = func() bool { _, avx512 := cpuFeatures(); return avx512 }()

func softmax32(x []float32, scale float32) {
	if !useAVX512 || len(x) == 0 {
		softmaxGo(x, scale)
		return
	}
	softmaxAVX512(&x[0], len(x), scale)
}

func swiglu(out, g, u []float32) {
	if !useAVX512 || len(out) == 0 {
		swigluGo(out, g, u)
		return
	}
	if len(g) != len(out) || len(u) != len(out) {
		panic("cpu: swiglu of unequal lengths")
	}
	swigluAVX512(&out[0], &g[0], &u[0], len(out))
}
