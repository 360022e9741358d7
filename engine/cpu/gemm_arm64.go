//go:build arm64 && !purego

package cpu

import "golang.org/x/sys/cpu"

//go:noescape
func gemm8x8NEON(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)

// neonKernel is the NEON micro-kernel (gemm_arm64.s). Its results are bit-identical to
// goKernel's: each element is the same chain of fused multiply-adds in k order.
var neonKernel = gemmKernel{name: "neon", mr: 8, nr: 8, fn: func(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	checkTile(8, 8, k, a, lda, b, ldb, c, ldc)
	gemm8x8NEON(k, &a[0], lda, &b[0], ldb, &c[0], ldc)
}}

// asmKernels lists the micro-kernels this CPU can run, best first; the pure-Go kernel is
// always last. Every arm64 CPU Go runs on has Advanced SIMD; the check keeps the choice in
// this one place.
var asmKernels = func() []gemmKernel {
	if cpu.ARM64.HasASIMD {
		return []gemmKernel{neonKernel}
	}
	return nil
}()

func pause() {}

// transpose16 has no NEON version: packing falls back to the scalar loop.
func transpose16(src []float32, lds int, dst []float32, ldd int) bool { return false }
