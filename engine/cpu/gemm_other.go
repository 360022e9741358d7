//go:build !amd64 || purego

package cpu

// Without assembly only the pure-Go micro-kernel exists.
var asmKernels []gemmKernel

func pause() {}
