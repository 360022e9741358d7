//go:build !(amd64 || arm64) || purego

package cpu

// Without assembly only the pure-Go micro-kernel exists.
var asmKernels []gemmKernel

func pause() {}

func transpose16(src []float32, lds int, dst []float32, ldd int) bool { return false }
