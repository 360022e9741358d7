package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"unsafe"
)

// DotF32 returns the dot product of one row of type t holding len(x) elements with the
// float32 activations x. The result equals the float32 dot product of the dequantized row
// with x up to the rounding of a different summation order.
//
// DotF32 sits in the innermost loop of every matrix product, so it does not return errors:
// the caller checks each weight tensor once with CheckRow, and a row of the wrong length or
// an unsupported type panics here as a programming error.
func DotF32(t Type, row []byte, x []float32) float32 {
	n := len(x)
	if int(t) >= len(decoderByID) || decoderByID[t] == nil {
		panic(fmt.Sprintf("quant: DotF32 on unsupported type %v", t))
	}
	bs, ts := t.BlockSize(), t.TypeSize()
	if n%bs != 0 || len(row) != n/bs*ts {
		panic(fmt.Sprintf("quant: DotF32 %v: %d bytes for %d elements", t, len(row), n))
	}
	if n == 0 {
		return 0
	}
	switch t {
	case F32:
		if viewable(row, 4) {
			return Dot(unsafe.Slice((*float32)(unsafe.Pointer(&row[0])), n), x)
		}
	case F16:
		if viewable(row, 2) {
			return dotF16(unsafe.Slice((*uint16)(unsafe.Pointer(&row[0])), n), x)
		}
	case Q8_0:
		return dotQ8_0(row, x)
	case Q4_K:
		return dotQ4_K(row, x)
	case Q6_K:
		return dotQ6_K(row, x)
	case Q5_K:
		return dotQ5_K(row, x)
	case Q2_K:
		return dotQ2_KGo(row, x)
	case IQ2_XXS:
		return dotIQ2_XXS(row, x)
	case MXFP4:
		return dotMXFP4(row, x)
	}
	return dotGeneric(t, row, x)
}

// DotRows sets out[r] to DotF32 of row r of rows with x, for len(out) rows stored one
// after another. It is DotF32 for a block of a matrix, with one call instead of one per row.
func DotRows(t Type, rows []byte, x []float32, out []float32) {
	rb := t.RowBytes(len(x))
	if len(rows) != len(out)*rb {
		panic(fmt.Sprintf("quant: DotRows %v: %d bytes for %d rows of %d elements", t, len(rows), len(out), len(x)))
	}
	if len(x)%t.BlockSize() == 0 && dotRowsFast(t, rows, x, out) {
		return
	}
	for r := range out {
		out[r] = DotF32(t, rows[r*rb:(r+1)*rb], x)
	}
}

// nativeLittleEndian is true on every machine we build for (amd64, arm64); elsewhere the
// plain types go through the byte-order-aware generic path.
var nativeLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// viewable reports whether row can be read in place as little-endian words of the given
// size: GGUF aligns tensor data, but a caller's slice need not be.
func viewable(row []byte, size uintptr) bool {
	return nativeLittleEndian && uintptr(unsafe.Pointer(&row[0]))%size == 0
}

// decoderByID is decoders as an array, for a cheaper lookup on the hot path.
var decoderByID = func() (a [64]blockDecoder) {
	for t, d := range decoders {
		a[t] = d
	}
	return a
}()

// dotGeneric expands one block at a time into a stack buffer and dots it.
func dotGeneric(t Type, row []byte, x []float32) float32 {
	dec := decoderByID[t]
	bs, ts := t.BlockSize(), t.TypeSize()
	var buf [QK_K]float32
	if bs == 1 {
		// Plain types: expand a stretch of elements at a time.
		var sum float32
		for i := 0; i < len(x); i += QK_K {
			m := min(QK_K, len(x)-i)
			for j := 0; j < m; j++ {
				dec(row[(i+j)*ts:], buf[j:j+1])
			}
			sum += Dot(buf[:m], x[i:i+m])
		}
		return sum
	}
	var sum float32
	for i, o := 0, 0; i < len(x); i, o = i+bs, o+ts {
		dec(row[o:o+ts], buf[:bs])
		sum += Dot(buf[:bs], x[i:i+bs])
	}
	return sum
}

// DotRows4 is DotRows for four tokens at once: x holds them at x[i·cols …] and
// out[i·ldo + r] receives row r's dot product with token i, each exactly as DotRows computes
// it alone. With a four-token kernel for t (Q8_0 with AVX-512) each block is read and
// converted once for the four; otherwise it makes four DotRows calls.
func DotRows4(t Type, rows []byte, x []float32, cols int, out []float32, ldo int) {
	n := len(rows) / max(t.RowBytes(cols), 1)
	if len(rows) != n*t.RowBytes(cols) || len(x) < 3*cols+cols || len(out) < 3*ldo+n {
		panic(fmt.Sprintf("quant: DotRows4 %v: %d bytes of rows of %d, %d x values, %d outputs of stride %d", t, len(rows), cols, len(x), len(out), ldo))
	}
	if cols%t.BlockSize() == 0 && dotRows4Fast(t, rows, x, cols, out, ldo) {
		return
	}
	for i := 0; i < 4; i++ {
		DotRows(t, rows, x[i*cols:(i+1)*cols], out[i*ldo:i*ldo+n])
	}
}

// Dot returns the float32 dot product of a and b, which must have the same length.
func Dot(a, b []float32) float32 {
	if len(a) != len(b) {
		panic(fmt.Sprintf("quant: Dot of lengths %d and %d", len(a), len(b)))
	}
	return dotF32(a, b)
}

// Axpy adds alpha·x to y (the attention value accumulation). len(y) must equal len(x).
func Axpy(alpha float32, x, y []float32) {
	if len(x) != len(y) {
		panic(fmt.Sprintf("quant: Axpy of lengths %d and %d", len(x), len(y)))
	}
	axpy(alpha, x, y)
}

func dotF32Go(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func axpyGo(alpha float32, x, y []float32) {
	y = y[:len(x)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

// f16Table widens every half by lookup; the pure-Go F16 dot is otherwise dominated by the
// branches of the conversion.
var f16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = F16ToF32(uint16(i))
	}
	return &t
})

func dotF16Go(h []uint16, x []float32) float32 {
	tab := f16Table()
	x = x[:len(h)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(h); i += 4 {
		s0 += tab[h[i]] * x[i]
		s1 += tab[h[i+1]] * x[i+1]
		s2 += tab[h[i+2]] * x[i+2]
		s3 += tab[h[i+3]] * x[i+3]
	}
	for ; i < len(h); i++ {
		s0 += tab[h[i]] * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func dotQ8_0Go(row []byte, x []float32) float32 {
	var sum float32
	for len(x) >= 32 {
		b := row[:34]
		q := b[2:34]
		xx := x[:32]
		var s0, s1, s2, s3 float32
		for j := 0; j < 32; j += 4 {
			s0 += float32(int8(q[j])) * xx[j]
			s1 += float32(int8(q[j+1])) * xx[j+1]
			s2 += float32(int8(q[j+2])) * xx[j+2]
			s3 += float32(int8(q[j+3])) * xx[j+3]
		}
		sum += half(b) * ((s0 + s1) + (s2 + s3))
		row, x = row[34:], x[32:]
	}
	return sum
}

// Fused K-quant dots: per sub-block, Σ(d·q − m)·x = d·Σq·x − m·Σx.

// The Q4_K, Q6_K and IQ2_XXS references below sum in "lanes": partial sum i takes the
// elements whose index is i mod 4 (or 8), and the scaled partial sums stay in per-lane row
// totals that are folded once at the end of the row. That is the order a 4-wide vector
// unit computes in, so the arm64 NEON kernels reproduce these functions bit for bit (Go
// fuses a += b*c into one FMADD on arm64, as the vector FMLA does); the amd64 kernels sum in
// their own order and agree to rounding.

func dotQ4_KGo(row []byte, x []float32) float32 {
	// a0..a3: low-nibble sub-blocks, b0..b3: high-nibble sub-blocks.
	var a0, a1, a2, a3, b0, b1, b2, b3 float32
	for len(x) >= QK_K {
		b := row[:144]
		d, dmin := half(b), half(b[2:])
		scales := b[4:16]
		for j := 0; j < 4; j++ {
			q := b[16+32*j : 48+32*j]
			xl, xh := x[64*j:64*j+32], x[64*j+32:64*j+64]
			// The low nibbles, then the high ones: each sum's own order is what counts,
			// and eight accumulators at a time stay in registers on amd64 too.
			var q0, q1, q2, q3, s0, s1, s2, s3 float32 // Σ q·x and Σ x per lane
			for l := 0; l < 32; l += 4 {
				q4, x4 := q[l:l+4], xl[l:l+4]
				q0 += float32(q4[0]&0xf) * x4[0]
				q1 += float32(q4[1]&0xf) * x4[1]
				q2 += float32(q4[2]&0xf) * x4[2]
				q3 += float32(q4[3]&0xf) * x4[3]
				s0 += x4[0]
				s1 += x4[1]
				s2 += x4[2]
				s3 += x4[3]
			}
			sc, m := scaleMinK4(2*j, scales)
			ds, dm := d*float32(sc), dmin*float32(m)
			a0 += ds * q0
			a1 += ds * q1
			a2 += ds * q2
			a3 += ds * q3
			a0 -= dm * s0
			a1 -= dm * s1
			a2 -= dm * s2
			a3 -= dm * s3
			q0, q1, q2, q3, s0, s1, s2, s3 = 0, 0, 0, 0, 0, 0, 0, 0
			for l := 0; l < 32; l += 4 {
				q4, x4 := q[l:l+4], xh[l:l+4]
				q0 += float32(q4[0]>>4) * x4[0]
				q1 += float32(q4[1]>>4) * x4[1]
				q2 += float32(q4[2]>>4) * x4[2]
				q3 += float32(q4[3]>>4) * x4[3]
				s0 += x4[0]
				s1 += x4[1]
				s2 += x4[2]
				s3 += x4[3]
			}
			sc, m = scaleMinK4(2*j+1, scales)
			ds, dm = d*float32(sc), dmin*float32(m)
			b0 += ds * q0
			b1 += ds * q1
			b2 += ds * q2
			b3 += ds * q3
			b0 -= dm * s0
			b1 -= dm * s1
			b2 -= dm * s2
			b3 -= dm * s3
		}
		row, x = row[144:], x[QK_K:]
	}
	return ((a0 + a1) + (a2 + a3)) + ((b0 + b1) + (b2 + b3))
}

func dotQ5_KGo(row []byte, x []float32) float32 {
	var sum float32
	for len(x) >= QK_K {
		b := row[:176]
		d, dmin := half(b), half(b[2:])
		scales := b[4:16]
		qhb := b[16:48]
		u1, u2 := byte(1), byte(2)
		for j := 0; j < 4; j++ {
			q := b[48+32*j : 80+32*j]
			xl, xh := x[64*j:64*j+32], x[64*j+32:64*j+64]
			var ql, qh, sl, sh float32
			for l, v := range q {
				lo, hi := v&0xf, v>>4
				if qhb[l]&u1 != 0 {
					lo += 16
				}
				if qhb[l]&u2 != 0 {
					hi += 16
				}
				ql += float32(lo) * xl[l]
				qh += float32(hi) * xh[l]
				sl += xl[l]
				sh += xh[l]
			}
			sc, m := scaleMinK4(2*j, scales)
			sum += d*float32(sc)*ql - dmin*float32(m)*sl
			sc, m = scaleMinK4(2*j+1, scales)
			sum += d*float32(sc)*qh - dmin*float32(m)*sh
			u1 <<= 2
			u2 <<= 2
		}
		row, x = row[176:], x[QK_K:]
	}
	return sum
}

func dotQ6_KGo(row []byte, x []float32) float32 {
	// Row totals per lane: a0..a3 for the first 128 elements of each block, b0..b3 for the
	// second.
	var a0, a1, a2, a3, b0, b1, b2, b3 float32
	for len(x) >= QK_K {
		b := row[:210]
		d := half(b[208:])
		for n := 0; n < 2; n++ {
			ql, qh, sc := b[64*n:64*n+64], b[128+32*n:160+32*n], b[192+8*n:200+8*n]
			xx := x[128*n : 128*n+128]
			// Quarter k holds elements 32k..32k+31 of the half: the low (k<2) or high
			// nibble of ql[l+32·(k&1)] and bit pair k of qh[l]; each 16 share a scale.
			for k := 0; k < 4; k++ {
				lo := ql[32*(k&1) : 32*(k&1)+32]
				shift, hs := 4*uint(k>>1), 2*uint(k)
				for g := 0; g < 2; g++ {
					var p0, p1, p2, p3 float32
					for l := 16 * g; l < 16*g+16; l += 4 {
						l4, h4, x4 := lo[l:l+4], qh[l:l+4], xx[32*k+l:32*k+l+4]
						p0 += float32(int(l4[0]>>shift&0xf|(h4[0]>>hs&3)<<4)-32) * x4[0]
						p1 += float32(int(l4[1]>>shift&0xf|(h4[1]>>hs&3)<<4)-32) * x4[1]
						p2 += float32(int(l4[2]>>shift&0xf|(h4[2]>>hs&3)<<4)-32) * x4[2]
						p3 += float32(int(l4[3]>>shift&0xf|(h4[3]>>hs&3)<<4)-32) * x4[3]
					}
					s := d * float32(int8(sc[2*k+g]))
					if n == 0 {
						a0 += s * p0
						a1 += s * p1
						a2 += s * p2
						a3 += s * p3
					} else {
						b0 += s * p0
						b1 += s * p1
						b2 += s * p2
						b3 += s * p3
					}
				}
			}
		}
		row, x = row[210:], x[QK_K:]
	}
	return ((a0 + a1) + (a2 + a3)) + ((b0 + b1) + (b2 + b3))
}

func dotQ2_KGo(row []byte, x []float32) float32 {
	var sum float32
	for len(x) >= QK_K {
		b := row[:84]
		scales, qs := b[0:16], b[16:80]
		d, dmin := half(b[80:]), half(b[82:])
		is := 0
		xx := x
		for n := 0; n < 2; n++ {
			q := qs[32*n : 32*n+32]
			for shift := 0; shift < 8; shift += 2 {
				for h := 0; h < 2; h++ {
					sc := scales[is]
					is++
					var sq, sx float32
					for l := 0; l < 16; l++ {
						sq += float32((q[l+16*h]>>shift)&3) * xx[l]
						sx += xx[l]
					}
					sum += d*float32(sc&0xf)*sq - dmin*float32(sc>>4)*sx
					xx = xx[16:]
				}
			}
		}
		row, x = row[84:], x[QK_K:]
	}
	return sum
}

// iq2xxsGridF32 and iqSignMask widen the IQ2_XXS codebook and the sign patterns for the
// assembly kernel: grid points as floats, signs as masks to XOR into the float sign bits.
var iq2xxsGridF32, iqSignMask = func() (g [256][8]float32, s [128][8]uint32) {
	for i, p := range iq2xxsGrid {
		for j := range 8 {
			g[i][j] = gridByte(p, j)
		}
	}
	for i, m := range iqSigns {
		for j := range 8 {
			s[i][j] = uint32(m>>j&1) << 31
		}
	}
	return g, s
}()

func dotIQ2_XXSGo(row []byte, x []float32) float32 {
	// a[j]: row total of the products with element j of each 8-element grid point.
	var a0, a1, a2, a3, a4, a5, a6, a7 float32
	for len(x) >= QK_K {
		b := row[:66]
		d := half(b)
		qs := b[2:66]
		for ib := 0; ib < 8; ib++ {
			aux := binary.LittleEndian.Uint32(qs[8*ib+4:])
			var s0, s1, s2, s3, s4, s5, s6, s7 float32
			for l := 0; l < 4; l++ {
				g := &iq2xxsGridF32[qs[8*ib+l]]
				m := &iqSignMask[(aux>>(7*l))&127]
				xx := x[32*ib+8*l : 32*ib+8*l+8]
				s0 += g[0] * flipSign(xx[0], m[0])
				s1 += g[1] * flipSign(xx[1], m[1])
				s2 += g[2] * flipSign(xx[2], m[2])
				s3 += g[3] * flipSign(xx[3], m[3])
				s4 += g[4] * flipSign(xx[4], m[4])
				s5 += g[5] * flipSign(xx[5], m[5])
				s6 += g[6] * flipSign(xx[6], m[6])
				s7 += g[7] * flipSign(xx[7], m[7])
			}
			t := d * (0.5 + float32(aux>>28)) * 0.25
			a0 += t * s0
			a1 += t * s1
			a2 += t * s2
			a3 += t * s3
			a4 += t * s4
			a5 += t * s5
			a6 += t * s6
			a7 += t * s7
		}
		row, x = row[66:], x[QK_K:]
	}
	return ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
}

// flipSign XORs the sign mask m (0 or 1<<31) into x: the sign goes onto x, which is exact,
// so that the product with the grid value and the sum fuse.
func flipSign(x float32, m uint32) float32 { return math.Float32frombits(math.Float32bits(x) ^ m) }

func dotQ8_0Q8_0Go(w, a []byte) float32 {
	var sum float32
	for len(w) >= 34 {
		var s int32
		for j := 2; j < 34; j++ {
			s += int32(int8(w[j])) * int32(int8(a[j]))
		}
		sum += half(w) * half(a) * float32(s)
		w, a = w[34:], a[34:]
	}
	return sum
}
