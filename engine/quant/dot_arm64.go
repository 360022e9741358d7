//go:build arm64 && !purego

package quant

import (
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// On arm64 the quantized dots run NEON kernels (dot_arm64.s) that give the same bits as the
// Go kernels of dot.go: the Go compiler fuses a += b*c into FMADD on arm64 and the NEON
// kernels use FMLA in the same order. Which kernel runs is decided once, here.

// rowsKernel computes out[r], for nrows ≥ 1 contiguous rows of nblocks ≥ 1 blocks, as the
// dot product of row r with x.
type rowsKernel func(rows *byte, x *float32, nblocks, nrows int, out *float32)

// rows4Kernel is rowsKernel for four tokens at x, x+xstride, … (floats), their results at
// out, out+ostride, ….
type rows4Kernel func(rows *byte, x *float32, xstride, nblocks, nrows int, out *float32, ostride int)

// kernelTable is the set of kernels for one level of CPU features; a nil entry means the
// pure-Go kernel.
type kernelTable struct {
	name                  string
	q8_0, q4_K, q6_K, iq2 rowsKernel
	// q8_0x4, q4_Kx4 and q6_Kx4 are q8_0, q4_K and q6_K for four tokens at once (DotRows4).
	q8_0x4, q4_Kx4, q6_Kx4 rows4Kernel
	// q8_0q8_0 dots a Q8_0 row with Q8_0-quantized activations (integer products).
	q8_0q8_0 func(w, a *byte, nblocks int) float32
}

// goTable runs the pure-Go kernels; the tests compare the others against it.
var goTable = kernelTable{name: "go"}

// neonTable needs only Advanced SIMD, which every arm64 CPU Go runs on has.
var neonTable = kernelTable{
	name: "neon",
	q8_0: dotQ8_0RowsNEON,
	q4_K: dotQ4_KRowsSums,
	q6_K: dotQ6_KRowsNEON,
	iq2:  dotIQ2_XXSRowsNEON,

	q8_0x4:   dotQ8_0Rows4NEON,
	q4_Kx4:   dotQ4_KRows4Sums,
	q6_Kx4:   dotQ6_KRows4NEON,
	q8_0q8_0: dotQ8_0Q8_0NEON,
}

// sdotTable adds the integer dot product instruction (FEAT_DotProd: Apple M1 and later,
// Neoverse, Cortex-A55/A76 and later) to neonTable.
var sdotTable = func() kernelTable {
	t := neonTable
	t.name = "neon+sdot"
	t.q8_0q8_0 = dotQ8_0Q8_0SDOT
	return t
}()

// kernels is the table in use: the best one the CPU supports.
var kernels = chooseKernels()

func chooseKernels() kernelTable {
	if cpu.ARM64.HasASIMD && cpu.ARM64.HasASIMDDP {
		return sdotTable
	}
	if cpu.ARM64.HasASIMD {
		return neonTable
	}
	return goTable
}

// useAsm and useAVX512 exist for the tests shared with amd64.
var useAsm = kernels.name != "go"

var useAVX512 = false

//go:noescape
func dotQ8_0RowsNEON(rows *byte, x *float32, nblocks, nrows int, out *float32)

//go:noescape
func dotQ8_0Rows4NEON(rows *byte, x *float32, xstride, nblocks, nrows int, out *float32, ostride int)

//go:noescape
func dotQ4_KRowsNEON(rows *byte, x *float32, nblocks, nrows int, out *float32, sums *float32)

//go:noescape
func q4kSumsNEON(x *float32, nblocks int, sums *float32, stride int)

//go:noescape
func dotQ4_KRows4NEON(rows *byte, x *float32, xstride, nblocks, nrows int, out *float32, ostride int, sums *float32)

// q4kSumsOnStack is the number of blocks whose sums of x fit the stack buffer of
// dotQ4_KRowsSums (16,384 columns); longer rows take a heap buffer.
const q4kSumsOnStack = 64

// dotQ4_KRowsSums makes the per-sub-block sums of x the Q4_K kernel needs (they depend on x
// only) once, then runs the rows.
func dotQ4_KRowsSums(rows *byte, x *float32, nblocks, nrows int, out *float32) {
	var buf [q4kSumsOnStack * 32]float32
	sums := buf[:]
	if nblocks > q4kSumsOnStack {
		sums = make([]float32, nblocks*32)
	}
	q4kSumsNEON(x, nblocks, &sums[0], 16)
	dotQ4_KRowsNEON(rows, x, nblocks, nrows, out, &sums[0])
}

// q4kSums4Pool holds the sums buffers of four-token calls too long for the stack.
var q4kSums4Pool sync.Pool

// dotQ4_KRows4Sums is dotQ4_KRowsSums for four tokens: their sums side by side, then one
// kernel call.
func dotQ4_KRows4Sums(rows *byte, x *float32, xstride, nblocks, nrows int, out *float32, ostride int) {
	var buf [q4kSumsOnStack * 32]float32
	sums := buf[:]
	if n := 4 * nblocks * 32; n > len(buf) {
		p, _ := q4kSums4Pool.Get().(*[]float32)
		if p == nil || len(*p) < n {
			s := make([]float32, n)
			p = &s
		}
		defer q4kSums4Pool.Put(p)
		sums = *p
	}
	for t := 0; t < 4; t++ {
		xt := (*float32)(unsafe.Add(unsafe.Pointer(x), 4*t*xstride))
		q4kSumsNEON(xt, nblocks, &sums[4*t], 64)
	}
	dotQ4_KRows4NEON(rows, x, xstride, nblocks, nrows, out, ostride, &sums[0])
}

//go:noescape
func dotQ6_KRowsNEON(rows *byte, x *float32, nblocks, nrows int, out *float32)

//go:noescape
func dotQ8_0Q8_0NEON(w, a *byte, nblocks int) float32

//go:noescape
func dotQ8_0Q8_0SDOT(w, a *byte, nblocks int) float32

//go:noescape
func dotQ6_KRows4NEON(rows *byte, x *float32, xstride, nblocks, nrows int, out *float32, ostride int)

//go:noescape
func dotIQ2_XXSRowsNEON(rows *byte, x *float32, nblocks, nrows int, out *float32)

// kernelFor returns the table's kernel for t and its block size, or nil.
func (k *kernelTable) kernelFor(t Type) (rowsKernel, int) {
	switch t {
	case Q8_0:
		return k.q8_0, 32
	case Q4_K:
		return k.q4_K, QK_K
	case Q6_K:
		return k.q6_K, QK_K
	case IQ2_XXS:
		return k.iq2, QK_K
	}
	return nil, 0
}

// dot1 runs the table's kernel for one row, or the Go kernel when there is none.
func (k *kernelTable) dot1(t Type, row []byte, x []float32, pure func([]byte, []float32) float32) float32 {
	fn, bs := k.kernelFor(t)
	if fn == nil || len(x) == 0 {
		return pure(row, x)
	}
	var out float32
	fn(&row[0], &x[0], len(x)/bs, 1, &out)
	return out
}

// dotRowsFast computes out[r] for len(out) contiguous rows of type t with one assembly
// call when the table has a kernel for t; the caller has checked the lengths.
func dotRowsFast(t Type, rows []byte, x []float32, out []float32) bool {
	fn, bs := kernels.kernelFor(t)
	if fn == nil || len(out) == 0 || len(x) == 0 {
		return false
	}
	fn(&rows[0], &x[0], len(x)/bs, len(out), &out[0])
	return true
}

// dotRows4Fast is DotRows4 with one assembly call, where the table has a four-token kernel.
func dotRows4Fast(t Type, rows []byte, x []float32, cols int, out []float32, ldo int) bool {
	var fn rows4Kernel
	switch t {
	case Q8_0:
		fn = kernels.q8_0x4
	case Q4_K:
		fn = kernels.q4_Kx4
	case Q6_K:
		fn = kernels.q6_Kx4
	}
	if fn == nil || cols == 0 || len(rows) == 0 {
		return false
	}
	fn(&rows[0], &x[0], cols, cols/t.BlockSize(), len(rows)/t.RowBytes(cols), &out[0], ldo)
	return true
}

func dotQ8_0(row []byte, x []float32) float32    { return kernels.dot1(Q8_0, row, x, dotQ8_0Go) }
func dotQ4_K(row []byte, x []float32) float32    { return kernels.dot1(Q4_K, row, x, dotQ4_KGo) }
func dotQ6_K(row []byte, x []float32) float32    { return kernels.dot1(Q6_K, row, x, dotQ6_KGo) }
func dotIQ2_XXS(row []byte, x []float32) float32 { return kernels.dot1(IQ2_XXS, row, x, dotIQ2_XXSGo) }

// The rest have no NEON kernel yet.

func dotF32(a, b []float32) float32           { return dotF32Go(a, b) }
func axpy(alpha float32, x, y []float32)      { axpyGo(alpha, x, y) }
func dotF16(h []uint16, x []float32) float32  { return dotF16Go(h, x) }
func dotQ5_K(row []byte, x []float32) float32 { return dotQ5_KGo(row, x) }

// dotQ8_0Q8_0 dots a Q8_0 row with activations quantized to Q8_0; the caller has checked
// that len(a) = len(w), a whole number of blocks.
func dotQ8_0Q8_0(w, a []byte) float32 {
	if kernels.q8_0q8_0 == nil || len(w) == 0 {
		return dotQ8_0Q8_0Go(w, a)
	}
	return kernels.q8_0q8_0(&w[0], &a[0], len(w)/34)
}

func kernelSet() string { return kernels.name }

func dotMXFP4(row []byte, x []float32) float32 { return dotMXFP4Go(row, x) }
