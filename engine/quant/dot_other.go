//go:build !(amd64 || arm64) || purego

package quant

// Without assembly every kernel is the pure-Go one.
const useAsm = false

// useAVX512 exists for the tests that switch kernels.
var useAVX512 = false

func dotF32(a, b []float32) float32           { return dotF32Go(a, b) }
func axpy(alpha float32, x, y []float32)      { axpyGo(alpha, x, y) }
func dotF16(h []uint16, x []float32) float32  { return dotF16Go(h, x) }
func dotQ8_0(row []byte, x []float32) float32 { return dotQ8_0Go(row, x) }
func dotQ4_K(row []byte, x []float32) float32 { return dotQ4_KGo(row, x) }
func dotQ6_K(row []byte, x []float32) float32 { return dotQ6_KGo(row, x) }

func dotQ8_0Q8_0(w, a []byte) float32 { return dotQ8_0Q8_0Go(w, a) }

func dotIQ2_XXS(row []byte, x []float32) float32 { return dotIQ2_XXSGo(row, x) }

func dotQ5_K(row []byte, x []float32) float32 { return dotQ5_KGo(row, x) }

func dotMXFP4(row []byte, x []float32) float32 { return dotMXFP4Go(row, x) }

func dotRowsFast(Type, []byte, []float32, []float32) bool { return false }

func dotRows4Fast(Type, []byte, []float32, int, []float32, int) bool { return false }

func kernelSet() string { return "go" }
