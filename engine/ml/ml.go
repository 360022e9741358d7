// Package ml is the backend interface the model graphs are written against.
//
// A graph issues operations on a Context, one per forward pass. A backend records them and
// runs the whole pass at Compute (the CPU backend, which plans the pass's memory from it; a
// GPU backend would encode one command buffer), so graphs never read a tensor's values
// except through Context.Read after Compute. Tensors stay on the backend; only token ids go in and logits come
// out.
//
// The interface is split by caller, as in ollama's KV cache: Backend is used by model loading
// and sessions; Context by the model graphs.
package ml

import (
	"errors"
	"fmt"
	"math"

	"github.com/redlite/batch/engine/quant"
)

// DType is the element type of activations and caches.
type DType int

const (
	F32 DType = iota
	F16
	// Q8_0 is ggml's block type for caches only: per 32 values one float16 scale and 32
	// int8s (34 bytes), as llama.cpp stores K and V with -ctk q8_0 -ctv q8_0.
	Q8_0
)

// KVTypes are the precisions a KV cache can be stored in, finest first.
var KVTypes = []DType{F32, F16, Q8_0}

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case Q8_0:
		return "q8_0"
	}
	return "dtype(?)"
}

// MarshalText writes the name ParseDType reads ("f32", "f16", "q8_0"): plans, capabilities
// and calibration files carry precisions by name.
func (d DType) MarshalText() ([]byte, error) {
	if d != F32 && d != F16 && d != Q8_0 {
		return nil, fmt.Errorf("ml: no name for dtype %d", int(d))
	}
	return []byte(d.String()), nil
}

// UnmarshalText reads what MarshalText writes.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Q8_0Block and Q8_0BlockBytes are Q8_0's values per block and the bytes of one block.
const (
	Q8_0Block      = 32
	Q8_0BlockBytes = 34
)

// RowBytes is the size of n values, a whole number of blocks for Q8_0 (see RowFits).
func (d DType) RowBytes(n int) int64 {
	switch d {
	case F16:
		return 2 * int64(n)
	case Q8_0:
		return int64(n/Q8_0Block) * Q8_0BlockBytes
	}
	return 4 * int64(n)
}

// RowFits reports whether rows of n values (a head) can be stored at precision d: Q8_0
// needs whole blocks.
func (d DType) RowFits(n int) bool { return d != Q8_0 || n%Q8_0Block == 0 }

// ParseDType reads "f32", "f16" or "q8_0".
func ParseDType(s string) (DType, error) {
	switch s {
	case "f32", "F32":
		return F32, nil
	case "f16", "F16":
		return F16, nil
	case "q8_0", "Q8_0":
		return Q8_0, nil
	}
	return 0, &BadDTypeError{Value: s}
}

// BadDTypeError names an unknown precision.
type BadDTypeError struct{ Value string }

func (e *BadDTypeError) Error() string {
	return "unknown precision " + quote(e.Value) + " (want f32, f16 or q8_0)"
}

func quote(s string) string { return "\"" + s + "\"" }

// Tensor is a backend-owned array of float32 activations. Shapes are row-major with the last
// dimension contiguous: activations of n tokens with d features are [n, d]; per-head views are
// [n, heads, headDim].
//
// A tensor made by a Context's operation lives until the context's Close; a tensor made by
// Backend.NewTensor lives until Backend.Release.
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

// Mapping is a region of host memory that weights are bound from: the tensor data section
// of a memory-mapped GGUF file. A GPU backend wraps it once (in a few no-copy buffers, as
// Metal's size limit per buffer requires) and addresses each weight as an offset into it;
// the CPU reads the bytes in place. The memory must stay mapped while any weight bound from
// it is used.
type Mapping interface {
	Bytes() int64
}

// Cache holds one sequence's attention keys and values for the layers that have them.
type Cache interface {
	DType() DType
	Capacity() int // positions
	Bytes() int64
	// Free releases the cache's memory at once instead of when the collector finds it
	// (GiB for long contexts); a cache drawn from a KVPool gives its blocks back to the
	// pool. Operations issued on it afterwards fail their pass. Calling Free twice is
	// harmless.
	Free()
}

// KVPool is KV-cache memory shared by many sequences in blocks of BlockSize positions (the
// paged cache of vLLM's PagedAttention, llama.cpp's unified cache): a sequence's Cache
// holds a table of blocks, so short and long sequences draw from one pool and give their
// blocks back when they end, instead of each reserving a whole context.
type KVPool interface {
	DType() DType
	BlockSize() int // positions per block
	Blocks() int    // blocks in the pool
	FreeBlocks() int
	// BlockBytes is one block's keys and values across the pool's layers.
	BlockBytes() int64
	Bytes() int64
	// Alloc takes the blocks for positions positions from the pool: a Cache of at least
	// that capacity (whole blocks), whose Free gives them back. It fails with an error
	// wrapping ErrPoolFull when too few blocks are free.
	Alloc(positions int) (Cache, error)
	// Share holds the first blocks blocks of c, a cache drawn from this pool, by reference
	// (a prefix cache keeps a sequence's prompt blocks this way): they stay allocated until
	// the handle's Release, and the positions in them must not be written again.
	Share(c Cache, blocks int) (*SharedBlocks, error)
	// AllocShared is Alloc whose first blocks are prefix's, shared by reference and
	// read-only: the new cache's writes start past them. Only the blocks after them are
	// taken from the free ones.
	AllocShared(prefix *SharedBlocks, positions int) (Cache, error)
	// Free releases the pool's memory; caches drawn from it must be freed first.
	Free()
}

// ErrPoolFull is wrapped by KVPool.Alloc when the pool has too few free blocks.
var ErrPoolFull = errors.New("KV pool has too few free blocks")

// KVBytesPerPosition is what one position of a KV cache holds: keys of keyLength and values
// of valueLength features for kvHeads heads in each of layers layers. It is the one
// definition of the term: the caches size their blocks with it, modelinfo reports it and
// the planner plans with it.
func KVBytesPerPosition(layers, kvHeads, keyLength, valueLength int, dt DType) int64 {
	return int64(layers) * int64(kvHeads) * (dt.RowBytes(keyLength) + dt.RowBytes(valueLength))
}

// BlocksFor is the number of blocks of blockSize positions that hold positions positions.
func BlocksFor(positions, blockSize int) int { return (positions + blockSize - 1) / blockSize }

// Backend creates weights, caches and per-pass contexts. Model loading and sessions use it.
type Backend interface {
	Name() string
	// Threads is the parallelism the backend uses (CPU threads, or 0 if not applicable).
	Threads() int
	// Map wraps data, the tensor section of a mapped model file, for binding weights from
	// it. The backend keeps a reference to data instead of copying it.
	Map(data []byte) (Mapping, error)
	// Weight binds the tensor of the given type and GGUF dims whose bytes start at offset in
	// m. It fails when the bytes fall outside m or the type is one the backend cannot
	// compute with.
	Weight(m Mapping, name string, typ quant.Type, dims []int, offset int64) (Weight, error)
	// NewCache allocates a KV cache of capacity positions for layers layers of kvHeads heads of
	// headDim features, keys and values both. Cache.Free releases it.
	NewCache(layers, kvHeads, headDim, capacity int, dtype DType) (Cache, error)
	// NewKVPool allocates blocks blocks of blockSize positions for layers layers of kvHeads
	// heads of headDim features; sequences draw their caches from it (KVPool.Alloc).
	NewKVPool(layers, kvHeads, headDim, blocks, blockSize int, dtype DType) (KVPool, error)
	// NewContext starts a forward pass. Every context must be closed.
	NewContext() Context

	// --- for hybrid/MoE models ---

	// NewTensor allocates a zeroed float32 tensor that outlives every forward pass: the
	// recurrent states of a sequence (a causal convolution's window, a delta rule's state
	// matrices). Operations that update such state take it as an argument and modify it in
	// place, as StoreKV does for a Cache.
	NewTensor(shape ...int) (Tensor, error)
	// Release frees a tensor from NewTensor at once; operations issued on it afterwards
	// fail their pass. Tensors of a pass are released by their context's Close instead.
	Release(t Tensor)
}

// RowWeights is implemented by backends that lay matrices out for products when binding
// them (the CPU backend's repacked rows): RowWeight binds a weight that is only ever read a
// row at a time (Context.Embed), such as a token embedding beside its own output matrix,
// which needs no such layout. Other backends bind it with Weight.
type RowWeights interface {
	RowWeight(m Mapping, name string, typ quant.Type, dims []int, offset int64) (Weight, error)
}

// ScratchPool is implemented by backends that keep the memory of finished passes for the
// passes that follow (so that decode allocates nothing per token) and can say how much
// memory passes needed: what a memory planner must reserve beside weights and caches.
type ScratchPool interface {
	// PeakScratchBytes is the most memory held at once by forward passes (intermediates and
	// operations' working buffers) since the backend was made or ResetScratch was called.
	PeakScratchBytes() int64
	// ResetScratch drops the memory kept for later passes and restarts the peak.
	ResetScratch()
}

// ExpertResidency is implemented by backends that can hold routed experts (the [Experts, Rows,
// Cols] weights of MatMulExperts) in a bounded cache instead of keeping all of them resident.
// The cache is filled from the weight's bytes (the mapped GGUF) one expert slice — one
// expert's rows of one weight — at a time; which slices it keeps is the backend's policy. The cache
// changes only where bytes are read from, never the arithmetic, so outputs do not depend on
// its size.
//
// On the CPU the cache is a heap copy of the slices, which bounds how much of the file must
// stay paged in; each weight gets a share in proportion to its bytes and keeps the slices
// looked up most often lately, since a pass walks the layers in order and a least recently
// used order over all of them would evict a layer's slices before the next pass needs them.
// The Metal backend keeps the slices in one GPU buffer of fixed-size slots
// (metalkit/experts.go): the routing result is read on the host before the expert products
// of that layer are encoded, so a bounded cache splits the command buffer at every MoE layer
// (the one place a graph's values reach the host mid-pass); with every expert resident no
// split is needed, and the GPU routes without counting lookups.
type ExpertResidency interface {
	// SetExpertCache bounds the routed-expert slices held to bytes; 0 means all resident.
	// A slice the cache does not hold is still multiplied, whatever its size (the CPU reads it
	// in place).
	SetExpertCache(bytes int64) error
	// ExpertStats reports the cache's counters since it was set.
	ExpertStats() ExpertStats
}

// ExpertStats counts expert slice lookups. With every expert resident all are hits.
type ExpertStats struct {
	Hits, Misses, Evictions int64
	Bytes                   int64 // slices held now
	Capacity                int64 // 0: all resident
}

// BatchAttention is implemented by contexts that attend every run of a batch in one
// operation: the Metal backend attends the decode tokens of a step's sequences in one
// dispatch over their block tables instead of one per sequence. Graphs reach it through
// model.Attend, which falls back to Attention run by run.
type BatchAttention interface {
	// AttentionRuns is Attention(qs[j], cs[j], layer, pos0s[j], scale) for every j, the
	// results joined along the first dimension in order: [Σ n_j, heads·headDim]. Every q has
	// the same heads and headDim.
	AttentionRuns(qs []Tensor, cs []Cache, layer int, pos0s []int, scale float32) Tensor
}

// MinRouteWeightSum is the least sum of the chosen probabilities that Route's
// renormalisation divides by (the smallest normal float16, as llama.cpp clamps it): it
// keeps the weights finite.
const MinRouteWeightSum = 6.103515625e-5

// RoPE says how rotary position embedding applies.
type RoPE struct {
	Dims int     // rotated features per head (≤ head dim; partial rotary leaves the rest)
	Base float32 // frequency base
	NeoX bool    // rotate pairs (i, i+Dims/2) instead of (2i, 2i+1)
	// Scale multiplies every angle (linear rope scaling: 1/rope.scaling.factor); 0 means 1.
	Scale float32
	// Factors divide the angles pair by pair (Dims/2 of them: Llama 3's rope_freqs.weight);
	// nil for none. Backends key their rotation tables by this slice's first element, so
	// a model keeps one slice for its life.
	Factors []float32
	// YaRN, when YaRN.OrigContext > 0, blends the scaled and unscaled angles per pair and
	// scales cos and sin (rope.scaling.type yarn; see RoPEAngles).
	YaRN YaRN
}

// YaRN holds the parameters of YaRN rope scaling as llama.cpp passes them to ggml_rope_ext
// (ext_factor 1): the pairs rotating faster than BetaFast turns over OrigContext keep
// their unscaled angle, those slower than BetaSlow take the scaled one (Scale), a linear
// ramp between; cos and sin are multiplied by AttnFactor·(1 + 0.1·ln(1/Scale)).
type YaRN struct {
	OrigContext        int // rope.scaling.original_context_length
	BetaFast, BetaSlow float32
	// AttnFactor is llama.cpp's yarn_attn_factor: rope.scaling.attn_factor times
	// (1 + 0.1·ln factor)/(1 + 0.1·ln factor), which is 1 up to rounding.
	AttnFactor float32
}

// RoPETableKey is what a rotation table of n positions from pos0 depends on: backends cache
// tables by it.
type RoPETableKey struct {
	Pos0, N, Dims int
	Base, Scale   float32
	Factors       *float32
	YaRN          YaRN
}

// TableKey is r's RoPETableKey for positions pos0 … pos0+n−1.
func (r RoPE) TableKey(pos0, n int) RoPETableKey {
	k := RoPETableKey{Pos0: pos0, N: n, Dims: r.Dims, Base: r.Base, Scale: r.Scale, YaRN: r.YaRN}
	if len(r.Factors) > 0 {
		k.Factors = &r.Factors[0]
	}
	return k
}

// Context runs (or records) the operations of one forward pass; the model graphs use it.
// Operations return new tensors and never modify their inputs, except the cache and state
// writes. Errors found while running an operation (an id out of range, a failed device
// command) are returned by Compute; misuse found when an operation is issued (shapes that
// do not fit) panics, as indexing out of range does.
//
// A backend may reuse the memory of an intermediate once the last operation that takes it
// as input has run, so only tensors that no operation consumes — directly or through a
// Reshape or Rows view — can be read after Compute: the pass's outputs.
type Context interface {
	// Input uploads host data of the given shape.
	Input(data []float32, shape ...int) Tensor
	// InputIDs uploads token ids as a tensor [len(ids)]. Tensors of ids hold them as float32
	// values (exact below 2^24), as Route and Argmax make them.
	InputIDs(ids []int32) Tensor
	// Embed looks up rows of table (GGUF dims {d, vocab}) for the ids of a tensor [n]:
	// [n, d]. An id outside the table fails the pass.
	Embed(table Weight, ids Tensor) Tensor
	// Argmax returns the index of the largest value of each row of the last dimension of x
	// (the first one on ties) as a tensor of ids [rows]: with Embed it lets a greedy step feed
	// the next one inside a pass, with no round trip to the host.
	Argmax(x Tensor) Tensor
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
	// GeGLU is GELU(gate) · up, GELU as the function GELU defines.
	GeGLU(gate, up Tensor) Tensor
	// ClampedSwiGLU is gpt-oss's gated activation (llama.cpp's swiglu_oai): with
	// g = min(gate, limit) and u = clamp(up, −limit, limit), g·sigmoid(alpha·g)·(u + 1).
	ClampedSwiGLU(gate, up Tensor, alpha, limit float32) Tensor
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
	// SlidingAttention is Attention where position p sees only positions p−window+1 … p
	// (a sliding-window layer: llama.cpp's LLAMA_SWA_TYPE_STANDARD masks p − j ≥ window).
	SlidingAttention(q Tensor, c Cache, layer, pos0 int, scale float32, window int) Tensor
	// SinkAttention is Attention (window 0) or SlidingAttention (window > 0) whose softmax
	// has one more term per head: sinks (one learned logit per query head, not scaled) joins
	// the denominator and attends to nothing, as gpt-oss's attention sinks do.
	SinkAttention(q Tensor, c Cache, layer, pos0 int, scale float32, window int, sinks Weight) Tensor
	// Name labels an intermediate (llama.cpp's cb(cur, "attn_norm", il)) so a debug hook can
	// dump it; layer is −1 outside the layers. It returns t.
	Name(t Tensor, name string, layer int) Tensor

	// --- operations for hybrid/MoE models (Qwen3-Next: Gated DeltaNet, gated attention, MoE) ---
	//
	// Element-wise operations return a tensor of x's shape. "Last dimension" is the
	// contiguous one. Tensors of expert ids hold small integers as float32 values (exact
	// below 2^24), so ids stay on the backend between routing and the expert products.

	// Sigmoid is 1/(1+e^−x); SiLU is x·sigmoid(x); Softplus is log(1+e^x) (x itself above 20).
	Sigmoid(x Tensor) Tensor
	SiLU(x Tensor) Tensor
	Softplus(x Tensor) Tensor
	// Scale multiplies every element by s.
	Scale(x Tensor, s float32) Tensor
	// AddVec and MulVec add or multiply the vector w (one value per element of the last
	// dimension) to every row of x: biases and per-head constants.
	AddVec(x Tensor, w Weight) Tensor
	MulVec(x Tensor, w Weight) Tensor
	// L2Norm divides each row of the last dimension by max(‖row‖₂, eps).
	L2Norm(x Tensor, eps float32) Tensor
	// Slice takes elements [start, start+n) of the last dimension of every row:
	// x.shape[:last] + [n]. A backend may return a strided view or a copy.
	Slice(x Tensor, start, n int) Tensor
	// Concat joins tensors along the last dimension; the other dimensions must agree.
	Concat(ts ...Tensor) Tensor
	// Conv1DCausal is a depthwise causal convolution of x [n, channels] with w (GGUF dims
	// {kernel, channels}): y[t][c] = Σ_i w[c][i] · x̃[t+i][c], where x̃ is the state
	// [kernel−1, channels] (the previous kernel−1 inputs, oldest first) followed by x. It
	// returns y [n, channels] and leaves the last kernel−1 rows of x̃ in state.
	Conv1DCausal(x Tensor, w Weight, state Tensor) Tensor
	// DeltaNet runs the gated delta rule over n tokens from the recurrent state and leaves
	// the final state in place. q, k are [n, kHeads, dk] (L2-normalized by the caller), v is
	// [n, vHeads, dv], g (log decay, ≤ 0) and beta are [n, vHeads]; value head h reads key
	// head h/(vHeads/kHeads). state is [vHeads, dv, dk], the transpose of each head's dk×dv
	// matrix S. Per token and head:
	//	S ← e^g·S;  S ← S + k·(β·(v − Sᵀk))ᵀ;  o = scale·Sᵀq
	// It returns o [n, vHeads, dv]. A backend may evaluate several tokens with the chunked
	// (parallel) form of the rule; it must equal the token-by-token form up to rounding.
	DeltaNet(q, k, v, g, beta, state Tensor, scale float32) Tensor
	// Route picks experts from router logits [n, experts]: softmax over all experts, the k
	// most probable (highest first, ties to the lower id), their probabilities renormalized
	// to sum to 1 when norm is set. It returns ids and weights, both [n, k].
	Route(logits Tensor, k int, norm bool) (ids, weights Tensor)
	// MatMulExperts multiplies, for each token i and slot j, expert ids[i][j] of w
	// [Experts, Rows, Cols] (GGUF dims {Cols, Rows, Experts}) by x[i] (x [n, Cols], shared
	// by the slots) or x[i][j] (x [n, k, Cols]): [n, k, Rows]. It is llama.cpp's mul_mat_id.
	MatMulExperts(w Weight, x, ids Tensor) Tensor
	// WeightedSum combines x [n, k, d] with weights w [n, k]: Σ_j w[i][j]·x[i][j], summed in
	// slot order: [n, d].
	WeightedSum(x, w Tensor) Tensor
	// LoadKV reads positions [pos0, pos0+n) of the cache's layer as float32 k and v
	// [n, kvHeads, headDim] (for session snapshots).
	LoadKV(c Cache, layer, pos0, n int) (k, v Tensor)
	// Assign copies src into dst (same number of elements); dst is usually a Backend.NewTensor
	// state being restored.
	Assign(dst, src Tensor)

	// Compute runs everything issued so far and waits for it. An operation that fails fails
	// the pass: Compute returns the error, and so do later Compute and Read calls.
	Compute() error
	// Read copies a tensor to the host after the Compute that ran it. It fails for a tensor
	// the pass consumed (see above), one not yet computed, and after a failed Compute.
	Read(t Tensor) ([]float32, error)
	// Close releases the pass's memory (a backend may keep it for the next pass). Tensors of
	// the pass must not be used afterwards.
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

// PanicError is a panic the engine caught and turned into an error: in a CPU pool's parallel
// loop (re-raised on the goroutine that issued the loop) or while a scheduler served one
// sequence (that sequence fails with it, the others go on). Value is the original panic
// value and Stack the stack of the goroutine that panicked, which the caller's own recover
// cannot see when it was a pool helper.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value when it is an error (a runtime.Error such as an index out
// of range, or an error an operation panicked with).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// KVRotations are the Walsh–Hadamard rotation sizes under which a cache of precision dt
// stores heads of hd features, as llama.cpp (d32676d7, llama-kv-cache.cpp) does for a
// quantized cache whose heads are a multiple of 64: keys (and the queries that meet them)
// by the largest power of two from 64 up that divides the head, values by 64, the
// attention output rotated back by the same 64. A rotation changes no product of a query
// and a key (it is orthonormal), only what the q8_0 rounding loses: it spreads a row's
// outliers over the block. 0 means none.
func KVRotations(dt DType, hd int) (k, v int) {
	if dt != Q8_0 || hd%64 != 0 {
		return 0, 0
	}
	k = 64
	for hd%(2*k) == 0 {
		k *= 2
	}
	return k, 64
}

// HadamardScale is 1/√n in float32, the scale of the orthonormal Walsh–Hadamard transform
// of size n (0 for none) that a q8_0 cache's rotations apply.
func HadamardScale(n int) float32 {
	if n == 0 {
		return 0
	}
	return float32(1 / math.Sqrt(float64(n)))
}
