package planner

import (
	"fmt"

	"github.com/redlite/batch/engine/ml"
)

// A worker that runs several jobs at once (continuous batching) holds one KV pool shared by
// all of them, in blocks of positions: the planner sizes it once, when the worker starts,
// from the same memory model as a job's plan — every slot's recurrent state, the scratch of
// one step's token budget, every expert resident — and jobs are then admitted while the pool
// has the blocks for their prompt + max_tokens.

// PoolMinSlotContext is the context per slot that f32 must leave when every slot is full for
// the pool to be f32; below it the pool is f16, which holds twice the positions.
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
	SlotContext int   `json:"slot_context"`
	NeedMiB     int64 `json:"need_mib"`
	LimitMiB    int64 `json:"limit_mib"`
	// Breakdown prices the full pool: KV for Blocks·BlockSize positions.
	Breakdown Breakdown `json:"breakdown"`
}

// Positions is the pool's blocks in positions: the longest job it holds, alone.
func (p Pool) Positions() int { return p.Blocks * p.BlockSize }

// PlanPool sizes the KV pool of a worker running slots sequences with steps of stepTokens
// tokens: the largest pool of blockSize-position blocks that fits the budget with every
// expert resident. The precision is the policy's, else f32 when it leaves every slot at
// least PoolMinSlotContext positions (or the trained context), else f16.
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
	kvs := kvChoices(pol, p, c)
	usable := b.UsableMiB()
	chunk := max(stepTokens, c.MinChunk)
	want := min(PoolMinSlotContext, p.ContextLength)
	var best Pool
	for _, kv := range kvs {
		price := func(ctx int) (Breakdown, bool) {
			br, err := Estimate(Config{Context: ctx, Slots: slots, KV: kv, Chunk: chunk, Residency: ResidencyFull}, p, c)
			return br, err == nil && br.NeedMiB() <= usable
		}
		// The largest per-slot context (whole blocks) that fits: the need grows with it.
		lo, hi := 0, p.ContextLength/blockSize
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if _, ok := price(mid * blockSize); ok {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		if lo == 0 {
			continue
		}
		br, _ := price(lo * blockSize)
		pool := Pool{KV: kv, Slots: slots, BlockSize: blockSize, Blocks: lo * slots, StepTokens: stepTokens,
			SlotContext: lo * blockSize, NeedMiB: br.NeedMiB(), LimitMiB: usable, Breakdown: br}
		if best.Blocks == 0 || best.SlotContext < want {
			best = pool
		}
		if pool.SlotContext >= want {
			break
		}
	}
	if best.Blocks == 0 {
		last := kvs[len(kvs)-1]
		br, _ := Estimate(Config{Context: blockSize, Slots: slots, KV: last, Chunk: chunk, Residency: ResidencyFull}, p, c)
		return Pool{}, fmt.Errorf("%w: %d slots need %s MiB for one block of %d positions each (%s KV, steps of %d tokens) but the limit is %s MiB; run fewer slots (REDLITE_CONCURRENCY)",
			ErrDoesNotFit, slots, commas(br.NeedMiB()), blockSize, last, stepTokens, commas(usable))
	}
	return best, nil
}
