package cpu

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// chain issues a pass of n rows of width d that keeps few tensors alive at once: a residual
// stream through layers of norm, product and element-wise ops, as a transformer's is.
func chain(c ml.Context, w ml.Weight, x ml.Tensor, layers int) ml.Tensor {
	for range layers {
		h := c.MatMul(w, c.RMSNorm(x, nil, 1e-6))
		x = c.Add(x, c.SiLU(c.Mul(h, h)))
	}
	return c.Scale(x, 0.5)
}

// eagerChain computes chain with a Compute after every operation, one context per
// operation: nothing is reused, every intermediate is a fresh buffer.
func eagerChain(t *testing.T, b *Backend, w ml.Weight, x []float32, n, d, layers int) []float32 {
	t.Helper()
	step := func(f func(c ml.Context, in ml.Tensor) ml.Tensor, in []float32) []float32 {
		c := b.NewContext()
		defer c.Close()
		return values(t, c, f(c, c.Input(in, n, d)))
	}
	for range layers {
		xn := step(func(c ml.Context, in ml.Tensor) ml.Tensor { return c.RMSNorm(in, nil, 1e-6) }, x)
		h := step(func(c ml.Context, in ml.Tensor) ml.Tensor { return c.MatMul(w, in) }, xn)
		hh := step(func(c ml.Context, in ml.Tensor) ml.Tensor { return c.SiLU(c.Mul(in, in)) }, h)
		c := b.NewContext()
		x = values(t, c, c.Add(c.Input(x, n, d), c.Input(hh, n, d)))
		c.Close()
	}
	c := b.NewContext()
	defer c.Close()
	return values(t, c, c.Scale(c.Input(x, n, d), 0.5))
}

func squareWeight(t *testing.T, b *Backend, rng *rand.Rand, d int) ml.Weight {
	t.Helper()
	v := make([]float32, d*d)
	for i := range v {
		v[i] = float32(rng.NormFloat64()) / float32(d)
	}
	w, err := weightOf(b, "w", quant.F32, []int{d, d}, f32bytes(v))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestPassMemory checks the liveness allocator: results equal the eager evaluation, a pass
// holds about the few tensors live at once instead of the sum of its intermediates, the
// next pass of the same shape takes every buffer from the arena, and only outputs can be
// read.
func TestPassMemory(t *testing.T) {
	const n, d, layers = 64, 256, 12
	b := New(2)
	rng := rand.New(rand.NewPCG(9, 9))
	w := squareWeight(t, b, rng, d)
	x := randomTensor(rng, n, d).data
	want := eagerChain(t, b, w, x, n, d, layers)
	b.ResetScratch()

	run := func() []float32 {
		c := b.NewContext()
		defer c.Close()
		return values(t, c, chain(c, w, c.Input(x, n, d), layers))
	}
	if got := run(); !equal32(got, want) {
		t.Fatal("the pass differs from the eager evaluation")
	}
	// Each layer makes 5 tensors of n·d; all of them would be 5·layers+1 buffers. Alive at
	// once are the stream, the norm or product, and one more.
	tensorBytes := int64(4 * sizeClass(n*d))
	peak := b.PeakScratchBytes()
	if peak > 4*tensorBytes {
		t.Errorf("peak %d bytes: more than 4 tensors of %d (the sum of the intermediates is %d)", peak, tensorBytes, (5*layers+1)*tensorBytes)
	}
	t.Logf("peak %d bytes = %.1f tensors, of %d intermediates", peak, float64(peak)/float64(tensorBytes), 5*layers+1)

	before := arenaMakes(b)
	for range 3 {
		if got := run(); !equal32(got, want) {
			t.Fatal("a later pass differs")
		}
	}
	if made := arenaMakes(b) - before; made != 0 {
		t.Errorf("passes of the same shape made %d new buffers", made)
	}

	t.Run("ReadOnlyOutputs", func(t *testing.T) {
		c := b.NewContext()
		defer c.Close()
		in := c.Input(x, n, d)
		mid := c.RMSNorm(in, nil, 1e-6)
		out := c.Add(mid, mid)
		view := c.Rows(out, 1, 2)
		if _, err := c.Read(out); err == nil || !strings.Contains(err.Error(), "before Compute") {
			t.Errorf("read before Compute: %v", err)
		}
		if err := c.Compute(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(mid); err == nil || !strings.Contains(err.Error(), "consume") {
			t.Errorf("read of a consumed intermediate: %v", err)
		}
		v, err := c.Read(view)
		if err != nil || len(v) != 2*d {
			t.Errorf("read of an output view: %d values, %v", len(v), err)
		}
	})
}

func arenaMakes(b *Backend) int64 {
	b.arena.mu.Lock()
	defer b.arena.mu.Unlock()
	return b.arena.makes
}

// TestPassFailure checks that an operation that panics inside a parallel loop fails the
// pass with an error that carries the panic, and that the backend serves the next pass.
func TestPassFailure(t *testing.T) {
	b := New(2)
	table, err := weightOf(b, "token_embd.weight", quant.F32, []int{4, 8}, f32bytes(make([]float32, 32)))
	if err != nil {
		t.Fatal(err)
	}
	c := b.NewContext()
	ids := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 99}
	out := c.Embed(table, c.InputIDs(ids))
	err = c.Compute()
	var lp *ml.PanicError
	if !errors.As(err, &lp) || !strings.Contains(err.Error(), "embed failed") || !strings.Contains(err.Error(), "token id") {
		t.Fatalf("Compute: %v, want the embed's panic", err)
	}
	if _, rerr := c.Read(out); rerr != err {
		t.Errorf("Read after the failure: %v", rerr)
	}
	if cerr := c.Compute(); cerr != err {
		t.Errorf("Compute after the failure: %v", cerr)
	}
	c.Close()

	c = b.NewContext()
	defer c.Close()
	if v := values(t, c, c.Embed(table, c.InputIDs([]int32{1, 2}))); len(v) != 8 {
		t.Errorf("next pass: %d values", len(v))
	}
}

// TestRelease checks that freed caches and state tensors are refused where they are used.
func TestRelease(t *testing.T) {
	b := New(1)
	kc, err := b.NewCache(1, 1, 4, 8, ml.F32)
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.NewTensor(2, 4)
	if err != nil {
		t.Fatal(err)
	}
	kc.Free()
	kc.Free() // harmless
	b.Release(st)
	c := b.NewContext()
	defer c.Close()
	for name, f := range map[string]func(){
		"cache":  func() { c.LoadKV(kc, 0, 0, 1) },
		"tensor": func() { c.Assign(st, c.Input(make([]float32, 8), 2, 4)) },
	} {
		func() {
			defer func() {
				if p := recover(); p == nil || !strings.Contains(p.(string), "freed") && !strings.Contains(p.(string), "released") {
					t.Errorf("%s used after release: %v", name, p)
				}
			}()
			f()
		}()
	}
}

// TestArgmax checks the greedy pick on the backend: the first of equal maxima wins.
func TestArgmax(t *testing.T) {
	c := New(1).NewContext()
	defer c.Close()
	got := values(t, c, c.Argmax(hostTensor([]float32{0, 3, 3, 1, -1, -2, -3, -1}, 2, 4)))
	if !equal32(got, []float32{1, 0}) {
		t.Errorf("argmax %v, want [1 0]", got)
	}
}

func TestSizeClass(t *testing.T) {
	for _, n := range []int{1, 64, 65, 100, 1000, 1 << 20, 1<<20 + 1, 3 << 19} {
		c := sizeClass(n)
		if c < n || float64(c) > 1.25*float64(max(n, 52)) {
			t.Errorf("class of %d is %d", n, c)
		}
		if sizeClass(c) != c {
			t.Errorf("class %d of %d is not its own class", c, n)
		}
	}
}

// TestNameHook checks that the debug hook sees each named tensor's values at its place in
// the pass, including intermediates whose buffers are reused afterwards, and that naming an
// output does not make it an intermediate.
func TestNameHook(t *testing.T) {
	b := New(2)
	seen := map[string][]float32{}
	b.Hook = func(name string, layer int, shape []int, data []float32) {
		seen[name] = append([]float32(nil), data...)
	}
	c := b.NewContext()
	defer c.Close()
	x := c.Input([]float32{1, 2, 3, 4}, 1, 4)
	a := c.Name(c.Scale(x, 2), "a", 0)
	out := c.Name(c.Add(a, a), "out", -1)
	got := values(t, c, out)
	if !equal32(seen["a"], []float32{2, 4, 6, 8}) || !equal32(seen["out"], []float32{4, 8, 12, 16}) || !equal32(got, seen["out"]) {
		t.Errorf("hook saw %v, read %v", seen, got)
	}
}
