//go:build amd64 && !purego

package quant

import (
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestCPUFeatureCaps runs this package's kernel tests again in child processes with
// REDLITE_CPU_FEATURES=avx2 and =avx512: the paths of CPUs without AVX-512 VNNI or
// AVX-512, which this machine would otherwise never take, must still agree with the Go
// kernels (no regression on the AVX2 path while the VNNI kernels are the default here).
func TestCPUFeatureCaps(t *testing.T) {
	if CPUFeatureCap != "" || !useAsm {
		t.Skip("a capped child, or no AVX2 kernels to cap")
	}
	if testing.Short() {
		t.Skip("runs the kernel tests twice more")
	}
	for _, c := range []string{"avx2", "avx512"} {
		t.Run(c, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.count=1", "-test.v",
				"-test.run=^(TestKernelSetCapped|TestDotQ8KAsm|TestDotRows4Q8K|TestDotRows|TestKernelsAsmVsGo|TestVNNIKernels|TestDotRowsQ8_0|TestDotRowsQ8_0Asm|TestQuantizeQ8_0Ref)$")
			cmd.Env = append(os.Environ(), "REDLITE_CPU_FEATURES="+c)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("REDLITE_CPU_FEATURES=%s: %v\n%s", c, err, out)
			}
			// The child must have run the check of its cap, not skipped everything.
			if !strings.Contains(string(out), "--- PASS: TestKernelSetCapped") {
				t.Fatalf("REDLITE_CPU_FEATURES=%s: TestKernelSetCapped did not run\n%s", c, out)
			}
		})
	}
}

// TestKernelSetCapped checks, in a child of TestCPUFeatureCaps, that the cap took: the
// kernel set named is the cap (or less, on a CPU without AVX-512), and no type takes the
// repacked kernels.
func TestKernelSetCapped(t *testing.T) {
	c := CPUFeatureCap
	if c == "" {
		t.Skip("run by TestCPUFeatureCaps with REDLITE_CPU_FEATURES set")
	}
	want := c
	if c == "avx512" && !cpuAVX512F() {
		want = "avx2"
	}
	if got := KernelSet(); got != want {
		t.Errorf("REDLITE_CPU_FEATURES=%s: kernel set %q, want %q", c, got, want)
	}
	for _, typ := range []Type{Q4_K, Q5_K, Q6_K} {
		if Int8Repacked(typ) || RepackedBytes(typ, 16, QK_K) > 0 && Repack(typ, make([]byte, 16*typ.RowBytes(QK_K)), 16, QK_K) != nil {
			t.Errorf("REDLITE_CPU_FEATURES=%s: %v still repacked", c, typ)
		}
		if got := Int8Kernel(typ); strings.Contains(got, "vnni") {
			t.Errorf("REDLITE_CPU_FEATURES=%s: %v kernels %q", c, typ, got)
		}
	}
}

// TestF32ToF16SliceAsm checks VCVTPS2PH's narrowing against F32ToF16 bit for bit over every
// exponent and sign with many mantissas (ties, subnormal results, overflow, Inf, quiet
// and signalling NaN payloads), the tail included; a kernel that truncates instead of
// rounding, or drops the sign, fails it.
func TestF32ToF16SliceAsm(t *testing.T) {
	if !useAsm {
		t.Skip("no F16C on this machine")
	}
	const n = 1<<22 + 13 // not a multiple of 16: the Go tail runs too
	src := make([]float32, n)
	for i := range src {
		// 4,194,317 patterns: the top bits of i walk sign and exponent, the low ones and a
		// multiplier spread over the mantissa, hitting its 13 dropped bits' ties.
		b := uint32(i)<<10 ^ uint32(i)*2654435761>>22
		if i%7 == 0 {
			b = b&^0x1fff | 0x1000 // exactly half way between two halves
		}
		src[i] = math.Float32frombits(b)
	}
	got := make([]uint16, n)
	if !narrowF16(src, got) {
		t.Fatal("narrowF16 did not run")
	}
	for i, f := range src {
		if want := F32ToF16(f); got[i] != want {
			t.Fatalf("%#08x: %#04x, Go %#04x", math.Float32bits(f), got[i], want)
		}
	}
}
