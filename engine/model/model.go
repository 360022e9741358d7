// Package model holds what every architecture shares: the registry that maps a GGUF's
// general.architecture to a graph, the binder that finds and checks weights by tensor name,
// and the interface sessions drive.
package model

import (
	"fmt"
	"sort"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
)

// Graph is a loaded architecture: weights bound on a backend and the forward pass.
type Graph interface {
	// Config returns the facts sessions and the planner need.
	Config() Config
	// NewState allocates one sequence's state (KV cache, recurrent state) for capacity positions.
	NewState(b ml.Backend, capacity int, kv ml.DType) (State, error)
	// Forward runs tokens at positions pos0 … and returns logits [n, vocab] for every token when
	// all is set, else [1, vocab] for the last one.
	Forward(ctx ml.Context, s State, tokens []int32, pos0 int, all bool) ml.Tensor
}

// State is one sequence's memory.
type State interface {
	Capacity() int
	Bytes() int64
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
