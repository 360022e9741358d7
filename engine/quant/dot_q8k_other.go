//go:build !amd64 || purego

package quant

// Without assembly the 8-bit path runs the pure-Go kernels: faster than the exact path
// only for the types whose exact dot is block expansion and a float dot.

func int8Asm(Type) bool { return false }

func int8Faster(t Type) bool { return int8GoFaster(t) }

func dotRowsQ8KFast(Type, []byte, []Q8K, []float32) bool { return false }

func int8Rows4(Type) bool { return false }

func dotRows4Q8K(Type, []byte, []Q8K, int, []float32, int) {
	panic("quant: no four-token 8-bit kernel")
}

func absMax256(x []float32) float32 { return absMax256Go(x) }

func quantizeQs(x []float32, iscale float32, b *Q8K) { quantizeQsGo(x, iscale, b) }

func int8Repacked(Type) bool { return false }

func dotRepacked(Type, []byte, int, int, []Q8K, int, []float32, int) {
	panic("quant: no repacked 8-bit kernel")
}

func dotRepackedQ8_0([]byte, int, int, []byte, int, []float32, int) {
	panic("quant: no repacked 8-bit kernel")
}

func int8Kernel(Type) string { return "go" }

func dotRowsQ8_0Fast([]byte, []byte, []float32) bool { return false }

func dotRows4Q8_0Fast([]byte, []byte, []float32, int) bool { return false }

func quantizeQ8_0Fast([]float32, []byte) bool { return false }

func int8Q8_0Kernel() string { return "go" }
