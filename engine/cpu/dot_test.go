package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/redlite/batch/engine/quant"
)

// randomQ4K is n random Q4_K blocks with small positive scales.
func randomQ4K(rng *rand.Rand, blocks int) []byte {
	data := make([]byte, blocks*144)
	for i := range data {
		data[i] = byte(rng.IntN(256))
	}
	for b := 0; b < blocks; b++ {
		d := quant.F32ToF16(float32(0.001 + 0.01*rng.Float64()))
		m := quant.F32ToF16(float32(0.001 * rng.Float64()))
		data[144*b], data[144*b+1], data[144*b+2], data[144*b+3] = byte(d), byte(d>>8), byte(m), byte(m>>8)
	}
	return data
}

// TestMatMulInt8 checks the 8-bit path of MatMul at one token and a few (the tiles): each
// token's row gets exactly the kernel's dot with that token's quantized activations, the
// result stays near the exact path's, and DotExact takes the exact path.
func TestMatMulInt8(t *testing.T) {
	// Above smallVector, which is expanded to float32 at load; not a multiple of the
	// repacked layout's sixteen rows, so that the last group is partial.
	const rows, cols = 168, 512
	rng := rand.New(rand.NewPCG(7, 8))
	b := New(2)
	w, err := weightOf(b, "w", quant.Q4_K, []int{cols, rows}, randomQ4K(rng, rows*cols/256))
	if err != nil {
		t.Fatal(err)
	}
	wt := w.(*weight)
	if (wt.packed != nil) != quant.Int8Repacked(quant.Q4_K) {
		t.Fatalf("repacked at load: %v, the machine's kernels want %v", wt.packed != nil, quant.Int8Repacked(quant.Q4_K))
	}
	for _, n := range []int{1, 3, 8} {
		x := randomTensor(rng, n, cols)
		b.SetDot(DotInt8)
		c := b.NewContext()
		got := values(t, c, c.MatMul(w, x))
		b.SetDot(DotExact)
		c = b.NewContext()
		exact := values(t, c, c.MatMul(w, x))
		acts := make([]quant.Q8K, cols/256)
		want := make([]float32, rows)
		for i := 0; i < n; i++ {
			quant.QuantizeQ8K(x.data[i*cols:(i+1)*cols], acts)
			if wt.packed != nil {
				quant.DotRepackedQ8K(quant.Q4_K, wt.packed, cols, 0, rows, acts, want, rows)
			} else {
				quant.DotRowsQ8K(quant.Q4_K, wt.data, acts, want)
			}
			if !equal32(got[i*rows:(i+1)*rows], want) {
				t.Fatalf("n %d token %d: int8 MatMul differs from the kernel on the quantized token", n, i)
			}
			checkNearExact(t, n, i, want, exact[i*rows:(i+1)*rows])
		}
	}
}

func TestParseDot(t *testing.T) {
	for s, want := range map[string]Dot{"": DotAuto, "auto": DotAuto, "exact": DotExact, "int8": DotInt8} {
		if got, err := ParseDot(s); err != nil || got != want {
			t.Errorf("ParseDot(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := ParseDot("fp8"); err == nil {
		t.Error("ParseDot(fp8): no error")
	}
}

// TestMatMulInt8Q8_0 checks Q8_0's 8-bit path at every batch size, the GEMM's included:
// each token's numbers are exactly the kernel's on that token quantized alone (repacked
// at load where the machine has the kernels, four tokens per call, or one), close to the
// exact path's but not equal.
func TestMatMulInt8Q8_0(t *testing.T) {
	const rows, cols = 168, 512
	rng := rand.New(rand.NewPCG(7, 9))
	b := New(2)
	wf := make([]float32, rows*cols)
	for i := range wf {
		wf[i] = float32(rng.NormFloat64())
	}
	data := make([]byte, quant.Q8_0.RowBytes(rows*cols))
	if err := quant.Quantize(quant.Q8_0, wf, data); err != nil {
		t.Fatal(err)
	}
	w, err := weightOf(b, "w", quant.Q8_0, []int{cols, rows}, data)
	if err != nil {
		t.Fatal(err)
	}
	if wt := w.(*weight); (wt.packed != nil) != quant.Int8Repacked(quant.Q8_0) {
		t.Fatalf("repacked at load: %v, the machine's kernels want %v", wt.packed != nil, quant.Int8Repacked(quant.Q8_0))
	}
	gemmFrom := b.fusedMaxTokens(quant.Q8_0) + 1
	for _, n := range []int{1, 3, 8, gemmFrom, 37} {
		x := randomTensor(rng, n, cols)
		b.SetDot(DotInt8)
		c := b.NewContext()
		got := values(t, c, c.MatMul(w, x))
		b.SetDot(DotExact)
		c = b.NewContext()
		exact := values(t, c, c.MatMul(w, x))
		acts := make([]byte, quant.Q8_0.RowBytes(cols))
		want := make([]float32, rows)
		for i := 0; i < n; i++ {
			quant.QuantizeQ8_0Ref(x.data[i*cols:(i+1)*cols], acts)
			quant.DotRowsQ8_0(data, acts, want)
			if !equal32(got[i*rows:(i+1)*rows], want) {
				t.Fatalf("n %d token %d: int8 MatMul differs from the kernel on the token alone", n, i)
			}
			checkNearExact(t, n, i, want, exact[i*rows:(i+1)*rows])
		}
	}
}

// TestRepackLimit binds Q8_0 weights under a limit that holds one layout: the first is
// repacked, the second reads its rows as stored, and both give each token the kernel's
// numbers.
func TestRepackLimit(t *testing.T) {
	if !quant.Int8Repacked(quant.Q8_0) {
		t.Skipf("kernel set %s repacks nothing", quant.KernelSet())
	}
	const rows, cols = 64, 2048
	rng := rand.New(rand.NewPCG(7, 10))
	b := New(2)
	data := make([]byte, quant.Q8_0.RowBytes(rows*cols))
	if err := quant.Quantize(quant.Q8_0, randomTensor(rng, rows, cols).data, data); err != nil {
		t.Fatal(err)
	}
	b.SetRepackLimit(int64(len(data)) + 1)
	var ws []*weight
	for _, name := range []string{"a", "b"} {
		w, err := weightOf(b, name, quant.Q8_0, []int{cols, rows}, data)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w.(*weight))
	}
	if ws[0].packed == nil || ws[1].packed != nil || b.HostWeightBytes() != int64(len(data)) {
		t.Fatalf("repacked %v, %v, %d bytes held: want the first only", ws[0].packed != nil, ws[1].packed != nil, b.HostWeightBytes())
	}
	x := randomTensor(rng, 3, cols)
	c := b.NewContext()
	p, q := c.MatMul(ws[0], x), c.MatMul(ws[1], x)
	if a, bb := values(t, c, p), values(t, c, q); !equal32(a, bb) {
		t.Error("the repacked and the stored rows gave different numbers")
	}
}

// checkNearExact fails unless token i's int8 products want are within 2 % relative RMS of
// the exact path's, and not the same numbers (which would mean int8 did not run).
func checkNearExact(t *testing.T, n, i int, want, exact []float32) {
	t.Helper()
	var dd, ee float64
	for r, w := range want {
		e := float64(exact[r])
		dd += (float64(w) - e) * (float64(w) - e)
		ee += e * e
	}
	if math.Sqrt(dd/ee) > 0.02 {
		t.Errorf("n %d token %d: int8 %.3g relative RMS from exact", n, i, math.Sqrt(dd/ee))
	}
	if dd == 0 {
		t.Errorf("n %d token %d: exact and int8 paths gave the same numbers", n, i)
	}
}
