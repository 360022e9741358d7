package metalkit

import (
	"fmt"
	"slices"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/kernels"
)

// Batched decode attention. A scheduler's step decodes one token of each of its sequences,
// each over its own block table of one KV pool; attention per sequence would take a decode
// and a merge dispatch each, and copies to join the rows. AttentionRuns instead attends
// every decode token of a pool in one attn_decode_batch dispatch (plus one merge) per
// layer, writing each row of the batch's output in place; prefill runs, and a pool's lone
// decode token, keep the per-sequence kernels, writing their rows of the same output.

var _ ml.BatchAttention = (*context)(nil)

// AttentionRuns is ml.BatchAttention.
func (c *context) AttentionRuns(qs []ml.Tensor, cs []ml.Cache, layer int, pos0s []int, scale float32) ml.Tensor {
	if len(qs) == 0 || len(cs) != len(qs) || len(pos0s) != len(qs) {
		panic(fmt.Sprintf("metalkit: attention of %d runs over %d caches at %d positions", len(qs), len(cs), len(pos0s)))
	}
	if !c.b.BatchAttention {
		parts := make([]ml.Tensor, len(qs))
		for j := range qs {
			parts[j] = c.Attention(qs[j], cs[j], layer, pos0s[j], scale)
		}
		return model.ConcatRows(c, parts...)
	}
	qts, kcs := make([]*tensor, len(qs)), make([]*cache, len(qs))
	starts := make([]int, len(qs)) // each run's first row of the output
	total := 0
	for j := range qs {
		qts[j], kcs[j] = qs[j].(*tensor), cs[j].(*cache)
		checkAttention(qts[j], kcs[j], layer, pos0s[j])
		if qts[j].shape[1] != qts[0].shape[1] || qts[j].shape[2] != qts[0].shape[2] {
			panic(fmt.Sprintf("metalkit: attention of runs of q %v and %v", qts[0].shape, qts[j].shape))
		}
		if kcs[j].pool.dtype != kcs[0].pool.dtype {
			panic(fmt.Sprintf("metalkit: attention of runs over %v and %v caches", kcs[0].pool.dtype, kcs[j].pool.dtype))
		}
		qts[j] = c.kvQuery(qts[j], kcs[j])
		starts[j] = total
		total += qts[j].shape[0]
	}
	heads, hd := qts[0].shape[1], qts[0].shape[2]
	out := c.out(total, heads*hd)

	// The decode runs of each pool, batched where a pool has two or more.
	var pools []*kvPool
	byPool := map[*kvPool][]int{}
	for j, q := range qts {
		if q.shape[0] == 1 {
			p := kcs[j].pool
			if byPool[p] == nil {
				pools = append(pools, p)
			}
			byPool[p] = append(byPool[p], j)
		}
	}
	type group struct {
		runs   []int
		tables *blockTables
	}
	var groups []group
	batched := make([]bool, len(qs))
	ins := slices.Clone(qts)
	for _, p := range pools {
		runs := byPool[p]
		if len(runs) < 2 {
			continue
		}
		g := group{runs: runs, tables: c.blockTables(kcs, runs)}
		groups = append(groups, g)
		ins = append(ins, g.tables.t)
		for _, j := range runs {
			batched[j] = true
		}
	}
	rowBytes := int64(4 * heads * hd)
	c.record("attention runs", false, func(e *encoder) {
		o := c.region(out)
		one := func(j int) {
			n := qts[j].shape[0]
			e.attention(c.region(qts[j]), n, heads, kcs[j], layer, pos0s[j], scale, o.Sub(int64(starts[j])*rowBytes, int64(n)*rowBytes))
		}
		for j := range qts {
			if !batched[j] {
				one(j)
			}
		}
		for _, g := range groups {
			seqs := make([]decodeSeq, len(g.runs))
			together := true
			for i, j := range g.runs {
				q := c.region(qts[j])
				seqs[i] = decodeSeq{c: kcs[j], pos0: pos0s[j], q: q, outOff: int64(starts[j]) * rowBytes, table0: g.tables.table0[i]}
				together = together && q.Buf == seqs[0].q.Buf
			}
			if !together {
				// Queries in two buffers (not one pass's scratch): one binding cannot
				// reach them all.
				for _, j := range g.runs {
					one(j)
				}
				continue
			}
			e.attentionDecodeBatch(seqs, heads, layer, scale, c.region(g.tables.t), o)
		}
	}, []*tensor{out}, ins...)
	return c.kvOutput(out, kcs[0].pool.dtype, hd)
}

// checkAttention refuses, where the graph issues it, attention of q at pos0 over a layer of
// the cache that does not fit it.
func checkAttention(qt *tensor, kc *cache, layer, pos0 int) {
	if len(qt.shape) != 3 || qt.shape[2] != kc.pool.headDim || qt.shape[1]%kc.pool.kvHeads != 0 || layer < 0 || layer >= kc.pool.layers ||
		pos0 < 0 || pos0+qt.shape[0] > kc.capacity {
		panic(fmt.Sprintf("metalkit: attention of q %v at %d of layer %d over a cache of %d layers × %d × %d×%d",
			qt.shape, pos0, layer, kc.pool.layers, kc.capacity, kc.pool.kvHeads, kc.pool.headDim))
	}
}

// blockTables is an input of the block tables of some caches, one after another, as
// float32 block numbers (exact below 2^24, as the engine holds ids), and where each starts.
type blockTables struct {
	caches []*cache
	t      *tensor
	table0 []int
}

// blockTables returns the input of the tables of kcs[runs…], made once per Compute for the
// same caches in the same order: every attention layer of a step shares it.
func (c *context) blockTables(kcs []*cache, runs []int) *blockTables {
	caches := make([]*cache, len(runs))
	for i, j := range runs {
		caches[i] = kcs[j]
	}
	for _, bt := range c.tables {
		if slices.Equal(bt.caches, caches) {
			return bt
		}
	}
	bt := &blockTables{caches: caches, table0: make([]int, len(caches))}
	var v []float32
	for i, kc := range caches {
		bt.table0[i] = len(v)
		for _, p := range kc.pages {
			v = append(v, float32(p))
		}
	}
	bt.t = c.out(len(v))
	bt.t.host = v
	c.record("block tables", false, nil, []*tensor{bt.t})
	c.tables = append(c.tables, bt)
	return bt
}

// decodeSeq is one sequence of a batched decode step: its cache, the position of its token,
// its queries [heads, headDim], where its output row starts in the batch's output (bytes),
// and where its block table starts in the batch's tables (entries).
type decodeSeq struct {
	c      *cache
	pos0   int
	q      Region
	outOff int64
	table0 int
}

// attentionDecodeBatch encodes the decode attention of one token of each of seqs, all of one
// pool, over their block tables: one attn_decode_batch_<type> dispatch for every split of
// every sequence, then one attn_merge_batch_f32 when a sequence has more than one split
// (both once per kernels.AttnBatchMaxSeqs sequences), instead of a decode and a merge per
// sequence. tables holds every sequence's block table as float32 block numbers; the
// queries must lie in one buffer (a pass's scratch). The arithmetic is attentionDecode's.
func (e *encoder) attentionDecodeBatch(seqs []decodeSeq, heads, layer int, scale float32, tables, out Region) {
	if e.err != nil || len(seqs) == 0 {
		return
	}
	seqs0 := seqs[0].c
	pool := seqs0.pool
	kvHeads, hd, dt := pool.kvHeads, pool.headDim, pool.dtype
	if heads <= 0 || heads%kvHeads != 0 {
		e.err = fmt.Errorf("metalkit: batched attention of %d heads over a cache of %d kv heads", heads, kvHeads)
		return
	}
	qBytes := int64(4 * heads * hd)
	lo, hi := seqs[0].q.Off, int64(0)
	for i, s := range seqs {
		if s.c.pool != pool {
			e.err = fmt.Errorf("metalkit: batched attention over the caches of two pools (sequence %d)", i)
			return
		}
		if err := s.c.checkSpan("attend over", layer, s.pos0, 1); err != nil {
			e.err = err
			return
		}
		if s.q.Buf != seqs[0].q.Buf || s.q.Off%16 != 0 || s.q.Len < qBytes {
			e.err = fmt.Errorf("metalkit: batched attention: sequence %d's queries (%d bytes at %d) are not %d bytes at a multiple of 16 in the first sequence's buffer", i, s.q.Len, s.q.Off, qBytes)
			return
		}
		if s.outOff < 0 || s.outOff%4 != 0 || s.outOff+qBytes > out.Len {
			e.err = fmt.Errorf("metalkit: batched attention: sequence %d's output at byte %d of %d", i, s.outOff, out.Len)
			return
		}
		lo, hi = min(lo, s.q.Off), max(hi, s.q.Off+qBytes)
	}
	q := Region{Buf: seqs[0].q.Buf, Off: lo, Len: hi - lo}
	kernel := "attn_decode_batch_" + dt.String()
	p, err := e.dev.Pipeline(kernel)
	if err != nil {
		e.err = err
		return
	}
	tgHeads, gridY := decodeHeads(p, heads, kvHeads, hd)
	split := seqs[0].c.split()
	d := kernels.AttnDecodeArgs{
		Heads: int32(heads), KVHeads: int32(kvHeads), HeadDim: int32(hd), Group: int32(heads / kvHeads), TGHeads: int32(tgHeads),
		Split: int32(split), BlockSize: int32(pool.blockSize), Scale: scale,
	}
	for len(seqs) > 0 {
		chunk := seqs[:min(len(seqs), kernels.AttnBatchMaxSeqs)]
		seqs = seqs[len(chunk):]
		args := kernels.AttnDecodeBatchArgs{D: d, Seqs: int32(len(chunk))}
		var cost, merge device.Cost
		merges := false
		for i, s := range chunk {
			positions := s.pos0 + 1
			nsplit := ml.BlocksFor(positions, split)
			args.QOff[i] = int32((s.q.Off - lo) / 16)
			args.OutOff[i] = int32(s.outOff / 4)
			args.Positions[i] = int32(positions)
			args.Table0[i] = int32(s.table0)
			args.Split0[i] = args.Splits
			args.Splits += int32(nsplit)
			cost = sumCost(cost, attentionDecodeCost(heads, kvHeads, tgHeads, hd, positions, nsplit, dt))
			if nsplit > 1 {
				merges = true
				merge = sumCost(merge, attentionMergeCost(heads, hd, nsplit))
			}
		}
		splits := int64(args.Splits)
		accBytes := 4 * splits * int64(heads*hd)
		w, err := pool.workspace(accBytes + 8*splits*int64(heads))
		if err != nil {
			e.err = err
			return
		}
		pacc, pml := w.Sub(0, accBytes), w.Sub(accBytes, 8*splits*int64(heads))
		e.dispatch(kernel, nil, [3]int{int(args.Splits), gridY, 1}, [3]int{kernels.AttnDecodeThreads, 1, 1}, 4*tgHeads*hd,
			cost, args, q, seqs0.layerK(layer), seqs0.layerV(layer), tables, pacc, pml, out)
		if merges {
			e.dispatch("attn_merge_batch_f32", nil, [3]int{heads, len(chunk), 1}, [3]int{kernels.AttnDecodeThreads, 1, 1}, 0,
				merge, args, pacc, pml, out)
		}
	}
}
