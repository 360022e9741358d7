package metalkit

import (
	"fmt"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/kernels"
)

// attnGrouped selects the grouped attention kernels: one decode threadgroup per (split, KV
// head) computes every query head sharing the KV head, reading each key and value row once;
// in prefill each SIMD group computes up to kernels.AttnMaxGroup heads of its token, so each
// key and value element loaded serves them all. false takes one threadgroup per query head,
// which reads the rows once per query head (Red Lite's RL_ENGINE_ATTN_GROUP=0 for decode:
// 252.8 ms against 164.3 for the grouped kernel on splits of 256 at ~8400 positions, M4
// Max; the prefill variant is not measured). Decode groups wider than kernels.AttnMaxGroup
// always take the per-head kernel.
var attnGrouped = true

// attention computes causal softmax attention of q [n, heads, headDim] at positions
// pos0 … pos0+n−1 over the cache's layer into out [n, heads·headDim] (ml.Context.Attention).
// One token (decode) goes by split-K, more (prefill) by the tiled flash kernel. q and out
// are contiguous; the kernels read q as float4, so its offset must be a multiple of 16
// bytes (Metal's alignment for a float4 buffer binding).
func (e *encoder) attention(q Region, n, heads int, c *cache, layer, pos0 int, scale float32, out Region) {
	if e.err != nil {
		return
	}
	if err := c.checkSpan("attend over", layer, pos0, n); err != nil {
		e.err = err
		return
	}
	kvHeads, hd := c.pool.kvHeads, c.pool.headDim
	if n <= 0 || heads <= 0 || heads%kvHeads != 0 {
		e.err = fmt.Errorf("metalkit: attention of %d tokens of %d heads over a cache of %d kv heads", n, heads, kvHeads)
		return
	}
	if err := regionsHold("attention", int64(4*n*heads*hd), q, out); err != nil {
		e.err = err
		return
	}
	if q.Off%16 != 0 {
		e.err = fmt.Errorf("metalkit: attention queries at offset %d, not a multiple of 16 bytes", q.Off)
		return
	}
	if n == 1 {
		e.attentionDecode(q, heads, c, layer, pos0, scale, out)
		return
	}
	e.attentionPrefill(q, n, heads, c, layer, pos0, scale, out)
}

func (e *encoder) attentionDecode(q Region, heads int, c *cache, layer, pos0 int, scale float32, out Region) {
	kvHeads, hd, dt := c.pool.kvHeads, c.pool.headDim, c.pool.dtype
	group := heads / kvHeads
	positions := pos0 + 1
	split := c.split()
	nsplit := ml.BlocksFor(positions, split)
	kernel := "attn_decode_" + dt.String()
	p, err := e.dev.Pipeline(kernel)
	if err != nil {
		e.err = err
		return
	}
	tgHeads, gridY := decodeHeads(p, heads, kvHeads, hd)
	// With one split the kernel writes the output itself and touches no partials; bind out
	// in their place.
	pacc, pml := out, out
	if nsplit > 1 {
		accBytes := int64(4 * nsplit * heads * hd)
		w, err := c.pool.workspace(accBytes + int64(8*nsplit*heads))
		if err != nil {
			e.err = err
			return
		}
		pacc, pml = w.Sub(0, accBytes), w.Sub(accBytes, int64(8*nsplit*heads))
	}
	args := kernels.AttnDecodeArgs{
		Heads: int32(heads), KVHeads: int32(kvHeads), HeadDim: int32(hd), Group: int32(group), TGHeads: int32(tgHeads),
		Positions: int32(positions), Split: int32(split), NSplit: int32(nsplit), BlockSize: int32(c.pool.blockSize), Scale: scale,
	}
	e.dispatch(kernel, nil, [3]int{nsplit, gridY, 1}, [3]int{kernels.AttnDecodeThreads, 1, 1}, 4*tgHeads*hd,
		attentionDecodeCost(heads, kvHeads, tgHeads, hd, positions, nsplit, dt), args,
		q, c.layerK(layer), c.layerV(layer), c.tableRegion(), pacc, pml, out)
	if nsplit > 1 {
		e.dispatch("attn_merge_f32", nil, [3]int{heads, 1, 1}, [3]int{kernels.AttnDecodeThreads, 1, 1}, 0,
			attentionMergeCost(heads, hd, nsplit),
			kernels.AttnMergeArgs{Heads: int32(heads), HeadDim: int32(hd), NSplit: int32(nsplit)},
			pacc, pml, out)
	}
}

// decodeHeads is the query heads a decode threadgroup computes and the grid's threadgroups
// along y. A threadgroup holds its heads' queries (4·tgHeads·hd bytes) beside the kernel's
// own threadgroup memory: grouped only where both fit (a head of 1,024 features in a group
// of 8 does not), else one head per threadgroup.
func decodeHeads(p device.Pipeline, heads, kvHeads, hd int) (tgHeads, gridY int) {
	group := heads / kvHeads
	if attnGrouped && group <= kernels.AttnMaxGroup && 4*group*hd+p.StaticShared() <= device.MaxThreadgroupMemory {
		return group, kvHeads
	}
	return 1, heads
}

func (e *encoder) attentionPrefill(q Region, n, heads int, c *cache, layer, pos0 int, scale float32, out Region) {
	kvHeads, hd, dt := c.pool.kvHeads, c.pool.headDim, c.pool.dtype
	if hd%32 != 0 || hd > kernels.AttnMaxHeadDim {
		// Each lane of a SIMD group holds hd/32 output features.
		e.err = fmt.Errorf("metalkit: prefill attention needs a head of a multiple of 32 features up to %d, not %d", kernels.AttnMaxHeadDim, hd)
		return
	}
	group := heads / kvHeads
	tgHeads := 1
	if attnGrouped {
		// The most heads of a group one SIMD group can hold that divide the group.
		for d := min(group, kernels.AttnMaxGroup); d >= 1; d-- {
			if group%d == 0 {
				tgHeads = d
				break
			}
		}
	}
	const tq = kernels.AttnPrefillQueries
	args := kernels.AttnPrefillArgs{
		N: int32(n), Heads: int32(heads), KVHeads: int32(kvHeads), HeadDim: int32(hd), Group: int32(group), TGHeads: int32(tgHeads),
		Pos0: int32(pos0), BlockSize: int32(c.pool.blockSize), Scale: scale,
	}
	e.dispatch("attn_prefill_"+dt.String(), nil, [3]int{ml.BlocksFor(n, tq), heads / tgHeads, 1}, [3]int{32 * tq, 1, 1}, 4*tq*tgHeads*hd,
		attentionPrefillCost(n, heads, tgHeads, hd, pos0, dt), args,
		q, c.layerK(layer), c.layerV(layer), c.tableRegion(), out)
}

// attentionDecodeCost: every threadgroup reads its split's key and value rows of one KV
// head (grouped: once per KV head; per query head: once per query head) and its queries;
// scores and weighted values are 2 FLOPs per feature each.
func attentionDecodeCost(heads, kvHeads, tgHeads, hd, positions, nsplit int, dt ml.DType) device.Cost {
	readers := kvHeads
	if tgHeads == 1 {
		readers = heads
	}
	kv := int64(readers) * int64(positions) * 2 * dt.RowBytes(hd)
	q := int64(nsplit) * int64(heads) * int64(hd) * 4
	written := int64(heads) * int64(hd) * 4
	if nsplit > 1 {
		written = int64(nsplit) * int64(heads) * int64(hd+2) * 4
	}
	return device.Cost{Label: "attention decode", Read: kv + q, Written: written, FLOPs: 4 * int64(heads) * int64(positions) * int64(hd)}
}

// sumCost adds b's traffic and arithmetic to a's, under b's label.
func sumCost(a, b device.Cost) device.Cost {
	return device.Cost{Label: b.Label, Read: a.Read + b.Read, Written: a.Written + b.Written, FLOPs: a.FLOPs + b.FLOPs}
}

// attentionMergeCost: every split's partials of every head, rescaled and summed.
func attentionMergeCost(heads, hd, nsplit int) device.Cost {
	return device.Cost{
		Label:   "attention merge",
		Read:    int64(nsplit) * int64(heads) * int64(hd+2) * 4,
		Written: int64(heads) * int64(hd) * 4,
		FLOPs:   2 * int64(nsplit) * int64(heads) * int64(hd),
	}
}

// attentionPrefillCost: every threadgroup (tile of queries, tgHeads heads) reads the key
// and value rows its last query sees; each query scores and weighs the positions it sees.
func attentionPrefillCost(n, heads, tgHeads, hd, pos0 int, dt ml.DType) device.Cost {
	const tq = kernels.AttnPrefillQueries
	var rows, seen int64
	for t0 := 0; t0 < n; t0 += tq {
		rows += int64(pos0 + min(t0+tq, n))
	}
	for t := range n {
		seen += int64(pos0 + t + 1)
	}
	return device.Cost{
		Label:   "attention prefill",
		Read:    int64(heads/tgHeads)*rows*2*dt.RowBytes(hd) + int64(n*heads*hd*4),
		Written: int64(n * heads * hd * 4),
		FLOPs:   4 * int64(heads) * seen * int64(hd),
	}
}

// attentionSinks is attention over the last window positions (0: all) with a sink logit
// per query head (attn_sinks_f32/f16), or none when sinks is the zero Region.
func (e *encoder) attentionSinks(q Region, n, heads int, c *cache, layer, pos0 int, scale float32, window int, sinks, out Region) {
	if e.err != nil {
		return
	}
	if err := c.checkSpan("attend over", layer, pos0, n); err != nil {
		e.err = err
		return
	}
	kvHeads, hd, dt := c.pool.kvHeads, c.pool.headDim, c.pool.dtype
	if n <= 0 || heads <= 0 || heads%kvHeads != 0 || hd%32 != 0 || hd > kernels.AttnMaxHeadDim {
		e.err = fmt.Errorf("metalkit: sink attention of %d tokens of %d heads of %d over a cache of %d kv heads (heads of a multiple of 32 up to %d)", n, heads, hd, kvHeads, kernels.AttnMaxHeadDim)
		return
	}
	if err := regionsHold("sink attention", int64(4*n*heads*hd), q, out); err != nil {
		e.err = err
		return
	}
	seen := pos0 + n // the most positions a token sees
	if window > 0 {
		seen = min(seen, window)
	}
	kvBytes := int64(dt.RowBytes(2 * hd))
	args := kernels.AttnSinksArgs{N: int32(n), Heads: int32(heads), KVHeads: int32(kvHeads), HeadDim: int32(hd),
		Pos0: int32(pos0), BlockSize: int32(c.pool.blockSize), Window: int32(window), HasSinks: 1, Scale: scale}
	if sinks.Len == 0 {
		args.HasSinks, sinks = 0, q // bound for the slot, never read
	}
	e.dispatch("attn_sinks_"+dt.String(), nil, [3]int{n, heads, 1}, [3]int{32, 1, 1}, 0,
		device.Cost{Label: "sink attention", Read: int64(n*heads) * (int64(seen)*kvBytes + int64(4*hd)), Written: int64(4 * n * heads * hd),
			FLOPs: int64(4 * n * heads * seen * hd)},
		args, q, c.layerK(layer), c.layerV(layer), c.tableRegion(), sinks, out)
}
