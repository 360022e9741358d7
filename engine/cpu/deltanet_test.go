package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// deltaInputs is a random gated-delta-rule problem shaped like a Qwen3-Next layer.
type deltaInputs struct {
	n, hk, hv, dk, dv int
	q, k, v, g, beta  *tensor
	state             *tensor
	scale             float32
}

func randomDelta(rng *rand.Rand, n, hk, hv, d int) *deltaInputs {
	in := &deltaInputs{n: n, hk: hk, hv: hv, dk: d, dv: d, scale: float32(1 / math.Sqrt(float64(d)))}
	unit := func(t *tensor) *tensor {
		for i := range t.data {
			t.data[i] = float32(rng.NormFloat64())
		}
		for r := 0; r < len(t.data)/d; r++ {
			row := t.data[r*d : (r+1)*d]
			s := float32(1 / math.Sqrt(float64(quant.Dot(row, row))))
			for i := range row {
				row[i] *= s
			}
		}
		return t
	}
	in.q = unit(newTensor(n, hk, d))
	in.k = unit(newTensor(n, hk, d))
	in.v = newTensor(n, hv, d)
	for i := range in.v.data {
		in.v.data[i] = float32(rng.NormFloat64())
	}
	in.g, in.beta = newTensor(n, hv), newTensor(n, hv)
	for i := range in.g.data {
		// Decays as the model makes them: softplus(α + dt_bias)·(−A), A in [1, 16].
		in.g.data[i] = -softplus(float32(rng.NormFloat64()-4)) * float32(1+15*rng.Float64())
		in.beta.data[i] = sigmoid(float32(rng.NormFloat64()))
	}
	in.state = newTensor(hv, d, d)
	for i := range in.state.data {
		in.state.data[i] = float32(rng.NormFloat64() * 0.1)
	}
	return in
}

func (in *deltaInputs) run(t testing.TB, c *context, chunk int) (out, state []float32) {
	st := newTensor(in.state.shape...)
	copy(st.data, in.state.data)
	o := c.deltaNet(in.q, in.k, in.v, in.g, in.beta, st, in.scale, chunk)
	return values(t, c, o), st.data
}

// reference64 is the recurrence in float64, written from the definition.
func (in *deltaInputs) reference64() (out, state []float64) {
	d := in.dk
	state = make([]float64, len(in.state.data))
	for i, v := range in.state.data {
		state[i] = float64(v)
	}
	out = make([]float64, in.n*in.hv*d)
	for h := 0; h < in.hv; h++ {
		kh := h / (in.hv / in.hk)
		m := state[h*d*d : (h+1)*d*d] // m[j][i] = S[i][j]
		for t := 0; t < in.n; t++ {
			q := in.q.data[(t*in.hk+kh)*d:]
			k := in.k.data[(t*in.hk+kh)*d:]
			v := in.v.data[(t*in.hv+h)*d:]
			decay := math.Exp(float64(in.g.data[t*in.hv+h]))
			b := float64(in.beta.data[t*in.hv+h])
			for j := 0; j < d; j++ {
				var sk float64
				for i := 0; i < d; i++ {
					m[j*d+i] *= decay
					sk += m[j*d+i] * float64(k[i])
				}
				delta := (float64(v[j]) - sk) * b
				var o float64
				for i := 0; i < d; i++ {
					m[j*d+i] += delta * float64(k[i])
					o += m[j*d+i] * float64(q[i])
				}
				out[(t*in.hv+h)*d+j] = o * float64(in.scale)
			}
		}
	}
	return out, state
}

// maxRelDiff is max |a−b| over max |b|.
func maxRelDiff(a []float32, b []float64) float64 {
	var diff, scale float64
	for i := range b {
		diff = max(diff, math.Abs(float64(a[i])-b[i]))
		scale = max(scale, math.Abs(b[i]))
	}
	return diff / scale
}

// TestDeltaNetChunkedEqualsRecurrent checks the chunked form against the token-by-token
// form and both against a float64 evaluation of the definition, for chunk lengths that
// leave a short last chunk.
func TestDeltaNetChunkedEqualsRecurrent(t *testing.T) {
	c := New(2).NewContext().(*context)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, shape := range []struct{ n, hk, hv, d int }{{150, 2, 4, 128}, {70, 1, 3, 32}, {1, 2, 2, 16}} {
		in := randomDelta(rng, shape.n, shape.hk, shape.hv, shape.d)
		wantO, wantS := in.reference64()
		recO, recS := in.run(t, c, 1)
		for _, chunk := range []int{1, 5, 64} {
			o, s := in.run(t, c, chunk)
			eo, es := maxRelDiff(o, wantO), maxRelDiff(s, wantS)
			t.Logf("%+v chunk %d: output %.2g, state %.2g relative to float64", shape, chunk, eo, es)
			if eo > 1e-5 || es > 1e-5 {
				t.Errorf("%+v chunk %d: output off by %.2g, state by %.2g (relative)", shape, chunk, eo, es)
			}
			var d float64
			for i := range o {
				d = max(d, math.Abs(float64(o[i]-recO[i])))
			}
			for i := range s {
				d = max(d, math.Abs(float64(s[i]-recS[i])))
			}
			if d > 1e-5 {
				t.Errorf("%+v chunk %d differs from the recurrent form by %.2g", shape, chunk, d)
			}
		}
	}
}

// TestDeltaNetCarriesState checks that a sequence split over several calls (the state
// carried between them) gives the outputs of one call.
func TestDeltaNetCarriesState(t *testing.T) {
	c := New(2).NewContext().(*context)
	in := randomDelta(rand.New(rand.NewPCG(3, 4)), 40, 2, 4, 32)
	whole, wholeS := in.run(t, c, 64)
	st := hostTensor(append([]float32(nil), in.state.data...), in.state.shape...)
	var parts []float32
	for _, cut := range [][2]int{{0, 1}, {1, 13}, {13, 14}, {14, 40}} {
		sub := func(x *tensor) ml.Tensor { return c.Rows(x, cut[0], cut[1]-cut[0]) }
		o := c.DeltaNet(sub(in.q), sub(in.k), sub(in.v), sub(in.g), sub(in.beta), st, in.scale)
		parts = append(parts, values(t, c, o)...)
	}
	for i := range whole {
		if d := math.Abs(float64(whole[i] - parts[i])); d > 1e-5 {
			t.Fatalf("output %d: whole %v, in parts %v", i, whole[i], parts[i])
		}
	}
	for i := range wholeS {
		if d := math.Abs(float64(wholeS[i] - st.data[i])); d > 1e-5 {
			t.Fatalf("state %d: whole %v, in parts %v", i, wholeS[i], st.data[i])
		}
	}
}

// TestConv1DCausal checks the convolution against its definition and that the window
// carried in the state makes split calls equal one call.
func TestConv1DCausal(t *testing.T) {
	b := New(2)
	c := b.NewContext().(*context)
	rng := rand.New(rand.NewPCG(5, 6))
	const n, ch, kernel = 9, 6, 4
	wdata := make([]float32, kernel*ch)
	for i := range wdata {
		wdata[i] = float32(rng.NormFloat64())
	}
	w, err := weightOf(b, "conv", quant.F32, []int{kernel, ch}, f32bytes(wdata))
	if err != nil {
		t.Fatal(err)
	}
	x := newTensor(n, ch)
	for i := range x.data {
		x.data[i] = float32(rng.NormFloat64())
	}
	st, _ := b.NewTensor(kernel-1, ch)
	y := &tensor{data: values(t, c, c.Conv1DCausal(x, w, st))}
	for tk := 0; tk < n; tk++ {
		for ci := 0; ci < ch; ci++ {
			var want float64
			for i := 0; i < kernel; i++ {
				if p := tk - (kernel - 1) + i; p >= 0 { // zeros before the first token
					want += float64(wdata[ci*kernel+i]) * float64(x.data[p*ch+ci])
				}
			}
			if d := math.Abs(want - float64(y.data[tk*ch+ci])); d > 1e-5 {
				t.Fatalf("y[%d][%d] = %v, want %v", tk, ci, y.data[tk*ch+ci], want)
			}
		}
	}
	st2, _ := b.NewTensor(kernel-1, ch)
	var parts []float32
	for _, cut := range [][2]int{{0, 2}, {2, 3}, {3, 9}} {
		o := c.Conv1DCausal(c.Rows(x, cut[0], cut[1]-cut[0]), w, st2)
		parts = append(parts, values(t, c, o)...)
	}
	for i := range parts {
		if parts[i] != y.data[i] {
			t.Fatalf("split conv differs at %d: %v vs %v", i, parts[i], y.data[i])
		}
	}
	if got, want := st2.(*tensor).data, x.data[(n-kernel+1)*ch:]; !equal32(got, want) {
		t.Fatalf("state after the calls %v, want the last %d inputs %v", got, kernel-1, want)
	}
}

func equal32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func f32bytes(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		u := math.Float32bits(x)
		out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return out
}

// BenchmarkDeltaNet times one Qwen3-Next-80B DeltaNet layer's delta rule (16 key heads,
// 32 value heads of 128) for a 64-token prefill chunk in both forms, and for one decode
// token.
func BenchmarkDeltaNet(b *testing.B) {
	c := New(0).NewContext().(*context)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, bc := range []struct {
		name     string
		n, chunk int
	}{{"prefill64/chunked", 64, 64}, {"prefill64/recurrent", 64, 1}, {"decode", 1, 1}} {
		in := randomDelta(rng, bc.n, 16, 32, 128)
		b.Run(bc.name, func(b *testing.B) {
			s := checkDelta(in.q, in.k, in.v, in.g, in.beta, in.state)
			out := newTensor(bc.n, 32, 128)
			for b.Loop() {
				c.deltaRun(s, in.q, in.k, in.v, in.g, in.beta, in.state, in.scale, bc.chunk, out)
			}
			b.ReportMetric(float64(b.N*bc.n)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

var _ ml.Context = (*context)(nil)
