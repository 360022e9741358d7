//go:build amd64 && !purego

package quant

// useAsm selects the AVX2/FMA kernels of dot_amd64.s; the pure-Go kernels stay the
// reference they are tested against.
var useAsm = hasAVX2FMA()

// useAVX512 selects the AVX-512 versions of the block kernels (dot_avx512_amd64.s) where
// they exist; tests turn it off to check the AVX2 ones on the same machine.
var useAVX512 = useAsm && hasAVX512F()

// hasAVX512F reports AVX-512 Foundation with the OS saving the opmask and ZMM registers,
// unless REDLITE_CPU_FEATURES caps the kernels at AVX2.
func hasAVX512F() bool { return CPUFeatureCap != "avx2" && cpuAVX512F() }

// cpuAVX512F is hasAVX512F whatever the cap.
func cpuAVX512F() bool {
	_, ebx7, _, _ := cpuid(7, 0)
	xcr0, _ := xgetbv()
	return ebx7&(1<<16) != 0 && xcr0&0xe6 == 0xe6
}

// The AVX-512 kernels take several contiguous rows per call: out[r] is row r's dot product.

//go:noescape
func dotQ8_0RowsAVX512(rows *byte, x *float32, nblocks, nrows int, out *float32)

//go:noescape
func dotQ8_0Rows4AVX512(rows *byte, x *float32, xstride, nblocks, nrows int, out *float32, ostride int)

//go:noescape
func dotQ4_KRowsAVX512(rows *byte, x *float32, nblocks, nrows, group int, out *float32)

// q4kGroup is the number of blocks of a row the Q4_K kernel unpacks scales for at a time: at
// most 4, and a divisor of the row's blocks.
func q4kGroup(nblocks int) int {
	for g := 4; g > 1; g-- {
		if nblocks%g == 0 {
			return g
		}
	}
	return 1
}

//go:noescape
func dotQ6_KRowsAVX512(rows *byte, x *float32, nblocks, nrows int, out *float32)

// dotRowsFast computes out[r] for len(out) contiguous rows of type t with one assembly
// call when there is a multi-row kernel for t; the caller has checked the lengths.
func dotRowsFast(t Type, rows []byte, x []float32, out []float32) bool {
	if !useAVX512 || len(out) == 0 || len(x) == 0 {
		return false
	}
	switch t {
	case Q8_0:
		dotQ8_0RowsAVX512(&rows[0], &x[0], len(x)/32, len(out), &out[0])
	case Q4_K:
		nb := len(x) / QK_K
		dotQ4_KRowsAVX512(&rows[0], &x[0], nb, len(out), q4kGroup(nb), &out[0])
	case Q6_K:
		dotQ6_KRowsAVX512(&rows[0], &x[0], len(x)/QK_K, len(out), &out[0])
	default:
		return false
	}
	return true
}

//go:noescape
func dotAVX2(a, b *float32, n int) float32

//go:noescape
func axpyAVX2(alpha float32, x, y *float32, n int)

//go:noescape
func dotF16AVX2(h *uint16, x *float32, n int) float32

//go:noescape
func dotQ8_0AVX2(row *byte, x *float32, nblocks int) float32

//go:noescape
func dotQ4_KAVX2(row *byte, x *float32, nblocks int) float32

//go:noescape
func dotQ6_KAVX2(row *byte, x *float32, nblocks int) float32

// The plain kernels take multiples of 32 elements; Go finishes the tail.

func dotF32(a, b []float32) float32 {
	n := len(a) &^ 31
	if !useAsm || n == 0 {
		return dotF32Go(a, b)
	}
	b = b[:len(a)]
	s := dotAVX2(&a[0], &b[0], n)
	if n < len(a) {
		s += dotF32Go(a[n:], b[n:])
	}
	return s
}

func axpy(alpha float32, x, y []float32) {
	n := len(x) &^ 31
	if !useAsm || n == 0 {
		axpyGo(alpha, x, y)
		return
	}
	y = y[:len(x)]
	axpyAVX2(alpha, &x[0], &y[0], n)
	if n < len(x) {
		axpyGo(alpha, x[n:], y[n:])
	}
}

func dotF16(h []uint16, x []float32) float32 {
	n := len(h) &^ 31
	if !useAsm || n == 0 {
		return dotF16Go(h, x)
	}
	x = x[:len(h)]
	s := dotF16AVX2(&h[0], &x[0], n)
	if n < len(h) {
		s += dotF16Go(h[n:], x[n:])
	}
	return s
}

// The block kernels trust DotF32's length check: len(row) = nblocks × block bytes.

func dotQ8_0(row []byte, x []float32) float32 {
	if !useAsm {
		return dotQ8_0Go(row, x)
	}
	if useAVX512 {
		var out float32
		dotQ8_0RowsAVX512(&row[0], &x[0], len(x)/32, 1, &out)
		return out
	}
	return dotQ8_0AVX2(&row[0], &x[0], len(x)/32)
}

func dotQ4_K(row []byte, x []float32) float32 {
	if !useAsm {
		return dotQ4_KGo(row, x)
	}
	if useAVX512 {
		var out float32
		nb := len(x) / QK_K
		dotQ4_KRowsAVX512(&row[0], &x[0], nb, 1, q4kGroup(nb), &out)
		return out
	}
	return dotQ4_KAVX2(&row[0], &x[0], len(x)/QK_K)
}

func dotQ6_K(row []byte, x []float32) float32 {
	if !useAsm {
		return dotQ6_KGo(row, x)
	}
	if useAVX512 {
		var out float32
		dotQ6_KRowsAVX512(&row[0], &x[0], len(x)/QK_K, 1, &out)
		return out
	}
	return dotQ6_KAVX2(&row[0], &x[0], len(x)/QK_K)
}

//go:noescape
func dotQ8_0Q8_0AVX2(w, a *byte, nblocks int) float32

// dotQ8_0Q8_0 dots a Q8_0 row with activations quantized to Q8_0 (integer products). It is
// kept unexported for the benchmark that decides whether int8 activations pay.
func dotQ8_0Q8_0(w, a []byte) float32 {
	if !useAsm || len(w) == 0 {
		return dotQ8_0Q8_0Go(w, a)
	}
	return dotQ8_0Q8_0AVX2(&w[0], &a[0], len(w)/34)
}

//go:noescape
func dotIQ2_XXSAVX2(row *byte, x *float32, nblocks int, grid *[256][8]float32, signs *[128][8]uint32) float32

func dotIQ2_XXS(row []byte, x []float32) float32 {
	if !useAsm {
		return dotIQ2_XXSGo(row, x)
	}
	return dotIQ2_XXSAVX2(&row[0], &x[0], len(x)/QK_K, &iq2xxsGridF32, &iqSignMask)
}

//go:noescape
func dotQ5_KAVX2(row *byte, x *float32, nblocks int) float32

func dotQ5_K(row []byte, x []float32) float32 {
	if !useAsm {
		return dotQ5_KGo(row, x)
	}
	return dotQ5_KAVX2(&row[0], &x[0], len(x)/QK_K)
}

// dotRows4Fast is DotRows4 with one assembly call, where there is a four-token kernel.
func dotRows4Fast(t Type, rows []byte, x []float32, cols int, out []float32, ldo int) bool {
	if !useAVX512 || t != Q8_0 || cols == 0 || len(rows) == 0 {
		return false
	}
	dotQ8_0Rows4AVX512(&rows[0], &x[0], cols, cols/32, len(rows)/t.RowBytes(cols), &out[0], ldo)
	return true
}

//go:noescape
func dotMXFP4AVX2(row *byte, x *float32, nblocks int, levels *[16]int8, scales *[256]float32) float32

func dotMXFP4(row []byte, x []float32) float32 {
	if !useAsm {
		return dotMXFP4Go(row, x)
	}
	return dotMXFP4AVX2(&row[0], &x[0], len(x)/32, &kvaluesMXFP4, &e8m0HalfTable)
}
