package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Dequantization mirrors ggml's to_float operation for operation: every product and sum is
// rounded to float32 in the same order, so the results are bit-identical. An explicit
// float32(...) around a product that is then added to stops the Go compiler from fusing the
// two into an FMA (which it may do on arm64), since ggml's reference is compiled without.

// blockDecoder expands one block of a type into blockSize floats.
type blockDecoder func(b []byte, y []float32)

var decoders = map[Type]blockDecoder{
	F32:     func(b []byte, y []float32) { y[0] = math.Float32frombits(binary.LittleEndian.Uint32(b)) },
	F16:     func(b []byte, y []float32) { y[0] = F16ToF32(binary.LittleEndian.Uint16(b)) },
	BF16:    func(b []byte, y []float32) { y[0] = BF16ToF32(binary.LittleEndian.Uint16(b)) },
	Q4_0:    deqQ4_0,
	Q4_1:    deqQ4_1,
	Q5_0:    deqQ5_0,
	Q5_1:    deqQ5_1,
	Q8_0:    deqQ8_0,
	Q2_K:    deqQ2_K,
	Q3_K:    deqQ3_K,
	Q4_K:    deqQ4_K,
	Q5_K:    deqQ5_K,
	Q6_K:    deqQ6_K,
	IQ2_XXS: deqIQ2_XXS,
	IQ2_XS:  deqIQ2_XS,
	IQ2_S:   deqIQ2_S,
	IQ3_XXS: deqIQ3_XXS,
	IQ3_S:   deqIQ3_S,
	IQ1_S:   deqIQ1_S,
	IQ1_M:   deqIQ1_M,
	IQ4_NL:  deqIQ4_NL,
	IQ4_XS:  deqIQ4_XS,
	MXFP4:   deqMXFP4,
}

// Supported reports whether Dequantize, DotF32 and the row helpers handle t.
func Supported(t Type) bool { return int(t) < len(decoderByID) && decoderByID[t] != nil }

// CheckRow validates that a buffer of nbytes holds exactly n elements of type t. The CPU
// backend calls it once per tensor so that the hot dot-product paths need not.
func CheckRow(t Type, nbytes, n int) error {
	if !Supported(t) {
		return fmt.Errorf("quant: type %v is not supported", t)
	}
	bs := t.BlockSize()
	if n < 0 || n%bs != 0 {
		return fmt.Errorf("quant: %v: element count %d is not a multiple of the block size %d", t, n, bs)
	}
	if want := t.RowBytes(n); nbytes != want {
		return fmt.Errorf("quant: %v: %d elements need %d bytes, got %d", t, n, want, nbytes)
	}
	return nil
}

// Dequantize expands src, which must hold exactly len(dst) elements of type t, into dst.
// The result is bit-identical to ggml's to_float for the same bytes.
func Dequantize(t Type, src []byte, dst []float32) error {
	if err := CheckRow(t, len(src), len(dst)); err != nil {
		return err
	}
	switch t {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
		return nil
	case F16:
		if dequantF16(src, dst) {
			return nil
		}
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
		return nil
	case BF16:
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
		return nil
	}
	if dequantFast(t, src, dst) {
		return nil
	}
	dec := decoderByID[t]
	bs, ts := t.BlockSize(), t.TypeSize()
	for i, o := 0, 0; i < len(dst); i, o = i+bs, o+ts {
		dec(src[o:o+ts], dst[i:i+bs])
	}
	return nil
}

func half(b []byte) float32 { return F16ToF32(binary.LittleEndian.Uint16(b)) }

// ---- 32-element legacy blocks

func deqQ4_0(b []byte, y []float32) {
	d := half(b)
	qs := b[2:18]
	for j, q := range qs {
		y[j] = float32(int(q&0xf)-8) * d
		y[j+16] = float32(int(q>>4)-8) * d
	}
}

func deqQ4_1(b []byte, y []float32) {
	d, m := half(b), half(b[2:])
	qs := b[4:20]
	for j, q := range qs {
		y[j] = float32(float32(q&0xf)*d) + m
		y[j+16] = float32(float32(q>>4)*d) + m
	}
}

func deqQ5_0(b []byte, y []float32) {
	d := half(b)
	qh := binary.LittleEndian.Uint32(b[2:])
	qs := b[6:22]
	for j, q := range qs {
		h0 := byte(qh>>j<<4) & 0x10
		h1 := byte(qh>>(j+12)) & 0x10
		y[j] = float32(int(q&0xf|h0)-16) * d
		y[j+16] = float32(int(q>>4|h1)-16) * d
	}
}

func deqQ5_1(b []byte, y []float32) {
	d, m := half(b), half(b[2:])
	qh := binary.LittleEndian.Uint32(b[4:])
	qs := b[8:24]
	for j, q := range qs {
		h0 := byte(qh>>j<<4) & 0x10
		h1 := byte(qh>>(j+12)) & 0x10
		y[j] = float32(float32(q&0xf|h0)*d) + m
		y[j+16] = float32(float32(q>>4|h1)*d) + m
	}
}

func deqQ8_0(b []byte, y []float32) {
	d := half(b)
	for j, q := range b[2:34] {
		y[j] = float32(int8(q)) * d
	}
}

// ---- K-quants (256-element super-blocks)

// scaleMinK4 unpacks the j-th 6-bit scale and min of a Q4_K/Q5_K block.
func scaleMinK4(j int, s []byte) (sc, m byte) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0xf | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}

func deqQ2_K(b []byte, y []float32) {
	scales := b[0:16]
	qs := b[16:80]
	d, dmin := half(b[80:]), half(b[82:])
	is := 0
	for n := 0; n < 2; n++ {
		q := qs[32*n : 32*n+32]
		for shift := 0; shift < 8; shift += 2 {
			for h := 0; h < 2; h++ {
				sc := scales[is]
				is++
				dl := d * float32(sc&0xf)
				ml := dmin * float32(sc>>4)
				for l := 0; l < 16; l++ {
					y[l] = float32(dl*float32((q[l+16*h]>>shift)&3)) - ml
				}
				y = y[16:]
			}
		}
	}
}

// q3kScales unpacks the sixteen 6-bit signed scales of a Q3_K block (stored biased by 32).
func q3kScales(s []byte) [16]int8 {
	a0 := binary.LittleEndian.Uint32(s[0:])
	a1 := binary.LittleEndian.Uint32(s[4:])
	tmp := binary.LittleEndian.Uint32(s[8:])
	const m1, m2 = 0x03030303, 0x0f0f0f0f
	w := [4]uint32{
		a0&m2 | (tmp>>0&m1)<<4,
		a1&m2 | (tmp>>2&m1)<<4,
		a0>>4&m2 | (tmp>>4&m1)<<4,
		a1>>4&m2 | (tmp>>6&m1)<<4,
	}
	var out [16]int8
	for i := range out {
		out[i] = int8(byte(w[i/4]>>(8*(i%4)))) - 32
	}
	return out
}

func deqQ3_K(b []byte, y []float32) {
	hm := b[0:32]
	qs := b[32:96]
	sc := q3kScales(b[96:108])
	d := half(b[108:])
	is := 0
	m := byte(1)
	for n := 0; n < 2; n++ {
		q := qs[32*n : 32*n+32]
		for shift := 0; shift < 8; shift += 2 {
			for h := 0; h < 2; h++ {
				dl := d * float32(sc[is])
				is++
				for l := 0; l < 16; l++ {
					v := int((q[l+16*h] >> shift) & 3)
					if hm[l+16*h]&m == 0 {
						v -= 4
					}
					y[l] = dl * float32(v)
				}
				y = y[16:]
			}
			m <<= 1
		}
	}
}

func deqQ4_K(b []byte, y []float32) {
	d, dmin := half(b), half(b[2:])
	scales := b[4:16]
	qs := b[16:144]
	for j := 0; j < 4; j++ {
		sc, m := scaleMinK4(2*j, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = scaleMinK4(2*j+1, scales)
		d2, m2 := d*float32(sc), dmin*float32(m)
		q := qs[32*j : 32*j+32]
		for l, v := range q {
			y[l] = float32(d1*float32(v&0xf)) - m1
			y[l+32] = float32(d2*float32(v>>4)) - m2
		}
		y = y[64:]
	}
}

func deqQ5_K(b []byte, y []float32) {
	d, dmin := half(b), half(b[2:])
	scales := b[4:16]
	qh := b[16:48]
	qs := b[48:176]
	u1, u2 := byte(1), byte(2)
	for j := 0; j < 4; j++ {
		sc, m := scaleMinK4(2*j, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = scaleMinK4(2*j+1, scales)
		d2, m2 := d*float32(sc), dmin*float32(m)
		q := qs[32*j : 32*j+32]
		for l, v := range q {
			lo, hi := v&0xf, v>>4
			if qh[l]&u1 != 0 {
				lo += 16
			}
			if qh[l]&u2 != 0 {
				hi += 16
			}
			y[l] = float32(d1*float32(lo)) - m1
			y[l+32] = float32(d2*float32(hi)) - m2
		}
		y = y[64:]
		u1 <<= 2
		u2 <<= 2
	}
}

func deqQ6_K(b []byte, y []float32) {
	ql := b[0:128]
	qh := b[128:192]
	sc := b[192:208]
	d := half(b[208:])
	for n := 0; n < 2; n++ {
		l0, h0, s0 := ql[64*n:], qh[32*n:], sc[8*n:]
		yy := y[128*n:]
		for l := 0; l < 32; l++ {
			is := l / 16
			h := h0[l]
			q1 := int(l0[l]&0xf|(h&3)<<4) - 32
			q2 := int(l0[l+32]&0xf|(h>>2&3)<<4) - 32
			q3 := int(l0[l]>>4|(h>>4&3)<<4) - 32
			q4 := int(l0[l+32]>>4|(h>>6&3)<<4) - 32
			yy[l] = d * float32(int8(s0[is])) * float32(q1)
			yy[l+32] = d * float32(int8(s0[is+2])) * float32(q2)
			yy[l+64] = d * float32(int8(s0[is+4])) * float32(q3)
			yy[l+96] = d * float32(int8(s0[is+6])) * float32(q4)
		}
	}
}
