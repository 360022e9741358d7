package quant

import (
	"math"
	"unsafe"
)

// F16ToF32 widens an IEEE half. Every half is exactly representable as a float32; a
// signalling NaN comes back quiet (payload kept), as the F16C instruction and ggml's
// conversion both return.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		if mant == 0 {
			return math.Float32frombits(sign | 0x7f800000)
		}
		return math.Float32frombits(sign | 0x7fc00000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal half: normalise the mantissa into a float32 exponent.
	e := uint32(127 - 15 + 1)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
}

// F32ToF16 narrows to an IEEE half, rounding to nearest even (what ggml's CPU backend gets
// from F16C with rounding mode 0): overflow goes to ±Inf, tiny values to half subnormals
// or ±0, NaN stays NaN (quiet, top payload bits kept).
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7e00 | uint16(mant>>13)
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Result is a half subnormal (or zero): shift the full significand so that its
		// unit is 2^-24, rounding half to even on the dropped bits.
		if e < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := m >> shift
		rest := m & (1<<shift - 1)
		if rest > half || (rest == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rest := mant & 0x1fff
	if rest > 0x1000 || (rest == 0x1000 && r&1 == 1) {
		r++ // a carry into the exponent is right, up to and including Inf
	}
	return sign | uint16(r)
}

// BF16ToF32 widens a bfloat16 (the top half of a float32).
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 narrows to bfloat16 with round to nearest even; NaN is forced quiet, as in
// ggml's reference conversion.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// F16ToF32Slice widens len(dst) halves; src must be at least as long.
func F16ToF32Slice(dst []float32, src []uint16) {
	src = src[:len(dst)]
	// The F16 weights' widening kernel (VCVTPH2PS) reads the same little-endian halves: an
	// f16 KV cache is widened here for every position attention reads.
	if len(src) > 0 && dequantF16(unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), 2*len(src)), dst) {
		return
	}
	for i, h := range src {
		dst[i] = F16ToF32(h)
	}
}

// F32ToF16Slice narrows len(dst) floats; src must be at least as long.
func F32ToF16Slice(dst []uint16, src []float32) {
	src = src[:len(dst)]
	if narrowF16(src, dst) {
		return
	}
	for i, f := range src {
		dst[i] = F32ToF16(f)
	}
}
