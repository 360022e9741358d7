package metalkit

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/metalkit/device"
)

// Backend runs the engine's operations as Metal kernels on a device: the Metal GPU on a Mac,
// or the harness, which runs the same kernels on the CPU. Weights are read in place from the
// mapped GGUF (no-copy buffers); a pass's intermediates live in a scratch buffer planned by
// liveness (context.go); caches and recurrent states are buffers of their own.
type Backend struct {
	// Hook, when set, receives every intermediate named with Context.Name after the
	// Compute that makes it (for dumping and comparing against the CPU backend or the
	// oracle; engine/cpu has the same hook). The slice is the hook's.
	Hook func(name string, layer int, shape []int, data []float32)

	// FusedTail runs the routed experts' product and the MoE weighted sum that consumes it
	// as one dispatch in decode (fuse.go); New sets it. Off, the two operations are two
	// dispatches.
	FusedTail bool
	// MPS sends dense products of mpsMinTokens tokens or more through the device's GEMM
	// (MPSMatrixMultiplication on a Mac) when it has one; New sets it. Off, the tiled kernel
	// runs them.
	MPS bool
	// BatchAttention attends the decode tokens of every sequence of a batched step that share
	// a KV pool in one dispatch (plus one merge) per layer, writing the batch's output rows
	// in place (attention.go); New sets it. Off, each sequence has its own dispatches and
	// the rows are joined by copies.
	BatchAttention bool

	dev  device.Device
	name string

	mu sync.Mutex
	// free holds the scratch buffers of closed passes for the passes that follow.
	free []device.Buffer
	// live is the scratch that open passes planned (bytes), peak its maximum since New or
	// ResetScratch.
	live, peak int64
	// vecs holds small vectors converted to float32 at load (vectors.go).
	vecs vectorArena
	// experts is the bounded expert cache (experts.go).
	experts expertCache
}

// New returns a backend over dev. The backend does not own dev: close the device after the
// backend's buffers are released.
func New(dev device.Device) *Backend {
	return &Backend{dev: dev, name: "metal", FusedTail: true, MPS: true, BatchAttention: true}
}

// Switches are the Metal backend's switches in the environment, which the daemon's
// configuration and the engine commands read (with caarlos0/env, both on by default) and
// Open applies. The zero value turns them all off.
type Switches struct {
	// MPS is REDLITE_METAL_MPS (Backend.MPS).
	MPS bool `env:"REDLITE_METAL_MPS" envDefault:"true"`
	// FusedTail is REDLITE_METAL_FUSED_TAIL (Backend.FusedTail).
	FusedTail bool `env:"REDLITE_METAL_FUSED_TAIL" envDefault:"true"`
	// BatchAttention is REDLITE_METAL_BATCH_ATTENTION (Backend.BatchAttention).
	BatchAttention bool `env:"REDLITE_METAL_BATCH_ATTENTION" envDefault:"true"`
}

// apply sets the switches of e on b.
func (e Switches) apply(b *Backend) *Backend {
	b.MPS, b.FusedTail, b.BatchAttention = e.MPS, e.FusedTail, e.BatchAttention
	return b
}

// Name is "metal", or the name Open gave ("metal-harness").
func (b *Backend) Name() string { return b.name }

// Threads is 0: the device decides its parallelism.
func (b *Backend) Threads() int { return 0 }

// Device is the device the backend runs on.
func (b *Backend) Device() device.Device { return b.dev }

// pageSize is the alignment of the no-copy buffers' starts: Apple Silicon's 16 KiB VM page
// (a multiple of the 4 KiB pages elsewhere). newBufferWithBytesNoCopy needs page-aligned
// memory.
const pageSize = 16 << 10

// maxOverlap bounds the overlap of consecutive windows of a mapping: any weight up to this
// size lies wholly inside one window. The largest tensor of Qwen3-Next-80B's files is an
// expert stack of about 280 MB, so 1 GiB holds every weight of the models we serve with
// room to spare; a larger weight that straddles two windows gets a window of its own.
const maxOverlap = 1 << 30

// mapping is the tensor section of a mapped model file, wrapped in windows: device buffers
// of at most the device's MaxBufferLength over overlapping ranges of it.
//
// Metal binds host memory in place only from a page boundary, and a GGUF's tensor section
// starts where its header ends, mid-page. So the windows are laid over base, the memory
// from the page boundary at or before the section's start: the bytes before the section are
// the file's header, mapped with it (gguf.Open maps the whole file from a page boundary).
//
// The backend learns the weights only one by one (Weight), after Map, so the windows cannot
// break at tensor boundaries. Instead consecutive windows overlap by O bytes (a quarter of
// the device's largest buffer, at most maxOverlap), each starting on a page: a weight of at
// most O bytes then lies wholly inside the last window starting at or before it. A larger
// weight across a boundary gets a window of its own at Weight. The overlap costs address
// space, not memory: the windows are views of the same pages.
type mapping struct {
	data []byte // the section
	base []byte // from the page boundary at or before data[0] to data's end
	lead int64  // data[0] is base[lead]
	mu   sync.Mutex
	wins []window
}

// window is bytes [start, end) of a mapping's base in one device buffer.
type window struct {
	start, end int64
	buf        device.Buffer
}

func (m *mapping) Bytes() int64 { return int64(len(m.data)) }

// windowPlan returns the ranges [start, end) of the windows over n bytes of page-aligned
// memory, for buffers of at most max bytes: every start is on a page.
func windowPlan(n, max int64) [][2]int64 {
	max -= max % pageSize
	if n <= max {
		return [][2]int64{{0, n}}
	}
	overlap := min(max/4, maxOverlap)
	overlap -= overlap % pageSize
	stride := max - overlap // a multiple of the page
	plan := [][2]int64{{0, max}}
	for s := stride; plan[len(plan)-1][1] < n; s += stride {
		plan = append(plan, [2]int64{s, min(n, s+max)})
	}
	return plan
}

// pageBase extends data back to the page boundary at or before its start. The memory
// between must be mapped and readable, as a file mapping's header is; data on the Go heap
// (tests) must start on a page, or the collector may find a pointer before its object.
func pageBase(data []byte) ([]byte, int64) {
	p := unsafe.Pointer(unsafe.SliceData(data))
	lead := int64(uintptr(p) % pageSize)
	if lead == 0 {
		return data, 0
	}
	return unsafe.Slice((*byte)(unsafe.Add(p, -lead)), lead+int64(len(data))), lead
}

// Map wraps data in the device buffers weights are addressed in. data is a file mapping's
// tensor section (pageBase says why it must be one, or start on a page).
func (b *Backend) Map(data []byte) (ml.Mapping, error) {
	m := &mapping{data: data}
	if len(data) == 0 {
		return m, nil
	}
	m.base, m.lead = pageBase(data)
	for _, r := range windowPlan(int64(len(m.base)), b.dev.MaxBufferLength()) {
		buf, err := b.dev.WrapBuffer(m.base[r[0]:r[1]:r[1]])
		if err != nil {
			m.release()
			return nil, fmt.Errorf("metalkit: wrap bytes [%d, %d) of the model: %w", r[0]-m.lead, r[1]-m.lead, err)
		}
		m.wins = append(m.wins, window{start: r[0], end: r[1], buf: buf})
	}
	return m, nil
}

// region returns where bytes [off, off+n) of the section are: in the window holding them,
// or in a window made for them when none does (a weight larger than the overlap across a
// boundary).
func (m *mapping) region(dev device.Device, off, n int64) (Region, error) {
	off += m.lead
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.wins {
		if w.start <= off && off+n <= w.end {
			return Region{Buf: w.buf, Off: off - w.start, Len: n}, nil
		}
	}
	start := off - off%pageSize
	if off+n-start > dev.MaxBufferLength() {
		return Region{}, fmt.Errorf("%d bytes exceed the device's largest buffer (%d)", n, dev.MaxBufferLength())
	}
	buf, err := dev.WrapBuffer(m.base[start : off+n : off+n])
	if err != nil {
		return Region{}, err
	}
	m.wins = append(m.wins, window{start: start, end: off + n, buf: buf})
	return Region{Buf: buf, Off: off - start, Len: n}, nil
}

func (m *mapping) release() {
	for _, w := range m.wins {
		w.buf.Release()
	}
	m.wins = nil
}

// weight is a tensor of the model file: its bytes in a window, and for small vectors their
// float32 values, which the element-wise kernels read.
type weight struct {
	name string
	typ  quant.Type
	dims []int
	raw  Region
	rows int // product of dims[1:]
	cols int // dims[0]
	// vec holds the float32 values of a vector of at most smallVector elements (norms,
	// biases, gates, convolution kernels); Len 0 otherwise.
	vec Region
	// An expert stack [experts, rows, cols]: its bytes in the mapped file, what the expert
	// cache copies from, its number among the expert weights and the bytes of one expert.
	host   []byte
	expert int
	slice  int64
}

func (w *weight) Name() string     { return w.name }
func (w *weight) Type() quant.Type { return w.typ }
func (w *weight) Dims() []int      { return w.dims }
func (w *weight) Bytes() int64     { return w.raw.Len }

// smallVector is the size up to which a weight is also held as float32: the element-wise
// kernels read vectors as float32, and vectors are tiny beside the matrices. The CPU
// backend expands the same ones.
const smallVector = 1 << 16

// Weight binds a weight of the mapping. Matrices must be of a type the matrix kernels
// multiply; small vectors of any type the engine knows are converted to float32 here.
func (b *Backend) Weight(mm ml.Mapping, name string, typ quant.Type, dims []int, offset int64) (ml.Weight, error) {
	m, ok := mm.(*mapping)
	if !ok {
		return nil, fmt.Errorf("metalkit: weight %s bound from a mapping of another backend", name)
	}
	if len(dims) == 0 {
		return nil, fmt.Errorf("metalkit: weight %s has no dimensions", name)
	}
	if !quant.Supported(typ) {
		return nil, fmt.Errorf("metalkit: weight %s has type %s, which this engine cannot compute with", name, typ)
	}
	w := &weight{name: name, typ: typ, dims: append([]int(nil), dims...), cols: dims[0], rows: 1}
	for _, d := range dims[1:] {
		w.rows *= d
	}
	small := w.rows*w.cols <= smallVector
	if !small && !matMulSupported(typ) {
		return nil, fmt.Errorf("metalkit: weight %s has type %s, which the Metal kernels cannot multiply", name, typ)
	}
	size := int64(typ.RowBytes(w.cols)) * int64(w.rows)
	if offset < 0 || offset+size > int64(len(m.data)) {
		return nil, fmt.Errorf("metalkit: weight %s: bytes [%d, %d) outside the mapping's %d", name, offset, offset+size, len(m.data))
	}
	var err error
	if w.raw, err = m.region(b.dev, offset, size); err != nil {
		return nil, fmt.Errorf("metalkit: weight %s: %w", name, err)
	}
	if len(dims) == 3 && !small {
		w.host = m.data[offset : offset+size : offset+size]
		w.slice = size / int64(dims[2])
		b.experts.bind(w)
	}
	if small {
		if typ == quant.F32 && offset%4 == 0 {
			w.vec = w.raw
		} else {
			v := make([]float32, w.rows*w.cols)
			if err := quant.Dequantize(typ, m.data[offset:offset+size], v); err != nil {
				return nil, fmt.Errorf("metalkit: weight %s: %w", name, err)
			}
			if w.vec, err = b.vecs.put(b.dev, v); err != nil {
				return nil, fmt.Errorf("metalkit: weight %s: %w", name, err)
			}
		}
	}
	return w, nil
}

// vectorArena packs small float32 vectors into a few device buffers instead of one
// allocation (of at least a page) each.
type vectorArena struct {
	mu   sync.Mutex
	buf  device.Buffer
	used int64
}

// vectorChunk is the size of the arena's buffers.
const vectorChunk = 4 << 20

func (a *vectorArena) put(dev device.Device, v []float32) (Region, error) {
	n := int64(4 * len(v))
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.buf == nil || a.used+n > a.buf.Len() {
		buf, err := dev.NewBuffer(max(n, vectorChunk))
		if err != nil {
			return Region{}, err
		}
		// The full buffer stays referenced by the regions already handed out.
		a.buf, a.used = buf, 0
	}
	r := Region{Buf: a.buf, Off: a.used, Len: n}
	if err := a.buf.Write(r.Off, floatBytes(v)); err != nil {
		return Region{}, err
	}
	a.used += (n + scratchAlign - 1) / scratchAlign * scratchAlign
	return r, nil
}

// floatBytes views v's memory as bytes (little-endian on every machine we run on).
func floatBytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
}

// NewTensor allocates a zeroed float32 state tensor in a buffer of its own.
func (b *Backend) NewTensor(shape ...int) (ml.Tensor, error) {
	for _, d := range shape {
		if d <= 0 {
			return nil, fmt.Errorf("metalkit: state tensor of shape %v", shape)
		}
	}
	n := ml.Numel(shape)
	buf, err := b.dev.NewBuffer(4 * int64(n))
	if err != nil {
		return nil, fmt.Errorf("metalkit: state tensor %v: %w", shape, err)
	}
	t := &tensor{shape: append([]int(nil), shape...), n: n, buf: buf}
	t.root = t
	return t, nil
}

// Release frees a state tensor's buffer at once; operations issued on it afterwards panic.
func (b *Backend) Release(x ml.Tensor) {
	t := x.(*tensor)
	if t.ctx != nil || t.root != t {
		panic("metalkit: release of a pass tensor or a view (they go with their context)")
	}
	if t.freed {
		return
	}
	t.freed = true
	t.buf.Release()
	t.buf = nil
}

// NewCache allocates a private KV cache (one block) on the device.
func (b *Backend) NewCache(layers, kvHeads, headDim, capacity int, dtype ml.DType) (ml.Cache, error) {
	c, err := newCache(b.dev, layers, kvHeads, headDim, capacity, dtype)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// NewKVPool allocates a paged KV cache shared by sequences.
func (b *Backend) NewKVPool(layers, kvHeads, headDim, blocks, blockSize int, dtype ml.DType) (ml.KVPool, error) {
	p, err := newKVPool(b.dev, layers, kvHeads, headDim, blocks, blockSize, dtype)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// scratchAlign aligns every intermediate's offset in the scratch buffer (and each size):
// wide enough for any vector load a kernel makes.
const scratchAlign = 256

// scratchGranule rounds scratch buffers up so that passes of nearly the same shape reuse
// one buffer.
const scratchGranule = 1 << 20

// takeScratch returns a buffer of at least need bytes for a pass: the smallest kept one
// that is large enough, else a new one (dropping the kept ones too small to serve it).
func (b *Backend) takeScratch(need int64) (device.Buffer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	best := -1
	for i, buf := range b.free {
		if buf.Len() >= need && (best < 0 || buf.Len() < b.free[best].Len()) {
			best = i
		}
	}
	var buf device.Buffer
	if best >= 0 {
		buf = b.free[best]
		b.free = append(b.free[:best], b.free[best+1:]...)
	} else {
		keep := b.free[:0]
		for _, f := range b.free {
			if f.Len() >= need {
				keep = append(keep, f)
			} else {
				f.Release()
			}
		}
		b.free = keep
		var err error
		if buf, err = b.dev.NewBuffer((need + scratchGranule - 1) / scratchGranule * scratchGranule); err != nil {
			return nil, err
		}
	}
	b.live += need
	b.peak = max(b.peak, b.live)
	return buf, nil
}

// putScratch takes back a buffer of takeScratch whose pass planned need bytes in it.
func (b *Backend) putScratch(buf device.Buffer, need int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.live -= need
	b.free = append(b.free, buf)
}

// PeakScratchBytes is the most scratch memory that passes planned at once since New or the
// last ResetScratch: the peak of their live intermediates, which is what a memory planner
// reserves (buffers are rounded up by at most scratchGranule beside it).
func (b *Backend) PeakScratchBytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

// ResetScratch releases the scratch buffers kept for later passes and restarts the peak
// from what open passes hold.
func (b *Backend) ResetScratch() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, buf := range b.free {
		buf.Release()
	}
	b.free = nil
	b.peak = b.live
}

var (
	_ ml.Backend     = (*Backend)(nil)
	_ ml.ScratchPool = (*Backend)(nil)
)
