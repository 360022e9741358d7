//go:build amd64 && !purego

package quant

//go:noescape
func dotQ8_0Q8_0RowsAVX2(rows, a *byte, nblocks, nrows int, out *float32)

func dotRowsQ8_0Fast(rows, a []byte, out []float32) bool {
	if !useAsm {
		return false
	}
	dotQ8_0Q8_0RowsAVX2(&rows[0], &a[0], len(a)/34, len(out), &out[0])
	return true
}

//go:noescape
func dotQ8_0Q8_0Rows4AVX2(rows, a *byte, nblocks, nrows int, out *float32, ldo int)

func dotRows4Q8_0Fast(rows, a []byte, out []float32, ldo int) bool {
	if !useAsm {
		return false
	}
	nb := len(a) / 4 / 34
	dotQ8_0Q8_0Rows4AVX2(&rows[0], &a[0], nb, len(rows)/(nb*34), &out[0], ldo)
	return true
}

//go:noescape
func quantizeQ8_0AVX2(x *float32, dst *byte, nblocks int)

func quantizeQ8_0Fast(x []float32, dst []byte) bool {
	if !useAsm || len(x) < 32 {
		return false
	}
	quantizeQ8_0AVX2(&x[0], &dst[0], len(x)/32)
	return true
}

func int8Q8_0Kernel() string {
	switch {
	case int8Repacked(Q8_0):
		return "avx512vnni, rows repacked by 16"
	case useAsm:
		return "avx2, four tokens"
	}
	return "go"
}
