// Package cpu is the reference backend: every operation of package ml in pure Go (with the
// SIMD dot products of package quant), parallel across cores.
package cpu

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// Backend runs on the CPU.
type Backend struct {
	pool *pool
	// Hook, when set, receives every intermediate named with Context.Name (for dumping and
	// comparing against the oracle). The slice is only valid during the call.
	Hook func(name string, layer int, shape []int, data []float32)
	// experts decides where routed experts are read from (moe.go).
	experts expertCache
	// arena holds the buffers of intermediates between their uses and between passes.
	arena arena
	// lists keeps the recorded-operation lists of closed contexts for the next ones.
	lists opLists
	// dot is the Dot path of quantized products (dot.go); atomic so that SetDot may be
	// called while another goroutine's pass reads it.
	dot atomic.Int32
	// hostWeights counts the bytes bound weights hold beside the mapping, mappedWeights
	// those of them outside the Go heap (hostBytes).
	hostWeights, mappedWeights atomic.Int64
	// repackLimit bounds hostWeights: a weight whose layout would take it further reads
	// the rows as stored.
	repackLimit atomic.Int64
}

// HostWeightBytes is the heap the bound weights hold beside the mapped file: the repacked
// rows of the 8-bit kernels, about the size of those matrices again (the float32 copies of
// small vectors are too small to count). The planner's weight term counts the file only,
// so the daemon keeps this out of the budget.
func (b *Backend) HostWeightBytes() int64 { return b.hostWeights.Load() }

// MappedWeightBytes is the part of HostWeightBytes outside the Go heap, which the Go
// memory limit does not count.
func (b *Backend) MappedWeightBytes() int64 { return b.mappedWeights.Load() }

// defaultRepackLimit is a quarter of the machine's memory (4 GiB where it is unknown): the
// repacked layouts are anonymous memory beside the file's page cache, so a model near the
// machine's size must not get a copy of itself (a 35B-A3B Q8_0 is 37 GB).
func defaultRepackLimit() int64 {
	if m := physicalMemory(); m > 0 {
		return m / 4
	}
	return 4 << 30
}

// SetRepackLimit bounds the repacked layouts that later bound weights may take (bytes ≥ 0;
// 0: none): a weight whose layout would exceed it reads its rows as stored, with kernels
// that give Q8_0 the same numbers and the K-quants the same to rounding.
func (b *Backend) SetRepackLimit(bytes int64) { b.repackLimit.Store(max(bytes, 0)) }

// RepackedBytes is what binding a weight of typ and dims (GGUF order) repacks for the
// 8-bit kernels on this machine: a matrix too large to expand to float32, on the 8-bit
// path, of a type whose kernels here read repacked rows; and the experts of a Q8_0 weight
// (3-D, whole groups of rows each) while every expert is resident: a bounded expert cache
// holds its slices repacked instead (expertCache.get). 0 otherwise.
func (b *Backend) RepackedBytes(typ quant.Type, dims []int) int {
	switch {
	case len(dims) == 2 && dims[0]*dims[1] > smallVector && b.repacks(typ):
		return quant.RepackedBytes(typ, dims[1], dims[0])
	case b.repacksExperts(typ, dims) && b.experts.unbounded():
		return quant.RepackedBytes(typ, dims[1]*dims[2], dims[0])
	}
	return 0
}

// repacksExperts reports whether the experts of a 3-D weight of typ and dims take the
// repacked kernels: Q8_0 only, whose repacked and row kernels agree bit for bit, so that
// an expert read in place (a miss of a bounded cache) gives the numbers a repacked one
// would; each expert's rows whole groups.
func (b *Backend) repacksExperts(typ quant.Type, dims []int) bool {
	return len(dims) == 3 && typ == quant.Q8_0 && dims[1]%quant.RepackRows == 0 && b.repacks(typ)
}

// repacks reports whether products with weights of type t take the repacked kernels.
func (b *Backend) repacks(t quant.Type) bool {
	if t == quant.Q8_0 {
		return b.int8Q8_0() && quant.Int8Repacked(t)
	}
	return b.int8(t) && quant.Int8Repacked(t)
}

// New returns a CPU backend using threads goroutines (0: GOMAXPROCS).
func New(threads int) *Backend {
	b := &Backend{pool: newPool(threads)}
	b.pool.scratch.meter = &b.arena
	b.experts.hostWeights = &b.hostWeights
	b.experts.mappedWeights = &b.mappedWeights
	b.experts.repacks = b.repacksExperts
	b.repackLimit.Store(defaultRepackLimit())
	return b
}

func (b *Backend) Name() string { return "cpu" }
func (b *Backend) Threads() int { return b.pool.threads }

// SetThreads sets the threads of the operations that start after it (n ≥ 1; not while
// another goroutine computes): `redlite bench --threads 1,2` measures each count on one
// loaded model, repacked once.
func (b *Backend) SetThreads(n int) { b.pool.threads = max(n, 1) }

type weight struct {
	name string
	typ  quant.Type
	dims []int
	data []byte
	rows int // product of dims[1:]
	cols int // dims[0]
	rowB int // bytes per row
	f32  []float32
	// packed is the matrix in quant's repacked layout (quant.Repack), made at load where
	// this machine has kernels for it: every 8-bit product with the weight, of one token
	// or many, then runs on it. The GGUF's bytes stay for the other paths.
	packed       []byte
	packedMapped bool // packed is outside the Go heap (hostBytes)
}

func (w *weight) Name() string     { return w.name }
func (w *weight) Type() quant.Type { return w.typ }
func (w *weight) Dims() []int      { return w.dims }
func (w *weight) Bytes() int64     { return int64(len(w.data)) }

// row returns the bytes of row r.
func (w *weight) row(r int) []byte { return w.data[r*w.rowB : (r+1)*w.rowB] }

// smallVector is the size under which a weight is expanded to float32 at load: norms, biases
// and gates are read element-wise and are tiny next to the matrices.
const smallVector = 1 << 16

// mapping is host memory weights are bound from; the CPU reads it in place.
type mapping struct{ data []byte }

func (m *mapping) Bytes() int64 { return int64(len(m.data)) }

func (b *Backend) Map(data []byte) (ml.Mapping, error) { return &mapping{data: data}, nil }

// Weight binds a weight in place: its bytes are the mapping's, nothing is copied (only
// small vectors are expanded to float32).
func (b *Backend) Weight(m ml.Mapping, name string, typ quant.Type, dims []int, offset int64) (ml.Weight, error) {
	return b.weight(m, name, typ, dims, offset, true)
}

// RowWeight binds a weight only ever read a row at a time (ml.RowWeights): in place, never
// repacked.
func (b *Backend) RowWeight(m ml.Mapping, name string, typ quant.Type, dims []int, offset int64) (ml.Weight, error) {
	return b.weight(m, name, typ, dims, offset, false)
}

func (b *Backend) weight(m ml.Mapping, name string, typ quant.Type, dims []int, offset int64, products bool) (ml.Weight, error) {
	mp, ok := m.(*mapping)
	if !ok {
		return nil, fmt.Errorf("cpu: weight %s bound from a mapping of another backend", name)
	}
	if len(dims) == 0 {
		return nil, fmt.Errorf("cpu: weight %s has no dimensions", name)
	}
	if !quant.Supported(typ) {
		return nil, fmt.Errorf("cpu: weight %s has type %s, which this engine cannot compute with", name, typ)
	}
	size := int64(typ.RowBytes(dims[0]))
	for _, d := range dims[1:] {
		size *= int64(d)
	}
	if offset < 0 || offset+size > int64(len(mp.data)) {
		return nil, fmt.Errorf("cpu: weight %s: bytes [%d, %d) outside the mapping's %d", name, offset, offset+size, len(mp.data))
	}
	w, err := bindWeight(name, typ, dims, mp.data[offset:offset+size:offset+size])
	if err != nil {
		return nil, err
	}
	if n := int64(b.RepackedBytes(typ, dims)); products && n > 0 && b.hostWeights.Load()+n <= b.repackLimit.Load() {
		// An expert's rows are whole groups, so expert e's repacked slice is bytes
		// [e, e+1) × its size of the whole weight's layout.
		buf, mapped := hostBytes(w, int(n))
		w.packed = quant.RepackInto(typ, buf, w.data, w.rows, w.cols)
		if mapped {
			w.packedMapped = true
			b.mappedWeights.Add(n)
		}
		if len(dims) == 3 {
			b.experts.mu.Lock()
			b.experts.repacked = append(b.experts.repacked, w)
			b.experts.mu.Unlock()
		}
	}
	b.hostWeights.Add(int64(len(w.packed)))
	return w, nil
}

func bindWeight(name string, typ quant.Type, dims []int, data []byte) (*weight, error) {
	if len(dims) == 0 {
		return nil, fmt.Errorf("cpu: weight %s has no dimensions", name)
	}
	if !quant.Supported(typ) {
		return nil, fmt.Errorf("cpu: weight %s has type %s, which this engine cannot compute with", name, typ)
	}
	w := &weight{name: name, typ: typ, dims: append([]int(nil), dims...), data: data, cols: dims[0], rows: 1}
	for _, d := range dims[1:] {
		w.rows *= d
	}
	w.rowB = typ.RowBytes(w.cols)
	if w.rowB*w.rows != len(data) {
		return nil, fmt.Errorf("cpu: weight %s: %d bytes for %s %v (want %d)", name, len(data), typ, dims, w.rowB*w.rows)
	}
	switch {
	case typ == quant.F32 && uintptr(unsafe.Pointer(unsafe.SliceData(data)))%4 == 0:
		w.f32 = unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(data))), len(data)/4)
	case w.rows*w.cols <= smallVector:
		w.f32 = make([]float32, w.rows*w.cols)
		if err := quant.Dequantize(typ, data, w.f32); err != nil {
			return nil, fmt.Errorf("cpu: weight %s: %w", name, err)
		}
	}
	return w, nil
}

func (b *Backend) NewContext() ml.Context {
	c := &context{b: b}
	c.ops, c.made = b.lists.get()
	return c
}

// tensor is an array of float32. A state tensor (Backend.NewTensor) or one made outside a
// context owns its data; a pass tensor gets its data when the operation making it runs, from
// its root: itself, or for a view the tensor it views (elements [off, off+n)).
type tensor struct {
	shape []int
	data  []float32
	n     int // elements

	root *tensor  // nil for state and host tensors
	ctx  *context // the pass a root belongs to
	off  int      // a view's first element in its root
	buf  []float32

	// Lifetime in the pass (pass.go): last is the index of the root's last use, used whether
	// an operation or view consumes the tensor, keep whether the root must outlive the pass's
	// operations (an output), released whether its buffer is gone.
	last                 int
	used, keep, released bool
	// freed is set on a state tensor by Backend.Release.
	freed bool
}

func (t *tensor) Shape() []int { return t.shape }

// newTensor makes a tensor with its own zeroed data.
func newTensor(shape ...int) *tensor {
	n := ml.Numel(shape)
	return &tensor{shape: shape, data: make([]float32, n), n: n}
}

// rows2 views a tensor as [rows, last dimension].
func (t *tensor) rows2() (int, int) {
	last := t.shape[len(t.shape)-1]
	return t.n / last, last
}
