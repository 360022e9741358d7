//go:build amd64 && !purego

package cpu

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/quant"
)

// TestCPUFeatureCaps runs the 8-bit MatMul and GEMM kernel tests again in child processes
// with REDLITE_CPU_FEATURES=avx2 and =avx512, so that the row-major AVX2 path, which a
// machine with AVX-512 VNNI does not take by default, is checked on it too.
func TestCPUFeatureCaps(t *testing.T) {
	if quant.CPUFeatureCap != "" || !quant.Int8Repacked(quant.Q4_K) {
		t.Skip("a capped child, or a machine that takes the AVX2 path already")
	}
	if testing.Short() {
		t.Skip("runs the tests twice more")
	}
	for _, c := range []string{"avx2", "avx512"} {
		t.Run(c, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.count=1", "-test.v", "-test.run=^(TestMatMulInt8|TestMatMulInt8Q8_0|TestGemmKernels|TestGemmWeight)$")
			cmd.Env = append(os.Environ(), "REDLITE_CPU_FEATURES="+c)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("REDLITE_CPU_FEATURES=%s: %v\n%s", c, err, out)
			}
			if !strings.Contains(string(out), "--- PASS: TestMatMulInt8") {
				t.Fatalf("REDLITE_CPU_FEATURES=%s: TestMatMulInt8 did not pass\n%s", c, out)
			}
		})
	}
}
