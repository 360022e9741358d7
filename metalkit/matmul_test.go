package metalkit

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/redlite/batch/engine/cpu"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/kernels"
)

// matMulTol bounds the difference from the CPU backend relative to ‖w_row‖·‖x‖: both sum
// float32 products of the same decoded weights, in another order (the bound for n terms is
// about n·2⁻²⁴ of Σ|wᵢxᵢ| ≤ ‖w‖‖x‖; 1e-5 is far above what a correct kernel shows and far
// below what a wrong block or scale gives).
const matMulTol = 1e-5

// testCols is the row length a type is tested at: not a multiple of a whole mat-vec span
// or of the mat-mat tile where the block size allows.
func testCols(t quant.Type) int {
	switch t.BlockSize() {
	case 1:
		return 300 // not even a multiple of the 16-value chunk
	case 32:
		return 544 // 17 blocks
	}
	return 768 // 3 super-blocks
}

// upload puts data in a new buffer of the device and returns its region.
func upload(t *testing.T, dev device.Device, data []byte) Region {
	t.Helper()
	b, err := dev.NewBuffer(int64(max(len(data), 4)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Release)
	if err := b.Write(0, data); err != nil {
		t.Fatal(err)
	}
	return Region{Buf: b, Len: int64(len(data))}
}

func uploadF32(t *testing.T, dev device.Device, v []float32) Region {
	t.Helper()
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return upload(t, dev, b)
}

func readF32(t *testing.T, r Region) []float32 {
	t.Helper()
	b := make([]byte, r.Len)
	if err := r.Buf.Read(r.Off, b); err != nil {
		t.Fatal(err)
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// run encodes what enc encodes as one command list and waits for it.
func run(t *testing.T, dev device.Device, enc func(e *encoder)) {
	t.Helper()
	e := &encoder{dev: dev, cmd: dev.NewCommands()}
	enc(e)
	if e.err != nil {
		t.Fatal(e.err)
	}
	e.cmd.Commit()
	if err := e.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

// cpuPass runs one pass of the CPU backend (the reference) over weights w of type typ and
// GGUF dims, with f issuing the operation, and returns the output.
func cpuPass(t *testing.T, typ quant.Type, w []byte, dims []int, f func(c ml.Context, w ml.Weight) ml.Tensor) []float32 {
	t.Helper()
	b := refCPU()
	m, err := b.Map(w)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := b.Weight(m, "w", typ, dims, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := b.NewContext()
	defer c.Close()
	y := f(c, wt)
	if err := c.Compute(); err != nil {
		t.Fatal(err)
	}
	out, err := c.Read(y)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rowNorms are the norms of the dequantized rows of a [rows, cols] matrix.
func rowNorms(t *testing.T, typ quant.Type, w []byte, rows, cols int) []float64 {
	t.Helper()
	v := make([]float32, rows*cols)
	if err := quant.Dequantize(typ, w, v); err != nil {
		t.Fatal(err)
	}
	out := make([]float64, rows)
	for r := range out {
		s := 0.0
		for _, f := range v[r*cols : (r+1)*cols] {
			s += float64(f) * float64(f)
		}
		out[r] = math.Sqrt(s)
	}
	return out
}

func norm(v []float32) float64 {
	s := 0.0
	for _, f := range v {
		s += float64(f) * float64(f)
	}
	return math.Sqrt(s)
}

// compareProducts checks got against want, [n, rows] products of rows of norm wn[r] with
// inputs x[i] of norm xn[i], and returns the largest error relative to wn·xn.
func compareProducts(t *testing.T, what string, got, want []float32, wn func(i, r int) float64, xn func(i int) float64, rows int) float64 {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d outputs, want %d", what, len(got), len(want))
	}
	worst, bad := 0.0, 0
	for k := range want {
		i, r := k/rows, k%rows
		scale := wn(i, r) * xn(i)
		e := math.Abs(float64(got[k]) - float64(want[k]))
		if scale > 0 {
			e /= scale
		}
		if !(e <= matMulTol) { // NaN fails too
			if bad < 5 {
				t.Errorf("%s: [%d][%d] = %g, want %g (error %.3g of ‖w‖‖x‖)", what, i, r, got[k], want[k], e)
			}
			bad++
		}
		if e > worst || math.IsNaN(e) {
			worst = e
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d outputs off", what, bad, len(want))
	}
	return worst
}

func TestMatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 1))
	const rows = 37 // not a multiple of the rows of a mat-vec threadgroup or a mat-mat tile
	for _, typ := range kernels.MatMulTypes {
		testMatMul(t, rng, typ, rows, testCols(typ), []int{1, 3, 64})
	}
}

// TestMatMulWide runs the mat-vec kernel on rows long enough for 16 lanes per row (2048
// columns: the gate/up projections) and 32 (4096, and a plain row with a tail).
func TestMatMulWide(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 1))
	testMatMul(t, rng, quant.IQ2_XXS, 9, 2048, []int{1, 3})
	testMatMul(t, rng, quant.IQ1_M, 5, 4096, []int{1})
	testMatMul(t, rng, quant.F16, 5, 4100, []int{2})
}

// TestMatMulEdges runs both kernels around their tile and group sizes: one row, a row of
// one block (or of 17 values), token counts around MV_TOKENS, matVecMaxTokens and MM_TN.
func TestMatMulEdges(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 1))
	for _, c := range []struct {
		typ  quant.Type
		cols int
	}{{quant.F32, 17}, {quant.Q8_0, 32}, {quant.Q4_K, 256}} {
		for _, rows := range []int{1, 33, 65} {
			testMatMul(t, rng, c.typ, rows, c.cols, []int{4, 5, matVecMaxTokens, matVecMaxTokens + 1, 33})
		}
	}
}

func testMatMul(t *testing.T, rng *rand.Rand, typ quant.Type, rows, cols int, ns []int) {
	dev := testDevice(t)
	w := randomMatrix(rng, typ, rows, cols)
	wn := rowNorms(t, typ, w, rows, cols)
	wr := upload(t, dev, w)
	for _, n := range ns {
		t.Run(fmt.Sprintf("%v/%dx%d/n=%d", typ, rows, cols, n), func(t *testing.T) {
			x := randomVector(rng, n*cols)
			want := cpuPass(t, typ, w, []int{cols, rows}, func(c ml.Context, w ml.Weight) ml.Tensor {
				return c.MatMul(w, c.Input(x, n, cols))
			})
			y := upload(t, dev, make([]byte, 4*n*rows))
			run(t, dev, func(e *encoder) { e.matMul(typ, wr, rows, cols, uploadF32(t, dev, x), y, n) })
			worst := compareProducts(t, "matmul", readF32(t, y), want,
				func(_, r int) float64 { return wn[r] },
				func(i int) float64 { return norm(x[i*cols : (i+1)*cols]) }, rows)
			t.Logf("max error %.2g of ‖w‖‖x‖", worst)
		})
	}
}

// TestMatMulExperts runs k = 2 of 4 experts at 3 tokens (mat-vec per pair) and at 70
// (the gathered mat-mat: expert 0 takes most tokens' first slot, so it fills more than one
// tile of pairs and its pairs span more than one gathering step).
func TestMatMulExperts(t *testing.T) {
	dev := testDevice(t)
	rng := rand.New(rand.NewPCG(12, 1))
	const experts, rows, k = 4, 21, 2
	for _, typ := range kernels.MatMulTypes {
		cols := testCols(typ)
		w := randomMatrix(rng, typ, experts*rows, cols)
		wn := rowNorms(t, typ, w, experts*rows, cols)
		wr := upload(t, dev, w)
		for _, n := range []int{3, 70} {
			ids := make([]float32, n*k)
			for i := 0; i < n; i++ {
				p := rng.Perm(experts)
				if rng.IntN(4) != 0 {
					z := slices.Index(p, 0)
					p[0], p[z] = p[z], p[0]
				}
				for j := 0; j < k; j++ {
					ids[i*k+j] = float32(p[j])
				}
			}
			for _, perSlot := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/n=%d/perSlot=%v", typ, n, perSlot), func(t *testing.T) {
					xRows := n
					if perSlot {
						xRows = n * k
					}
					x := randomVector(rng, xRows*cols)
					want := cpuPass(t, typ, w, []int{cols, rows, experts}, func(c ml.Context, w ml.Weight) ml.Tensor {
						var xt ml.Tensor
						if perSlot {
							xt = c.Input(x, n, k, cols)
						} else {
							xt = c.Input(x, n, cols)
						}
						return c.MatMulExperts(w, xt, c.Input(ids, n, k))
					})
					y := upload(t, dev, make([]byte, 4*n*k*rows))
					run(t, dev, func(e *encoder) {
						e.matMulExperts(typ, wr, experts, rows, cols, uploadF32(t, dev, x), perSlot, uploadF32(t, dev, ids), k, y, n, allPairs(n, k))
					})
					// Output row p·rows+r is expert ids[p]'s row r, for pair p = i·k+j.
					worst := compareProducts(t, "experts", readF32(t, y), want,
						func(p, r int) float64 { return wn[int(ids[p])*rows+r] },
						func(p int) float64 {
							xi := p / k
							if perSlot {
								xi = p
							}
							return norm(x[xi*cols : (xi+1)*cols])
						}, rows)
					t.Logf("max error %.2g of ‖w‖‖x‖", worst)
				})
			}
		}
	}
}

// TestGetRows checks the row lookups: the decoded rows are exactly engine/quant's.
func TestGetRows(t *testing.T) {
	dev := testDevice(t)
	rng := rand.New(rand.NewPCG(13, 1))
	const vocab = 19
	for _, typ := range kernels.MatMulTypes {
		t.Run(typ.String(), func(t *testing.T) {
			cols := testCols(typ)
			w := randomMatrix(rng, typ, vocab, cols)
			ids := []int32{3, 0, 18, 3, 7}
			want := cpuPass(t, typ, w, []int{cols, vocab}, func(c ml.Context, w ml.Weight) ml.Tensor {
				return c.Embed(w, c.InputIDs(ids))
			})
			fids := make([]float32, len(ids))
			for i, id := range ids {
				fids[i] = float32(id)
			}
			y := upload(t, dev, make([]byte, 4*len(ids)*cols))
			run(t, dev, func(e *encoder) {
				e.getRows(typ, upload(t, dev, w), cols, uploadF32(t, dev, fids), y, len(ids))
			})
			got := readF32(t, y)
			for k := range want {
				if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
					t.Fatalf("row %d (id %d) [%d] = %g, want %g", k/cols, ids[k/cols], k%cols, got[k], want[k])
				}
			}
		})
	}
}

// TestGetRowsOutside checks that an id outside the table gives NaN instead of reading past
// the table (the harness would fail the pass on an out-of-bounds read).
func TestGetRowsOutside(t *testing.T) {
	dev := testDevice(t)
	rng := rand.New(rand.NewPCG(14, 1))
	typ, cols, vocab := quant.Q8_0, 64, 3
	table := upload(t, dev, randomMatrix(rng, typ, vocab, cols))
	y := upload(t, dev, make([]byte, 4*2*cols))
	run(t, dev, func(e *encoder) {
		e.getRows(typ, table, cols, uploadF32(t, dev, []float32{1, 3}), y, 2)
	})
	got := readF32(t, y)
	if math.IsNaN(float64(got[0])) || !math.IsNaN(float64(got[cols])) {
		t.Errorf("row of id 1 starts %g, row of id 3 (outside 3 rows) starts %g; want a number and NaN", got[0], got[cols])
	}
}

// TestMatMulDispatch checks the choice of kernel by batch size and the modelled cost the
// roofline table sums, on a device that only records.
func TestMatMulDispatch(t *testing.T) {
	rec := &recorder{}
	e := &encoder{dev: rec, cmd: rec}
	big := Region{Buf: nil, Len: 1 << 40}
	const rows, cols = 4096, 2048
	e.matMul(quant.IQ2_XXS, big, rows, cols, big, big, 1)
	e.matMul(quant.IQ2_XXS, big, rows, cols, big, big, matVecMaxTokens+1)
	e.matMulExperts(quant.IQ1_M, big, 512, 512, cols, big, false, big, 10, big, 1, allPairs(1, 10))
	e.getRows(quant.Q6_K, big, cols, big, big, 5)
	e.matMulExperts(quant.IQ2_XS, big, 512, 512, cols, big, true, big, 10, big, 2048, allPairs(2048, 10))
	if e.err != nil {
		t.Fatal(e.err)
	}
	want := []struct {
		name    string
		groups  [3]int
		label   string
		flops   int64
		weights int64
	}{
		// 2048 columns: 16 lanes per row, 2 rows per SIMD group, 4 per threadgroup.
		{"mul_mv_iq2_xxs_f32", [3]int{rows / 4, 1, 1}, "matvec iq2_xxs", 2 * rows * cols, rows * 66 * cols / 256},
		{"mul_mm_iq2_xxs_f32", [3]int{rows / 32, 1, 1}, "matmat iq2_xxs", 2 * rows * cols * (matVecMaxTokens + 1), rows * 66 * cols / 256},
		{"mul_mv_id_iq1_m_f32", [3]int{512 / 4, 10, 1}, "matvec experts iq1_m", 2 * 512 * cols * 10, 10 * 512 * 56 * cols / 256},
		{"get_rows_q6_K", [3]int{2, 5, 1}, "get_rows q6_K", 0, 5 * 210 * cols / 256},
		// A prefill chunk: one threadgroup per tile of rows of every expert; 20480 pairs
		// over 512 experts are 40 each, two tiles of 32, so each expert is read twice.
		{"mul_mm_id_iq2_xs_f32", [3]int{512 / 32, 512, 1}, "matmat experts iq2_xs", 2 * 512 * cols * 20480, 2 * 512 * 512 * 74 * cols / 256},
	}
	if len(rec.d) != len(want) {
		t.Fatalf("%d dispatches, want %d", len(rec.d), len(want))
	}
	for i, w := range want {
		d := rec.d[i]
		if d.Pipeline.Name() != w.name || d.Groups != w.groups || d.Cost.Label != w.label || d.Cost.FLOPs != w.flops {
			t.Errorf("dispatch %d: %s groups %v cost %+v; want %s groups %v label %q flops %d", i, d.Pipeline.Name(), d.Groups, d.Cost, w.name, w.groups, w.label, w.flops)
		}
		if d.Cost.Read < w.weights {
			t.Errorf("dispatch %d (%s): reads %d bytes, less than its %d bytes of weights", i, w.name, d.Cost.Read, w.weights)
		}
	}
}

func TestMvLanes(t *testing.T) {
	for _, c := range []struct{ cols, lanes int }{{16, 1}, {128, 1}, {256, 2}, {300, 2}, {768, 4}, {2048, 16}, {4096, 32}, {16384, 32}} {
		if got := mvLanes(c.cols); got != c.lanes {
			t.Errorf("mvLanes(%d) = %d, want %d", c.cols, got, c.lanes)
		}
	}
}

// recorder is a device that records dispatches and runs nothing.
type recorder struct{ d []device.Dispatch }

type recPipeline string

func (p recPipeline) Name() string      { return string(p) }
func (p recPipeline) MaxThreads() int   { return 1024 }
func (p recPipeline) SIMDWidth() int    { return 32 }
func (p recPipeline) StaticShared() int { return 0 }

func (r *recorder) Name() string                             { return "recorder" }
func (r *recorder) NewBuffer(int64) (device.Buffer, error)   { return nil, nil }
func (r *recorder) WrapBuffer([]byte) (device.Buffer, error) { return nil, nil }
func (r *recorder) MaxBufferLength() int64                   { return 1 << 40 }
func (r *recorder) Pipeline(name string, _ ...device.Constant) (device.Pipeline, error) {
	return recPipeline(name), nil
}
func (r *recorder) NewCommands() device.Commands { return r }
func (r *recorder) Close() error                 { return nil }
func (r *recorder) Encode(d device.Dispatch)     { r.d = append(r.d, d) }
func (r *recorder) Commit()                      {}
func (r *recorder) Wait() error                  { return nil }

// TestMatMulCoversQuant: every type engine/quant computes with has matrix kernels, so the
// Metal backend never refuses a model the CPU backend runs.
func TestMatMulCoversQuant(t *testing.T) {
	for ty := quant.Type(0); ty < 64; ty++ {
		if quant.Supported(ty) && !matMulSupported(ty) {
			t.Errorf("no matrix kernels for %v, which engine/quant supports", ty)
		}
	}
}

// TestMatMulExpertsOutside checks that a pair whose id is not an expert (out of range, or not
// a whole number) gets a row of NaN, and the other pairs their products, in both kernels.
func TestMatMulExpertsOutside(t *testing.T) {
	dev := testDevice(t)
	rng := rand.New(rand.NewPCG(15, 1))
	typ, experts, rows, cols, k := quant.Q8_0, 2, 5, 64, 1
	w := upload(t, dev, randomMatrix(rng, typ, experts*rows, cols))
	for _, n := range []int{2, matVecMaxTokens + 1} {
		ids := make([]float32, n)
		for i := range ids {
			ids[i] = float32(i % experts)
		}
		ids[0], ids[n-1] = float32(experts), 0.5
		x := uploadF32(t, dev, randomVector(rng, n*cols))
		y := upload(t, dev, make([]byte, 4*n*rows))
		run(t, dev, func(e *encoder) {
			e.matMulExperts(typ, w, experts, rows, cols, x, false, uploadF32(t, dev, ids), k, y, n, allPairs(n, k))
		})
		got := readF32(t, y)
		for p := 0; p < n; p++ {
			bad := p == 0 || p == n-1
			for r := 0; r < rows; r++ {
				if v := got[p*rows+r]; math.IsNaN(float64(v)) != bad {
					t.Errorf("n=%d: pair %d (id %g) row %d = %g", n, p, ids[p], r, v)
				}
			}
		}
	}
}

// refCPU is the reference backend: the CPU on its exact path, float32 activations as the
// kernels compute (its default picks 8-bit activations for some types).
func refCPU() *cpu.Backend {
	b := cpu.New(1)
	b.SetDot(cpu.DotExact)
	return b
}
