package planner

import (
	"fmt"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/modelinfo"
)

// MiB is the unit of every limit and need the planner reports.
const MiB = 1 << 20

// SlotAlignment is the granularity of one expert slot in a bounded expert cache: a slot holds
// one expert's gate, up and down slices and starts on a page so that it can be filled from the
// mapped GGUF with one aligned copy.
const SlotAlignment = 4096

// KVBytes is the KV cache size of one position (all full-attention layers, K and V) per
// precision.
type KVBytes struct {
	F32 int64 `json:"f32"`
	F16 int64 `json:"f16"`
	// Q8_0 is 0 in profiles written before the precision existed: the planner then never
	// chooses it.
	Q8_0 int64 `json:"q8_0,omitempty"`
}

// ExpertLayer is the routed-expert payload of one layer.
type ExpertLayer struct {
	Layer   int `json:"layer"`
	Experts int `json:"experts"`
	// Bytes is the raw size of the layer's routed expert tensors (gate, up, down), all experts.
	Bytes int64 `json:"bytes"`
	// SlotBytes is one expert's gate+up+down slices rounded up to SlotAlignment: what a cache
	// holding that expert occupies.
	SlotBytes int64 `json:"slot_bytes"`
}

// CacheBytes is the layer's size when every expert sits in its own slot.
func (l ExpertLayer) CacheBytes() int64 { return l.SlotBytes * int64(l.Experts) }

// Profile holds the facts about one model file that the memory model needs. All sizes are
// bytes. A Profile comes from ProfileFromFacts (the engine fills Facts from a GGUF) or from a
// JSON file in this format (see testdata/ for Red Lite's Qwen3-Next-80B IQ2_XXS).
type Profile struct {
	Architecture string `json:"architecture"`
	Name         string `json:"name"`
	// Source says where the numbers come from (a GGUF path and hash, or a publication).
	Source string `json:"source,omitempty"`
	// ContextLength is the longest context the model was trained for.
	ContextLength   int `json:"context_length"`
	ExpertCount     int `json:"expert_count"`
	ExpertUsedCount int `json:"expert_used_count"`
	// ExpertLayerCount is the number of layers with routed experts.
	ExpertLayerCount int `json:"expert_layer_count"`
	// ExpertLayers is the per-layer payload; it may be omitted when only totals are known
	// (published numbers), and must add up to the totals when present.
	ExpertLayers []ExpertLayer `json:"expert_layers,omitempty"`
	// ExpertBytes is the raw routed-expert payload of all layers.
	ExpertBytes int64 `json:"expert_bytes"`
	// ExpertCacheBytes is the payload with every expert slot rounded up to SlotAlignment: the
	// expert_cache term of a fully resident plan.
	ExpertCacheBytes int64 `json:"expert_cache_bytes"`
	// DenseBytes is every weight that is neither a routed expert nor the MTP block:
	// embeddings, attention, DeltaNet, shared experts, routers, norms, output.
	DenseBytes         int64   `json:"dense_bytes"`
	KVBytesPerPosition KVBytes `json:"kv_bytes_per_position"`
	// RecurrentStateBytes is one sequence's recurrent (DeltaNet) state. The first sequence's
	// state is part of the calibration's base overhead; each further slot adds one.
	RecurrentStateBytes int64 `json:"recurrent_state_bytes"`
	// MTPBytes is the multi-token-prediction block; 0 means the model has none.
	MTPBytes int64 `json:"mtp_bytes"`
}

// KVPerPosition returns the KV bytes of one position at precision p.
func (p Profile) KVPerPosition(prec ml.DType) int64 {
	switch prec {
	case ml.F16:
		return p.KVBytesPerPosition.F16
	case ml.Q8_0:
		return p.KVBytesPerPosition.Q8_0
	}
	return p.KVBytesPerPosition.F32
}

// StatePositions expresses one sequence's recurrent state as KV positions at precision p,
// rounded up: the form in which the formula charges a further slot's state.
func (p Profile) StatePositions(prec ml.DType) int64 {
	kv := p.KVPerPosition(prec)
	if kv <= 0 {
		return 0
	}
	return ceilDiv(p.RecurrentStateBytes, kv)
}

// HasMTP reports whether the model carries an MTP block.
func (p Profile) HasMTP() bool { return p.MTPBytes > 0 }

// MinCacheBytes is the smallest bounded expert cache the planner will propose: one whole
// layer of experts (the largest layer). A 512-token prefill chunk with top-k routing touches
// nearly every expert of a layer, so a smaller cache would evict experts it needs again
// within the same layer's pass and read the GGUF for almost every expert of every chunk.
func (p Profile) MinCacheBytes() int64 {
	var largest int64
	for _, l := range p.ExpertLayers {
		largest = max(largest, l.CacheBytes())
	}
	if largest == 0 && p.ExpertLayerCount > 0 {
		largest = alignUp(ceilDiv(p.ExpertCacheBytes, int64(p.ExpertLayerCount)), SlotAlignment)
	}
	return largest
}

// Validate reports the first field that makes the profile unusable.
func (p Profile) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadProfile, fmt.Sprintf(format, args...))
	}
	switch {
	case p.ContextLength <= 0:
		return bad("context_length must be > 0, got %d", p.ContextLength)
	case p.DenseBytes <= 0:
		return bad("dense_bytes must be > 0, got %d", p.DenseBytes)
	case p.KVBytesPerPosition.F32 <= 0:
		return bad("kv_bytes_per_position.f32 must be > 0, got %d", p.KVBytesPerPosition.F32)
	case p.KVBytesPerPosition.F16 <= 0:
		return bad("kv_bytes_per_position.f16 must be > 0, got %d", p.KVBytesPerPosition.F16)
	case p.KVBytesPerPosition.F16 > p.KVBytesPerPosition.F32:
		return bad("kv_bytes_per_position.f16 (%d) exceeds f32 (%d)", p.KVBytesPerPosition.F16, p.KVBytesPerPosition.F32)
	case p.KVBytesPerPosition.Q8_0 < 0 || p.KVBytesPerPosition.Q8_0 > p.KVBytesPerPosition.F16:
		return bad("kv_bytes_per_position.q8_0 (%d) must be within [0, f16 (%d)]", p.KVBytesPerPosition.Q8_0, p.KVBytesPerPosition.F16)
	case p.RecurrentStateBytes < 0:
		return bad("recurrent_state_bytes must be ≥ 0, got %d", p.RecurrentStateBytes)
	case p.MTPBytes < 0:
		return bad("mtp_bytes must be ≥ 0, got %d", p.MTPBytes)
	case p.ExpertBytes < 0:
		return bad("expert_bytes must be ≥ 0, got %d", p.ExpertBytes)
	case p.ExpertCacheBytes < p.ExpertBytes:
		return bad("expert_cache_bytes (%d) is less than expert_bytes (%d): slots are rounded up, never down", p.ExpertCacheBytes, p.ExpertBytes)
	case p.ExpertCount < 0 || p.ExpertUsedCount < 0 || p.ExpertUsedCount > p.ExpertCount:
		return bad("expert_used_count %d must be within [0, expert_count %d]", p.ExpertUsedCount, p.ExpertCount)
	case p.ExpertCacheBytes > 0 && (p.ExpertCount == 0 || p.ExpertLayerCount <= 0):
		return bad("expert payload of %d bytes needs expert_count and expert_layer_count > 0", p.ExpertCacheBytes)
	}
	if len(p.ExpertLayers) == 0 {
		return nil
	}
	if len(p.ExpertLayers) != p.ExpertLayerCount {
		return bad("expert_layers has %d entries, expert_layer_count says %d", len(p.ExpertLayers), p.ExpertLayerCount)
	}
	var raw, cache int64
	for i, l := range p.ExpertLayers {
		if l.Experts <= 0 || l.Bytes <= 0 || l.SlotBytes%SlotAlignment != 0 || l.CacheBytes() < l.Bytes {
			return bad("expert_layers[%d] (layer %d): experts %d, bytes %d, slot_bytes %d: want experts and bytes > 0 and slot_bytes a multiple of %d holding one expert",
				i, l.Layer, l.Experts, l.Bytes, l.SlotBytes, SlotAlignment)
		}
		raw += l.Bytes
		cache += l.CacheBytes()
	}
	if raw != p.ExpertBytes || cache != p.ExpertCacheBytes {
		return bad("expert_layers add up to %d raw / %d cache bytes, totals say %d / %d", raw, cache, p.ExpertBytes, p.ExpertCacheBytes)
	}
	return nil
}

// TensorFact is one tensor of a model file.
type TensorFact struct {
	Name  string         `json:"name"`
	Layer int            `json:"layer"` // -1 outside the blocks
	Class modelinfo.Role `json:"class"`
	Bytes int64          `json:"bytes"`
}

// Facts is what ProfileFromFacts needs, in plain numbers: the seam where the engine hands
// over what it read from a GGUF (tensor bytes by class and hyperparameters).
type Facts struct {
	Architecture    string
	Name            string
	Source          string
	ContextLength   int
	ExpertCount     int
	ExpertUsedCount int
	// AttentionLayers is the number of layers with a KV cache (full attention), each with
	// KVHeads heads of KeyLength + ValueLength elements per position.
	AttentionLayers int
	KVHeads         int
	KeyLength       int
	ValueLength     int
	// RecurrentStateBytes is one sequence's recurrent state as the engine allocates it (see
	// modelinfo.GatedDeltaNetStateBytes).
	RecurrentStateBytes int64
	Tensors             []TensorFact
}

// ProfileFromFacts sums the tensors by class, sizes the expert slots and the KV cache.
func ProfileFromFacts(f Facts) (Profile, error) {
	bad := func(format string, args ...any) (Profile, error) {
		return Profile{}, fmt.Errorf("%w: %s", ErrBadProfile, fmt.Sprintf(format, args...))
	}
	if f.AttentionLayers < 0 || f.KVHeads < 0 || f.KeyLength < 0 || f.ValueLength < 0 {
		return bad("negative attention hyperparameter: layers %d, kv heads %d, key %d, value %d", f.AttentionLayers, f.KVHeads, f.KeyLength, f.ValueLength)
	}
	p := Profile{
		Architecture:    f.Architecture,
		Name:            f.Name,
		Source:          f.Source,
		ContextLength:   f.ContextLength,
		ExpertCount:     f.ExpertCount,
		ExpertUsedCount: f.ExpertUsedCount,
		KVBytesPerPosition: KVBytes{
			F32: ml.KVBytesPerPosition(f.AttentionLayers, f.KVHeads, f.KeyLength, f.ValueLength, ml.F32),
			F16: ml.KVBytesPerPosition(f.AttentionLayers, f.KVHeads, f.KeyLength, f.ValueLength, ml.F16),
		},
		RecurrentStateBytes: f.RecurrentStateBytes,
	}
	if ml.Q8_0.RowFits(f.KeyLength) && ml.Q8_0.RowFits(f.ValueLength) {
		p.KVBytesPerPosition.Q8_0 = ml.KVBytesPerPosition(f.AttentionLayers, f.KVHeads, f.KeyLength, f.ValueLength, ml.Q8_0)
	}
	layers := map[int]*ExpertLayer{}
	var order []int
	for _, t := range f.Tensors {
		if t.Bytes < 0 {
			return bad("tensor %s: negative size %d", t.Name, t.Bytes)
		}
		switch t.Class {
		case modelinfo.RoleDense:
			p.DenseBytes += t.Bytes
		case modelinfo.RoleMTP:
			p.MTPBytes += t.Bytes
		case modelinfo.RoleRoutedExpert:
			if f.ExpertCount <= 0 {
				return bad("tensor %s is a routed expert but expert_count is %d", t.Name, f.ExpertCount)
			}
			if t.Bytes%int64(f.ExpertCount) != 0 {
				return bad("tensor %s: %d bytes do not split into %d experts", t.Name, t.Bytes, f.ExpertCount)
			}
			l := layers[t.Layer]
			if l == nil {
				l = &ExpertLayer{Layer: t.Layer, Experts: f.ExpertCount}
				layers[t.Layer] = l
				order = append(order, t.Layer)
			}
			l.Bytes += t.Bytes
		default:
			return bad("tensor %s: unknown class %q", t.Name, t.Class)
		}
	}
	for _, i := range order {
		l := layers[i]
		l.SlotBytes = alignUp(l.Bytes/int64(l.Experts), SlotAlignment)
		p.ExpertLayers = append(p.ExpertLayers, *l)
		p.ExpertBytes += l.Bytes
		p.ExpertCacheBytes += l.CacheBytes()
	}
	p.ExpertLayerCount = len(p.ExpertLayers)
	if err := p.Validate(); err != nil {
		return Profile{}, err
	}
	return p, nil
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

func alignUp(n, a int64) int64 {
	if a <= 1 {
		return n
	}
	return ceilDiv(n, a) * a
}
