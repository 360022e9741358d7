package metalkit

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/metalkit/device"
)

// fakeDevice runs nothing: buffers are host memory, dispatches are counted. It tests what
// the backend decides (windows, the memory plan, errors) apart from the kernels, which the
// harness device tests (ops_test.go).
type fakeDevice struct {
	maxLen      int64
	badPipeline string // Pipeline fails for this kernel
	waitErr     error
	wrapped     int
	made        int64 // bytes of NewBuffer
	encoded     []device.Dispatch
	released    int
}

type fakeBuffer struct {
	d    *fakeDevice
	data []byte
}

func (b *fakeBuffer) Len() int64 { return int64(len(b.data)) }
func (b *fakeBuffer) Write(off int64, src []byte) error {
	copy(b.data[off:], src)
	return nil
}
func (b *fakeBuffer) Read(off int64, dst []byte) error {
	copy(dst, b.data[off:])
	return nil
}
func (b *fakeBuffer) Release() { b.d.released++ }

type fakePipeline string

func (p fakePipeline) Name() string      { return string(p) }
func (p fakePipeline) MaxThreads() int   { return 1024 }
func (p fakePipeline) SIMDWidth() int    { return 32 }
func (p fakePipeline) StaticShared() int { return 0 }

type fakeCommands struct{ d *fakeDevice }

func (c fakeCommands) Encode(d device.Dispatch) { c.d.encoded = append(c.d.encoded, d) }
func (c fakeCommands) Commit()                  {}
func (c fakeCommands) Wait() error {
	if c.d.waitErr != nil {
		return &device.Error{Op: "commit", Err: c.d.waitErr}
	}
	return nil
}

func (d *fakeDevice) Name() string { return "fake" }
func (d *fakeDevice) NewBuffer(size int64) (device.Buffer, error) {
	d.made += size
	return &fakeBuffer{d: d, data: make([]byte, size)}, nil
}
func (d *fakeDevice) WrapBuffer(data []byte) (device.Buffer, error) {
	if uintptr(unsafe.Pointer(&data[0]))%pageSize != 0 {
		// As Metal's newBufferWithBytesNoCopy.
		return nil, errors.New("fake: no-copy memory off a page boundary")
	}
	d.wrapped++
	return &fakeBuffer{d: d, data: data}, nil
}
func (d *fakeDevice) MaxBufferLength() int64 { return d.maxLen }
func (d *fakeDevice) Pipeline(name string, consts ...device.Constant) (device.Pipeline, error) {
	if name == d.badPipeline {
		return nil, errors.New("fake: no kernel " + name)
	}
	return fakePipeline(name), nil
}
func (d *fakeDevice) NewCommands() device.Commands { return fakeCommands{d} }
func (d *fakeDevice) Close() error                 { return nil }

func TestWindowPlan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ n, max int64 }{
		{10 * pageSize, 64 * pageSize},
		{10*pageSize + 100, 11 * pageSize},
		{100*pageSize + 7, 8 * pageSize},
		{1000 * pageSize, 16*pageSize + 5},
	} {
		plan := windowPlan(tc.n, tc.max)
		maxLen := tc.max - tc.max%pageSize
		overlap := min(maxLen/4, maxOverlap)
		overlap -= overlap % pageSize
		if plan[0][0] != 0 || plan[len(plan)-1][1] != tc.n {
			t.Fatalf("%+v: windows %v do not cover the mapping", tc, plan)
		}
		for i, w := range plan {
			if w[0]%pageSize != 0 {
				t.Errorf("%+v: window %d starts at %d, not on a page", tc, i, w[0])
			}
			if w[1]-w[0] > maxLen {
				t.Errorf("%+v: window %d is %d bytes, more than %d", tc, i, w[1]-w[0], maxLen)
			}
		}
		// Every weight of at most the overlap lies inside the last window starting at or
		// before it.
		for range 2000 {
			size := 1 + rng.Int64N(min(overlap, tc.n))
			off := rng.Int64N(tc.n - size + 1)
			w := 0
			for i, win := range plan {
				if win[0] <= off {
					w = i
				}
			}
			if off+size > plan[w][1] {
				t.Fatalf("%+v: bytes [%d, %d) not inside window %v", tc, off, off+size, plan[w])
			}
		}
	}
}

// pageAligned returns n bytes starting on a page, so that tests control the lead.
func pageAligned(n int) []byte {
	b := make([]byte, n+pageSize)
	lead := int(uintptr(unsafe.Pointer(&b[0])) % pageSize)
	return b[pageSize-lead : pageSize-lead+n]
}

func TestMapWeights(t *testing.T) {
	d := &fakeDevice{maxLen: 8 * pageSize}
	b := New(d)
	data := pageAligned(40*pageSize + 123)[7:] // a section starting off the page
	for i := range data {
		data[i] = byte(i * 7)
	}
	m, err := b.Map(data)
	if err != nil {
		t.Fatal(err)
	}
	windows := d.wrapped
	if windows < 6 || windows > 8 {
		t.Errorf("%d windows over %d bytes of %d-byte buffers", windows, len(data), d.maxLen)
	}
	check := func(name string, typ quant.Type, dims []int, off int64) {
		t.Helper()
		w, err := b.Weight(m, name, typ, dims, off)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := w.(*weight).raw
		got := r.Buf.(*fakeBuffer).data[r.Off : r.Off+r.Len]
		if !bytes.Equal(got, data[off:off+r.Len]) {
			t.Errorf("%s: region holds other bytes than the mapping's [%d, %d)", name, off, off+r.Len)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		rows := 1 + rng.IntN(2*pageSize/(34*8)) // Q8_0 rows of 256 values: up to 2 pages
		off := rng.Int64N(int64(len(data)) - int64(rows*34*8))
		check("w", quant.Q8_0, []int{256, rows}, off)
		_ = i
	}
	if d.wrapped != windows {
		t.Errorf("weights within the overlap made %d more windows", d.wrapped-windows)
	}
	// A weight larger than the overlap gets a window of its own where it straddles.
	big := 5 * pageSize / 4 // F32 values: 5 pages
	check("big", quant.F32, []int{big}, 3*pageSize+8)
	if _, err := b.Weight(m, "huge", quant.F32, []int{9 * pageSize / 4}, 0); err == nil || !strings.Contains(err.Error(), "largest buffer") {
		t.Errorf("a weight larger than any buffer: %v", err)
	}
	if _, err := b.Weight(m, "outside", quant.F32, []int{64}, int64(len(data))-8); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("a weight past the mapping: %v", err)
	}
	if _, err := b.Weight(m, "odd", quant.Type(200), []int{64}, 0); err == nil || !strings.Contains(err.Error(), "odd") {
		t.Errorf("a weight of an unknown type: %v", err)
	}
}

// TestSmallVectors checks that vectors of a non-F32 type are held as float32 for the
// element-wise kernels.
func TestSmallVectors(t *testing.T) {
	d := &fakeDevice{maxLen: 1 << 30}
	b := New(d)
	v := []float32{1, -2, 0.5, 3}
	data := pageAligned(2 * len(v))
	for i, x := range v {
		h := quant.F32ToF16(x)
		data[2*i], data[2*i+1] = byte(h), byte(h>>8)
	}
	m, _ := b.Map(data)
	w, err := b.Weight(m, "norm", quant.F16, []int{4}, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := w.(*weight).vec
	got := make([]float32, 4)
	if err := r.Buf.Read(r.Off, floatBytes(got)); err != nil || r.Len != 16 {
		t.Fatal(err, r.Len)
	}
	for i := range v {
		if got[i] != v[i] {
			t.Errorf("vector %v, want %v", got, v)
			break
		}
	}
}

// checkPlan verifies that no two roots of a segment that are live at once share bytes, an
// operation's output excepted from the input it was written over; it returns how many
// outputs were written over their input.
func checkPlan(t *testing.T, c *context) (inPlace int) {
	t.Helper()
	type span struct {
		t           *tensor
		birth, last int
	}
	var spans []span
	index := map[*tensor]int{}
	for i, o := range c.ops {
		for _, out := range o.outs {
			birth := i
			if out.host != nil {
				birth = -1
			}
			index[out] = len(spans)
			spans = append(spans, span{out, birth, len(c.ops)})
		}
	}
	for i, o := range c.ops {
		for _, in := range o.ins {
			if j, ok := index[in.root]; ok && !in.root.keep {
				spans[j].last = i
			}
		}
	}
	for i, a := range spans {
		for _, b := range spans[i+1:] {
			if a.t.seg != b.t.seg || a.t.size == 0 || b.t.size == 0 {
				continue
			}
			timeOverlap := a.birth < b.last && b.birth < a.last
			over := a.last == b.birth && c.ops[b.birth].inPlace && a.t.soff == b.t.soff
			if over {
				inPlace++
			}
			if timeOverlap && !over && a.t.soff < b.t.soff+b.t.size && b.t.soff < a.t.soff+a.t.size {
				t.Errorf("%v [%d, %d] at %d+%d and %v [%d, %d] at %d+%d overlap", a.t.shape, a.birth, a.last, a.t.soff, a.t.size,
					b.t.shape, b.birth, b.last, b.t.soff, b.t.size)
			}
		}
	}
	return inPlace
}

func TestScratchPlan(t *testing.T) {
	d := &fakeDevice{maxLen: 1 << 30}
	b := New(d)
	// A chain of layers: each step's intermediates die within it, so the pass needs a few
	// rows' worth of scratch, not the sum.
	const n, dim, layers = 4, 1024, 20
	run := func() (int64, *context) {
		ctx := b.NewContext().(*context)
		x := ctx.Input(make([]float32, n*dim), n, dim)
		for range layers {
			h := ctx.RMSNorm(x, nil, 1e-6)
			g := ctx.SiLU(h)
			u := ctx.Scale(h, 2)
			x = ctx.Add(x, ctx.Mul(g, u))
			x = ctx.Reshape(ctx.Concat(ctx.Slice(x, 0, dim/2), ctx.Slice(x, dim/2, dim/2)), n, dim)
		}
		out := ctx.Argmax(x)
		if err := ctx.Compute(); err != nil {
			t.Fatal(err)
		}
		if n := checkPlan(t, ctx); n < layers {
			t.Errorf("%d outputs written over their inputs in %d layers of element-wise operations", n, layers)
		}
		if _, err := ctx.Read(out); err != nil {
			t.Errorf("read of the output: %v", err)
		}
		if _, err := ctx.Read(x); err == nil {
			t.Error("read of an intermediate the pass consumed succeeded")
		}
		return ctx.segs[0].need, ctx
	}
	need, ctx := run()
	t.Logf("need %d", need)
	row := int64(4 * n * dim)
	if need > 6*row || need < 3*row {
		t.Errorf("a chain of %d layers planned %d bytes of scratch (%d per activation)", layers, need, row)
	}
	if got := b.PeakScratchBytes(); got != need {
		t.Errorf("PeakScratchBytes = %d, want %d", got, need)
	}
	ctx.Close()
	made := d.made
	_, ctx = run()
	ctx.Close()
	if d.made != made {
		t.Errorf("a second pass of the same shape allocated %d bytes", d.made-made)
	}
	b.ResetScratch()
	if b.PeakScratchBytes() != 0 || len(b.free) != 0 {
		t.Errorf("after ResetScratch: peak %d, %d buffers kept", b.PeakScratchBytes(), len(b.free))
	}
}

func TestContextErrors(t *testing.T) {
	d := &fakeDevice{maxLen: 1 << 30}
	b := New(d)

	t.Run("ReadBeforeCompute", func(t *testing.T) {
		ctx := b.NewContext()
		defer ctx.Close()
		y := ctx.SiLU(ctx.Input([]float32{1, 2}, 2))
		if _, err := ctx.Read(y); err == nil || !strings.Contains(err.Error(), "before Compute") {
			t.Errorf("read before compute: %v", err)
		}
	})
	t.Run("FailedPassFailsLater", func(t *testing.T) {
		d.waitErr = device.ErrOutOfMemory
		defer func() { d.waitErr = nil }()
		ctx := b.NewContext()
		defer ctx.Close()
		y := ctx.SiLU(ctx.Input([]float32{1, 2}, 2))
		if err := ctx.Compute(); !errors.Is(err, device.ErrOutOfMemory) {
			t.Fatalf("compute: %v", err)
		}
		d.waitErr = nil
		if _, err := ctx.Read(y); !errors.Is(err, device.ErrOutOfMemory) {
			t.Errorf("read after a failed pass: %v", err)
		}
		if err := ctx.Compute(); !errors.Is(err, device.ErrOutOfMemory) {
			t.Errorf("compute after a failed pass: %v", err)
		}
	})

	t.Run("PipelineError", func(t *testing.T) {
		d.badPipeline = "unary_f32"
		defer func() { d.badPipeline = "" }()
		ctx := b.NewContext()
		defer ctx.Close()
		y := ctx.SiLU(ctx.Input([]float32{1, 2}, 2))
		if err := ctx.Compute(); err == nil || !strings.Contains(err.Error(), "silu: fake: no kernel unary_f32") {
			t.Errorf("compute with a kernel the device cannot build: %v", err)
		}
		if _, err := ctx.Read(y); err == nil {
			t.Error("read after a failed pass succeeded")
		}
	})
	t.Run("ShapesPanic", func(t *testing.T) {
		ctx := b.NewContext()
		defer ctx.Close()
		defer func() {
			if p := recover(); p == nil || !strings.Contains(p.(string), "metalkit: add of shapes") {
				t.Errorf("panic %v", p)
			}
		}()
		ctx.Add(ctx.Input(make([]float32, 2), 2), ctx.Input(make([]float32, 3), 3))
	})
	t.Run("ReleasedState", func(t *testing.T) {
		s, err := b.NewTensor(2, 3)
		if err != nil {
			t.Fatal(err)
		}
		b.Release(s)
		ctx := b.NewContext()
		defer ctx.Close()
		defer func() {
			if p := recover(); p == nil || !strings.Contains(p.(string), "released") {
				t.Errorf("panic %v", p)
			}
		}()
		ctx.Assign(s, ctx.Input(make([]float32, 6), 2, 3))
	})
	t.Run("ClosedContext", func(t *testing.T) {
		ctx := b.NewContext()
		x := ctx.Input([]float32{1}, 1)
		ctx.Close()
		if _, err := ctx.Read(x); err == nil {
			t.Error("read after close succeeded")
		}
	})
	var _ ml.Context = b.NewContext()
}

// TestTwoComputes checks that an output of one Compute feeds the next one's operations and
// that an intermediate it consumed is refused.
func TestTwoComputes(t *testing.T) {
	d := &fakeDevice{maxLen: 1 << 30}
	b := New(d)
	ctx := b.NewContext()
	defer ctx.Close()
	x := ctx.Input([]float32{1, 2, 3}, 3)
	h := ctx.SiLU(x)
	y := ctx.Scale(h, 2)
	if err := ctx.Compute(); err != nil {
		t.Fatal(err)
	}
	z := ctx.Add(y, y)
	if err := ctx.Compute(); err != nil {
		t.Fatal(err)
	}
	if _, err := ctx.Read(z); err != nil {
		t.Error(err)
	}
	ctx.Add(h, h)
	if err := ctx.Compute(); err == nil || !strings.Contains(err.Error(), "earlier Compute") {
		t.Errorf("use of a consumed intermediate of an earlier Compute: %v", err)
	}
}

// BenchmarkEncodePass measures the host's side of a decode-sized pass on a device that runs
// nothing: recording, the memory plan and encoding 48 layers of 10 operations each.
func BenchmarkEncodePass(b *testing.B) {
	d := &fakeDevice{maxLen: 1 << 30}
	be := New(d)
	data := pageAligned(4 * 2048)
	m, _ := be.Map(data)
	w, _ := be.Weight(m, "norm", quant.F32, []int{2048}, 0)
	in := make([]float32, 2048)
	b.ReportAllocs()
	for b.Loop() {
		d.encoded = d.encoded[:0]
		ctx := be.NewContext()
		x := ctx.Input(in, 1, 2048)
		for range 48 {
			h := ctx.RMSNorm(x, w, 1e-6)
			q := ctx.RoPE(ctx.Reshape(h, 1, 16, 128), 100, ml.RoPE{Dims: 64, Base: 1e7, NeoX: true})
			g := ctx.Sigmoid(ctx.Slice(h, 0, 1024))
			u := ctx.MulVec(ctx.Concat(g, g), w)
			x = ctx.Add(x, ctx.Mul(ctx.SwiGLU(ctx.Reshape(q, 1, 2048), u), ctx.Scale(h, 0.5)))
		}
		ctx.Argmax(x)
		if err := ctx.Compute(); err != nil {
			b.Fatal(err)
		}
		ctx.Close()
	}
	b.ReportMetric(float64(len(d.encoded)), "dispatches/pass")
}
