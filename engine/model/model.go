// Package model holds what every architecture shares: the registry that maps a GGUF's
// general.architecture to a graph, the binder that finds and checks weights by tensor name,
// and the interface sessions drive.
package model

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// Graph is a loaded architecture: weights bound on a backend and the forward pass.
type Graph interface {
	// Config returns the facts sessions and the planner need.
	Config() Config
	// NewState allocates one sequence's state (KV cache, recurrent state) for capacity positions.
	NewState(b ml.Backend, capacity int, kv ml.DType) (State, error)
	// NewKVPool allocates KV memory of blocks blocks of blockSize positions across the
	// model's attention layers, for the states NewPooledState draws from it.
	NewKVPool(b ml.Backend, blocks, blockSize int, kv ml.DType) (ml.KVPool, error)
	// NewPooledState allocates one sequence's state whose KV cache takes the blocks for
	// capacity positions from pool (failing with ml.ErrPoolFull when too few are free).
	NewPooledState(b ml.Backend, pool ml.KVPool, capacity int) (State, error)
	// NewStateOn allocates one sequence's state around c, a cache drawn from a pool made by
	// NewKVPool (KVPool.Alloc or AllocShared); the state owns c from then on, even when it
	// fails.
	NewStateOn(b ml.Backend, c ml.Cache) (State, error)
	// Forward runs a batch (Batch.Runs must accept it) and returns the logits of the tokens
	// whose Logits flag is set, in batch order: [rows, vocab], or nil when none is.
	Forward(ctx ml.Context, b Batch) ml.Tensor
}

// State is one sequence's memory.
type State interface {
	Capacity() int
	Bytes() int64
	// Free releases the state's backend memory (KV cache, recurrent and MTP tensors) at
	// once; the state must not be used afterwards.
	Free()
	// Snapshot encodes what the state holds after pos positions: the KV entries of positions
	// [0, pos) in the cache's precision and every recurrent state. Positions beyond pos are
	// not saved.
	Snapshot(b ml.Backend, pos int) ([]byte, error)
	// Restore loads a Snapshot of pos positions into this state, which must come from the
	// same model with the same KV precision and hold at least pos positions.
	Restore(b ml.Backend, pos int, data []byte) error
	// KV is the state's attention cache.
	KV() ml.Cache
	// SaveRecurrent copies the recurrent memory (conv windows and delta-rule states), nil
	// for an architecture without one; RestoreRecurrent loads such a copy. With the KV
	// entries of the same positions they are the whole state after a prefix (MTP aside).
	SaveRecurrent(b ml.Backend) ([]byte, error)
	RestoreRecurrent(b ml.Backend, data []byte) error
}

// Drafter is implemented by graphs with a next-token-prediction (MTP) head, for
// self-speculative decoding: the head drafts the token after next, and one two-token
// forward pass verifies it.
type Drafter interface {
	// EnableDraft allocates the head's part of s (its KV cache, the hidden state it carries,
	// room for a checkpoint). From then on Forward also runs the head over every token so its
	// cache follows the sequence.
	EnableDraft(b ml.Backend, s State) error
	// Draft runs the head for token at pos — the token the main model has just predicted,
	// not yet fed to it — and returns the head's logits for the token after it: [1, vocab].
	Draft(ctx ml.Context, s State, token int32, pos int) ml.Tensor
	// Verify is Forward of token and the draft after it at pos and pos+1, with the logits of
	// both ([2, vocab]), where draft is the draft's id as a tensor [1] of the same pass (the
	// Argmax of Draft's logits): drafting and verifying are one pass, with no round trip to
	// the host for the draft.
	Verify(ctx ml.Context, s State, token int32, draft ml.Tensor, pos int) ml.Tensor
	// Checkpoint copies s's recurrent state; Rollback restores the copy, undoing the
	// Forward calls in between. KV entries need no copy: positions past the rollback point
	// are simply written again.
	Checkpoint(ctx ml.Context, s State)
	Rollback(ctx ml.Context, s State)
}

// Facts are the sizes a memory planner needs, derived from the bound weights and the
// hyperparameters. Architectures implement it beside Graph.
type Facts interface {
	// ExpertBytes is the routed-expert payload of each layer (0 where a layer has none).
	ExpertBytes() []int64
	// ExpertTotalBytes is their sum.
	ExpertTotalBytes() int64
	// ExpertSliceBytes is one expert's gate, up and down bytes in layer l: what an expert
	// cache holds per cached expert.
	ExpertSliceBytes(l int) int64
	// DenseBytes is every other weight of the main model (embeddings, output, attention,
	// recurrent layers, shared experts, norms).
	DenseBytes() int64
	// KVBytesPerPosition is the KV cache of one position across the full-attention layers.
	KVBytesPerPosition(dt ml.DType) int64
	// RecurrentBytes is one sequence's recurrent state (conv windows and delta-rule state
	// matrices, float32), independent of the context length.
	RecurrentBytes() int64
	// MTPBytes is the next-token-prediction block's weights, 0 without one; it is not part
	// of DenseBytes or the expert payload.
	MTPBytes() int64
}

// Config is the shape of a model, as far as sessions and planning care.
type Config struct {
	Arch          string
	Vocab         int
	ContextLength int // trained context
	Layers        int
	Embedding     int
	Heads         int
	KVHeads       int
	HeadDim       int
	AttnLayers    int // layers with a KV cache
}

// Builder binds an architecture's weights from a GGUF file.
type Builder func(f *gguf.File, b ml.Backend) (Graph, error)

var registry = map[string]Builder{}

// Register makes an architecture loadable; architectures call it from init.
func Register(arch string, build Builder) {
	if _, dup := registry[arch]; dup {
		panic("model: architecture registered twice: " + arch)
	}
	registry[arch] = build
}

// Build binds the graph for the file's architecture.
func Build(f *gguf.File, b ml.Backend) (Graph, error) {
	arch, err := f.Architecture()
	if err != nil {
		return nil, err
	}
	build, ok := registry[arch]
	if !ok {
		return nil, fmt.Errorf("model: architecture %q is not supported (supported: %v)", arch, Architectures())
	}
	return build(f, b)
}

// Architectures lists the registered architecture names.
func Architectures() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// AppendKV appends positions [0, pos) of layers [0, layers) of c to dst, keys then values per
// layer, as little-endian float32, or float16 bits for an f16 cache (which holds nothing
// finer, so the round trip is exact). A q8_0 cache is written as float32: its values are
// q·d exactly, and quantizing them again gives back the same blocks.
func AppendKV(dst []byte, b ml.Backend, c ml.Cache, layers, pos int) ([]byte, error) {
	if pos == 0 {
		return dst, nil
	}
	ctx := b.NewContext()
	defer ctx.Close()
	var ts []ml.Tensor
	for l := 0; l < layers; l++ {
		k, v := ctx.LoadKV(c, l, 0, pos)
		ts = append(ts, k, v)
	}
	if err := ctx.Compute(); err != nil {
		return nil, err
	}
	for _, t := range ts {
		v, err := ctx.Read(t)
		if err != nil {
			return nil, err
		}
		dst = appendFloats(dst, v, snapshotDType(c.DType()))
	}
	return dst, nil
}

// RestoreKV reads what AppendKV wrote for rows of row values per position (kvHeads·headDim)
// and returns the bytes after it.
func RestoreKV(src []byte, b ml.Backend, c ml.Cache, layers, pos, kvHeads, headDim int) ([]byte, error) {
	if pos == 0 {
		return src, nil
	}
	if pos > c.Capacity() {
		return nil, fmt.Errorf("model: snapshot of %d positions does not fit a cache of %d", pos, c.Capacity())
	}
	n := pos * kvHeads * headDim
	ctx := b.NewContext()
	defer ctx.Close()
	for l := 0; l < layers; l++ {
		var kv [2][]float32
		for i := range kv {
			var err error
			kv[i], src, err = readFloats(src, n, snapshotDType(c.DType()), fmt.Sprintf("layer %d KV", l))
			if err != nil {
				return nil, err
			}
		}
		ctx.StoreKV(c, l, 0, ctx.Input(kv[0], pos, kvHeads, headDim), ctx.Input(kv[1], pos, kvHeads, headDim))
	}
	if err := ctx.Compute(); err != nil {
		return nil, err
	}
	return src, nil
}

// AppendTensors appends the values of backend state tensors as little-endian float32.
func AppendTensors(dst []byte, b ml.Backend, ts ...ml.Tensor) ([]byte, error) {
	ctx := b.NewContext()
	defer ctx.Close()
	if err := ctx.Compute(); err != nil {
		return nil, err
	}
	for _, t := range ts {
		v, err := ctx.Read(t)
		if err != nil {
			return nil, err
		}
		dst = appendFloats(dst, v, ml.F32)
	}
	return dst, nil
}

// RestoreTensors reads what AppendTensors wrote into ts and returns the bytes after it.
func RestoreTensors(src []byte, b ml.Backend, ts ...ml.Tensor) ([]byte, error) {
	ctx := b.NewContext()
	defer ctx.Close()
	for i, t := range ts {
		var v []float32
		var err error
		v, src, err = readFloats(src, ml.Numel(t.Shape()), ml.F32, fmt.Sprintf("state tensor %d", i))
		if err != nil {
			return nil, err
		}
		ctx.Assign(t, ctx.Input(v, t.Shape()...))
	}
	if err := ctx.Compute(); err != nil {
		return nil, err
	}
	return src, nil
}

// snapshotDType is how a cache of precision dt is written in a snapshot.
func snapshotDType(dt ml.DType) ml.DType {
	if dt == ml.F16 {
		return ml.F16
	}
	return ml.F32
}

func appendFloats(dst []byte, v []float32, dt ml.DType) []byte {
	for _, x := range v {
		if dt == ml.F16 {
			dst = binary.LittleEndian.AppendUint16(dst, quant.F32ToF16(x))
		} else {
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(x))
		}
	}
	return dst
}

func readFloats(src []byte, n int, dt ml.DType, what string) ([]float32, []byte, error) {
	need := int(dt.RowBytes(n))
	if len(src) < need {
		return nil, nil, fmt.Errorf("model: snapshot truncated in %s: %d bytes left, want %d", what, len(src), need)
	}
	v := make([]float32, n)
	for i := range v {
		if dt == ml.F16 {
			v[i] = quant.F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		} else {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	}
	return v, src[need:], nil
}
