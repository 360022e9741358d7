//go:build amd64 && !purego

package quant

//go:noescape
func dotQ4_KQ8KAVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32)

//go:noescape
func dotQ6_KQ8KAVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32)

// int8Asm reports whether t has an assembly 8-bit kernel on this machine.
func int8Asm(t Type) bool {
	if !useAsm {
		return false
	}
	switch t {
	case Q4_K, Q6_K:
		return true
	}
	return false
}

// int8Faster is the amd64 table of Int8Faster. Q6_K's AVX2 8-bit kernel beats both exact
// ones; Q4_K's beats the AVX2 exact kernel but not the AVX-512 one; Q5_K, IQ2_XXS and
// IQ3_XXS have vector exact kernels (or a pure-Go 8-bit one that loses) and stay exact.
func int8Faster(t Type) bool {
	switch {
	case t == Q6_K && useAsm:
		return true
	case t == Q4_K && useAsm:
		return !useAVX512
	}
	return int8GoFaster(t)
}

// dotRowsQ8KFast is DotRowsQ8K with one assembly call over every row, where t has a kernel;
// the caller has checked the lengths and that there is at least one row and one block.
func dotRowsQ8KFast(t Type, rows []byte, a []Q8K, out []float32) bool {
	if !useAsm {
		return false
	}
	switch t {
	case Q4_K:
		dotQ4_KQ8KAVX2(&rows[0], &a[0], len(a), len(out), &out[0])
	case Q6_K:
		dotQ6_KQ8KAVX2(&rows[0], &a[0], len(a), len(out), &out[0])
	default:
		return false
	}
	return true
}
