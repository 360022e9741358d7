package planner

import (
	"fmt"
	"math"
	"slices"

	"github.com/redlite/batch/engine/ml"
)

// Residency says how routed experts are held.
type Residency string

const (
	ResidencyFull  Residency = "full"  // every expert resident
	ResidencyCache Residency = "cache" // a bounded cache filled from the mapped GGUF
)

// Config is one way to run a job: the choices a plan makes.
type Config struct {
	// Context is the positions of one slot: prompt (with chat template) + max_tokens.
	Context   int       `json:"context"`
	Slots     int       `json:"slots"`
	KV        ml.DType  `json:"kv"`
	Chunk     int       `json:"chunk"`
	MTP       bool      `json:"mtp"`
	Residency Residency `json:"residency"`
	// ExpertCacheBytes is the expert cache: the whole slot-rounded payload for full
	// residency (filled in by Estimate), the bounded size otherwise.
	ExpertCacheBytes int64 `json:"expert_cache_bytes"`
	// PrefixCacheBytes bounds what a batching worker's prefix cache holds beside the KV
	// pool: recurrent checkpoints, so it counts only for a model with recurrent layers (a
	// dense model's cached prefixes are KV blocks of the pool itself).
	PrefixCacheBytes int64 `json:"prefix_cache_bytes,omitempty"`
}

// Breakdown is every term of the memory model for one Config, in bytes.
type Breakdown struct {
	ExpertCacheBytes int64 `json:"expert_cache_bytes"`
	DenseBytes       int64 `json:"dense_bytes"`
	BaseBytes        int64 `json:"base_bytes"`
	// KVPositions = context × slots + state_positions × (slots − 1).
	KVPositions int64 `json:"kv_positions"`
	// StatePositions is one further slot's recurrent state in positions at this precision.
	StatePositions     int64 `json:"state_positions"`
	KVBytesPerPosition int64 `json:"kv_bytes_per_position"`
	KVBytes            int64 `json:"kv_bytes"`
	// ScratchTokens = max(0, chunk − min_chunk).
	ScratchTokens int   `json:"scratch_tokens"`
	ScratchBytes  int64 `json:"scratch_bytes"`
	// AttentionScratchBytes = context × the calibration's attention scratch per position:
	// one chunk's transient copy of the cache (0 on backends that read it in place).
	AttentionScratchBytes int64 `json:"attention_scratch_bytes"`
	MTPBytes              int64 `json:"mtp_bytes"`
	// PrefixCacheBytes is Config.PrefixCacheBytes where it counts (a hybrid model).
	PrefixCacheBytes int64 `json:"prefix_cache_bytes,omitempty"`
	TotalBytes       int64 `json:"total_bytes"`
}

// NeedMiB is the total rounded up to a whole MiB: the number compared with the limit.
func (b Breakdown) NeedMiB() int64 { return ceilDiv(b.TotalBytes, MiB) }

// maxPlanBytes bounds every product so that int64 arithmetic cannot overflow (1 EiB).
const maxPlanBytes = 1 << 60

// Estimate evaluates the memory model for one configuration:
//
//	need = expert_cache + dense + base
//	     + positions × kv_per_position(kv)
//	     + max(0, chunk − min_chunk) × scratch_per_chunk_token
//	     + (mtp ? mtp_block : 0)
//	     + (recurrent state ? prefix_cache : 0)
//	positions = context × slots + state_positions(kv) × (slots − 1)
//
// The KV and scratch terms are rounded up to the calibration's alignment; the total is
// rounded up to a MiB by NeedMiB. Estimate checks that the configuration is possible for the
// model, not that it is wise (it will price MTP beyond the MTP limit).
func Estimate(cfg Config, p Profile, c Calibration) (Breakdown, error) {
	bad := func(format string, args ...any) (Breakdown, error) {
		return Breakdown{}, fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case cfg.Context < 1 || cfg.Context > p.ContextLength:
		return bad("context %d must be within [1, %d], the model's trained context", cfg.Context, p.ContextLength)
	case cfg.Slots < 1:
		return bad("slots must be ≥ 1, got %d", cfg.Slots)
	case cfg.KV != ml.F32 && cfg.KV != ml.F16 && cfg.KV != ml.Q8_0:
		return bad("kv %v: want f32, f16 or q8_0", cfg.KV)
	case !slices.Contains(c.KVs(), cfg.KV):
		return bad("kv %v: the %s backend holds %v caches", cfg.KV, c.Backend, c.KVs())
	case p.KVPerPosition(cfg.KV) <= 0:
		return bad("kv %v: the model %q's attention heads are not whole blocks of %d values", cfg.KV, p.Name, ml.Q8_0Block)
	case cfg.Chunk < c.MinChunk:
		return bad("chunk %d is below the backend's smallest chunk %d", cfg.Chunk, c.MinChunk)
	case cfg.MTP && !p.HasMTP():
		return bad("mtp requested but the model %q has no MTP block", p.Name)
	case cfg.PrefixCacheBytes < 0 || cfg.PrefixCacheBytes > maxPlanBytes:
		return bad("prefix cache of %d bytes", cfg.PrefixCacheBytes)
	}
	b := Breakdown{
		DenseBytes:         p.DenseBytes,
		BaseBytes:          int64(math.Ceil(c.BaseMiB * MiB)),
		StatePositions:     p.StatePositions(cfg.KV),
		KVBytesPerPosition: p.KVPerPosition(cfg.KV),
		ScratchTokens:      max(0, cfg.Chunk-c.MinChunk),
	}
	switch cfg.Residency {
	case ResidencyFull:
		b.ExpertCacheBytes = p.ExpertCacheBytes
	case ResidencyCache:
		if cfg.ExpertCacheBytes < 0 || cfg.ExpertCacheBytes > p.ExpertCacheBytes {
			return bad("expert cache of %d bytes must be within [0, %d]", cfg.ExpertCacheBytes, p.ExpertCacheBytes)
		}
		b.ExpertCacheBytes = cfg.ExpertCacheBytes
	default:
		return bad("residency %q: want full or cache", cfg.Residency)
	}
	positions := float64(cfg.Context)*float64(cfg.Slots) + float64(b.StatePositions)*float64(cfg.Slots-1)
	if positions*float64(b.KVBytesPerPosition) > maxPlanBytes {
		return bad("%d slots of %d positions are beyond any device", cfg.Slots, cfg.Context)
	}
	b.KVPositions = int64(cfg.Context)*int64(cfg.Slots) + b.StatePositions*int64(cfg.Slots-1)
	b.KVBytes = alignUp(b.KVPositions*b.KVBytesPerPosition, c.AlignmentBytes)
	// The per-token constant is a fraction of a MiB; rounding to the byte removes the float
	// noise (572/1536 MiB × 1536 tokens is exactly 572 MiB, not a byte more).
	scratch := math.Round(float64(b.ScratchTokens) * c.ScratchMiBPerChunkToken * MiB)
	if scratch > maxPlanBytes {
		return bad("chunk %d needs more scratch than any device has", cfg.Chunk)
	}
	b.ScratchBytes = alignUp(int64(scratch), c.AlignmentBytes)
	// One chunk runs at a time, so the attention copy covers one slot's context.
	b.AttentionScratchBytes = alignUp(int64(math.Ceil(float64(cfg.Context)*c.attentionScratch(cfg.KV))), c.AlignmentBytes)
	if cfg.MTP {
		b.MTPBytes = p.MTPBytes
	}
	if p.RecurrentStateBytes > 0 {
		b.PrefixCacheBytes = alignUp(cfg.PrefixCacheBytes, c.AlignmentBytes)
	}
	b.TotalBytes = b.ExpertCacheBytes + b.DenseBytes + b.BaseBytes + b.KVBytes + b.ScratchBytes + b.AttentionScratchBytes + b.MTPBytes + b.PrefixCacheBytes
	return b, nil
}
