package mtl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/redlite/batch/metalkit/device"
)

// The pure parts of the Metal device: what it computes before it sends a message. They
// build and are tested everywhere; the darwin files call them.

// mtlSize is MTLSize: three NSUInteger (width, height, depth), 24 bytes. purego passes it by
// value the way the arm64 C ABI does for a 24-byte aggregate that is not a homogeneous
// floating-point one: the caller copies it to memory and passes a pointer in the next
// integer register (AAPCS64 B.4; purego's struct_arm64.go placeStack), which is what
// clang emits for [encoder dispatchThreadgroups:g threadsPerThreadgroup:t].
type mtlSize struct {
	Width, Height, Depth uint
}

func sizeOf(v [3]int) mtlSize {
	return mtlSize{Width: uint(v[0]), Height: uint(v[1]), Depth: uint(v[2])}
}

// nsRange is NSRange: location and length, two NSUInteger. At 16 bytes it is passed in two
// integer registers (AAPCS64: a composite of at most 16 bytes that is not floating-point
// goes in the next two general registers), so the message layer passes it as two words.
type nsRange struct {
	Location, Length uint
}

// maxBindings is the size of a compute encoder's buffer and threadgroup-memory argument
// tables (Metal's limit of 31 buffer entries per stage, rounded to what we check).
const maxBindings = 31

// noCopyLength is the length to give newBufferWithBytesNoCopy:length:options:deallocator:
// for n bytes at addr: Metal wants a page-aligned pointer and a whole number of pages.
// The start cannot be moved (the bytes before it may not be ours to bind, and offsets into
// the buffer would shift), so a start off a page boundary is an error; the backend passes
// page-aligned windows of the mapped GGUF (and binds each weight at its offset inside
// one). The end is rounded up to the page: the rounded tail lies in the same page as the
// last byte, and memory is mapped in whole pages, so it is readable; the GPU never reads
// past the n bytes the backend binds, and the Buffer reports n.
func noCopyLength(addr uintptr, n int64, page int64) (int64, error) {
	switch {
	case page <= 0 || page&(page-1) != 0:
		return 0, fmt.Errorf("page size %d is not a power of two", page)
	case n <= 0:
		return 0, fmt.Errorf("no-copy buffer of %d bytes", n)
	case int64(addr)&(page-1) != 0:
		return 0, fmt.Errorf("no-copy buffer at %#x is not page-aligned (page size %d, %d bytes past a page): pass a page-aligned window of the mapping", addr, page, int64(addr)&(page-1))
	case n > math.MaxInt64-page:
		return 0, fmt.Errorf("no-copy buffer of %d bytes is too long", n)
	}
	return (n + page - 1) &^ (page - 1), nil
}

// checkRange reports whether [off, off+n) lies in a buffer of length size.
func checkRange(off, n, size int64) error {
	if off < 0 || n < 0 || off > size || n > size-off {
		return fmt.Errorf("range [%d, %d) outside a buffer of %d bytes", off, off+n, size)
	}
	return nil
}

// constantValue is a function constant's MTLDataType and the bytes of its value, as
// setConstantValue:type:atIndex: reads them (little-endian, bool as one byte).
func constantValue(c device.Constant) (uint, []byte, error) {
	if c.Index < 0 || c.Index > math.MaxUint16 {
		return 0, nil, fmt.Errorf("function constant index %d out of range", c.Index)
	}
	switch v := c.Value.(type) {
	case bool:
		if v {
			return dataTypeBool, []byte{1}, nil
		}
		return dataTypeBool, []byte{0}, nil
	case int32:
		return dataTypeInt, binary.LittleEndian.AppendUint32(nil, uint32(v)), nil
	case uint32:
		return dataTypeUInt, binary.LittleEndian.AppendUint32(nil, v), nil
	case float32:
		return dataTypeFloat, binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)), nil
	}
	return 0, nil, fmt.Errorf("function constant %d: value %v of type %T (want bool, int32, uint32 or float32)", c.Index, c.Value, c.Value)
}

// pipelineKey names a pipeline in the cache: the kernel and its constants in index order,
// so the same specialisation given in another order is compiled once.
func pipelineKey(name string, consts []device.Constant) (string, error) {
	cs := append([]device.Constant(nil), consts...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].Index < cs[j].Index })
	var b strings.Builder
	b.WriteString(name)
	for i, c := range cs {
		if i > 0 && cs[i-1].Index == c.Index {
			return "", fmt.Errorf("function constant %d given twice", c.Index)
		}
		t, data, err := constantValue(c)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "|%d:%d:%x", c.Index, t, data)
	}
	return b.String(), nil
}

// maxBytesLength is the most setBytes:length:atIndex: takes (Apple: "for data smaller than
// 4 KB"); larger arguments belong in a buffer.
const maxBytesLength = 4096

// sharedLength rounds a threadgroup memory length up to the multiple of 16 bytes that
// setThreadgroupMemoryLength:atIndex: requires.
func sharedLength(n int) int { return (n + 15) &^ 15 }

// checkDispatch rejects a dispatch Metal would reject or run wrongly, before it is encoded:
// a GPU does not report a bad dispatch, it runs garbage or faults the whole command buffer.
func checkDispatch(d device.Dispatch, maxThreads int) error {
	threads := 1
	for i := range 3 {
		if d.Groups[i] < 1 || d.Threads[i] < 1 {
			return fmt.Errorf("dispatch of %v threadgroups of %v threads: every dimension must be at least 1", d.Groups, d.Threads)
		}
		if d.Groups[i] > math.MaxUint32 || d.Threads[i] > math.MaxUint32 {
			return fmt.Errorf("dispatch of %v threadgroups of %v threads: too large", d.Groups, d.Threads)
		}
		threads *= d.Threads[i]
	}
	if threads > maxThreads {
		return fmt.Errorf("threadgroup of %v = %d threads exceeds the pipeline's %d", d.Threads, threads, maxThreads)
	}
	for _, b := range d.Buffers {
		if b.Buffer == nil {
			return fmt.Errorf("buffer %d is nil", b.Index)
		}
		if b.Index < 0 || b.Index >= maxBindings {
			return fmt.Errorf("buffer index %d: Metal binds buffers at 0 to %d", b.Index, maxBindings-1)
		}
		if b.Offset < 0 || b.Offset > b.Buffer.Len() {
			return fmt.Errorf("buffer %d at offset %d: outside its %d bytes", b.Index, b.Offset, b.Buffer.Len())
		}
	}
	for _, b := range d.Bytes {
		if b.Index < 0 || b.Index >= maxBindings || len(b.Data) == 0 || len(b.Data) > maxBytesLength {
			return fmt.Errorf("bytes %d: %d bytes (setBytes takes 1 to %d)", b.Index, len(b.Data), maxBytesLength)
		}
	}
	for _, s := range d.Shared {
		if s.Index < 0 || s.Index >= maxBindings || s.Size < 0 {
			return fmt.Errorf("threadgroup memory %d of %d bytes", s.Index, s.Size)
		}
	}
	return nil
}

// Command buffers: the encoded pass is committed in a few command buffers rather than one,
// so that the GPU starts on the first dispatches while the host still encodes the rest
// (encoding a decode step is thousands of Objective-C messages). The first command buffer
// is committed after firstSplit dispatches — the GPU waits only for those — and each next
// one holds twice as many, up to maxSplit, so a pass of n dispatches costs about
// log2(n/firstSplit) + n/maxSplit commits. They run in commit order on the one queue, and
// the buffers are hazard-tracked, so each dispatch still sees the previous ones' writes.
//
// The device interface allows this: the host does not write a buffer while a committed
// dispatch uses it, and the backend writes its inputs before it encodes a pass.
const (
	firstSplit = 32
	maxSplit   = 512
)

// splitAfter is how many dispatches command buffer k (from 0) of a pass holds before it is
// committed.
func splitAfter(k int) int {
	n := firstSplit
	for range k {
		if n >= maxSplit {
			break
		}
		n *= 2
	}
	return min(n, maxSplit)
}

// commandBufferError turns a failed command buffer's NSError (its code in
// MTLCommandBufferErrorDomain and localizedDescription) into the error Wait returns.
// Out of memory wraps device.ErrOutOfMemory, which the backend and the planner act on;
// any other code is named.
func commandBufferError(op string, code int64, domain, desc string) *device.Error {
	name, ok := commandBufferErrors[code]
	if !ok {
		name = "code " + fmt.Sprint(code)
	}
	var err error
	switch {
	case code == commandBufferErrorOutOfMemory:
		err = fmt.Errorf("%w (MTLCommandBufferErrorOutOfMemory: %s)", device.ErrOutOfMemory, desc)
	case desc == "":
		err = fmt.Errorf("MTLCommandBufferError%s (%s %d)", name, domain, code)
	default:
		err = fmt.Errorf("MTLCommandBufferError%s (%s %d): %s", name, domain, code, desc)
	}
	return &device.Error{Op: op, Err: err}
}

// errWrapWrite is returned by Write on a wrapped buffer: its memory is the caller's (a
// read-only file mapping, for weights) and must stay unchanged.
var errWrapWrite = errors.New("write to a no-copy buffer over host memory")
