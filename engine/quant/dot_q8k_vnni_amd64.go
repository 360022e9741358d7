//go:build amd64 && !purego

package quant

// useVNNI selects the AVX-512 VNNI 8-bit kernels over repacked rows (dot_q4kr_amd64.s and the
// Q5_K and Q6_K files beside it) for
// the types that have them; tests turn it off to check the AVX2 ones on the same machine.
// A repacked matrix takes them for every product, of one token or many: they agree bit for
// bit with each other and with the Go kernels, the AVX2 row kernels only with each other.
var useVNNI = useAsm && hasAVX512VNNI()

//go:noescape
func dotQ4_KR16Q8K4VNNI(packed *byte, a *Q8K, nblocks, ngroups int, out *float32, ldo int)

//go:noescape
func dotQ4_KR16Q8KVNNI(packed *byte, a *Q8K, nblocks, ngroups int, out *float32)

//go:noescape
func dotQ5_KR16Q8K4VNNI(packed *byte, a *Q8K, nblocks, ngroups int, out *float32, ldo int)

//go:noescape
func dotQ5_KR16Q8KVNNI(packed *byte, a *Q8K, nblocks, ngroups int, out *float32)

//go:noescape
func dotQ6_KR16Q8K4VNNI(packed *byte, a *Q8K, nblocks, ngroups int, out *float32, ldo int)

//go:noescape
func dotQ6_KR16Q8KVNNI(packed *byte, a *Q8K, nblocks, ngroups int, out *float32)

// int8Repacked: the types whose repacked kernels run here.
func int8Repacked(t Type) bool { return useVNNI && groupBlock(t) > 0 }

// repackedKernels returns t's four-token and one-token kernels.
func repackedKernels(t Type) (four func(*byte, *Q8K, int, int, *float32, int), one func(*byte, *Q8K, int, int, *float32)) {
	switch t {
	case Q5_K:
		return dotQ5_KR16Q8K4VNNI, dotQ5_KR16Q8KVNNI
	case Q6_K:
		return dotQ6_KR16Q8K4VNNI, dotQ6_KR16Q8KVNNI
	}
	return dotQ4_KR16Q8K4VNNI, dotQ4_KR16Q8KVNNI
}

// dotRepacked runs the repacked kernels over nr rows (whole groups but maybe the last) and
// n tokens: four at a time, then one. A last partial group is computed into a scratch
// tile and copied, so the kernels always write sixteen rows.
func dotRepacked(t Type, packed []byte, nb, nr int, a []Q8K, n int, out []float32, ldo int) {
	four, one := repackedKernels(t)
	full := nr / RepackRows
	gb := nb * groupBlock(t)
	i := 0
	for ; i+4 <= n; i += 4 {
		if full > 0 {
			four(&packed[0], &a[i*nb], nb, full, &out[i*ldo], ldo)
		}
		if tail := nr - full*RepackRows; tail > 0 {
			var tile [4 * RepackRows]float32
			four(&packed[full*gb], &a[i*nb], nb, 1, &tile[0], RepackRows)
			for k := range 4 {
				copy(out[(i+k)*ldo+full*RepackRows:(i+k)*ldo+nr], tile[k*RepackRows:])
			}
		}
	}
	for ; i < n; i++ {
		if full > 0 {
			one(&packed[0], &a[i*nb], nb, full, &out[i*ldo])
		}
		if tail := nr - full*RepackRows; tail > 0 {
			var tile [RepackRows]float32
			one(&packed[full*gb], &a[i*nb], nb, 1, &tile[0])
			copy(out[i*ldo+full*RepackRows:i*ldo+nr], tile[:])
		}
	}
}

// kernelSet names the amd64 kernels in use.
func kernelSet() string {
	switch {
	case useVNNI:
		return "avx512vnni"
	case useAVX512:
		return "avx512"
	case useAsm:
		return "avx2"
	}
	return "go"
}

// int8Kernel names t's 8-bit kernels here.
func int8Kernel(t Type) string {
	switch {
	case int8Repacked(t):
		return "avx512vnni, rows repacked by 16"
	case int8Asm(t) && int8Rows4(t):
		return "avx2, four tokens"
	case int8Asm(t):
		return "avx2"
	}
	return "go"
}

//go:noescape
func dotQ8_0R16Q8_0x2VNNI(packed, a *byte, nblocks, ngroups int, out *float32, ldo int)

//go:noescape
func dotQ8_0R16Q8_0VNNI(packed, a *byte, nblocks, ngroups int, out *float32)

// dotRepackedQ8_0 is dotRepacked for Q8_0 with activations quantized to Q8_0 (34 bytes a
// block): two tokens at a time, then one.
func dotRepackedQ8_0(packed []byte, nb, nr int, a []byte, n int, out []float32, ldo int) {
	full := nr / RepackRows
	gb := nb * q8_0r16Block
	ab := nb * 34
	tail := nr - full*RepackRows
	i := 0
	for ; i+2 <= n; i += 2 {
		if full > 0 {
			dotQ8_0R16Q8_0x2VNNI(&packed[0], &a[i*ab], nb, full, &out[i*ldo], ldo)
		}
		if tail > 0 {
			var tile [2 * RepackRows]float32
			dotQ8_0R16Q8_0x2VNNI(&packed[full*gb], &a[i*ab], nb, 1, &tile[0], RepackRows)
			copy(out[i*ldo+full*RepackRows:i*ldo+nr], tile[:])
			copy(out[(i+1)*ldo+full*RepackRows:(i+1)*ldo+nr], tile[RepackRows:])
		}
	}
	if i < n {
		if full > 0 {
			dotQ8_0R16Q8_0VNNI(&packed[0], &a[i*ab], nb, full, &out[i*ldo])
		}
		if tail > 0 {
			var tile [RepackRows]float32
			dotQ8_0R16Q8_0VNNI(&packed[full*gb], &a[i*ab], nb, 1, &tile[0])
			copy(out[i*ldo+full*RepackRows:i*ldo+nr], tile[:])
		}
	}
}
