package quant_test

// The test that reads the fixtures lives in package quant_test: the fixtures package builds
// some of its files with this package's encoders.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/quant"
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

func TestDequantizeMatchesGGMLFixtures(t *testing.T) {
	root := fixtures.Path(t, "dequant")
	dirs, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[quant.Type]int{}
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
				typ, err := quant.ParseType(e.Type)
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
				want := quant.ReadFloats(t, filepath.Join(dir, e.F32))
				if len(want) != e.Rows*e.Ne[0] || len(raw) != e.Rows*e.RowBytes {
					t.Fatalf("fixture sizes: %d floats, %d bytes for %d rows of %d", len(want), len(raw), e.Rows, e.Ne[0])
				}
				quant.CheckBitIdentical(t, typ, raw, want)
				seen[typ]++
			})
		}
	}
	for _, typ := range []quant.Type{quant.F16, quant.Q8_0, quant.Q2_K, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.IQ2_XXS, quant.IQ2_S, quant.IQ3_XXS, quant.IQ3_S} {
		if seen[typ] == 0 {
			t.Errorf("no fixture exercised %v", typ)
		}
	}
}
