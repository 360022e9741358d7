//go:build amd64 && !purego

package quant

//go:noescape
func dotQ4_KQ8KAVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32)

//go:noescape
func dotQ6_KQ8KAVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32)

//go:noescape
func dotQ5_KQ8KAVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32)

//go:noescape
func dotQ5_KQ8K4AVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32, ldo int)

//go:noescape
func dotQ2_KQ8KAVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32)

//go:noescape
func dotIQ2_XXSQ8KAVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32)

// int8Asm reports whether t has an assembly 8-bit kernel on this machine.
func int8Asm(t Type) bool {
	if !useAsm {
		return false
	}
	switch t {
	case Q2_K, Q4_K, Q5_K, Q6_K, IQ2_XXS:
		return true
	}
	return false
}

func int8Rows4(t Type) bool {
	return (t == Q2_K || t == Q4_K || t == Q5_K || t == Q6_K || t == IQ2_XXS) && useAsm
}

func dotRows4Q8K(t Type, rows []byte, a []Q8K, nr int, out []float32, ldo int) {
	switch t {
	case Q2_K:
		dotQ2_KQ8K4AVX2(&rows[0], &a[0], len(a)/4, nr, &out[0], ldo)
	case IQ2_XXS:
		dotIQ2_XXSQ8K4AVX2(&rows[0], &a[0], len(a)/4, nr, &out[0], ldo)
	case Q4_K:
		dotQ4_KQ8K4AVX2(&rows[0], &a[0], len(a)/4, nr, &out[0], ldo)
	case Q5_K:
		dotQ5_KQ8K4AVX2(&rows[0], &a[0], len(a)/4, nr, &out[0], ldo)
	case Q6_K:
		dotQ6_KQ8K4AVX2(&rows[0], &a[0], len(a)/4, nr, &out[0], ldo)
	}
}

// int8Faster is the amd64 table of Int8Faster (BenchmarkDotQ8K, quantization of x
// included). On a loaded AVX-512 machine, best of 6: Q6_K's AVX2 8-bit kernel is 1.97× the
// AVX-512 exact one, Q4_K's 1.11×. On an AVX2-only EPYC, medians of 3 (512 rows × 2048):
// Q5_K's 8-bit kernel is 2.7× its exact one; IQ2_XXS's 109 µs against 229 µs for its AVX2
// exact one (which AVX-512 machines run too); Q2_K's 56 µs against 3.0 ms for the pure-Go
// exact path. IQ3_XXS has a vector exact kernel and only a pure-Go 8-bit one, so it stays
// exact. An AVX-512 VNNI Q4_K kernel over the rows as stored (VPDPBUSD on 64 bytes,
// VPMULLD by the scales) measured 1.4× slower than the AVX2 one; over rows repacked by
// sixteen (dot_q8k_vnni_amd64.go) it pays.
func int8Faster(t Type) bool {
	if int8Asm(t) { // every assembly 8-bit kernel so far
		return true
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
	case Q5_K:
		dotQ5_KQ8KAVX2(&rows[0], &a[0], len(a), len(out), &out[0])
	case Q6_K:
		dotQ6_KQ8KAVX2(&rows[0], &a[0], len(a), len(out), &out[0])
	case Q2_K:
		dotQ2_KQ8KAVX2(&rows[0], &a[0], len(a), len(out), &out[0])
	case IQ2_XXS:
		dotIQ2_XXSQ8KAVX2(&rows[0], &a[0], len(a), len(out), &out[0])
	default:
		return false
	}
	return true
}

//go:noescape
func dotQ2_KQ8K4AVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32, ldo int)

//go:noescape
func dotIQ2_XXSQ8K4AVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32, ldo int)

//go:noescape
func dotQ4_KQ8K4AVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32, ldo int)

//go:noescape
func dotQ6_KQ8K4AVX2(rows *byte, a *Q8K, nblocks, nrows int, out *float32, ldo int)

//go:noescape
func absMaxAVX2(x *float32) float32

//go:noescape
func quantizeQ8KAVX2(x *float32, iscale float32, b *Q8K)

// absMax256 is the largest |x[i]| of a block, NaNs ignored.
func absMax256(x []float32) float32 {
	if !useAsm {
		return absMax256Go(x)
	}
	return absMaxAVX2(&x[0])
}

// quantizeQs sets b.Qs and b.Bsums from a block and its scale.
func quantizeQs(x []float32, iscale float32, b *Q8K) {
	if !useAsm {
		quantizeQsGo(x, iscale, b)
		return
	}
	quantizeQ8KAVX2(&x[0], iscale, b)
}
