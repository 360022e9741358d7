package planner

import (
	"fmt"

	"github.com/redlite/batch/engine/ml"
)

// A worker that runs several jobs at once (continuous batching) holds one KV pool shared by
// all of them, in blocks of positions: the planner sizes it once, when the worker starts,
// from the same memory model as a job's plan — every slot's recurrent state, the scratch of
// one step's token budget, the routed experts — and jobs are then admitted while the pool has
// the blocks for their prompt + max_tokens.
//
// The experts are held in one of two ways, chosen once for the pool:
//
//   - Every expert resident, when that leaves every slot PoolMinSlotContext positions (or
//     the trained context): the pool then takes all the rest of the budget.
//   - Otherwise a bounded expert cache shared by every sequence of the batch: the pool keeps
//     exactly PoolMinSlotContext positions per slot and the cache takes all the rest, up to
//     every expert. The cache must hold at least Profile.MinCacheBytes (one layer's experts).
//
// A fully resident pool shorter than PoolMinSlotContext per slot is still taken when even the
// smallest cache would not fit beside the minimum pool, and it is the only kind when the
// policy forbids a cache (CacheNever) or the model has no routed experts.

// PoolMinSlotContext is the context per slot a pool must leave: f32 only when it leaves it,
// every expert resident only when it leaves it (else a bounded cache), and what a pool with
// a bounded cache keeps. f16 holds twice the positions of f32.
const PoolMinSlotContext = 4096

// Pool is the planner's answer for a batching worker.
type Pool struct {
	KV         ml.DType `json:"kv"`
	Slots      int      `json:"slots"`
	BlockSize  int      `json:"block_size"`
	Blocks     int      `json:"blocks"`
	StepTokens int      `json:"step_tokens"`
	// SlotContext is Blocks·BlockSize / Slots: the positions each slot has when all are full
	// (one job alone may use the whole pool, up to the trained context).
	SlotContext int `json:"slot_context"`
	// Residency says how the routed experts are held: all resident, or a bounded cache of
	// ExpertCacheBytes that every sequence of the batch shares.
	Residency        Residency `json:"residency"`
	ExpertCacheBytes int64     `json:"expert_cache_bytes"`
	NeedMiB          int64     `json:"need_mib"`
	LimitMiB         int64     `json:"limit_mib"`
	// Breakdown prices the full pool: KV for Blocks·BlockSize positions.
	Breakdown Breakdown `json:"breakdown"`
}

// Positions is the pool's blocks in positions: the longest job it holds, alone.
func (p Pool) Positions() int { return p.Blocks * p.BlockSize }

// PlanPool sizes the KV pool of a worker running slots sequences with steps of stepTokens
// tokens, in blocks of blockSize positions, and chooses how the experts are held (see
// above). The precision is the policy's, else the first of those the backend holds (f32,
// f16, q8_0) that leaves every slot at least PoolMinSlotContext positions; beside a bounded
// cache, the one that leaves the largest cache (the smallest KV, as Choose prefers the
// largest cache).
func PlanPool(p Profile, c Calibration, b Budget, pol Policy, slots, stepTokens, blockSize int) (Pool, error) {
	if err := p.Validate(); err != nil {
		return Pool{}, err
	}
	if err := c.Validate(); err != nil {
		return Pool{}, err
	}
	if err := b.Validate(); err != nil {
		return Pool{}, err
	}
	if slots < 1 || slots > MaxSlots || stepTokens < 1 || blockSize < 1 {
		return Pool{}, fmt.Errorf("%w: a pool of %d slots (1 to %d), steps of %d tokens and blocks of %d positions", ErrBadJob, slots, MaxSlots, stepTokens, blockSize)
	}
	ps := poolSearch{p: p, c: c, pol: pol, slots: slots, stepTokens: stepTokens, blockSize: blockSize,
		chunk: max(stepTokens, c.MinChunk), usable: b.UsableMiB()}
	full, fullOK := ps.resident()
	cacheAllowed := p.ExpertCacheBytes > 0 && pol.ExpertCache != CacheNever
	if fullOK && (full.SlotContext >= ps.want() || !cacheAllowed) {
		return full, nil
	}
	if cacheAllowed {
		if cached, ok := ps.cached(); ok {
			return cached, nil
		}
	}
	if fullOK {
		return full, nil
	}
	return Pool{}, ps.doesNotFit(cacheAllowed)
}

// poolSearch holds one PlanPool call's inputs.
type poolSearch struct {
	p                            Profile
	c                            Calibration
	pol                          Policy
	slots, stepTokens, blockSize int
	chunk                        int
	usable                       int64 // MiB
}

// want is the context per slot a pool should leave.
func (ps *poolSearch) want() int { return min(PoolMinSlotContext, ps.p.ContextLength) }

// price estimates slots sequences of ctx positions each.
func (ps *poolSearch) price(ctx int, kv ml.DType, res Residency, cache int64) (Breakdown, error) {
	return Estimate(Config{Context: ctx, Slots: ps.slots, KV: kv, Chunk: ps.chunk, Residency: res, ExpertCacheBytes: cache,
		PrefixCacheBytes: ps.pol.PrefixCacheMiB * MiB}, ps.p, ps.c)
}

func (ps *poolSearch) pool(kv ml.DType, perSlot int, res Residency, br Breakdown) Pool {
	return Pool{KV: kv, Slots: ps.slots, BlockSize: ps.blockSize, Blocks: perSlot * ps.slots, StepTokens: ps.stepTokens,
		SlotContext: perSlot * ps.blockSize, Residency: res, ExpertCacheBytes: br.ExpertCacheBytes,
		NeedMiB: br.NeedMiB(), LimitMiB: ps.usable, Breakdown: br}
}

// resident is the largest pool with every expert resident: f32 when it leaves every slot
// want() positions, else f16 (or the policy's precision). ok is false when not even one
// block per slot fits.
func (ps *poolSearch) resident() (Pool, bool) {
	var best Pool
	for _, kv := range kvChoices(ps.pol, ps.p, ps.c) {
		fits := func(perSlot int) bool {
			br, err := ps.price(perSlot*ps.blockSize, kv, ResidencyFull, 0)
			return err == nil && br.NeedMiB() <= ps.usable
		}
		// The largest per-slot context (whole blocks) that fits: the need grows with it.
		lo, hi := 0, ps.p.ContextLength/ps.blockSize
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if fits(mid) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		if lo == 0 {
			continue
		}
		br, _ := ps.price(lo*ps.blockSize, kv, ResidencyFull, 0)
		pool := ps.pool(kv, lo, ResidencyFull, br)
		if best.Blocks == 0 || best.SlotContext < ps.want() {
			best = pool
		}
		if pool.SlotContext >= ps.want() {
			break
		}
	}
	return best, best.Blocks > 0
}

// minBlocks is the blocks per slot of a pool beside a bounded cache: want() positions, in
// whole blocks within the trained context, at least one.
func (ps *poolSearch) minBlocks() int {
	return max(1, min(int(ceilDiv(int64(ps.want()), int64(ps.blockSize))), ps.p.ContextLength/ps.blockSize))
}

// cacheRoom is the largest cache, in whole MiB and at most every expert, that fits beside a
// pool of minBlocks per slot in precision kv (negative when the pool alone does not fit).
func (ps *poolSearch) cacheRoom(kv ml.DType) (int64, error) {
	rest, err := ps.price(ps.minBlocks()*ps.blockSize, kv, ResidencyCache, 0)
	if err != nil {
		return 0, err
	}
	room := ps.usable*MiB - rest.TotalBytes
	if room < 0 {
		return room, nil
	}
	return min(room/MiB*MiB, ps.p.ExpertCacheBytes), nil
}

// cached is the pool of minBlocks per slot beside the largest bounded cache, in the
// precision that leaves the largest; ok is false when that cache is below the minimum.
func (ps *poolSearch) cached() (Pool, bool) {
	var best Pool
	for _, kv := range kvChoices(ps.pol, ps.p, ps.c) {
		size, err := ps.cacheRoom(kv)
		if err != nil || size < ps.p.MinCacheBytes() || size <= best.ExpertCacheBytes {
			continue
		}
		br, err := ps.price(ps.minBlocks()*ps.blockSize, kv, ResidencyCache, size)
		if err != nil || br.NeedMiB() > ps.usable {
			continue
		}
		best = ps.pool(kv, ps.minBlocks(), ResidencyCache, br)
	}
	return best, best.Blocks > 0
}

// doesNotFit names what the smallest pools need: one block per slot with every expert
// resident, and (when a cache is allowed) the minimum pool beside the smallest cache.
func (ps *poolSearch) doesNotFit(cacheAllowed bool) error {
	kvs := kvChoices(ps.pol, ps.p, ps.c)
	last := kvs[len(kvs)-1]
	full, _ := ps.price(ps.blockSize, last, ResidencyFull, 0)
	msg := fmt.Sprintf("%d slots need %s MiB for one block of %d positions each with every expert resident (%s KV, steps of %d tokens)",
		ps.slots, commas(full.NeedMiB()), ps.blockSize, last, ps.stepTokens)
	if cacheAllowed {
		minCache := ps.p.MinCacheBytes()
		cached, _ := ps.price(ps.minBlocks()*ps.blockSize, last, ResidencyCache, minCache)
		msg += fmt.Sprintf(", or %s MiB for %s positions each beside the smallest expert cache of %s MiB (one layer's experts)",
			commas(cached.NeedMiB()), commas(int64(ps.minBlocks()*ps.blockSize)), commas(ceilDiv(minCache, MiB)))
	}
	return fmt.Errorf("%w: %s, but the limit is %s MiB; run fewer slots (REDLITE_CONCURRENCY)", ErrDoesNotFit, msg, commas(ps.usable))
}
