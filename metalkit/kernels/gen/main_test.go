package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestGeneratedUpToDate fails when a generated file of package kernels differs from what
// the generator writes now (engine/quant's grids or the type list changed without
// `go generate ./metalkit/kernels`).
func TestGeneratedUpToDate(t *testing.T) {
	out, err := outputs(filepath.Join("..", gridsPath))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range out {
		got, err := os.ReadFile(filepath.Join("..", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./metalkit/kernels", name)
		}
	}
}

// TestTablesFromGrids checks a few entries against values stated in the formats (first
// and last grid points, the IQ4 levels, the sign parity), so a misread source fails here.
func TestTablesFromGrids(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", gridsPath))
	if err != nil {
		t.Fatal(err)
	}
	vals, err := arrayLiterals(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range grids {
		if len(vals[g.goName]) == 0 {
			t.Errorf("%s: no values", g.goName)
		}
	}
	if got := vals["iq2xxsGrid"][0]; got != 0x0808080808080808 {
		t.Errorf("iq2xxsGrid[0] = %#x", got)
	}
	if got := vals["iq1sGrid"][0]; got != 0xffffffffffffffff {
		t.Errorf("iq1sGrid[0] = %#x", got)
	}
	if got := int8(vals["kvaluesIQ4NL"][0]); got != -127 {
		t.Errorf("kvaluesIQ4NL[0] = %d", got)
	}
	h, err := quantTables(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"constant uchar iq1s_grid[2048][8]", "constant uchar iq2xs_grid[512][8]", "constant float kvalues_iq4nl[16] = {-127.0f", "ksigns_iq2xs[128] = {\n    0, 129, 130, 3,"} {
		if !bytes.Contains(h, []byte(want)) {
			t.Errorf("header lacks %q", want)
		}
	}
}
