package quant

import "math"

// MXFP4 (OCP microscaling FP4, gpt-oss's expert weights): 32 values per 17-byte block, an
// E8M0 exponent byte e and 16 bytes of FP4 (E2M1) nibbles, value j the low nibble of byte
// j and value j+16 its high nibble. A value is kvaluesMXFP4[nibble] · 2^(e−128): the
// doubled E2M1 level times half the block scale 2^(e−127).

// e8m0Half is half the scale an E8M0 byte encodes, 2^(e−128), as ggml builds it: the bit
// pattern of the float directly, subnormal for e < 2 (2^−128 and 2^−127).
func e8m0Half(e byte) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

// e8m0HalfTable is e8m0Half of every byte, for the vector kernels.
var e8m0HalfTable = func() (t [256]float32) {
	for e := range t {
		t[e] = e8m0Half(byte(e))
	}
	return t
}()

func deqMXFP4(b []byte, y []float32) {
	d := e8m0Half(b[0])
	for j, q := range b[1:17] {
		y[j] = float32(kvaluesMXFP4[q&0xf]) * d
		y[j+16] = float32(kvaluesMXFP4[q>>4]) * d
	}
}

// mxfp4Levels widens kvaluesMXFP4 to floats for the dot products.
var mxfp4Levels = func() (l [16]float32) {
	for i, v := range kvaluesMXFP4 {
		l[i] = float32(v)
	}
	return l
}()

// dotMXFP4Go is the reference dot product of an MXFP4 row with x. It sums in eight lanes,
// the order of one 8-wide vector register: lane i of a block takes the products of
// elements i, i+8, i+16 and i+24 in that order, the block's lanes are scaled and added to
// the row's, and the row's eight are folded as a vector unit folds them, (0+4, 1+5, 2+6,
// 3+7), then (0+2, 1+3), then 0+1. The amd64 kernel computes exactly this.
func dotMXFP4Go(row []byte, x []float32) float32 {
	var a [8]float32
	for len(x) >= 32 {
		b := row[:17]
		d := e8m0Half(b[0])
		q := b[1:17]
		for i := range 8 {
			s := mxfp4Levels[q[i]&0xf] * x[i]
			s += mxfp4Levels[q[i+8]&0xf] * x[i+8]
			s += mxfp4Levels[q[i]>>4] * x[i+16]
			s += mxfp4Levels[q[i+8]>>4] * x[i+24]
			a[i] += d * s
		}
		row, x = row[17:], x[32:]
	}
	return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}
