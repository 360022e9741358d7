package metalkit

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/redlite/batch/engine/cpu"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/metalkit/harness/harnesstest"
)

// Every kernel of ops.metal against the CPU backend (the reference) running the same ml
// operation on the same random inputs, at several shapes, on the harness device.

// wspec is a weight of a test's model bytes.
type wspec struct {
	typ  quant.Type
	dims []int
	vals []float32
}

// pair runs one graph on the CPU backend and on the Metal backend over the harness.
type pair struct {
	cpu, metal ml.Backend
}

func newPair(t *testing.T) pair {
	t.Helper()
	return pair{cpu: refCPU(), metal: New(harnesstest.Device(t))}
}

// encodeWeights lays the weights out as a GGUF tensor section would (32-byte aligned).
func encodeWeights(t *testing.T, ws []wspec) ([]byte, []int64) {
	t.Helper()
	var data []byte
	offs := make([]int64, len(ws))
	for i, w := range ws {
		for len(data)%32 != 0 {
			data = append(data, 0)
		}
		offs[i] = int64(len(data))
		switch w.typ {
		case quant.F32:
			for _, v := range w.vals {
				data = binary.LittleEndian.AppendUint32(data, math.Float32bits(v))
			}
		case quant.F16:
			for _, v := range w.vals {
				data = binary.LittleEndian.AppendUint16(data, quant.F32ToF16(v))
			}
		default:
			t.Fatalf("test weights of type %s", w.typ)
		}
	}
	// On a page, as a file mapping starts (Map reads from the page boundary before data).
	aligned := pageAligned(len(data))
	copy(aligned, data)
	return aligned, offs
}

// run builds the graph on both backends and returns the outputs' values (CPU, Metal).
func (p pair) run(t *testing.T, ws []wspec, build func(ctx ml.Context, w []ml.Weight) []ml.Tensor) (want, got [][]float32) {
	t.Helper()
	data, offs := encodeWeights(t, ws)
	for _, b := range []ml.Backend{p.cpu, p.metal} {
		m, err := b.Map(data)
		if err != nil {
			t.Fatal(err)
		}
		w := make([]ml.Weight, len(ws))
		for i, s := range ws {
			if w[i], err = b.Weight(m, fmt.Sprintf("w%d", i), s.typ, s.dims, offs[i]); err != nil {
				t.Fatal(err)
			}
		}
		ctx := b.NewContext()
		outs := build(ctx, w)
		if err := ctx.Compute(); err != nil {
			ctx.Close()
			t.Fatalf("%s: %v", b.Name(), err)
		}
		var vals [][]float32
		for _, o := range outs {
			v, err := ctx.Read(o)
			if err != nil {
				t.Fatalf("%s: %v", b.Name(), err)
			}
			vals = append(vals, v)
		}
		ctx.Close()
		if b == p.cpu {
			want = vals
		} else {
			got = vals
		}
	}
	return want, got
}

// near reports the first element where got differs from want by more than
// atol + rtol·|want|.
func near(t *testing.T, what string, want, got []float32, atol, rtol float64) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst, at := 0.0, -1
	for i := range want {
		d := math.Abs(float64(want[i]) - float64(got[i]))
		if d > atol+rtol*math.Abs(float64(want[i])) || math.IsNaN(float64(got[i])) != math.IsNaN(float64(want[i])) {
			t.Errorf("%s: element %d is %v, want %v (of %d)", what, i, got[i], want[i], len(want))
			return
		}
		if d > worst {
			worst, at = d, i
		}
	}
	_ = at
}

func randVec(rng *rand.Rand, n int, scale float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = (rng.Float32()*2 - 1) * scale
	}
	return v
}

// shapes of activations the tests run at: a token, a few, rows longer than a threadgroup,
// and lengths that are not multiples of the SIMD width.
var opShapes = [][]int{{1, 7}, {3, 64}, {2, 1000}, {5, 4099}, {1, 4, 33}}

func TestElementwise(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(11, 12))
	for _, shape := range opShapes {
		n := ml.Numel(shape)
		// ±30 reaches both sides of softplus's switch at 20 and saturates the sigmoid.
		a, b := randVec(rng, n, 30), randVec(rng, n, 4)
		want, got := p.run(t, nil, func(ctx ml.Context, _ []ml.Weight) []ml.Tensor {
			x, y := ctx.Input(a, shape...), ctx.Input(b, shape...)
			return []ml.Tensor{ctx.Sigmoid(x), ctx.SiLU(x), ctx.Softplus(x), ctx.Scale(x, -0.37),
				ctx.Add(x, y), ctx.Mul(x, y), ctx.SwiGLU(y, x), ctx.GeGLU(x, y), ctx.GeGLU(y, x),
				// gpt-oss's alpha and limit; x reaches past ±limit as gate and as up.
				ctx.ClampedSwiGLU(x, y, 1.702, 7), ctx.ClampedSwiGLU(y, x, 1.702, 7)}
		})
		for i, name := range []string{"sigmoid", "silu", "softplus", "scale", "add", "mul", "swiglu"} {
			// Exponentials: the C library's float exp against Go's float64 one, rounded.
			near(t, fmt.Sprintf("%s %v", name, shape), want[i], got[i], 1e-7, 2e-6)
		}
		// GELU rounds to half: a tanh one float ulp apart may land on the other side of a
		// half's rounding boundary, one half ulp (2^-11 relative) away.
		near(t, fmt.Sprintf("geglu %v", shape), want[7], got[7], 1e-7, 1e-3)
		near(t, fmt.Sprintf("geglu small %v", shape), want[8], got[8], 1e-7, 1e-3)
		near(t, fmt.Sprintf("clamped swiglu %v", shape), want[9], got[9], 1e-7, 2e-6)
		near(t, fmt.Sprintf("clamped swiglu of clamped up %v", shape), want[10], got[10], 1e-7, 2e-6)
	}
}

func TestVectorOps(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(13, 14))
	for _, shape := range opShapes {
		d := shape[len(shape)-1]
		xs := randVec(rng, ml.Numel(shape), 3)
		ws := []wspec{
			{quant.F32, []int{d}, randVec(rng, d, 2)},
			{quant.F16, []int{d}, randVec(rng, d, 2)}, // converted to float32 at load
		}
		want, got := p.run(t, ws, func(ctx ml.Context, w []ml.Weight) []ml.Tensor {
			x := ctx.Input(xs, shape...)
			return []ml.Tensor{ctx.AddVec(x, w[0]), ctx.MulVec(x, w[0]), ctx.AddVec(x, w[1]), ctx.MulVec(x, w[1])}
		})
		for i, name := range []string{"add vec f32", "mul vec f32", "add vec f16", "mul vec f16"} {
			near(t, fmt.Sprintf("%s %v", name, shape), want[i], got[i], 0, 0)
		}
	}
}

func TestNorms(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(15, 16))
	for _, shape := range append(opShapes, []int{4, 8, 256}, []int{2, 16384}) {
		d := shape[len(shape)-1]
		xs := randVec(rng, ml.Numel(shape), 5)
		ws := []wspec{{quant.F32, []int{d}, randVec(rng, d, 2)}}
		want, got := p.run(t, ws, func(ctx ml.Context, w []ml.Weight) []ml.Tensor {
			x := ctx.Input(xs, shape...)
			return []ml.Tensor{ctx.RMSNorm(x, w[0], 1e-6), ctx.RMSNorm(x, nil, 1e-5), ctx.L2Norm(x, 1e-6)}
		})
		// The sum of squares in float32 over a threadgroup against the CPU's float64.
		for i, name := range []string{"rms norm", "rms norm without weight", "l2 norm"} {
			near(t, fmt.Sprintf("%s %v", name, shape), want[i], got[i], 1e-6, 1e-5)
		}
	}
	// A zero row: eps keeps both finite.
	want, got := p.run(t, nil, func(ctx ml.Context, _ []ml.Weight) []ml.Tensor {
		x := ctx.Input(make([]float32, 64), 1, 64)
		return []ml.Tensor{ctx.RMSNorm(x, nil, 1e-6), ctx.L2Norm(x, 1e-6)}
	})
	near(t, "norms of zeros", want[0], got[0], 0, 0)
	near(t, "l2 of zeros", want[1], got[1], 0, 0)
}

func TestRoPE(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(17, 18))
	for _, tc := range []struct {
		n, heads, hd, dims, pos0 int
		neox                     bool
	}{
		{1, 2, 64, 64, 0, false},
		{5, 3, 64, 32, 17, false},
		{3, 4, 128, 128, 30000, true},
		{2, 8, 256, 64, 4095, true}, // Qwen3-Next: partial rotary, head_dim 256
		{7, 1, 10, 6, 3, false},
	} {
		r := ml.RoPE{Dims: tc.dims, Base: 10000, NeoX: tc.neox}
		if tc.hd == 256 {
			r.Base = 1e7
		}
		xs := randVec(rng, tc.n*tc.heads*tc.hd, 2)
		want, got := p.run(t, nil, func(ctx ml.Context, _ []ml.Weight) []ml.Tensor {
			x := ctx.Input(xs, tc.n, tc.heads, tc.hd)
			// Two rotations at the same positions share the table.
			return []ml.Tensor{ctx.RoPE(x, tc.pos0, r), ctx.RoPE(ctx.Scale(x, 2), tc.pos0, r)}
		})
		// The angles are the CPU's own table: only the rotation's products round differently
		// (fused multiply-adds).
		near(t, fmt.Sprintf("rope %+v", tc), want[0], got[0], 1e-6, 1e-6)
		near(t, fmt.Sprintf("rope of scaled %+v", tc), want[1], got[1], 1e-6, 1e-6)
	}
}

func TestRoute(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(19, 20))
	for _, tc := range []struct {
		n, experts, k int
		norm          bool
	}{
		{1, 16, 4, true},
		{7, 64, 8, false},
		{3, 512, 10, true}, // Qwen3-Next: 512 experts, 10 chosen
		{2, 32, 32, true},
		{4, 5, 1, false},
		{4, 24, 6, true}, // rows with NaN and infinite logits
	} {
		logits := randVec(rng, tc.n*tc.experts, 6)
		if tc.experts == 32 {
			// Ties: equal logits are chosen in the order of their ids.
			for i := range logits {
				logits[i] = float32(i % 3)
			}
		}
		if tc.experts == 24 {
			// Every probability of these rows is NaN: no expert has a number to rank by,
			// and k distinct experts are still chosen (NaN weights), the last row normal.
			inf := float32(math.Inf(1))
			logits[5] = float32(math.NaN())
			for e := range tc.experts {
				logits[tc.experts+e] = -inf
			}
			logits[2*tc.experts+7] = inf
		}
		want, got := p.run(t, nil, func(ctx ml.Context, _ []ml.Weight) []ml.Tensor {
			ids, w := ctx.Route(ctx.Input(logits, tc.n, tc.experts), tc.k, tc.norm)
			return []ml.Tensor{ids, w}
		})
		near(t, fmt.Sprintf("route ids %+v", tc), want[0], got[0], 0, 0)
		near(t, fmt.Sprintf("route weights %+v", tc), want[1], got[1], 1e-7, 1e-5)
	}
}

func TestWeightedSumArgmax(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(21, 22))
	for _, tc := range []struct{ n, k, d int }{{1, 10, 2048}, {3, 4, 33}, {5, 1, 7}} {
		xs, ws := randVec(rng, tc.n*tc.k*tc.d, 3), randVec(rng, tc.n*tc.k, 1)
		want, got := p.run(t, nil, func(ctx ml.Context, _ []ml.Weight) []ml.Tensor {
			return []ml.Tensor{ctx.WeightedSum(ctx.Input(xs, tc.n, tc.k, tc.d), ctx.Input(ws, tc.n, tc.k))}
		})
		near(t, fmt.Sprintf("weighted sum %+v", tc), want[0], got[0], 1e-6, 1e-6)
	}
	for _, shape := range append(opShapes, []int{2, 151936}) {
		xs := randVec(rng, ml.Numel(shape), 10)
		ties := make([]float32, len(xs))
		for i := range ties {
			ties[i] = float32(rng.IntN(4)) // many equal maxima: the first wins
		}
		want, got := p.run(t, nil, func(ctx ml.Context, _ []ml.Weight) []ml.Tensor {
			return []ml.Tensor{ctx.Argmax(ctx.Input(xs, shape...)), ctx.Argmax(ctx.Input(ties, shape...))}
		})
		near(t, fmt.Sprintf("argmax %v", shape), want[0], got[0], 0, 0)
		near(t, fmt.Sprintf("argmax with ties %v", shape), want[1], got[1], 0, 0)
	}
}

func TestCopies(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(23, 24))
	a, b, c := randVec(rng, 3*40, 1), randVec(rng, 3*7, 1), randVec(rng, 3*2*5, 1)
	want, got := p.run(t, nil, func(ctx ml.Context, _ []ml.Weight) []ml.Tensor {
		x := ctx.Input(a, 3, 40)
		cat := ctx.Concat(ctx.Slice(x, 5, 11), ctx.Input(b, 3, 7), ctx.Reshape(ctx.Input(c, 3, 2, 5), 3, 10))
		// Views: rows of a reshape, then an operation on them.
		rows := ctx.Rows(ctx.Reshape(x, 6, 20), 2, 3)
		return []ml.Tensor{cat, ctx.Scale(rows, 1), ctx.Slice(ctx.Reshape(x, 3, 4, 10), 9, 1)}
	})
	for i, name := range []string{"concat of slices", "rows of a reshape", "slice of the last column"} {
		near(t, name, want[i], got[i], 0, 0)
	}
}

// TestStateTensors assigns to a state tensor, reads it in a later pass and releases it.
func TestStateTensors(t *testing.T) {
	p := newPair(t)
	vals := randVec(rand.New(rand.NewPCG(25, 26)), 24, 1)
	for _, b := range []ml.Backend{p.cpu, p.metal} {
		s, err := b.NewTensor(4, 6)
		if err != nil {
			t.Fatal(err)
		}
		ctx := b.NewContext()
		zero, err := ctx.Read(s)
		if err != nil || len(zero) != 24 || zero[5] != 0 {
			t.Fatalf("%s: a new state tensor reads %v, %v", b.Name(), zero, err)
		}
		ctx.Assign(s, ctx.Scale(ctx.Input(vals, 24), 2))
		if err := ctx.Compute(); err != nil {
			t.Fatal(err)
		}
		ctx.Close()
		ctx = b.NewContext()
		// A view of the state feeds a pass.
		y := ctx.Add(ctx.Rows(s, 1, 2), ctx.Rows(s, 2, 2))
		if err := ctx.Compute(); err != nil {
			t.Fatal(err)
		}
		got, err := ctx.Read(y)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if w := 2*vals[6+i] + 2*vals[12+i]; got[i] != w {
				t.Fatalf("%s: element %d is %v, want %v", b.Name(), i, got[i], w)
			}
		}
		ctx.Close()
		b.Release(s)
	}
}

// TestChain runs a chain of layers whose intermediates reuse each other's bytes (outputs
// written over dying inputs, first-fit placement) and compares the end with the CPU's.
func TestChain(t *testing.T) {
	p := newPair(t)
	rng := rand.New(rand.NewPCG(27, 28))
	const n, heads, hd = 3, 4, 32
	xs := randVec(rng, n*heads*hd, 1)
	ws := []wspec{{quant.F32, []int{heads * hd}, randVec(rng, heads*hd, 1)}}
	want, got := p.run(t, ws, func(ctx ml.Context, w []ml.Weight) []ml.Tensor {
		x := ctx.Input(xs, n, heads*hd)
		var firsts []ml.Tensor
		for l := range 6 {
			h := ctx.RMSNorm(x, w[0], 1e-6)
			q := ctx.RoPE(ctx.Reshape(h, n, heads, hd), 5*l, ml.RoPE{Dims: hd / 2, Base: 10000, NeoX: l%2 == 0})
			g := ctx.Sigmoid(ctx.Rows(x, 0, n))
			x = ctx.Add(x, ctx.Mul(ctx.Reshape(q, n, heads*hd), g))
			firsts = append(firsts, ctx.Slice(x, 0, 1))
		}
		return []ml.Tensor{ctx.Scale(x, 1), ctx.Concat(firsts...)}
	})
	near(t, "chain", want[0], got[0], 1e-5, 1e-5)
	near(t, "chain's first columns", want[1], got[1], 1e-5, 1e-5)
}

// TestHook names intermediates that later operations consume (and could overwrite) and
// checks that the hook sees the CPU backend's values for each.
func TestHook(t *testing.T) {
	p := newPair(t)
	xs := randVec(rand.New(rand.NewPCG(29, 30)), 4*64, 2)
	seen := map[string]map[string][]float32{}
	for _, b := range []ml.Backend{p.cpu, p.metal} {
		got := map[string][]float32{}
		hook := func(name string, layer int, shape []int, data []float32) {
			got[fmt.Sprintf("%s.%d%v", name, layer, shape)] = append([]float32(nil), data...)
		}
		switch be := b.(type) {
		case *cpu.Backend:
			be.Hook = hook
		case *Backend:
			be.Hook = hook
		}
		ctx := b.NewContext()
		x := ctx.Input(xs, 4, 64)
		h := ctx.Name(ctx.SiLU(x), "act", 0)
		y := ctx.Name(ctx.Scale(h, 3), "scaled", 1) // consumes h: in place over it, but for the name
		out := ctx.Add(y, x)
		if err := ctx.Compute(); err != nil {
			t.Fatal(err)
		}
		if _, err := ctx.Read(out); err != nil {
			t.Fatal(err)
		}
		ctx.Close()
		seen[b.Name()] = got
	}
	if len(seen["metal"]) != 2 {
		t.Fatalf("the hook saw %d tensors, want 2", len(seen["metal"]))
	}
	for k, want := range seen["cpu"] {
		near(t, k, want, seen["metal"][k], 1e-7, 2e-6)
	}
}
