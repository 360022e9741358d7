package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestDequantizeFastMatchesDecoders checks the assembly dequantizers (and F16 widening) bit for bit against the
// Go block decoders (which the ggml fixture tests pin to ggml), on random rows with sane
// scales and on raw random bytes, whose scales may be Inf or NaN.
func TestDequantizeFastMatchesDecoders(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, typ := range []Type{F16, Q8_0, Q4_K, Q6_K, IQ2_XXS} {
		for _, raw := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/raw=%v", typ, raw), func(t *testing.T) {
				sizes := []int{256, 512, 4096, 4096 + 256}
				if typ.BlockSize() == 1 {
					sizes = append(sizes, 100) // a tail shorter than a vector
				}
				for _, n := range sizes {
					row := randomRow(typ, n, rng)
					if raw {
						for i := range row {
							row[i] = byte(rng.Uint32())
						}
					}
					got := make([]float32, n)
					if err := Dequantize(typ, row, got); err != nil {
						t.Fatal(err)
					}
					want := make([]float32, n)
					dec := decoderByID[typ]
					bs, ts := typ.BlockSize(), typ.TypeSize()
					for i, o := 0, 0; i < n; i, o = i+bs, o+ts {
						dec(row[o:o+ts], want[i:i+bs])
					}
					for i := range got {
						g, w := got[i], want[i]
						if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
							t.Fatalf("n=%d element %d: %v (%#x), want %v (%#x)", n, i, g, math.Float32bits(g), w, math.Float32bits(w))
						}
					}
				}
			})
		}
	}
}
