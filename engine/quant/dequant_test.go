package quant

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlite/batch/internal/fixtures"
)

type dequantEntry struct {
	Tensor    string `json:"tensor"`
	Type      string `json:"type"`
	Ne        []int  `json:"ne"`
	Rows      int    `json:"rows"`
	RowBytes  int    `json:"row_bytes"`
	BlockSize int    `json:"block_size"`
	TypeSize  int    `json:"type_size"`
	F32       string `json:"f32"`
	Raw       string `json:"raw"`
}

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

func TestDequantizeMatchesGGMLFixtures(t *testing.T) {
	root := fixtures.Path(t, "dequant")
	dirs, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[Type]int{}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		dir := filepath.Join(root, d.Name())
		var idx struct {
			Tensors []dequantEntry `json:"tensors"`
		}
		b, err := os.ReadFile(filepath.Join(dir, "index.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &idx); err != nil {
			t.Fatalf("%s/index.json: %v", d.Name(), err)
		}
		for _, e := range idx.Tensors {
			t.Run(d.Name()+"/"+strings.TrimSuffix(e.Raw, ".raw.bin"), func(t *testing.T) {
				typ, err := ParseType(e.Type)
				if err != nil {
					t.Fatal(err)
				}
				if typ.BlockSize() != e.BlockSize || typ.TypeSize() != e.TypeSize {
					t.Errorf("%v: block %d × %d bytes, index.json says %d × %d", typ,
						typ.BlockSize(), typ.TypeSize(), e.BlockSize, e.TypeSize)
				}
				if got := typ.RowBytes(e.Ne[0]); got != e.RowBytes {
					t.Errorf("%v: RowBytes(%d) = %d, index.json says %d", typ, e.Ne[0], got, e.RowBytes)
				}
				raw, err := os.ReadFile(filepath.Join(dir, e.Raw))
				if err != nil {
					t.Fatal(err)
				}
				want := readFloats(t, filepath.Join(dir, e.F32))
				if len(want) != e.Rows*e.Ne[0] || len(raw) != e.Rows*e.RowBytes {
					t.Fatalf("fixture sizes: %d floats, %d bytes for %d rows of %d", len(want), len(raw), e.Rows, e.Ne[0])
				}
				checkBitIdentical(t, typ, raw, want)
				seen[typ]++
			})
		}
	}
	for _, typ := range []Type{F16, Q8_0, Q2_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_S, IQ3_XXS, IQ3_S} {
		if seen[typ] == 0 {
			t.Errorf("no fixture exercised %v", typ)
		}
	}
}
