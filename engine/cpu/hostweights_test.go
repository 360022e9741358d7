package cpu

import (
	"testing"

	"github.com/redlite/batch/engine/quant"
)

// TestHostWeightBytes: the heap a bound weight holds beside the mapping is counted, so that
// the daemon can keep it out of the planner's budget: the repacked rows where this machine's
// kernels repack the type, nothing for an exact-path or float32 weight.
func TestHostWeightBytes(t *testing.T) {
	const rows, cols = 272, 512 // over smallVector, so not expanded to float32
	data := make([]byte, quant.Q4_K.RowBytes(cols)*rows)
	b := New(1)
	m, err := b.Map(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Weight(m, "w", quant.Q4_K, []int{cols, rows}, 0); err != nil {
		t.Fatal(err)
	}
	want := int64(0)
	if b.int8(quant.Q4_K) && quant.Int8Repacked(quant.Q4_K) {
		want = int64(quant.RepackedBytes(quant.Q4_K, rows, cols))
		if want < int64(len(data)) {
			t.Fatalf("RepackedBytes %d is less than the matrix's %d bytes", want, len(data))
		}
	}
	if got := b.HostWeightBytes(); got != want {
		t.Errorf("HostWeightBytes = %d after one Q4_K matrix, want %d", got, want)
	}
	exact := New(1)
	exact.SetDot(DotExact)
	if _, err := exact.Weight(m, "w", quant.Q4_K, []int{cols, rows}, 0); err != nil {
		t.Fatal(err)
	}
	if got := exact.HostWeightBytes(); got != 0 {
		t.Errorf("the exact path holds %d bytes beside the mapping, want 0", got)
	}
	t.Logf("Q4_K %d×%d: %d bytes in the file, %d repacked here (%s)", rows, cols, len(data), want, quant.KernelSet())
}
