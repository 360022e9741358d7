package quant

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzDequantize feeds arbitrary bytes, as a GGUF file could hold, to every decoder and the
// dot products: any length must give an error or a result, never a panic.
func FuzzDequantize(f *testing.F) {
	types := supportedTypes()
	// ggml's names keep the K of the K-quants upper-case (q4_K.raw.bin): match by lower case.
	raws, _ := filepath.Glob("testdata/ggml/*.raw.bin")
	byName := map[string]string{}
	for _, r := range raws {
		byName[strings.ToLower(filepath.Base(r))] = r
	}
	seeded := 0
	for i, typ := range types {
		if raw, err := os.ReadFile(byName[strings.ToLower(typ.String())+".raw.bin"]); err == nil {
			f.Add(uint8(i), uint16(0), raw[:min(len(raw), 2*typ.TypeSize())])
			seeded++
		}
	}
	if seeded < len(raws)/2 {
		f.Fatalf("only %d of %d types found their ggml blocks in testdata/ggml", seeded, len(types))
	}
	f.Add(uint8(0), uint16(3), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, which uint8, n uint16, data []byte) {
		typ := types[int(which)%len(types)]
		// An arbitrary claimed length first: mismatches must be errors.
		if err := Dequantize(typ, data, make([]float32, n)); err == nil && typ.RowBytes(int(n)) != len(data) {
			t.Fatalf("%v: %d bytes accepted for %d elements", typ, len(data), n)
		}
		// Then the whole blocks the data holds.
		nb := len(data) / typ.TypeSize()
		m := nb * typ.BlockSize()
		data = data[:nb*typ.TypeSize()]
		dst := make([]float32, m)
		if err := Dequantize(typ, data, dst); err != nil {
			t.Fatalf("%v: %d whole blocks rejected: %v", typ, nb, err)
		}
		x := make([]float32, m)
		for i := range x {
			x[i] = 1
		}
		_ = DotF32(typ, data, x)
	})
}
