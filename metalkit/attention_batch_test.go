package metalkit

import (
	"fmt"
	"math"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/kernels"
)

// batchDecodeCase fills the caches of sequences of one pool (blocks of blockSize, their
// tables scattered by pools) with random keys and values up to each sequence's position,
// then attends one token of each: once with the per-sequence kernels, once as one batch
// (attentionDecodeBatch), the queries of the batch in one buffer at uneven offsets and the
// outputs rows of one region. The batch must equal the per-sequence kernels bit for bit
// (the same arithmetic in the same order) and the CPU within attnTol.
func (r *kernelRig) batchDecodeCase(sh attnShape, dt ml.DType, blocks, blockSize int, pos0s []int) {
	r.t.Helper()
	caps := make([]int, len(pos0s))
	for i, p := range pos0s {
		caps[i] = p + 1
	}
	seqs := r.pools(2, sh.kvHeads, sh.hd, blocks, blockSize, dt, caps...)
	row := sh.kvHeads * sh.hd
	qn := sh.heads * sh.hd
	scale := float32(1 / math.Sqrt(float64(sh.hd)))
	// Queries: sequence i at float 4·i + i·(qn + 8), a gap of 8 floats (32 bytes) between.
	qs := make([]float32, len(seqs)*(qn+8)+8)
	qAt := func(i int) int { return 4 + i*(qn+8) }
	for i := range qs {
		qs[i] = 2 * (2*r.rng.Float32() - 1)
	}
	qAll := r.upload(qs)
	single := r.upload(make([]float32, len(seqs)*qn))
	batched := r.upload(make([]float32, len(seqs)*qn))
	// Over q8_0 the kernels take the queries rotated and rounded, and leave the output
	// rotated (kvq8.go): qIn and the raw outputs, then rotated into single and batched.
	q8 := dt == ml.Q8_0
	rk, rv := ml.KVRotations(dt, sh.hd)
	qIn, singleRaw, batchedRaw := qAll, single, batched
	if q8 {
		qIn = r.upload(make([]float32, len(qs)))
		singleRaw, batchedRaw = r.upload(make([]float32, len(seqs)*qn)), r.upload(make([]float32, len(seqs)*qn))
	}
	var tables []float32
	var batch []decodeSeq
	var encode []func(e *encoder)
	want := make([][]float32, len(seqs))
	for i, s := range seqs {
		pos0 := pos0s[i]
		total := pos0 + 1
		k, v := r.floats(total*row, 1), r.floats(total*row, 1)
		kr, vr := r.upload(k), r.upload(v)
		encode = append(encode, func(e *encoder) { e.storeKV(s.gpu, 1, 0, total, kr, vr) })
		ctx := r.ref.NewContext()
		ctx.StoreKV(s.cpu, 1, 0, ctx.Input(k, total, sh.kvHeads, sh.hd), ctx.Input(v, total, sh.kvHeads, sh.hd))
		q := qs[qAt(i) : qAt(i)+qn]
		want[i] = r.compute(ctx, ctx.Attention(ctx.Input(q, 1, sh.heads, sh.hd), s.cpu, 1, pos0, scale))[0]
		ctx.Close()
		qr := qIn.Sub(int64(4*qAt(i)), int64(4*qn))
		if q8 {
			encode = append(encode, func(e *encoder) { e.kvRows(qAll.Sub(int64(4*qAt(i)), int64(4*qn)), qr, sh.hd, rk, true) })
		}
		batch = append(batch, decodeSeq{c: s.gpu, pos0: pos0, q: qr, outOff: int64(4 * i * qn), table0: len(tables)})
		for _, p := range s.gpu.pages {
			tables = append(tables, float32(p))
		}
	}
	tr := r.upload(tables)
	r.mustRun(func(e *encoder) {
		for _, f := range encode {
			f(e)
		}
		for i, s := range batch {
			e.attention(s.q, 1, sh.heads, s.c, 1, s.pos0, scale, singleRaw.Sub(int64(4*i*qn), int64(4*qn)))
		}
		e.attentionDecodeBatch(batch, sh.heads, 1, scale, tr, batchedRaw)
		if q8 {
			e.kvRows(singleRaw, single, sh.hd, rv, false)
			e.kvRows(batchedRaw, batched, sh.hd, rv, false)
		}
	})
	got, per := r.read(batched), r.read(single)
	for i := range seqs {
		what := fmt.Sprintf("sequence %d at %d", i, pos0s[i])
		if d := r.maxDiff(what, got[i*qn:(i+1)*qn], per[i*qn:(i+1)*qn]); d != 0 {
			r.t.Errorf("%s: the batch differs from the per-sequence kernel by %g", what, d)
		}
		r.within(what, got[i*qn:(i+1)*qn], want[i], attnTol)
	}
}

// TestAttentionDecodeBatch: ragged lengths (one split, many, a last split of one position,
// position 0) over scattered block tables of one pool, for the models' head shapes, grouped
// and per query head, f32 and f16 caches.
func TestAttentionDecodeBatch(t *testing.T) {
	r := newKernelRig(t)
	// Qwen3-Next (16 query heads over 2 KV heads of 256), head 128, tiny qwen3, a group of
	// 16 (the per-head kernel either way).
	shapes := []attnShape{{16, 2, 256}, {8, 2, 128}, {4, 2, 64}, {16, 1, 64}}
	r.attnVariants(t, shapes, shapes[1:3], func(sh attnShape, dt ml.DType) {
		// Blocks of 32 (splits of 32): 300 positions, 21, 65, 1 and 32.
		r.batchDecodeCase(sh, dt, 40, 32, []int{299, 20, 64, 0, 31})
		// Blocks of 256 (splits of 128, two per block).
		r.batchDecodeCase(sh, dt, 6, 256, []int{300, 127, 128})
	})
}

// A head of 1,024 features in a group of 8 takes one head per threadgroup in a batch too.
func TestAttentionDecodeBatchLargeHeads(t *testing.T) {
	r := newKernelRig(t)
	for _, dt := range []ml.DType{ml.F32, ml.F16} { // q8_0 heads are at most kernels.AttnMaxHeadDim
		t.Run(dt.String(), func(t *testing.T) {
			r.t = t
			r.batchDecodeCase(attnShape{8, 1, 1024}, dt, 10, 64, []int{40, 130})
		})
	}
}

// More sequences than one dispatch's arguments hold: a dispatch (and merge) per
// kernels.AttnBatchMaxSeqs.
func TestAttentionDecodeBatchMany(t *testing.T) {
	r := newKernelRig(t)
	pos := make([]int, kernels.AttnBatchMaxSeqs+3)
	for i := range pos {
		pos[i] = (i * 37) % 90
	}
	r.batchDecodeCase(attnShape{4, 2, 64}, ml.F16, 2*len(pos)+4, 64, pos)
}

// TestAttentionDecodeBatchThreadgroupMemory: the batched kernel declares what the
// per-sequence kernel does (the harness counts every threadgroup variable, as Metal's
// staticThreadgroupMemoryLength), and with the models' heads the queries of a group fit
// beside it under the 32 KiB a threadgroup has.
func TestAttentionDecodeBatchThreadgroupMemory(t *testing.T) {
	r := newKernelRig(t)
	for _, dt := range []ml.DType{ml.F32, ml.F16, ml.Q8_0} {
		one, err := r.dev.Pipeline("attn_decode_" + dt.String())
		if err != nil {
			t.Fatal(err)
		}
		p, err := r.dev.Pipeline("attn_decode_batch_" + dt.String())
		if err != nil {
			t.Fatal(err)
		}
		const want = 4 * (kernels.AttnMaxGroup*kernels.AttnDecodeThreads + kernels.AttnDecodeThreads/32*kernels.AttnMaxGroup)
		if p.StaticShared() != want || one.StaticShared() != want {
			t.Errorf("%s: kernels declare %d (batch) and %d (one sequence) bytes of threadgroup memory, want %d", dt, p.StaticShared(), one.StaticShared(), want)
		}
		for _, sh := range []attnShape{{16, 2, 256}, {32, 4, 128}, {16, 8, 128}} {
			tg, _ := decodeHeads(p, sh.heads, sh.kvHeads, sh.hd)
			if total := 4*tg*sh.hd + p.StaticShared(); tg != sh.heads/sh.kvHeads || total > device.MaxThreadgroupMemory {
				t.Errorf("%s %v: %d heads per threadgroup, %d bytes of threadgroup memory", dt, sh, tg, total)
			}
		}
		if tg, _ := decodeHeads(p, 8, 1, 1024); tg != 1 {
			t.Errorf("%s: a group of 8 heads of 1,024 grouped in one threadgroup (%d heads)", dt, tg)
		}
	}
}
