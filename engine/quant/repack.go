package quant

import (
	"encoding/binary"
	"fmt"
)

// Repacked weights: a layout of a quantized matrix made at load for the kernels that
// interleave rows (see dot_q4kr_amd64.s), kept beside the GGUF's own bytes, which the
// other paths (exact dots, dequantization, the GPU) go on reading.
//
// Q4_K, sixteen rows at a time ("Q4_Kx16"): per block of the sixteen rows a group-block of
// 2,368 bytes (the rows' own blocks take 2,304): d[16] and dmin[16] f16, the eight scales
// and the eight mins of each row as bytes, sub-block by sub-block ([8][16]), then the
// nibbles, 64 bytes for every four bytes of each of the four 32-byte chunks: row r's
// bytes 4g…4g+3 of chunk j at 320 + 512j + 64g + 4r. Rows past the matrix's last group
// are zeros.
//
// Q5_K, sixteen rows at a time: per block of the sixteen rows 2,880 bytes (the rows' own
// take 2,816): Q4_K's header (d, dmin, scales, mins: 320 bytes), then for chunk j 640
// bytes at 320 + 640j: the nibbles as Q4_K's (row r's bytes 4g…4g+3 at 64g + 4r), then two
// planes of fifth bits, for the low nibbles' values at 512 and the high ones' at 576: bit g
// of byte 4r + i is the bit of row r's value at quad g, byte i.
//
// Q6_K, sixteen rows at a time: per block of the sixteen rows 3,360 bytes, as many as the
// rows' own blocks: d[16] f16, the sixteen scales of each row ([16][16] int8), then for
// each sub-block of sixteen values (quads A, B, C, D of four) 192 bytes: A's and B's low
// nibbles (A in bits 0–3), C's and D's, and the four quads' high two bits (A in bits 0–1,
// B 2–3, C 4–5, D 6–7), row r's four bytes at 4r in each 64.
//
// Q8_0, sixteen rows at a time: per block of 32 values of the sixteen rows 544 bytes, as
// many as the rows' own blocks: d[16] f16, then for each quad q (values 4q…4q+3) 64 bytes,
// row r's four quants at 32 + 64q + 4r, each stored plus 128 as an unsigned byte (the
// operand VPDPBUSD multiplies unsigned; dot_q8_0r_amd64.s takes the 128 back).

// RepackRows is the number of rows a repacked group holds.
const RepackRows = 16

// q4kr16Block and q6kr16Block are the bytes of one group-block.
const (
	q4kr16Block  = 2368
	q5kr16Block  = 2880
	q6kr16Block  = 3360
	q8_0r16Block = 544
)

// groupBlock is the bytes of t's group-block, 0 if t has no repacked layout.
func groupBlock(t Type) int {
	switch t {
	case Q4_K:
		return q4kr16Block
	case Q5_K:
		return q5kr16Block
	case Q6_K:
		return q6kr16Block
	case Q8_0:
		return q8_0r16Block
	}
	return 0
}

// RepackedBytes is the size of t's repacked layout of a rows × cols matrix, 0 if t has
// none.
func RepackedBytes(t Type, rows, cols int) int {
	bs := t.BlockSize()
	if bs == 0 || cols%bs != 0 {
		return 0
	}
	return (rows + RepackRows - 1) / RepackRows * (cols / bs) * groupBlock(t)
}

// Repack returns t's repacked layout of the rows × cols matrix data, or nil if this
// machine has no kernel for it (Int8Repacked).
func Repack(t Type, data []byte, rows, cols int) []byte {
	if !Int8Repacked(t) || RepackedBytes(t, rows, cols) == 0 {
		return nil
	}
	return RepackInto(t, make([]byte, RepackedBytes(t, rows, cols)), data, rows, cols)
}

// RepackInto is Repack into dst, which must hold RepackedBytes(t, rows, cols) bytes; it
// returns dst.
func RepackInto(t Type, dst, data []byte, rows, cols int) []byte {
	if !Int8Repacked(t) || RepackedBytes(t, rows, cols) == 0 || len(dst) != RepackedBytes(t, rows, cols) {
		panic(fmt.Sprintf("quant: RepackInto %v: %d bytes for %d × %d", t, len(dst), rows, cols))
	}
	if len(data) != rows*t.RowBytes(cols) {
		panic(fmt.Sprintf("quant: RepackInto %v: %d bytes of rows for %d × %d", t, len(data), rows, cols))
	}
	switch t {
	case Q5_K:
		return repackGroups(t, data, dst, rows, cols, q5kr16Block, fillQ5_K)
	case Q6_K:
		return repackGroups(t, data, dst, rows, cols, q6kr16Block, fillQ6_K)
	case Q8_0:
		return repackGroups(t, data, dst, rows, cols, q8_0r16Block, fillQ8_0)
	}
	return repackGroups(t, data, dst, rows, cols, q4kr16Block, fillQ4_K)
}

// repackGroups lays the rows × cols matrix data of type t out in out by groups of
// RepackRows rows: for each group and each of t's blocks, one out-block of outBlock bytes,
// which fill writes from each row's block (src) as the group's row r.
func repackGroups(t Type, data, out []byte, rows, cols, outBlock int, fill func(dst, src []byte, r int)) []byte {
	nb, rb, bb := cols/t.BlockSize(), t.RowBytes(cols), t.TypeSize()
	clear(out)
	for g := 0; g*RepackRows < rows; g++ {
		for b := 0; b < nb; b++ {
			dst := out[(g*nb+b)*outBlock:][:outBlock]
			for r := 0; r < RepackRows && g*RepackRows+r < rows; r++ {
				fill(dst, data[(g*RepackRows+r)*rb+b*bb:][:bb], r)
			}
		}
	}
	return out
}

// repackK4Header writes the first 320 bytes of a Q4_K or Q5_K out-block for row r: d and
// dmin of the 16 rows, then their 8 sub-block scales and mins unpacked to bytes.
func repackK4Header(dst, src []byte, r int) {
	copy(dst[2*r:], src[0:2])
	copy(dst[32+2*r:], src[2:4])
	for k := 0; k < 8; k++ {
		sc, m := scaleMinK4(k, src[4:16])
		dst[64+16*k+r] = sc
		dst[192+16*k+r] = m
	}
}

// The fill functions write row r's block src into its group's out-block dst.

func fillQ4_K(dst, src []byte, r int) {
	repackK4Header(dst, src, r)
	for j := 0; j < 4; j++ {
		for q := 0; q < 8; q++ {
			copy(dst[320+512*j+64*q+4*r:][:4], src[16+32*j+4*q:])
		}
	}
}

func fillQ5_K(dst, src []byte, r int) {
	repackK4Header(dst, src, r)
	qh, qs := src[16:48], src[48:176]
	for j := 0; j < 4; j++ {
		chunk := dst[320+640*j:][:640]
		for q := 0; q < 8; q++ {
			copy(chunk[64*q+4*r:][:4], qs[32*j+4*q:])
			for i := 0; i < 4; i++ {
				h := qh[4*q+i] >> (2 * j)
				chunk[512+4*r+i] |= h & 1 << q
				chunk[576+4*r+i] |= h >> 1 & 1 << q
			}
		}
	}
}

func fillQ6_K(dst, src []byte, r int) {
	copy(dst[2*r:], src[208:210])
	q := q6kValues(src)
	for s := 0; s < 16; s++ {
		dst[32+16*s+r] = src[192+s]
		sub := dst[288+192*s:]
		for i := 0; i < 4; i++ {
			a, b, c, d := q[16*s+i], q[16*s+4+i], q[16*s+8+i], q[16*s+12+i]
			sub[4*r+i] = a&15 | b<<4
			sub[64+4*r+i] = c&15 | d<<4
			sub[128+4*r+i] = a>>4 | b>>4<<2 | c>>4<<4 | d>>4<<6
		}
	}
}

func fillQ8_0(dst, src []byte, r int) {
	copy(dst[2*r:], src[:2])
	for q := 0; q < 8; q++ {
		// +128 on each of four bytes, mod 256: flip each top bit.
		binary.LittleEndian.PutUint32(dst[32+64*q+4*r:], binary.LittleEndian.Uint32(src[2+4*q:])^0x80808080)
	}
}

// q6kValues is a Q6_K block's 256 values as stored, 0…63 (the value is q − 32).
func q6kValues(b []byte) (q [QK_K]byte) {
	for n := 0; n < 2; n++ {
		ql, qh := b[64*n:64*n+64], b[128+32*n:160+32*n]
		for l := 0; l < 32; l++ {
			h := qh[l]
			q[128*n+l] = ql[l]&0xf | (h&3)<<4
			q[128*n+l+32] = ql[l+32]&0xf | (h>>2&3)<<4
			q[128*n+l+64] = ql[l]>>4 | (h>>4&3)<<4
			q[128*n+l+96] = ql[l+32]>>4 | (h>>6&3)<<4
		}
	}
	return q
}

// DotRepackedQ8K sets out[i·ldo + r − r0] to the dot product of row r of a repacked
// matrix (t, cols) with token i of a, for rows [r0, r1), r0 a multiple of RepackRows, and
// the len(a)/(cols/256) tokens of a (one after another). Each token's numbers are what it
// gets alone, and bit for bit what the pure-Go kernel gives it over the GGUF's rows (the
// AVX2 row kernels of DotRowsQ8K agree with that to rounding only: a matrix takes one or
// the other for all its products).
func DotRepackedQ8K(t Type, packed []byte, cols, r0, r1 int, a []Q8K, out []float32, ldo int) {
	nb := cols / QK_K
	if !Int8Repacked(t) || r0%RepackRows != 0 || nb == 0 || len(a)%nb != 0 || r1 <= r0 {
		panic(fmt.Sprintf("quant: DotRepackedQ8K %v: rows [%d, %d), %d blocks of %d", t, r0, r1, len(a), nb))
	}
	n := len(a) / nb
	g0, g1 := r0/RepackRows, (r1+RepackRows-1)/RepackRows
	gb := nb * groupBlock(t)
	if len(packed) < g1*gb || (n > 0 && len(out) < (n-1)*ldo+r1-r0) {
		panic(fmt.Sprintf("quant: DotRepackedQ8K %v: %d bytes, rows [%d, %d), %d outputs", t, len(packed), r0, r1, len(out)))
	}
	dotRepacked(t, packed[g0*gb:g1*gb], nb, r1-r0, a, n, out, ldo)
}

// DotRepackedQ8_0 is DotRepackedQ8K for a repacked Q8_0 matrix and activations quantized
// by QuantizeQ8_0Ref (len(a)/(cols/32·34) tokens, one after another): each token's numbers
// are bit for bit DotRowsQ8_0's over the GGUF's rows, whatever it is batched with.
func DotRepackedQ8_0(packed []byte, cols, r0, r1 int, a []byte, out []float32, ldo int) {
	nb := cols / 32
	if !Int8Repacked(Q8_0) || cols%32 != 0 || r0%RepackRows != 0 || nb == 0 || len(a)%(nb*34) != 0 || r1 <= r0 {
		panic(fmt.Sprintf("quant: DotRepackedQ8_0: rows [%d, %d), %d bytes of activations for %d columns", r0, r1, len(a), cols))
	}
	n := len(a) / (nb * 34)
	g0, g1 := r0/RepackRows, (r1+RepackRows-1)/RepackRows
	gb := nb * q8_0r16Block
	if len(packed) < g1*gb || (n > 0 && len(out) < (n-1)*ldo+r1-r0) {
		panic(fmt.Sprintf("quant: DotRepackedQ8_0: %d bytes, rows [%d, %d), %d outputs", len(packed), r0, r1, len(out)))
	}
	dotRepackedQ8_0(packed[g0*gb:g1*gb], nb, r1-r0, a, n, out, ldo)
}
