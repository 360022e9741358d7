//go:build amd64 && !purego

package quant

import (
	"math/rand/v2"
	"testing"
)

// TestDotRowsQ8_0Asm checks the AVX2 kernel against the reference on this machine whatever
// the kernel DotRowsQ8_0 would choose.
func TestDotRowsQ8_0Asm(t *testing.T) {
	if !useAsm {
		t.Skip("no AVX2")
	}
	cs := q8_0Cases(rand.New(rand.NewPCG(31, 9)))
	asm := func(rows, a []byte, out []float32) {
		dotQ8_0Q8_0RowsAVX2(&rows[0], &a[0], len(a)/34, len(out), &out[0])
	}
	if err := checkRowsQ8_0(asm, cs); err != nil {
		t.Error(err)
	}
}
