package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"

	"github.com/redlite/batch/engine/ml"
)

// Allocation is what the engine holds for one session, by kind, in bytes: the facts the
// planner's calibration is fitted to.
type Allocation struct {
	// WeightsBytes is every tensor of the file, mapped (the CPU reads them in place).
	WeightsBytes int64 `json:"weights_bytes"`
	// KVBytes is the KV cache of the session's full capacity.
	KVBytes int64 `json:"kv_bytes"`
	// StateBytes is the rest of the session's state: recurrent layers' conv windows and
	// delta-rule matrices.
	StateBytes int64 `json:"state_bytes"`
	// ScratchBytes is the transient memory of the prefill: with a backend that accounts
	// for it (ml.ScratchPool, the CPU backend) the most its passes held at once —
	// intermediates alive together and operations' working buffers — over a prefill of the
	// whole context, whose last chunk attends to the most positions. Otherwise it is
	// HeapGrowthBytes.
	ScratchBytes int64 `json:"scratch_bytes"`
	// HeapGrowthBytes is the Go heap's growth over the session's baseline at the end of the
	// last chunk, run with the collector paused: the pooled scratch plus everything the
	// chunk allocated, garbage included. It was the scratch term before passes reused
	// memory and is kept for comparison.
	HeapGrowthBytes int64 `json:"heap_growth_bytes"`
}

// TotalBytes is the sum of every kind.
func (a Allocation) TotalBytes() int64 {
	return a.WeightsBytes + a.KVBytes + a.StateBytes + a.ScratchBytes
}

// MeasureAllocation opens a session of o.Context positions, prefills it to the full context
// in chunks of chunk tokens (random ids) and reports what it holds. The scratch term is the
// backend's peak pass memory when it reports one (it drops its pooled memory first, so
// earlier passes do not count), else the heap's growth (see Allocation). It runs a prefill
// of the whole context: a few seconds for the fixture models, long for real ones.
func (m *Model) MeasureAllocation(ctx context.Context, o SessionOptions, chunk int) (Allocation, error) {
	if chunk < 1 || o.Context < chunk {
		return Allocation{}, fmt.Errorf("engine: measure needs 1 ≤ chunk ≤ context, got chunk %d, context %d", chunk, o.Context)
	}
	var a Allocation
	for i := range m.File.Tensors {
		a.WeightsBytes += int64(m.File.Tensors[i].Size)
	}
	s, err := m.NewSession(o)
	if err != nil {
		return a, err
	}
	defer s.Close()
	pool, pooled := m.Backend.(ml.ScratchPool)
	if pooled {
		pool.ResetScratch()
	}
	cfg := m.Config()
	a.KVBytes = int64(o.Context) * ml.KVBytesPerPosition(cfg.AttnLayers, cfg.KVHeads, cfg.HeadDim, cfg.HeadDim, o.KV)
	a.StateBytes = s.StateBytes() - a.KVBytes

	// The heap after the session is allocated is the baseline: what the passes add on top of
	// it is intermediates and the backend's pooled scratch.
	var base, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&base)

	rng := rand.New(rand.NewPCG(uint64(o.Context), uint64(chunk)))
	tokens := make([]int32, o.Context)
	for i := range tokens {
		tokens[i] = int32(rng.IntN(cfg.Vocab))
	}
	last := o.Context - chunk
	if last > 0 {
		if _, err := s.Prefill(ctx, tokens[:last], PrefillOptions{Chunk: chunk}); err != nil {
			return a, err
		}
	}
	runtime.GC() // what survives is the backend's pooled scratch
	gc := debug.SetGCPercent(-1)
	_, err = s.Prefill(ctx, tokens[last:], PrefillOptions{Chunk: chunk})
	runtime.ReadMemStats(&after)
	debug.SetGCPercent(gc)
	if err != nil {
		return a, err
	}
	a.HeapGrowthBytes = max(int64(after.HeapAlloc)-int64(base.HeapAlloc), 0)
	a.ScratchBytes = a.HeapGrowthBytes
	if pooled {
		a.ScratchBytes = pool.PeakScratchBytes()
	}
	return a, nil
}

// MeasureBatch runs a full batch in a scheduler of o's sizes — every slot's sequence filling
// its share of the pool (prompts of Blocks·BlockSize/Slots − 1 tokens, one generated) — and
// reports what the engine held: the weights, the whole pool, every slot's recurrent state
// and the most the steps' passes held at once (ScratchBytes, with a backend that accounts
// for it; 0 otherwise). It is what the planner's pool plan predicts.
func (m *Model) MeasureBatch(ctx context.Context, o SchedulerOptions) (Allocation, error) {
	var a Allocation
	for i := range m.File.Tensors {
		a.WeightsBytes += int64(m.File.Tensors[i].Size)
	}
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.Slots < 1 || o.Blocks%o.Slots != 0 {
		return a, fmt.Errorf("engine: measure a batch of %d slots over %d blocks (want a multiple)", o.Slots, o.Blocks)
	}
	pool, pooled := m.Backend.(ml.ScratchPool)
	if pooled {
		pool.ResetScratch()
	}
	s, err := m.NewScheduler(o)
	if err != nil {
		return a, err
	}
	defer s.Close()
	a.KVBytes = s.pool.Bytes()
	if f, ok := m.Graph.(interface{ RecurrentBytes() int64 }); ok {
		a.StateBytes = int64(o.Slots) * f.RecurrentBytes()
	}
	cfg := m.Config()
	per := o.Blocks * o.BlockSize / o.Slots
	rng := rand.New(rand.NewPCG(uint64(per), uint64(o.Slots)))
	prompts := make([][]int32, o.Slots)
	for j := range prompts {
		prompts[j] = make([]int32, per-1)
		for i := range prompts[j] {
			prompts[j][i] = int32(rng.IntN(cfg.Vocab))
		}
	}
	if err := s.GenerateTogether(ctx, prompts, per, GenerateOptions{MaxTokens: 1, Stream: DiscardText{}}); err != nil {
		return a, err
	}
	if pooled {
		a.ScratchBytes = pool.PeakScratchBytes()
	}
	return a, nil
}

// DiscardText is a TextStream that decodes nothing: for measurements and benchmarks,
// which feed random ids.
type DiscardText struct{}

func (DiscardText) Next(int32) string { return "" }
func (DiscardText) Flush() string     { return "" }
