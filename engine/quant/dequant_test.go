package quant

import (
	"encoding/binary"
	"math"
	"os"
	"testing"
)

func readFloats(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b)%4 != 0 {
		t.Fatalf("%s: %d bytes is not a whole number of float32", path, len(b))
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// checkBitIdentical dequantizes raw with our code and compares every float's bits with want.
func checkBitIdentical(t *testing.T, typ Type, raw []byte, want []float32) {
	t.Helper()
	got := make([]float32, len(want))
	if err := Dequantize(typ, raw, got); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if bad < 5 {
				t.Errorf("%v element %d (block %d): got %g (%#08x), ggml %g (%#08x)", typ, i,
					i/typ.BlockSize(), got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%v: %d of %d elements differ", typ, bad, len(want))
	}
}
