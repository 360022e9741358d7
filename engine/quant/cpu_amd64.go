//go:build amd64 && !purego

package quant

import "os"

// cpuid and xgetbv are tiny assembly stubs (cpu_amd64.s); the feature test is done here so
// that the package needs neither golang.org/x/sys/cpu nor the runtime's internal/cpu.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
func xgetbv() (eax, edx uint32)

// hasAVX2FMA reports whether the CPU and the OS support the AVX2, FMA and F16C
// instructions the assembly kernels use (the OS must save the YMM registers).
func hasAVX2FMA() bool {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const (
		fma     = 1 << 12
		osxsave = 1 << 27
		avx     = 1 << 28
		f16c    = 1 << 29
	)
	if ecx1&(fma|osxsave|avx|f16c) != fma|osxsave|avx|f16c {
		return false
	}
	if xcr0, _ := xgetbv(); xcr0&6 != 6 { // XMM and YMM state enabled by the OS
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<5) != 0 // AVX2
}

// hasAVX512VNNI reports AVX512BW, AVX512VL and AVX512_VNNI (VPDPWSSD and VPDPBUSD on ZMM
// registers), with the OS saving the opmask and ZMM registers: what the 8-bit kernels of
// dot_q8k_vnni_amd64.s use.
func hasAVX512VNNI() bool {
	if !hasAVX2FMA() || CPUFeatureCap != "" {
		return false
	}
	_, ebx7, ecx7, _ := cpuid(7, 0)
	const (
		avx512f  = 1 << 16
		avx512bw = 1 << 30
		avx512vl = 1 << 31
		vnni     = 1 << 11 // in ECX
	)
	if ebx7&(avx512f|avx512bw|avx512vl) != avx512f|avx512bw|avx512vl || ecx7&vnni == 0 {
		return false
	}
	xcr0, _ := xgetbv()
	return xcr0&0xe6 == 0xe6
}

// CPUFeatureCap is REDLITE_CPU_FEATURES, read once: "avx2" keeps every kernel, here and in
// package cpu, to what an AVX2 CPU runs; "avx512" to AVX-512 without the VNNI kernels;
// empty (or anything else), all the CPU has. It measures and tests the other paths on one
// machine: `REDLITE_CPU_FEATURES=avx2 go test ./engine/...`.
var CPUFeatureCap = func() string {
	switch c := os.Getenv("REDLITE_CPU_FEATURES"); c {
	case "avx2", "avx512":
		return c
	}
	return ""
}()
