// Package ml is the backend interface the model graphs are written against.
//
// A graph issues operations on a Context, one per forward pass. A backend may run each
// operation at once (the CPU backend) or record them and run the whole pass at Compute (a GPU
// backend encoding one command buffer), so graphs never read a tensor's values except through
// Context.Read after Compute. Tensors stay on the backend; only token ids go in and logits come
// out.
//
// The interface is split by caller, as in ollama's KV cache: Backend is used by model loading
// and sessions; Context by the model graphs.
package ml

import (
	"github.com/redlite/batch/engine/quant"
)

// DType is the element type of activations and caches.
type DType int

const (
	F32 DType = iota
	F16
)

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case F16:
		return "f16"
	}
	return "dtype(?)"
}

// Bytes is the size of one element.
func (d DType) Bytes() int {
	if d == F16 {
		return 2
	}
	return 4
}

// ParseDType reads "f32" or "f16".
func ParseDType(s string) (DType, error) {
	switch s {
	case "f32", "F32":
		return F32, nil
	case "f16", "F16":
		return F16, nil
	}
	return 0, &BadDTypeError{Value: s}
}

// BadDTypeError names an unknown precision.
type BadDTypeError struct{ Value string }

func (e *BadDTypeError) Error() string {
	return "unknown precision " + quote(e.Value) + " (want f32 or f16)"
}

func quote(s string) string { return "\"" + s + "\"" }

// Tensor is a backend-owned array of float32 activations. Shapes are row-major with the last
// dimension contiguous: activations of n tokens with d features are [n, d]; per-head views are
// [n, heads, headDim].
type Tensor interface {
	Shape() []int
}

// Weight is a model parameter bound from the GGUF file, stored in its file type. A matrix of
// Rows outputs and Cols inputs is [Rows, Cols] (GGUF dims {Cols, Rows}); a stack of experts is
// [Experts, Rows, Cols]; vectors have Rows 1.
type Weight interface {
	Name() string
	Type() quant.Type
	Dims() []int // GGUF order: Dims()[0] is the contiguous dimension
	Bytes() int64
}

// Cache holds one sequence's attention keys and values for the layers that have them.
type Cache interface {
	DType() DType
	Capacity() int // positions
	Bytes() int64
}

// Backend creates weights, caches and per-pass contexts.
type Backend interface {
	Name() string
	// Threads is the parallelism the backend uses (CPU threads, or 0 if not applicable).
	Threads() int
	// Weight binds a tensor's bytes; the backend may keep a reference to data (a file mapping)
	// instead of copying it.
	Weight(name string, typ quant.Type, dims []int, data []byte) (Weight, error)
	// NewCache allocates a KV cache of capacity positions for layers layers of kvHeads heads of
	// headDim features, keys and values both.
	NewCache(layers, kvHeads, headDim, capacity int, dtype DType) (Cache, error)
	// NewContext starts a forward pass.
	NewContext() Context
}

// RoPE says how rotary position embedding applies.
type RoPE struct {
	Dims int     // rotated features per head (≤ head dim; partial rotary leaves the rest)
	Base float32 // frequency base
	NeoX bool    // rotate pairs (i, i+Dims/2) instead of (2i, 2i+1)
}

// Context runs (or records) the operations of one forward pass. Operations return new tensors
// and never modify their inputs, except the cache writes.
type Context interface {
	// Input uploads host data of the given shape.
	Input(data []float32, shape ...int) Tensor
	// Embed looks up rows of table (GGUF dims {d, vocab}) for ids: [len(ids), d].
	Embed(table Weight, ids []int32) Tensor
	// MatMul multiplies x [n, Cols] by w's rows: [n, Rows].
	MatMul(w Weight, x Tensor) Tensor
	// RMSNorm normalizes each row of the last dimension: x / sqrt(mean(x²) + eps) · w.
	// w may be nil (no scale); its length must equal the last dimension.
	RMSNorm(x Tensor, w Weight, eps float32) Tensor
	// Add, Mul: element-wise, same shape.
	Add(a, b Tensor) Tensor
	Mul(a, b Tensor) Tensor
	// SwiGLU is silu(gate) · up.
	SwiGLU(gate, up Tensor) Tensor
	// Reshape views x with another shape of the same size.
	Reshape(x Tensor, shape ...int) Tensor
	// Rows selects rows [start, start+n) of the first dimension.
	Rows(x Tensor, start, n int) Tensor
	// RoPE rotates x [n, heads, headDim] for positions pos0 … pos0+n−1.
	RoPE(x Tensor, pos0 int, r RoPE) Tensor
	// StoreKV writes k and v [n, kvHeads, headDim] at positions pos0 … of the cache's layer.
	StoreKV(c Cache, layer, pos0 int, k, v Tensor)
	// Attention computes causal softmax attention of q [n, heads, headDim] at positions
	// pos0 … pos0+n−1 over the cache's layer (positions 0 … pos0+n−1), with grouped-query
	// sharing of the kv heads and the given scale: [n, heads·headDim].
	Attention(q Tensor, c Cache, layer, pos0 int, scale float32) Tensor
	// Name labels an intermediate (llama.cpp's cb(cur, "attn_norm", il)) so a debug hook can
	// dump it; layer is −1 outside the layers. It returns t.
	Name(t Tensor, name string, layer int) Tensor
	// Compute runs everything issued so far.
	Compute()
	// Read copies a tensor to the host (after Compute).
	Read(t Tensor) []float32
	// Close releases the context's scratch memory.
	Close()
}

// Numel is the number of elements of a shape.
func Numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}
