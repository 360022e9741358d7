package metalkit

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// Conv1DCausal against the CPU over calls of 1, 37, 2 and 1 tokens with the window carried
// between them (2 < kernel−1 shifts the window partly), F32 and F16 weights. The kernel
// sums in the CPU's order; only fused multiply-adds may differ.
func TestConv1DCausal(t *testing.T) {
	r := newKernelRig(t)
	const channels, kernel = 100, 4
	for _, wt := range []quant.Type{quant.F32, quant.F16} {
		t.Run(wt.String(), func(t *testing.T) {
			r.t = t
			wf := r.floats(channels*kernel, 1)
			var raw []byte
			for _, x := range wf {
				if wt == quant.F16 {
					raw = binary.LittleEndian.AppendUint16(raw, quant.F32ToF16(x))
				} else {
					raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(x))
				}
			}
			m, err := r.ref.Map(raw)
			if err != nil {
				t.Fatal(err)
			}
			w, err := r.ref.Weight(m, "conv", wt, []int{kernel, channels}, 0)
			if err != nil {
				t.Fatal(err)
			}
			wr := r.uploadBytes(raw)
			st0 := r.floats((kernel-1)*channels, 1)
			gst := r.upload(st0)
			cst, err := r.ref.NewTensor(kernel-1, channels)
			if err != nil {
				t.Fatal(err)
			}
			defer r.ref.Release(cst)
			ctx := r.ref.NewContext()
			ctx.Assign(cst, ctx.Input(st0, kernel-1, channels))
			r.compute(ctx)
			ctx.Close()
			for _, n := range []int{1, 37, 2, 1} {
				x := r.floats(n*channels, 1)
				xr, yr := r.upload(x), r.upload(make([]float32, n*channels))
				r.mustRun(func(e *encoder) { e.conv1dCausal(xr, n, channels, wr, wt, kernel, gst, yr) })
				ctx := r.ref.NewContext()
				y := ctx.Conv1DCausal(ctx.Input(x, n, channels), w, cst)
				want := r.compute(ctx, y)[0]
				ctx.Close()
				r.within(fmt.Sprintf("y of %d tokens", n), r.read(yr), want, 1e-6)
				cs := r.hostValues(cst)
				r.within(fmt.Sprintf("state after %d tokens", n), r.read(gst), cs, 0)
			}
		})
	}
}

// deltaShape is a Gated DeltaNet layer's heads.
type deltaShape struct{ kHeads, vHeads, dk, dv int }

// TestDeltaNet runs calls of 1, 37, 2 and 20 tokens with the state carried between them
// against the CPU (which runs 1 and 2 tokens in the recurrent form and more in its own
// chunked form, chunks of 64), with the chunked form on and off here. Tolerance: the forms
// and the backends sum in different orders; states are of order 1, outputs of order 0.1;
// the harness shows at most 2.4e-7 (states) and 2.6e-8 (outputs).
func TestDeltaNet(t *testing.T) {
	r := newKernelRig(t)
	// Tiny qwen3next's layer; a key of 64 with value heads of 40 (a partial block of rows);
	// keys of 256 (chunks of 8).
	shapes := []deltaShape{{2, 4, 128, 128}, {1, 2, 64, 40}, {1, 1, 256, 32}}
	for _, chunked := range []bool{true, false} {
		for _, sh := range shapes {
			t.Run(fmt.Sprintf("chunked=%v/%dk%dv/%dx%d", chunked, sh.kHeads, sh.vHeads, sh.dk, sh.dv), func(t *testing.T) {
				defer func(c bool) { deltaNetChunked = c }(deltaNetChunked)
				deltaNetChunked = chunked
				r.t = t
				r.deltaNetCase(sh, []int{1, 37, 2, 20}, 1e-5)
			})
		}
	}
}

func (r *kernelRig) deltaNetCase(sh deltaShape, calls []int, tol float64) {
	t := r.t
	stN := sh.vHeads * sh.dv * sh.dk
	st0 := r.floats(stN, 0.5)
	gst := r.upload(st0)
	cst, err := r.ref.NewTensor(sh.vHeads, sh.dv, sh.dk)
	if err != nil {
		t.Fatal(err)
	}
	defer r.ref.Release(cst)
	ctx := r.ref.NewContext()
	ctx.Assign(cst, ctx.Input(st0, sh.vHeads, sh.dv, sh.dk))
	r.compute(ctx)
	ctx.Close()
	scale := float32(1 / math.Sqrt(float64(sh.dk)))
	for _, n := range calls {
		// Unit q and k rows (the caller L2-normalizes them), log decays in [−1, 0), β in (0, 1).
		q, k := r.unitRows(n*sh.kHeads, sh.dk), r.unitRows(n*sh.kHeads, sh.dk)
		v := r.floats(n*sh.vHeads*sh.dv, 1)
		g, beta := make([]float32, n*sh.vHeads), make([]float32, n*sh.vHeads)
		for i := range g {
			g[i] = -r.rng.Float32()
			beta[i] = r.rng.Float32()
		}
		qr, kr, vr, gr, br := r.upload(q), r.upload(k), r.upload(v), r.upload(g), r.upload(beta)
		out := r.upload(make([]float32, n*sh.vHeads*sh.dv))
		r.mustRun(func(e *encoder) {
			e.deltaNet(qr, kr, vr, gr, br, gst, n, sh.kHeads, sh.vHeads, sh.dk, sh.dv, scale, out)
		})
		ctx := r.ref.NewContext()
		o := ctx.DeltaNet(ctx.Input(q, n, sh.kHeads, sh.dk), ctx.Input(k, n, sh.kHeads, sh.dk), ctx.Input(v, n, sh.vHeads, sh.dv),
			ctx.Input(g, n, sh.vHeads), ctx.Input(beta, n, sh.vHeads), cst, scale)
		want := r.compute(ctx, o)[0]
		ctx.Close()
		r.within(fmt.Sprintf("out of %d tokens", n), r.read(out), want, tol)
		cs := r.hostValues(cst)
		r.within(fmt.Sprintf("state after %d tokens", n), r.read(gst), cs, tol)
	}
}

func (r *kernelRig) unitRows(rows, d int) []float32 {
	x := r.floats(rows*d, 1)
	for i := range rows {
		row := x[i*d : (i+1)*d]
		var s float64
		for _, v := range row {
			s += float64(v) * float64(v)
		}
		for j := range row {
			row[j] = float32(float64(row[j]) / math.Sqrt(s))
		}
	}
	return x
}

// TestAttentionCosts checks the modelled traffic of a Qwen3-Next decode step's attention
// at 8192 positions: the grouped kernel reads the layer's f16 cache once per KV head.
func TestAttentionCosts(t *testing.T) {
	c := attentionDecodeCost(16, 2, 8, 256, 8192, 64, ml.F16)
	if want := int64(2 * 8192 * 256 * 2 * 2); c.Read < want || c.Read > want+want/10 {
		t.Errorf("grouped decode reads %d bytes, want about %d", c.Read, want)
	}
	if p := attentionDecodeCost(16, 2, 1, 256, 8192, 64, ml.F16); p.Read < 7*c.Read {
		t.Errorf("per-head decode reads %d bytes, grouped %d: want 8× the cache reads", p.Read, c.Read)
	}
	if c.FLOPs != 4*16*8192*256 || c.Label != "attention decode" {
		t.Errorf("cost %+v", c)
	}
}

// hostValues reads a state tensor of the CPU backend (made by NewTensor, outside any pass).
func (r *kernelRig) hostValues(x ml.Tensor) []float32 {
	r.t.Helper()
	ctx := r.ref.NewContext()
	defer ctx.Close()
	v, err := ctx.Read(x)
	if err != nil {
		r.t.Fatal(err)
	}
	return v
}

// TestDeltaNetChunkedEqualsTokens: the chunked form (chunks of 16, and of 8 at keys of 256)
// equals the token-by-token form from the same state up to rounding, on the device alone.
func TestDeltaNetChunkedEqualsTokens(t *testing.T) {
	defer func(c bool) { deltaNetChunked = c }(deltaNetChunked)
	r := newKernelRig(t)
	for _, sh := range []deltaShape{{2, 4, 128, 64}, {1, 1, 256, 32}} {
		const n = 37
		st0 := r.floats(sh.vHeads*sh.dv*sh.dk, 0.5)
		q, k := r.unitRows(n*sh.kHeads, sh.dk), r.unitRows(n*sh.kHeads, sh.dk)
		v := r.floats(n*sh.vHeads*sh.dv, 1)
		g, beta := make([]float32, n*sh.vHeads), make([]float32, n*sh.vHeads)
		for i := range g {
			g[i], beta[i] = -r.rng.Float32(), r.rng.Float32()
		}
		qr, kr, vr, gr, br := r.upload(q), r.upload(k), r.upload(v), r.upload(g), r.upload(beta)
		var outs, states [2][]float32
		for i, chunked := range []bool{false, true} {
			st, out := r.upload(st0), r.upload(make([]float32, n*sh.vHeads*sh.dv))
			deltaNetChunked = chunked
			r.mustRun(func(e *encoder) { e.deltaNet(qr, kr, vr, gr, br, st, n, sh.kHeads, sh.vHeads, sh.dk, sh.dv, 0.1, out) })
			outs[i], states[i] = r.read(out), r.read(st)
		}
		r.within(fmt.Sprintf("dk %d: outputs", sh.dk), outs[1], outs[0], 1e-6)
		r.within(fmt.Sprintf("dk %d: states", sh.dk), states[1], states[0], 1e-5)
	}
}
