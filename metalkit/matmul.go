package metalkit

import (
	"fmt"
	"slices"

	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/kernels"
)

// Products of weights with activations: the mat-vec kernels for decode (a few tokens), the
// tiled mat-mat kernel for prefill, the expert products over routed ids (mul_mat_id) and
// the row lookups of embeddings. The kernels are in kernels/mul_mat.h; their geometry
// (kernels.Mv*, Mm*, GetRowsThreads) is defined once in package kernels.

// matVecMaxTokens is the batch up to which matMul runs the mat-vec kernel: it decodes each
// weight chunk once per kernels.MvTokens tokens and keeps every lane busy, which beats the
// tiled kernel's threadgroup round trips while the batch is a few decoding sequences.
const matVecMaxTokens = 8

// simdWidth is the lanes of a SIMD group on Apple GPUs (and in the harness).
const simdWidth = 32

// matMulSupported reports whether the matrix kernels exist for weights of type t.
func matMulSupported(t quant.Type) bool { return slices.Contains(kernels.MatMulTypes, t) }

// checkMatrix panics, as engine/ml says misuse does, when a matrix of type t cannot have cols
// columns (the quantized kernels decode whole blocks).
func checkMatrix(t quant.Type, rows, cols int) {
	if !matMulSupported(t) {
		panic(fmt.Sprintf("metalkit: no matrix kernels for type %v", t))
	}
	if rows <= 0 || cols <= 0 || cols%t.BlockSize() != 0 {
		panic(fmt.Sprintf("metalkit: a %v matrix of %d rows by %d columns (columns must be a positive multiple of %d)", t, rows, cols, t.BlockSize()))
	}
}

// mvLanes is the lanes of a SIMD group that share a row of cols values: one per span of
// kernels.MvSpan chunks of 16, rounded down to a power of two, at most the SIMD width.
// 2048 columns get 16 lanes (two per 256-value block), 256 columns two lanes and 16 rows
// per SIMD group.
func mvLanes(cols int) int {
	spans := (cols + 16*kernels.MvSpan - 1) / (16 * kernels.MvSpan)
	l := 1
	for l*2 <= spans && l*2 <= simdWidth {
		l *= 2
	}
	return l
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// matMul encodes y[n, rows] = x[n, cols] · wᵀ for w the GGUF bytes of a [rows, cols] matrix
// of type t.
func (e *encoder) matMul(t quant.Type, w Region, rows, cols int, x, y Region, n int) {
	checkMatrix(t, rows, cols)
	rb := t.RowBytes(cols)
	if n <= 0 {
		panic(fmt.Sprintf("metalkit: matmul of %d tokens", n))
	}
	checkRegion("matmul weights", w, int64(rows)*int64(rb))
	checkRegion("matmul input", x, int64(n)*int64(cols)*4)
	checkRegion("matmul output", y, int64(n)*int64(rows)*4)
	sfx := kernels.TypeSuffix(t)
	if n <= matVecMaxTokens {
		lanes := mvLanes(cols)
		rowsPerGroup := kernels.MvSimdgroups * simdWidth / lanes
		args := kernels.MulMvArgs{Rows: int32(rows), Cols: int32(cols), N: int32(n), Lanes: int32(lanes), RowBytes: uint64(rb)}
		e.dispatch("mul_mv_"+sfx+"_f32", nil,
			[3]int{ceilDiv(rows, rowsPerGroup), ceilDiv(n, kernels.MvTokens), 1},
			[3]int{kernels.MvSimdgroups * simdWidth, 1, 1},
			0, matVecCost(t, rows, cols, n), args, w, x, y)
		return
	}
	// The tiled kernel: the fallback of the MPS route (matMulMPS, chosen where the product
	// is recorded, ops.go), and what every device without device.GEMMEncoder — the harness
	// among them — runs for prefill.
	args := kernels.MulMmArgs{Rows: int32(rows), Cols: int32(cols), N: int32(n), RowBytes: uint64(rb)}
	e.dispatch("mul_mm_"+sfx+"_f32", nil,
		[3]int{ceilDiv(rows, kernels.MmRows), ceilDiv(n, kernels.MmTokens), 1},
		[3]int{kernels.MmThreads, 1, 1},
		0, matMatCost(t, rows, cols, n), args, w, x, y)
}

// Dense prefill products may go through the device's vendor GEMM (device.GEMMEncoder: on a
// Mac, MPSMatrixMultiplication, which Red Lite measured at 12.6–12.9 TFLOPS in float32
// against 10.1–10.8 for its own tiled GEMM on 2048-token projections). The library takes
// float32 matrices, so a quantized weight is first decoded to float32 rows in the pass's
// scratch (the get_rows kernel over rows 0..r-1), at most mpsChunkBytes at a time: the
// product is cut into chunks of output features, each decoded and multiplied into its
// columns of the output. A float32 weight is read in place. Expert products never take this
// route (their rows are chosen per token on the GPU).

// mpsMinTokens is the batch from which a dense product takes the MPS route: below it the
// decode of the weight to float32 would cost more than the library's faster product saves
// (Red Lite uses MPS for prefill chunks only).
const mpsMinTokens = 64

// mpsChunkBytes bounds the float32 copy of a quantized weight that one product decodes at a
// time: the scratch the route adds to a pass (the planner's scratch term counts it through
// Backend.PeakScratchBytes). 64 MiB holds a whole 8192×2048 projection of Qwen3-Next-80B;
// a larger matrix (the output head) is multiplied in chunks of rows. A variable so tests
// can force several chunks.
var mpsChunkBytes int64 = 64 << 20

// mpsRoute is how a dense product runs through the device's GEMM: chunk output features at
// a time, decoding each chunk to float32 first (decode) or reading the weight in place.
// chunk 0 means the tiled kernel.
type mpsRoute struct {
	chunk  int
	decode bool
}

// routeMPS chooses the route of y[n, rows] = x[n, cols] · wᵀ on dev, with the route
// switched on (Backend.MPS) or off. Devices without a GEMM take the tiled kernel.
func routeMPS(dev device.Device, on bool, t quant.Type, rows, cols, n int) mpsRoute {
	if _, ok := dev.(device.GEMMEncoder); !ok || !on || n < mpsMinTokens {
		return mpsRoute{}
	}
	if t == quant.F32 {
		return mpsRoute{chunk: rows}
	}
	return mpsRoute{chunk: int(min(int64(rows), max(1, mpsChunkBytes/(4*int64(cols))))), decode: true}
}

// scratch is the bytes of decoded weight the route needs during the product.
func (r mpsRoute) scratch(cols int) int64 {
	if !r.decode {
		return 0
	}
	return int64(r.chunk) * int64(cols) * 4
}

// matMulMPS encodes y[n, rows] = x[n, cols] · wᵀ through the device's GEMM along route r:
// ids holds the float32 values 0..r.chunk-1 and deq r.scratch(cols) bytes when r.decode.
func (e *encoder) matMulMPS(r mpsRoute, t quant.Type, w Region, rows, cols int, x, y Region, n int, ids, deq Region) {
	checkMatrix(t, rows, cols)
	rb := int64(t.RowBytes(cols))
	checkRegion("matmul weights", w, int64(rows)*rb)
	checkRegion("matmul input", x, int64(n)*int64(cols)*4)
	checkRegion("matmul output", y, int64(n)*int64(rows)*4)
	if r.decode {
		checkRegion("matmul row ids", ids, int64(r.chunk)*4)
		checkRegion("matmul decoded weights", deq, r.scratch(cols))
	}
	ge, ok := e.dev.(device.GEMMEncoder)
	if !ok {
		e.err = fmt.Errorf("metalkit: device %s has no GEMM", e.dev.Name())
		return
	}
	for r0 := 0; r0 < rows && e.err == nil; r0 += r.chunk {
		rc := min(r.chunk, rows-r0)
		b := device.Matrix{Buffer: w.Buf, Offset: w.Off + int64(r0)*rb, RowBytes: rb, Type: device.Float32}
		if r.decode {
			e.getRows(t, w.Sub(int64(r0)*rb, int64(rc)*rb), cols, ids, deq, rc)
			b = device.Matrix{Buffer: deq.Buf, Offset: deq.Off, RowBytes: int64(cols) * 4, Type: device.Float32}
		}
		if e.err != nil {
			return
		}
		ge.EncodeGEMM(e.cmd, device.GEMM{
			M: n, N: rc, K: cols,
			A:    device.Matrix{Buffer: x.Buf, Offset: x.Off, RowBytes: int64(cols) * 4, Type: device.Float32},
			B:    b,
			C:    device.Matrix{Buffer: y.Buf, Offset: y.Off + int64(r0)*4, RowBytes: int64(rows) * 4, Type: device.Float32},
			Cost: gemmCost(rc, cols, n),
		})
	}
}

// matMulExperts encodes ml.Context.MatMulExperts: for token i and slot j, y[i][j] = x · wᵀ
// of expert ids[i][j] of w [experts, rows, cols], x [n, cols] shared by the k slots or
// [n, k, cols] (xPerSlot); ids [n, k] float32; y [n, k, rows]. Up to matVecMaxTokens tokens
// every (token, slot) pair is a mat-vec over its expert's rows (decode); beyond, each
// expert's threadgroups gather the pairs routed to it on the GPU and run the tiled mat-mat
// over them, decoding the expert's weights once per tile of pairs (prefill). r says where the
// experts are (w itself, or the slots of the expert cache's arena) and which pairs to compute.
func (e *encoder) matMulExperts(t quant.Type, w Region, experts, rows, cols int, x Region, xPerSlot bool, ids Region, k int, y Region, n int, r expertRound) {
	rb, eb, perSlot := checkExperts("expert matmul", t, w, experts, rows, cols, x, xPerSlot, ids, k, n, r)
	checkRegion("expert output", y, int64(n)*int64(k)*int64(rows)*4)
	sfx := kernels.TypeSuffix(t)
	if n <= matVecMaxTokens {
		args, groups := mvIdArgs(experts, rows, cols, rb, eb, perSlot, k, n, r)
		e.dispatchWith(r.table(), "mul_mv_id_"+sfx+"_f32", nil,
			[3]int{groups, n * k, 1},
			[3]int{kernels.MvSimdgroups * simdWidth, 1, 1},
			0, expertsVecCost(t, experts, rows, cols, n, k, xPerSlot, r), args, w, x, ids, y)
		return
	}
	args := kernels.MulMmIdArgs{
		Rows: int32(rows), Cols: int32(cols), N: int32(n), K: int32(k),
		Experts: int32(experts), XPerSlot: perSlot,
		Cached: b2i(r.cached), T0: int32(r.t0), T1: int32(r.t1), S0: int32(r.s0), S1: int32(r.s1),
		RowBytes: uint64(rb), ExpertBytes: uint64(eb),
	}
	e.dispatchWith(r.table(), "mul_mm_id_"+sfx+"_f32", nil,
		[3]int{ceilDiv(rows, kernels.MmRows), experts, 1},
		[3]int{kernels.MmThreads, 1, 1},
		0, expertsMatCost(t, experts, rows, cols, n, k, xPerSlot, r), args, w, x, ids, y)
}

// matMulExpertsSum encodes matMulExperts followed by weightedSum in one dispatch (decode,
// n ≤ matVecMaxTokens): y[i] = Σ_j ws[i][j] · (x[i][j] · wᵀ of expert ids[i][j]), the slots
// added in selection order; ws [n, k] float32, y [n, rows]. Each slot's product is the one
// matMulExperts computes, so y is bit-identical to the two dispatches (Red Lite's fused
// down projection and MoE tail), without the [n, k, rows] products in memory. A round of
// slots from r.s0 > 0 continues the sums an earlier round of the same tokens left in y.
func (e *encoder) matMulExpertsSum(t quant.Type, w Region, experts, rows, cols int, x Region, xPerSlot bool, ids Region, k int, ws, y Region, n int, r expertRound) {
	rb, eb, perSlot := checkExperts("fused expert sum", t, w, experts, rows, cols, x, xPerSlot, ids, k, n, r)
	if n > matVecMaxTokens {
		panic(fmt.Sprintf("metalkit: fused expert sum of %d tokens (at most %d)", n, matVecMaxTokens))
	}
	checkRegion("expert sum weights", ws, int64(n)*int64(k)*4)
	checkRegion("expert sum output", y, int64(n)*int64(rows)*4)
	args, groups := mvIdArgs(experts, rows, cols, rb, eb, perSlot, k, n, r)
	e.dispatchWith(r.table(), "mul_mv_id_sum_"+kernels.TypeSuffix(t)+"_f32", nil,
		[3]int{groups, n, 1},
		[3]int{kernels.MvSimdgroups * simdWidth, 1, 1},
		0, expertsSumCost(t, experts, rows, cols, n, k, xPerSlot, r), args, w, x, ids, ws, y)
}

// checkExperts panics, naming what, when an expert product's sizes or regions are wrong,
// and returns the bytes of a weight row and of an expert (of a slot when r is cached), and
// x_per_slot as the kernels take it.
func checkExperts(what string, t quant.Type, w Region, experts, rows, cols int, x Region, xPerSlot bool, ids Region, k, n int, r expertRound) (rb int, eb int64, perSlot int32) {
	checkMatrix(t, rows, cols)
	if experts <= 0 || k <= 0 || n <= 0 {
		panic(fmt.Sprintf("metalkit: %s of %d tokens, %d slots, %d experts", what, n, k, experts))
	}
	if r.t0 < 0 || r.t0 >= r.t1 || r.t1 > n || r.s0 < 0 || r.s0 >= r.s1 || r.s1 > k {
		panic(fmt.Sprintf("metalkit: %s of tokens [%d, %d) of %d and slots [%d, %d) of %d", what, r.t0, r.t1, n, r.s0, r.s1, k))
	}
	rb = t.RowBytes(cols)
	eb = int64(rows) * int64(rb)
	if r.cached {
		if len(r.where) != experts || r.slotBytes < eb {
			panic(fmt.Sprintf("metalkit: %s through a table of %d experts (want %d) and slots of %d bytes (need %d)", what, len(r.where), experts, r.slotBytes, eb))
		}
		eb = r.slotBytes
		checkRegion("expert cache arena", w, int64(slices.Max(r.where)+1)*eb)
	} else {
		checkRegion("expert weights", w, int64(experts)*eb)
	}
	xRows := int64(n)
	if xPerSlot {
		xRows *= int64(k)
		perSlot = 1
	}
	checkRegion("expert input", x, xRows*int64(cols)*4)
	checkRegion("expert ids", ids, int64(n)*int64(k)*4)
	return rb, eb, perSlot
}

// mvIdArgs are the arguments of the expert mat-vec kernels (mul_mv_id, mul_mv_id_sum) and
// the threadgroups that cover the rows.
func mvIdArgs(experts, rows, cols, rb int, eb int64, perSlot int32, k, n int, r expertRound) (kernels.MulMvIdArgs, int) {
	lanes := mvLanes(cols)
	rowsPerGroup := kernels.MvSimdgroups * simdWidth / lanes
	return kernels.MulMvIdArgs{
		Rows: int32(rows), Cols: int32(cols), N: int32(n), Lanes: int32(lanes),
		K: int32(k), Experts: int32(experts), XPerSlot: perSlot,
		Cached: b2i(r.cached), T0: int32(r.t0), T1: int32(r.t1), S0: int32(r.s0), S1: int32(r.s1),
		RowBytes: uint64(rb), ExpertBytes: uint64(eb),
	}, ceilDiv(rows, rowsPerGroup)
}

// getRows encodes ml.Context.Embed: y[n, cols] = the rows ids[n] (float32) of table, a
// [rows, cols] matrix of type t whose rows are the region's length over the row size. An id
// outside the table yields a row of NaN (a kernel cannot fail the pass).
func (e *encoder) getRows(t quant.Type, table Region, cols int, ids Region, y Region, n int) {
	checkMatrix(t, 1, cols)
	if n <= 0 {
		panic(fmt.Sprintf("metalkit: lookup of %d rows", n))
	}
	rb := t.RowBytes(cols)
	rows := table.Len / int64(rb)
	checkRegion("lookup ids", ids, int64(n)*4)
	checkRegion("lookup output", y, int64(n)*int64(cols)*4)
	args := kernels.GetRowsArgs{Cols: int32(cols), N: int32(n), Rows: int32(min(rows, 1<<31-1)), RowBytes: uint64(rb)}
	e.dispatch("get_rows_"+kernels.TypeSuffix(t), nil,
		[3]int{ceilDiv(ceilDiv(cols, 16), kernels.GetRowsThreads), n, 1},
		[3]int{kernels.GetRowsThreads, 1, 1},
		0, getRowsCost(t, cols, n), args, table, ids, y)
}

// checkRegion panics when r is shorter than a tensor of need bytes: a kernel would read or
// write past it, which a GPU does silently.
func checkRegion(what string, r Region, need int64) {
	if r.Len < need {
		panic(fmt.Sprintf("metalkit: %s region of %d bytes, need %d", what, r.Len, need))
	}
}

// ---- modelled costs, one function per kernel family (the roofline table sums them)

// matVecCost: every weight byte read once (again per kernels.MvTokens tokens, from cache),
// the activations, the outputs.
func matVecCost(t quant.Type, rows, cols, n int) device.Cost {
	return device.Cost{
		Label:   "matvec " + kernels.TypeSuffix(t),
		Read:    int64(rows)*int64(t.RowBytes(cols)) + int64(n)*int64(cols)*4,
		Written: int64(n) * int64(rows) * 4,
		FLOPs:   2 * int64(rows) * int64(cols) * int64(n),
	}
}

// matMatCost: the weights are read once per tile of kernels.MmTokens tokens, the
// activations once per tile of kernels.MmRows rows (what a tiled GEMM streams from memory
// when neither fits in cache).
func matMatCost(t quant.Type, rows, cols, n int) device.Cost {
	wb := int64(rows) * int64(t.RowBytes(cols))
	xb := int64(n) * int64(cols) * 4
	return device.Cost{
		Label:   "matmat " + kernels.TypeSuffix(t),
		Read:    wb*int64(ceilDiv(n, kernels.MmTokens)) + xb*int64(ceilDiv(rows, kernels.MmRows)),
		Written: int64(n) * int64(rows) * 4,
		FLOPs:   2 * int64(rows) * int64(cols) * int64(n),
	}
}

// gemmCost: a vendor GEMM over float32 operands, each read once (the library's tiling is
// not ours to model; at prefill sizes its operands stream from memory about once).
func gemmCost(rows, cols, n int) device.Cost {
	return device.Cost{
		Label:   "gemm mps f32",
		Read:    int64(rows)*int64(cols)*4 + int64(n)*int64(cols)*4,
		Written: int64(n) * int64(rows) * 4,
		FLOPs:   2 * int64(rows) * int64(cols) * int64(n),
	}
}

// expertsVecCost: the routed experts' weights (at most every expert once: pairs routed to
// the same expert read it again from cache), the activations of every pair, the outputs.
func expertsVecCost(t quant.Type, experts, rows, cols, n, k int, xPerSlot bool, r expertRound) device.Cost {
	pairs := int64(r.t1-r.t0) * int64(r.s1-r.s0)
	xRows := int64(r.t1 - r.t0)
	if xPerSlot {
		xRows = pairs
	}
	return device.Cost{
		Label:   "matvec experts " + kernels.TypeSuffix(t),
		Read:    min(pairs, int64(experts))*int64(rows)*int64(t.RowBytes(cols)) + xRows*int64(cols)*4 + pairs*4,
		Written: pairs * int64(rows) * 4,
		FLOPs:   2 * int64(rows) * int64(cols) * pairs,
	}
}

// expertsSumCost: what expertsVecCost reads, and the slots' weights; only the sums are
// written, and each product is scaled and added (2 FLOPs per product).
func expertsSumCost(t quant.Type, experts, rows, cols, n, k int, xPerSlot bool, r expertRound) device.Cost {
	c := expertsVecCost(t, experts, rows, cols, n, k, xPerSlot, r)
	pairs := int64(r.t1-r.t0) * int64(r.s1-r.s0)
	c.Label = "matvec experts+sum " + kernels.TypeSuffix(t)
	c.Read += pairs * 4
	c.Written = int64(r.t1-r.t0) * int64(rows) * 4
	c.FLOPs += 2 * pairs * int64(rows)
	return c
}

// expertsMatCost: every expert's weights once per tile of kernels.MmTokens pairs routed to
// it (the routing spread evenly: the model cannot know it), the activations once per tile
// of kernels.MmRows rows, and the ids once per threadgroup.
func expertsMatCost(t quant.Type, experts, rows, cols, n, k int, xPerSlot bool, r expertRound) device.Cost {
	pairs := int64(r.t1-r.t0) * int64(r.s1-r.s0)
	tilesPerExpert := max(1, ceilDiv(int(pairs), experts*kernels.MmTokens))
	groups := int64(ceilDiv(rows, kernels.MmRows)) * int64(experts)
	return device.Cost{
		Label:   "matmat experts " + kernels.TypeSuffix(t),
		Read:    int64(experts)*int64(tilesPerExpert)*int64(rows)*int64(t.RowBytes(cols)) + pairs*int64(cols)*4*int64(ceilDiv(rows, kernels.MmRows)) + groups*pairs*4,
		Written: pairs * int64(rows) * 4,
		FLOPs:   2 * int64(rows) * int64(cols) * pairs,
	}
}

// getRowsCost: the rows looked up and the ids.
func getRowsCost(t quant.Type, cols, n int) device.Cost {
	return device.Cost{
		Label:   "get_rows " + kernels.TypeSuffix(t),
		Read:    int64(n)*int64(t.RowBytes(cols)) + int64(n)*4,
		Written: int64(n) * int64(cols) * 4,
	}
}
