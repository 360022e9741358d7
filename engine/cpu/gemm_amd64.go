//go:build amd64 && !purego

package cpu

import "github.com/redlite/batch/engine/quant"

// cpuid and xgetbv are the assembly stubs of gemm_amd64.s (package quant has its own; the
// two packages do not share unexported code).
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
func xgetbv() (eax, edx uint32)

// pause hints a spin-wait loop to the CPU.
func pause()

//go:noescape
func gemm12x32AVX512(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)

//go:noescape
func gemm12x32TAVX512(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, m, n int)

//go:noescape
func transpose16AVX512(src *float32, lds int, dst *float32, ldd int)

//go:noescape
func gemm12x16TAVX512(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, m, n int)

//go:noescape
func gemm6x16AVX2(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)

//go:noescape
func gemm6x16TAVX2(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, m, n int)

// cpuFeatures reports whether the CPU and the OS support AVX2 with FMA, and AVX-512F (the
// OS must save the YMM, and for AVX-512 the ZMM and mask, registers).
func cpuFeatures() (avx2, avx512 bool) {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false, false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const fma, osxsave, avx = 1 << 12, 1 << 27, 1 << 28
	if ecx1&(fma|osxsave|avx) != fma|osxsave|avx {
		return false, false
	}
	xcr0, _ := xgetbv()
	if xcr0&6 != 6 {
		return false, false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	avx2 = ebx7&(1<<5) != 0
	avx512 = avx2 && ebx7&(1<<16) != 0 && xcr0&0xe0 == 0xe0 && quant.CPUFeatureCap != "avx2"
	return avx2, avx512
}

// useTranspose16 selects transpose16AVX512 for packing.
var useTranspose16 = func() bool { _, avx512 := cpuFeatures(); return avx512 }()

// transpose16 writes the transpose of the 16×16 block at src (row stride lds) to dst (row
// stride ldd); it reports false, doing nothing, when there is no assembly for it.
func transpose16(src []float32, lds int, dst []float32, ldd int) bool {
	if !useTranspose16 {
		return false
	}
	if len(src) < 15*lds+16 || len(dst) < 15*ldd+16 {
		panic("cpu: transpose16 out of bounds")
	}
	transpose16AVX512(&src[0], lds, &dst[0], ldd)
	return true
}

// asmKernels lists the micro-kernels this CPU can run, best first; the pure-Go kernel is
// always last.
var asmKernels = func() []gemmKernel {
	avx2, avx512 := cpuFeatures()
	var ks []gemmKernel
	if avx512 {
		ks = append(ks, gemmKernel{name: "avx512", mr: 12, nr: 32, fn: func(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
			checkTile(12, 32, k, a, lda, b, ldb, c, ldc)
			gemm12x32AVX512(k, &a[0], lda, &b[0], ldb, &c[0], ldc)
		}, fnT: func(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, m, n int) {
			checkTileT(12, 32, k, a, lda, b, ldb, c, ldc, m, n)
			gemm12x32TAVX512(k, &a[0], lda, &b[0], ldb, &c[0], ldc, m, n)
		}, narrowT: func(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, m, n int) {
			checkTileT(12, 16, k, a, lda, b, ldb, c, ldc, m, n)
			gemm12x16TAVX512(k, &a[0], lda, &b[0], ldb, &c[0], ldc, m, n)
		}})
	}
	if avx2 {
		ks = append(ks, gemmKernel{name: "avx2", mr: 6, nr: 16, fn: func(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
			checkTile(6, 16, k, a, lda, b, ldb, c, ldc)
			gemm6x16AVX2(k, &a[0], lda, &b[0], ldb, &c[0], ldc)
		}, fnT: func(k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, m, n int) {
			checkTileT(6, 16, k, a, lda, b, ldb, c, ldc, m, n)
			gemm6x16TAVX2(k, &a[0], lda, &b[0], ldb, &c[0], ldc, m, n)
		}})
	}
	return ks
}()
