package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestDotRows4 checks that four tokens at once give, bit for bit, what DotRows gives each
// token alone, for every supported type (the four-token kernel where there is one, four
// DotRows calls elsewhere), with rows whose block count is and is not a multiple of 4.
func TestDotRows4(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for _, typ := range supportedTypes() {
		for _, blocks := range []int{1, 3, 4, 9} {
			cols := blocks * typ.BlockSize()
			const nrows, ldo = 5, 7
			var rows []byte
			for range nrows {
				rows = append(rows, randomRow(typ, cols, rng)...)
			}
			x := randomVec(4*cols, rng)
			got := make([]float32, 3*ldo+nrows)
			DotRows4(typ, rows, x, cols, got, ldo)
			for i := 0; i < 4; i++ {
				want := make([]float32, nrows)
				DotRows(typ, rows, x[i*cols:(i+1)*cols], want)
				for r, w := range want {
					if g := got[i*ldo+r]; math.Float32bits(g) != math.Float32bits(w) {
						t.Fatalf("%v, %d blocks: token %d row %d: %v, alone %v", typ, blocks, i, r, g, w)
					}
				}
			}
		}
	}
}
