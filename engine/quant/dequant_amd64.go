//go:build amd64 && !purego

package quant

//go:noescape
func dequantQ8_0AVX2(row *byte, y *float32, nblocks int)

//go:noescape
func dequantQ4_KAVX2(row *byte, y *float32, nblocks int)

//go:noescape
func dequantQ6_KAVX2(row *byte, y *float32, nblocks int)

//go:noescape
func dequantIQ2_XXSAVX2(row *byte, y *float32, nblocks int, grid *[256][8]float32, signs *[128][8]uint32)

//go:noescape
func dequantF16AVX2(h *byte, y *float32, n int)

//go:noescape
func narrowF16AVX2(y *float32, h *uint16, n int)

// narrowF16 narrows floats to halves with VCVTPS2PH, the last n mod 16 in Go: an f16 KV
// cache is written through it at every position.
func narrowF16(src []float32, dst []uint16) bool {
	if !useAsm || len(dst) == 0 {
		return false
	}
	n := len(dst) &^ 15
	if n > 0 {
		narrowF16AVX2(&src[0], &dst[0], n)
	}
	for i := n; i < len(dst); i++ {
		dst[i] = F32ToF16(src[i])
	}
	return true
}

// dequantF16 widens halves with VCVTPH2PS, the last n mod 32 in Go.
func dequantF16(src []byte, dst []float32) bool {
	if !useAsm || len(dst) == 0 {
		return false
	}
	n := len(dst) &^ 31
	if n > 0 {
		dequantF16AVX2(&src[0], &dst[0], n)
	}
	for i := n; i < len(dst); i++ {
		dst[i] = F16ToF32(uint16(src[2*i]) | uint16(src[2*i+1])<<8)
	}
	return true
}

// dequantFast expands src into dst with an assembly kernel when there is one for t; the
// caller has checked the lengths. It reports whether it did.
func dequantFast(t Type, src []byte, dst []float32) bool {
	if !useAsm || len(dst) == 0 {
		return false
	}
	switch t {
	case Q8_0:
		dequantQ8_0AVX2(&src[0], &dst[0], len(dst)/32)
	case Q4_K:
		dequantQ4_KAVX2(&src[0], &dst[0], len(dst)/QK_K)
	case Q6_K:
		dequantQ6_KAVX2(&src[0], &dst[0], len(dst)/QK_K)
	case IQ2_XXS:
		dequantIQ2_XXSAVX2(&src[0], &dst[0], len(dst)/QK_K, &iq2xxsGridF32, &iqSignMask)
	default:
		return false
	}
	return true
}
