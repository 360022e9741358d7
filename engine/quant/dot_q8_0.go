package quant

import "fmt"

// The 8-bit activation path for Q8_0 weights, as llama.cpp's CPU backend takes it (Q8_0's
// vec_dot_type is Q8_0): the activations are quantized once per product to Q8_0 blocks with
// QuantizeQ8_0Ref, and each row's blocks are dotted with them in integers, one float
// product of the two scales per block. The weights' bytes are read as they are; the
// activations shrink from 128 to 34 bytes per block, and the inner loop becomes 8-bit
// multiply-adds instead of widening every weight to float32.

// DotRowsQ8_0 sets out[r] to the dot product of row r of rows (Q8_0, len(a)/34 blocks each,
// stored one after another) with a, activations quantized by QuantizeQ8_0Ref. Every row's
// number is the same whichever rows it is computed with, and the same on every kernel
// (dotRowsQ8_0Go says how): a token's results do not depend on what it is batched with.
// a's quants must lie in [−127, 127], as QuantizeQ8_0Ref's do: the kernels' 16-bit pair
// sums are exact only there.
func DotRowsQ8_0(rows, a []byte, out []float32) {
	const bs = 34
	if len(a)%bs != 0 || len(rows) != len(out)*len(a) {
		panic(fmt.Sprintf("quant: DotRowsQ8_0: %d bytes of rows, %d of activations, %d rows", len(rows), len(a), len(out)))
	}
	if len(out) == 0 || len(a) == 0 {
		clear(out)
		return
	}
	if dotRowsQ8_0Fast(rows, a, out) {
		return
	}
	dotRowsQ8_0Go(rows, a, out)
}

// dotRowsQ8_0Go is the reference of the vector kernels' arithmetic, which they match bit
// for bit: eight float lanes per row, lane l taking bytes 4l…4l+3 of every block; a block
// adds to each lane its exact integer sum of four products times the block's scale
// product, rounded as a product and then as a sum (no fused multiply-add); the lanes are
// folded as ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)).
func dotRowsQ8_0Go(rows, a []byte, out []float32) {
	rb := len(a)
	for r := range out {
		w := rows[r*rb : (r+1)*rb]
		var lanes [8]float32
		for b := 0; b < rb; b += 34 {
			d := half(w[b:]) * half(a[b:])
			for l := range lanes {
				var s int32
				for k := b + 2 + 4*l; k < b+6+4*l; k++ {
					s += int32(int8(w[k])) * int32(int8(a[k]))
				}
				// The conversion rounds the product, as the kernels do: without it the
				// compiler may fuse it into the sum (GOAMD64=v3, arm64).
				lanes[l] += float32(float32(s) * d)
			}
		}
		out[r] = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
	}
}

// DotRows4Q8_0 is DotRowsQ8_0 for four tokens at once, each row read once for the four: a
// holds the four tokens' activations one after another (len(a)/4 bytes each), and token i's
// result for row r goes to out[i·ldo + r]. Every number is bit for bit the one
// DotRowsQ8_0 gives the token alone, so a prompt chunk and a decode step agree.
func DotRows4Q8_0(rows, a []byte, out []float32, ldo int) {
	const bs = 34
	ab := len(a) / 4
	if len(a)%4 != 0 || ab%bs != 0 || ab == 0 || len(rows)%ab != 0 {
		panic(fmt.Sprintf("quant: DotRows4Q8_0: %d bytes of rows, %d of activations", len(rows), len(a)))
	}
	nr := len(rows) / ab
	if nr == 0 {
		return
	}
	if ldo < nr || len(out) < 3*ldo+nr {
		panic(fmt.Sprintf("quant: DotRows4Q8_0: %d outputs at stride %d for %d rows", len(out), ldo, nr))
	}
	if dotRows4Q8_0Fast(rows, a, out, ldo) {
		return
	}
	for i := range 4 {
		dotRowsQ8_0Go(rows, a[i*ab:(i+1)*ab], out[i*ldo:i*ldo+nr])
	}
}
