package device

import (
	"strings"
	"testing"
)

// GEMM.Check is what every GEMM device applies: each way of handing it operands it cannot
// run is refused with a message naming the operand.
func TestGEMMCheck(t *testing.T) {
	buf := func(n int64) Buffer { return nullBuffer(n) }
	good := GEMM{
		M: 3, N: 5, K: 8,
		A: Matrix{Buffer: buf(256 + 3*32), Offset: 256, RowBytes: 32},
		B: Matrix{Buffer: buf(5 * 16), RowBytes: 16, Type: Float16},
		// Columns 4..8 of a [3, 10] output, as a chunk of output features writes them.
		C: Matrix{Buffer: buf(3 * 40), Offset: 16, RowBytes: 40},
	}
	if err := good.Check(); err != nil {
		t.Fatalf("a valid GEMM refused: %v", err)
	}
	for name, c := range map[string]struct {
		edit func(g *GEMM)
		want string
	}{
		"empty":          {func(g *GEMM) { g.M = 0 }, "GEMM of 0"},
		"f16 output":     {func(g *GEMM) { g.C.Type = Float16 }, "must be f32"},
		"no buffer":      {func(g *GEMM) { g.B.Buffer = nil }, "operand B has no buffer"},
		"odd offset":     {func(g *GEMM) { g.A.Offset = 258 }, "operand A at offset 258"},
		"short rows":     {func(g *GEMM) { g.B.RowBytes = 14 }, "operand B: rows of 14 bytes"},
		"past buffer":    {func(g *GEMM) { g.C.Offset = 24 }, "operand C (3×5 at offset 24"},
		"past buffer A":  {func(g *GEMM) { g.M = 4 }, "operand A (4×8"},
		"unaligned rows": {func(g *GEMM) { g.C.RowBytes = 42 }, "operand C at offset 16 with rows of 42"},
	} {
		g := good
		c.edit(&g)
		err := g.Check()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, c.want)
		}
	}
}
