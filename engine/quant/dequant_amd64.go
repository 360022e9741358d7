//go:build amd64 && !purego

package quant

//go:noescape
func dequantQ8_0AVX2(row *byte, y *float32, nblocks int)

//go:noescape
func dequantQ4_KAVX2(row *byte, y *float32, nblocks int)

//go:noescape
func dequantQ6_KAVX2(row *byte, y *float32, nblocks int)

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
	default:
		return false
	}
	return true
}
