// Package device is what the Metal backend needs of a GPU, and nothing more: buffers,
// compiled kernels, and a stream of dispatches committed and waited for. Two implementations
// exist: the Metal device on macOS (package metalkit/mtl, Objective-C runtime calls) and the
// harness (package metalkit/harness), which compiles the same MSL sources as C++ and runs
// every threadgroup on the CPU, so that the backend's whole logic — buffers, offsets, kernel
// sequence, dispatch sizes, the kernels themselves — runs and is tested on Linux.
//
// The interface follows Metal's own shapes (MTLBuffer, MTLComputePipelineState,
// MTLComputeCommandEncoder's setBuffer/setBytes/setThreadgroupMemoryLength and
// dispatchThreadgroups:threadsPerThreadgroup:) so that the Metal device is a thin layer.
package device

import (
	"errors"
	"fmt"
)

// Device allocates buffers, builds pipelines and runs command lists.
type Device interface {
	// Name is the GPU's name ("Apple M4 Pro") or the harness's.
	Name() string
	// NewBuffer allocates a zeroed buffer of size bytes in memory shared with the host.
	NewBuffer(size int64) (Buffer, error)
	// WrapBuffer makes a buffer over host memory that the device reads in place where it can
	// (Metal: newBufferWithBytesNoCopy over page-aligned memory; the harness copies). data
	// must stay valid, and unchanged, until the buffer is released. Weights are bound this
	// way from the mapped GGUF file.
	WrapBuffer(data []byte) (Buffer, error)
	// MaxBufferLength is the largest buffer the device can make (MTLDevice.maxBufferLength).
	MaxBufferLength() int64
	// Pipeline returns the compute pipeline of kernel name specialised with the function
	// constants consts, compiling it on first use and caching it by name and constants.
	Pipeline(name string, consts ...Constant) (Pipeline, error)
	// NewCommands starts a list of dispatches (one Metal command buffer).
	NewCommands() Commands
	// Close releases the device's resources. Buffers must be released first.
	Close() error
}

// Buffer is device memory. Read and Write copy between it and the host; on Apple Silicon
// (shared storage) they are memcpy, in the harness they cross to the harness's memory.
// A buffer must not be written by the host while a committed dispatch uses it.
type Buffer interface {
	Len() int64
	Write(off int64, src []byte) error
	Read(off int64, dst []byte) error
	Release()
}

// Pipeline is a compiled kernel.
type Pipeline interface {
	Name() string
	// MaxThreads is the most threads a threadgroup of this kernel may have
	// (maxTotalThreadsPerThreadgroup).
	MaxThreads() int
	// StaticShared is the threadgroup memory the kernel declares itself, in bytes
	// (staticThreadgroupMemoryLength): it counts against MaxThreadgroupMemory with what a
	// dispatch sets (Dispatch.Shared).
	StaticShared() int
	// SIMDWidth is the threads per SIMD group (threadExecutionWidth): 32 on Apple GPUs and
	// in the harness.
	SIMDWidth() int
}

// Constant is a function constant's value at its index ([[function_constant(Index)]]):
// bool, int32, uint32, or float32.
type Constant struct {
	Index int
	Value any
}

// Dispatch is one kernel launch: Groups threadgroups of Threads threads each.
type Dispatch struct {
	Pipeline Pipeline
	Groups   [3]int
	Threads  [3]int
	// Buffers are bound at [[buffer(Index)]] at an offset; Bytes are small argument
	// structs copied at encoding time (setBytes, at most 4 KiB); Shared sizes the
	// [[threadgroup(Index)]] memory in bytes.
	Buffers []BufferArg
	Bytes   []BytesArg
	Shared  []SharedArg
	// Cost is what the dispatch reads and computes, as the backend models it (for the
	// roofline estimate and for counting on a device that runs nothing).
	Cost Cost
}

type BufferArg struct {
	Index  int
	Buffer Buffer
	Offset int64
	// Length is how many bytes from Offset the kernel may touch (the bound region's length);
	// 0 means to the end of the buffer. Metal ignores it; the harness makes the rest of the
	// buffer unaddressable during the dispatch, so that a kernel running past its tensor
	// into a neighbour in the same buffer is caught.
	Length int64
}

type BytesArg struct {
	Index int
	Data  []byte
}

// MaxThreadgroupMemory is the threadgroup memory a threadgroup may use, declared by its
// kernel and set by its dispatch together: 32 KiB on every Apple GPU of the Apple7 family and
// later (maxThreadgroupMemoryLength).
const MaxThreadgroupMemory = 32 << 10

type SharedArg struct {
	Index int
	Size  int
}

// Cost is one dispatch's modelled memory traffic and arithmetic.
type Cost struct {
	Label   string // the operation, as a roofline table groups it ("matvec iq2_xxs", "attention decode")
	Read    int64  // bytes read from device memory
	Written int64  // bytes written
	FLOPs   int64
}

// Commands is a list of dispatches run in order, each seeing the previous ones' writes
// (a serial compute encoder). A list is encoded, committed and waited for by one goroutine,
// and Wait is always called: the Metal device keeps the goroutine on one thread from the
// first Encode to Wait (the pass's autorelease pool). Wait without Commit abandons the list:
// nothing more of it runs, and Wait returns an error.
type Commands interface {
	Encode(d Dispatch)
	// Commit starts running what was encoded; encoding more afterwards is an error.
	Commit()
	// Wait blocks until the committed list has run and returns its error: an *Error.
	Wait() error
}

// ErrOutOfMemory is wrapped when the device could not hold the pass's memory
// (MTLCommandBufferErrorOutOfMemory, or an allocation the device refused).
var ErrOutOfMemory = errors.New("GPU out of memory")

// Error is a failed command list or allocation.
type Error struct {
	Op     string // "commit", "new buffer", "pipeline kernel_name", …
	Kernel string // the dispatch's kernel where it is known
	Err    error
}

func (e *Error) Error() string {
	if e.Kernel != "" {
		return fmt.Sprintf("%s (kernel %s): %v", e.Op, e.Kernel, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Op, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// GEMMEncoder is an optional capability of a Device: encoding a dense matrix product
// through a vendor library (the Metal device: MPSMatrixMultiplication) into a command list
// of the same device, between its dispatches and ordered with them. The backend uses it for
// dense prefill products when the device has it; the harness and the recorder do not, and
// run the backend's own tiled kernel instead.
type GEMMEncoder interface {
	EncodeGEMM(cmd Commands, g GEMM)
}

// DataType is an element type of a GEMM operand.
type DataType int

const (
	Float32 DataType = iota
	Float16
)

// Size is the bytes of one element.
func (t DataType) Size() int64 {
	if t == Float16 {
		return 2
	}
	return 4
}

func (t DataType) String() string {
	if t == Float16 {
		return "f16"
	}
	return "f32"
}

// Matrix is a row-major matrix in a buffer: element (i, j) at Offset + i·RowBytes +
// j·Type.Size().
type Matrix struct {
	Buffer   Buffer
	Offset   int64
	RowBytes int64
	Type     DataType
}

// GEMM is C[M, N] = A[M, K] · B[N, K]ᵀ: A the activations (float32, a row per token), B the
// weights as the model stores them (a row per output feature, used transposed), C the
// output (float32). Errors (shapes, types, buffers of another device) surface at Wait.
type GEMM struct {
	M, N, K int
	A, B, C Matrix
	Cost    Cost
}

// Check reports a GEMM whose shapes or operands cannot be run: every device implementing
// GEMMEncoder calls it, so the rules are stated once.
func (g GEMM) Check() error {
	if g.M <= 0 || g.N <= 0 || g.K <= 0 {
		return fmt.Errorf("GEMM of %d×%d by %d×%d", g.M, g.K, g.N, g.K)
	}
	if g.A.Type != Float32 || g.C.Type != Float32 {
		return fmt.Errorf("GEMM with %v activations and %v output (both must be f32)", g.A.Type, g.C.Type)
	}
	for _, m := range []struct {
		name       string
		x          Matrix
		rows, cols int
	}{{"A", g.A, g.M, g.K}, {"B", g.B, g.N, g.K}, {"C", g.C, g.M, g.N}} {
		es := m.x.Type.Size()
		switch {
		case m.x.Buffer == nil:
			return fmt.Errorf("GEMM operand %s has no buffer", m.name)
		case m.x.Offset < 0 || m.x.Offset%es != 0 || m.x.RowBytes%es != 0:
			return fmt.Errorf("GEMM operand %s at offset %d with rows of %d bytes, not multiples of its %d-byte elements", m.name, m.x.Offset, m.x.RowBytes, es)
		case m.x.RowBytes < int64(m.cols)*es:
			return fmt.Errorf("GEMM operand %s: rows of %d bytes hold fewer than its %d columns", m.name, m.x.RowBytes, m.cols)
		case m.x.Offset+int64(m.rows-1)*m.x.RowBytes+int64(m.cols)*es > m.x.Buffer.Len():
			return fmt.Errorf("GEMM operand %s (%d×%d at offset %d, rows of %d bytes) past its buffer of %d bytes", m.name, m.rows, m.cols, m.x.Offset, m.x.RowBytes, m.x.Buffer.Len())
		}
	}
	return nil
}
