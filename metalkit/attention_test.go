package metalkit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/redlite/batch/engine/cpu"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/harness/harnesstest"
)

// kernelRig runs encoder methods on the harness device beside the CPU backend, the
// reference, doing the same ml operations.
type kernelRig struct {
	t   *testing.T
	dev device.Device
	ref *cpu.Backend
	rng *rand.Rand
}

func newKernelRig(t *testing.T) *kernelRig {
	return &kernelRig{t: t, dev: harnesstest.Device(t), ref: refCPU(), rng: rand.New(rand.NewPCG(11, uint64(len(t.Name()))))}
}

// floats returns n values uniform in [−amp, amp).
func (r *kernelRig) floats(n int, amp float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = amp * (2*r.rng.Float32() - 1)
	}
	return x
}

// upload puts data on the device 64 bytes into a buffer of its own, so that regions with
// an offset are what the kernels see.
func (r *kernelRig) upload(data []float32) Region {
	r.t.Helper()
	raw := make([]byte, 4*len(data))
	for i, x := range data {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
	}
	return r.uploadBytes(raw)
}

func (r *kernelRig) uploadBytes(raw []byte) Region {
	r.t.Helper()
	const off = 64
	buf, err := r.dev.NewBuffer(int64(off + len(raw) + 64))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(buf.Release)
	if err := buf.Write(off, raw); err != nil {
		r.t.Fatal(err)
	}
	return Region{Buf: buf, Off: off, Len: int64(len(raw))}
}

func (r *kernelRig) read(reg Region) []float32 {
	r.t.Helper()
	raw := make([]byte, reg.Len)
	if err := reg.Buf.Read(reg.Off, raw); err != nil {
		r.t.Fatal(err)
	}
	x := make([]float32, reg.Len/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return x
}

// run encodes one command list with encode, runs it and returns the first error.
func (r *kernelRig) run(encode func(e *encoder)) error {
	e := &encoder{dev: r.dev, cmd: r.dev.NewCommands()}
	encode(e)
	if e.err != nil {
		return e.err
	}
	e.cmd.Commit()
	return e.cmd.Wait()
}

func (r *kernelRig) mustRun(encode func(e *encoder)) {
	r.t.Helper()
	if err := r.run(encode); err != nil {
		r.t.Fatal(err)
	}
}

// maxDiff is the largest |a−b|; it fails the test on a length mismatch or a NaN.
func (r *kernelRig) maxDiff(what string, a, b []float32) float64 {
	t := r.t
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d values against %d", what, len(a), len(b))
	}
	var m float64
	for i := range a {
		if a[i] == b[i] { // infinities too
			continue
		}
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if math.IsNaN(d) {
			t.Fatalf("%s: value %d is %v against %v", what, i, a[i], b[i])
		}
		m = max(m, d)
	}
	return m
}

func (r *kernelRig) within(what string, got, want []float32, tol float64) {
	t := r.t
	t.Helper()
	d := r.maxDiff(what, got, want)
	t.Logf("%s: max abs error %.3g (tolerance %.3g)", what, d, tol)
	if d > tol {
		t.Errorf("%s: max abs error %.3g above %.3g", what, d, tol)
	}
}

// compute runs a CPU pass and reads its outputs.
func (r *kernelRig) compute(ctx ml.Context, outs ...ml.Tensor) [][]float32 {
	r.t.Helper()
	if err := ctx.Compute(); err != nil {
		r.t.Fatal(err)
	}
	var vals [][]float32
	for _, o := range outs {
		v, err := ctx.Read(o)
		if err != nil {
			r.t.Fatal(err)
		}
		vals = append(vals, v)
	}
	return vals
}

// seqPair is one sequence's cache on both backends.
type seqPair struct {
	gpu *cache
	cpu ml.Cache
}

// pools makes the same pool on both backends (blocks of blockSize; blocks 0 for a private
// cache per sequence) and draws caches of the given capacities, freeing a first small cache
// between them so that block tables are out of order and interleaved.
func (r *kernelRig) pools(layers, kvHeads, hd, blocks, blockSize int, dt ml.DType, capacities ...int) []seqPair {
	r.t.Helper()
	var seqs []seqPair
	if blocks == 0 {
		for _, c := range capacities {
			g, err := newCache(r.dev, layers, kvHeads, hd, c, dt)
			if err != nil {
				r.t.Fatal(err)
			}
			cc, err := r.ref.NewCache(layers, kvHeads, hd, c, dt)
			if err != nil {
				r.t.Fatal(err)
			}
			r.t.Cleanup(g.Free)
			r.t.Cleanup(cc.Free)
			seqs = append(seqs, seqPair{g, cc})
		}
		return seqs
	}
	gp, err := newKVPool(r.dev, layers, kvHeads, hd, blocks, blockSize, dt)
	if err != nil {
		r.t.Fatal(err)
	}
	cp, err := r.ref.NewKVPool(layers, kvHeads, hd, blocks, blockSize, dt)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { gp.Free(); cp.Free() })
	first, err := gp.Alloc(blockSize)
	if err != nil {
		r.t.Fatal(err)
	}
	for i, c := range capacities {
		g, err := gp.alloc(c)
		if err != nil {
			r.t.Fatal(err)
		}
		cc, err := cp.Alloc(c)
		if err != nil {
			r.t.Fatal(err)
		}
		seqs = append(seqs, seqPair{g, cc})
		if i == 0 {
			first.Free()
		}
	}
	return seqs
}

func TestKVStoreLoad(t *testing.T) {
	r := newKernelRig(t)
	// q8_0 heads of 128 are stored rotated by 128 (keys) and 64 (values), of 32 not at all.
	for _, c := range []struct {
		dt ml.DType
		hd int
	}{{ml.F32, 32}, {ml.F16, 32}, {ml.Q8_0, 32}, {ml.Q8_0, 128}} {
		dt, hd := c.dt, c.hd
		t.Run(fmt.Sprintf("%v/%d", dt, hd), func(t *testing.T) {
			r.t = t
			const layers, kvHeads = 2, 2
			seqs := r.pools(layers, kvHeads, hd, 12, 16, dt, 70, 66)
			row := kvHeads * hd
			for si, s := range seqs {
				// Two stores crossing blocks, the second at an offset; then a load that
				// straddles both.
				for _, span := range [][2]int{{0, 37}, {37, 29}} {
					k, v := r.floats(span[1]*row, 3), r.floats(span[1]*row, 3)
					// Values beyond half's range and below its normal range round as on the CPU.
					k[0], k[1], v[2] = 70000, 3e-6, -1e-7
					kr, vr := r.upload(k), r.upload(v)
					r.mustRun(func(e *encoder) { e.storeKV(s.gpu, 1, span[0], span[1], kr, vr) })
					ctx := r.ref.NewContext()
					ctx.StoreKV(s.cpu, 1, span[0], ctx.Input(k, span[1], kvHeads, hd), ctx.Input(v, span[1], kvHeads, hd))
					r.compute(ctx)
					ctx.Close()
				}
				const p0, n = 5, 55
				gk, gv := r.upload(make([]float32, n*row)), r.upload(make([]float32, n*row))
				r.mustRun(func(e *encoder) { e.loadKV(s.gpu, 1, p0, n, gk, gv) })
				ctx := r.ref.NewContext()
				ck, cv := ctx.LoadKV(s.cpu, 1, p0, n)
				want := r.compute(ctx, ck, cv)
				ctx.Close()
				// The same conversion: bit for bit.
				if d := r.maxDiff("keys", r.read(gk), want[0]); d != 0 {
					t.Errorf("sequence %d: keys differ from the CPU's by %g", si, d)
				}
				if d := r.maxDiff("values", r.read(gv), want[1]); d != 0 {
					t.Errorf("sequence %d: values differ from the CPU's by %g", si, d)
				}
			}
		})
	}
}

// attnShape is a model's attention: heads query heads over kvHeads KV heads of hd features.
type attnShape struct{ heads, kvHeads, hd int }

func (s attnShape) String() string { return fmt.Sprintf("%dq%dkv×%d", s.heads, s.kvHeads, s.hd) }

// attentionCase fills sequences' caches with the same random keys and values on both
// backends (positions [0, pos0) then [pos0, pos0+n), as a prefill then a step would), runs
// attention of n tokens at pos0 for each and compares with the CPU. Every sequence's
// work goes in one command list, as a batched step's would.
func (r *kernelRig) attentionCase(sh attnShape, dt ml.DType, blocks, blockSize, n int, pos0s []int, tol float64) {
	r.sinkAttentionCase(sh, dt, blocks, blockSize, n, pos0s, tol, 0, nil)
}

// sinkAttentionCase is attentionCase through attn_sinks when sinks is not nil or window is
// not 0: against the CPU's SinkAttention (one sink logit per query head, over the last
// window positions, 0: all) or, without sinks, its SlidingAttention.
func (r *kernelRig) sinkAttentionCase(sh attnShape, dt ml.DType, blocks, blockSize, n int, pos0s []int, tol float64, window int, sinks []float32) {
	var sinkW ml.Weight
	var sinkR Region
	if sinks != nil {
		data, offs := encodeWeights(r.t, []wspec{{quant.F32, []int{sh.heads}, sinks}})
		m, err := r.ref.Map(data)
		if err != nil {
			r.t.Fatal(err)
		}
		if sinkW, err = r.ref.Weight(m, "attn_sinks.weight", quant.F32, []int{sh.heads}, offs[0]); err != nil {
			r.t.Fatal(err)
		}
		sinkR = r.upload(sinks)
	}
	caps := make([]int, len(pos0s))
	for i, p := range pos0s {
		caps[i] = p + n
	}
	seqs := r.pools(2, sh.kvHeads, sh.hd, blocks, blockSize, dt, caps...)
	row := sh.kvHeads * sh.hd
	scale := float32(1 / math.Sqrt(float64(sh.hd)))
	outs := make([]Region, len(seqs))
	want := make([][]float32, len(seqs))
	var encode []func(e *encoder)
	for i, s := range seqs {
		pos0 := pos0s[i]
		total := pos0 + n
		k, v := r.floats(total*row, 1), r.floats(total*row, 1)
		q := r.floats(n*sh.heads*sh.hd, 2)
		kr, vr, qr := r.upload(k), r.upload(v), r.upload(q)
		outs[i] = r.upload(make([]float32, n*sh.heads*sh.hd))
		ctx := r.ref.NewContext()
		for _, span := range [][2]int{{0, pos0}, {pos0, n}} {
			if span[1] == 0 {
				continue
			}
			a, m := span[0]*row, span[1]*row
			ctx.StoreKV(s.cpu, 1, span[0], ctx.Input(k[a:a+m], span[1], sh.kvHeads, sh.hd), ctx.Input(v[a:a+m], span[1], sh.kvHeads, sh.hd))
			encode = append(encode, func(e *encoder) {
				e.storeKV(s.gpu, 1, span[0], span[1], kr.Sub(int64(4*a), int64(4*m)), vr.Sub(int64(4*a), int64(4*m)))
			})
		}
		if sinks != nil || window > 0 {
			var out ml.Tensor
			if sinks != nil {
				out = ctx.SinkAttention(ctx.Input(q, n, sh.heads, sh.hd), s.cpu, 1, pos0, scale, window, sinkW)
			} else {
				out = ctx.SlidingAttention(ctx.Input(q, n, sh.heads, sh.hd), s.cpu, 1, pos0, scale, window)
			}
			want[i] = r.compute(ctx, out)[0]
			ctx.Close()
			encode = append(encode, r.kvAttend(dt, sh.hd, qr, outs[i], func(e *encoder, q, out Region) {
				e.attentionSinks(q, n, sh.heads, s.gpu, 1, pos0, scale, window, sinkR, out)
			}))
			continue
		}
		out := ctx.Attention(ctx.Input(q, n, sh.heads, sh.hd), s.cpu, 1, pos0, scale)
		want[i] = r.compute(ctx, out)[0]
		ctx.Close()
		encode = append(encode, r.kvAttend(dt, sh.hd, qr, outs[i], func(e *encoder, q, out Region) {
			e.attention(q, n, sh.heads, s.gpu, 1, pos0, scale, out)
		}))
	}
	r.mustRun(func(e *encoder) {
		for _, f := range encode {
			f(e)
		}
	})
	for i := range seqs {
		r.within(fmt.Sprintf("sequence %d at %d", i, pos0s[i]), r.read(outs[i]), want[i], tol)
	}
}

// kvAttend encodes attend from q into out as the graph does over a cache of dt: over q8_0
// the queries rotated and rounded first, the output rotated back after (kvq8.go).
func (r *kernelRig) kvAttend(dt ml.DType, hd int, q, out Region, attend func(e *encoder, q, out Region)) func(e *encoder) {
	if dt != ml.Q8_0 {
		return func(e *encoder) { attend(e, q, out) }
	}
	rk, rv := ml.KVRotations(dt, hd)
	qq, o := r.upload(make([]float32, q.Len/4)), r.upload(make([]float32, out.Len/4))
	return func(e *encoder) {
		e.kvRows(q, qq, hd, rk, true)
		attend(e, qq, o)
		e.kvRows(o, out, hd, rv, false)
	}
}

// Tolerance: the kernels and the CPU sum in different orders (and exp differs in the last
// bits); outputs are weighted means of values in [−1, 1]. f16 caches hold the same rounded
// keys and values on both backends, so the tolerance is the same. The harness shows at most
// 3.7e-7; the margin is for Metal's fast-math exp on a Mac.
const attnTol = 1e-5

// attnVariants runs f as a subtest for each variant (grouped, then per query head), shape
// and cache type; the per-query-head variant runs the same code with one head, so only on
// perHead, smaller shapes.
func (r *kernelRig) attnVariants(t *testing.T, shapes, perHead []attnShape, f func(sh attnShape, dt ml.DType)) {
	for _, grouped := range []bool{true, false} {
		if !grouped {
			shapes = perHead
		}
		for _, sh := range shapes {
			for _, dt := range []ml.DType{ml.F32, ml.F16, ml.Q8_0} {
				t.Run(fmt.Sprintf("grouped=%v/%v/%v", grouped, sh, dt), func(t *testing.T) {
					defer func(g bool) { attnGrouped = g }(attnGrouped)
					attnGrouped = grouped
					r.t = t
					f(sh, dt)
				})
			}
		}
	}
}

func TestAttentionDecode(t *testing.T) {
	r := newKernelRig(t)
	// Qwen3-Next, head 128, tiny qwen3, a group of 16 (the per-head kernel either way).
	shapes := []attnShape{{16, 2, 256}, {8, 2, 128}, {4, 2, 64}, {16, 1, 64}}
	r.attnVariants(t, shapes, shapes[1:3], func(sh attnShape, dt ml.DType) {
		// Three sequences of a pool of blocks of 32 (splits of 32, non-contiguous tables):
		// one split, many, and a last split of one position.
		r.attentionCase(sh, dt, 20, 32, 1, []int{299, 20, 64}, attnTol)
		// A private cache: splits of 128, the last partial.
		r.attentionCase(sh, dt, 0, 0, 1, []int{299, 127}, attnTol)
	})
}

// A head of 1,024 features in a group of 8: the group's queries (32 KiB) and the decode
// kernel's own threadgroup variables do not fit in one threadgroup together, so the step
// takes one head per threadgroup instead of failing (on a GPU, or in the harness, which
// counts the kernel's variables as a GPU does).
func TestAttentionDecodeLargeHeads(t *testing.T) {
	r := newKernelRig(t)
	sh := attnShape{8, 1, 1024}
	for _, dt := range []ml.DType{ml.F32, ml.F16} {
		t.Run(dt.String(), func(t *testing.T) {
			r.t = t
			r.attentionCase(sh, dt, 0, 0, 1, []int{40, 130}, attnTol)
		})
	}
}

func TestAttentionPrefill(t *testing.T) {
	r := newKernelRig(t)
	// Qwen3-Next, head 128, tiny qwen3, a group of 16 (two threadgroups of 8 heads per KV
	// head), a group of 6.
	shapes := []attnShape{{16, 2, 256}, {8, 2, 128}, {4, 2, 64}, {16, 1, 64}, {12, 2, 64}}
	r.attnVariants(t, shapes, shapes[1:3], func(sh attnShape, dt ml.DType) {
		// n = 5 and 40 at 0 and across blocks of 16 in one pool, and a private cache.
		r.attentionCase(sh, dt, 40, 16, 5, []int{0, 150}, attnTol)
		r.attentionCase(sh, dt, 40, 16, 40, []int{90, 0}, attnTol)
		r.attentionCase(sh, dt, 0, 0, 40, []int{33}, attnTol)
	})
}

func TestKVCacheLifecycle(t *testing.T) {
	r := newKernelRig(t)
	p, err := newKVPool(r.dev, 1, 1, 32, 4, 16, ml.F16)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Free()
	if got, want := p.BlockBytes(), int64(1*2*16*32*2); got != want {
		t.Errorf("block bytes %d, want %d", got, want)
	}
	a, err := p.Alloc(40) // 3 blocks
	if err != nil {
		t.Fatal(err)
	}
	if a.Capacity() != 48 || p.FreeBlocks() != 1 {
		t.Errorf("capacity %d with %d free blocks, want 48 and 1", a.Capacity(), p.FreeBlocks())
	}
	if _, err := p.Alloc(17); !errors.Is(err, ml.ErrPoolFull) {
		t.Errorf("over-allocation: %v, want ErrPoolFull", err)
	}
	q := r.upload(make([]float32, 8*32))
	a.Free()
	a.Free() // harmless
	if p.FreeBlocks() != 4 {
		t.Errorf("%d free blocks after Free, want 4", p.FreeBlocks())
	}
	err = r.run(func(e *encoder) { e.attention(q, 1, 1, a.(*cache), 0, 0, 1, q) })
	if err == nil {
		t.Error("attention over a freed cache ran")
	}
	err = r.run(func(e *encoder) { e.storeKV(a.(*cache), 0, 0, 1, q, q) })
	if err == nil {
		t.Error("store in a freed cache ran")
	}
	b, err := p.alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.run(func(e *encoder) { e.storeKV(b, 0, 10, 7, q, q) }); err == nil {
		t.Error("a store past the capacity ran")
	}
	if _, err := newKVPool(r.dev, 1, 1, 32, 4, 200, ml.F32); err == nil {
		t.Error("blocks of 200 positions (a split of 128 would cross them) were accepted")
	}
	c, err := newCache(r.dev, 1, 1, 32, 10, ml.F32)
	if err != nil {
		t.Fatal(err)
	}
	c.Free()
	c.Free()
}

// attnRecorder is a device that runs nothing and keeps what was encoded: the kernel
// sequence, dispatch sizes and costs, checked without the harness.
type attnRecorder struct{ got []device.Dispatch }

type attnRecBuf struct{ n int64 }
type attnRecPipe struct{ name string }
type attnRecCmds struct{ r *attnRecorder }

func (r *attnRecorder) Name() string                             { return "recorder" }
func (r *attnRecorder) NewBuffer(n int64) (device.Buffer, error) { return &attnRecBuf{n}, nil }
func (r *attnRecorder) WrapBuffer(d []byte) (device.Buffer, error) {
	return &attnRecBuf{int64(len(d))}, nil
}
func (r *attnRecorder) MaxBufferLength() int64 { return 1 << 40 }
func (r *attnRecorder) Pipeline(name string, _ ...device.Constant) (device.Pipeline, error) {
	return attnRecPipe{name}, nil
}
func (r *attnRecorder) NewCommands() device.Commands { return attnRecCmds{r} }
func (r *attnRecorder) Close() error                 { return nil }
func (b *attnRecBuf) Len() int64                     { return b.n }
func (b *attnRecBuf) Write(int64, []byte) error      { return nil }
func (b *attnRecBuf) Read(int64, []byte) error       { return nil }
func (b *attnRecBuf) Release()                       {}
func (p attnRecPipe) Name() string                   { return p.name }
func (p attnRecPipe) MaxThreads() int                { return 1024 }
func (p attnRecPipe) SIMDWidth() int                 { return 32 }
func (p attnRecPipe) StaticShared() int              { return 0 }
func (c attnRecCmds) Encode(d device.Dispatch)       { c.r.got = append(c.r.got, d) }
func (c attnRecCmds) Commit()                        {}
func (c attnRecCmds) Wait() error                    { return nil }

// TestAttentionDispatches checks what a Qwen3-Next layer's decode attention encodes at 300
// positions: grouped, a threadgroup per (split, KV head), and the merge; per query head a
// threadgroup per (split, query head); a pool's blocks of 64 make splits of 64; prefill a
// threadgroup per (2 tokens, KV head), or per (2 tokens, query head).
func TestAttentionDispatches(t *testing.T) {
	defer func(g bool) { attnGrouped = g }(attnGrouped)
	dev := &attnRecorder{}
	c, err := newCache(dev, 1, 2, 256, 4096, ml.F16)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newKVPool(dev, 1, 2, 256, 8, 64, ml.F32)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := p.alloc(300)
	if err != nil {
		t.Fatal(err)
	}
	buf, _ := dev.NewBuffer(1 << 20)
	reg := Region{Buf: buf, Len: 1 << 20}
	type want struct {
		name    string
		groups  [3]int
		label   string
		threads int
	}
	for _, tc := range []struct {
		grouped bool
		c       *cache
		n       int
		want    []want
	}{
		{true, c, 1, []want{{"attn_decode_f16", [3]int{3, 2, 1}, "attention decode", 128}, {"attn_merge_f32", [3]int{16, 1, 1}, "attention merge", 128}}},
		{false, c, 1, []want{{"attn_decode_f16", [3]int{3, 16, 1}, "attention decode", 128}, {"attn_merge_f32", [3]int{16, 1, 1}, "attention merge", 128}}},
		{true, pc, 1, []want{{"attn_decode_f32", [3]int{5, 2, 1}, "attention decode", 128}, {"attn_merge_f32", [3]int{16, 1, 1}, "attention merge", 128}}},
		{true, c, 7, []want{{"attn_prefill_f16", [3]int{4, 2, 1}, "attention prefill", 64}}},
		{false, c, 7, []want{{"attn_prefill_f16", [3]int{4, 16, 1}, "attention prefill", 64}}},
	} {
		dev.got = nil
		attnGrouped = tc.grouped
		e := &encoder{dev: dev, cmd: dev.NewCommands()}
		e.attention(reg, tc.n, 16, tc.c, 0, 300-tc.n, 0.0625, reg)
		if e.err != nil {
			t.Fatal(e.err)
		}
		if len(dev.got) != len(tc.want) {
			t.Fatalf("%d dispatches, want %d", len(dev.got), len(tc.want))
		}
		for i, w := range tc.want {
			d := dev.got[i]
			if d.Pipeline.Name() != w.name || d.Groups != w.groups || d.Threads[0] != w.threads || d.Cost.Label != w.label || d.Cost.Read <= 0 || d.Cost.FLOPs <= 0 {
				t.Errorf("dispatch %d: %s %v×%v cost %+v, want %s %v×%d %q", i, d.Pipeline.Name(), d.Groups, d.Threads, d.Cost, w.name, w.groups, w.threads, w.label)
			}
		}
	}
}

// TestAttentionSinks: attn_sinks against the CPU's SinkAttention, for a token and for a
// chunk, over all positions and over a window shorter than them, in a pool of blocks and in
// a private cache; the sinks run from far below the scores to far above.
func TestAttentionSinks(t *testing.T) {
	r := newKernelRig(t)
	shapes := []attnShape{{4, 2, 64}, {8, 1, 128}}
	r.attnVariants(t, shapes, nil, func(sh attnShape, dt ml.DType) {
		sinks := make([]float32, sh.heads)
		for h := range sinks {
			sinks[h] = float32(h)*3 - 4
		}
		for _, window := range []int{0, 16} {
			r.sinkAttentionCase(sh, dt, 40, 16, 1, []int{0, 150}, attnTol, window, sinks)
			r.sinkAttentionCase(sh, dt, 40, 16, 40, []int{90, 0}, attnTol, window, sinks)
			r.sinkAttentionCase(sh, dt, 0, 0, 40, []int{33}, attnTol, window, sinks)
		}
	})
}

// TestAttentionSlidingWindow: attn_sinks without sinks against the CPU's SlidingAttention
// past the window (gemma3's sliding-window layers), for a token and for a chunk, f32 and f16
// caches, in a pool of blocks and in a private cache; a window of 1 sees only the token.
func TestAttentionSlidingWindow(t *testing.T) {
	r := newKernelRig(t)
	shapes := []attnShape{{4, 2, 64}, {8, 1, 128}}
	r.attnVariants(t, shapes, nil, func(sh attnShape, dt ml.DType) {
		for _, window := range []int{1, 16, 37} {
			r.sinkAttentionCase(sh, dt, 40, 16, 1, []int{20, 150}, attnTol, window, nil)
			r.sinkAttentionCase(sh, dt, 40, 16, 40, []int{90, 0}, attnTol, window, nil)
			r.sinkAttentionCase(sh, dt, 0, 0, 40, []int{33}, attnTol, window, nil)
		}
	})
}
