package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"sort"

	"github.com/redlite/batch/engine/quant"
)

// Limits that reject absurd files before they cost memory. They are far above anything a real
// model has (Qwen3's vocabulary is 151,936 strings; the largest models have a few thousand
// tensors) and far below what would exhaust a machine.
const (
	maxStringLen   = 64 << 20 // one metadata string (chat templates are a few KiB)
	maxArrayDepth  = 2        // arrays of arrays of scalars
	maxKeyLen      = 64 << 10
	maxTensorName  = 64 << 10
	maxTensorCount = 1 << 20
)

// File is a parsed GGUF file. Tensor data are views into the file's memory mapping and stay
// valid until Close.
type File struct {
	Version    uint32
	KV         []KV // in file order
	Tensors    []TensorInfo
	Alignment  uint64
	DataOffset uint64 // absolute offset of the data section
	Path       string

	kv      map[string]int
	tensors map[string]int
	data    []byte // the whole file
	unmap   func() error
}

// Open memory-maps and parses the GGUF file at path.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("gguf: %s is not a regular file", path)
	}
	data, unmap, err := mapFile(fh, st.Size())
	if err != nil {
		return nil, fmt.Errorf("gguf: map %s: %w", path, err)
	}
	f, err := Parse(data)
	if err != nil {
		unmap()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.Path = path
	f.unmap = unmap
	return f, nil
}

// Close releases the file's mapping; tensor views must not be used afterwards.
func (f *File) Close() error {
	if f.unmap == nil {
		return nil
	}
	err := f.unmap()
	f.unmap, f.data = nil, nil
	return err
}

// Size is the file's length in bytes.
func (f *File) Size() int64 { return int64(len(f.data)) }

// Parse reads a GGUF image held in memory. The File refers to data without copying it.
func Parse(data []byte) (*File, error) {
	r := &reader{buf: data}
	f := &File{data: data, kv: map[string]int{}, tensors: map[string]int{}}

	magic := r.u32("magic")
	if r.err == nil && magic != Magic {
		return nil, formatErr(0, "magic", "got %#08x, want %#08x (\"GGUF\")", magic, Magic)
	}
	f.Version = r.u32("version")
	if r.err == nil && f.Version != 2 && f.Version != 3 {
		return nil, formatErr(4, "version", "unsupported version %d (want 2 or 3)", f.Version)
	}
	nTensors := r.u64("tensor_count")
	nKV := r.u64("metadata_kv_count")
	if r.err != nil {
		return nil, r.err
	}
	// Every KV takes at least 12 bytes and every tensor info at least 24; counts beyond what the
	// file could hold are rejected before allocating for them.
	if nKV > uint64(len(data))/12 {
		return nil, formatErr(16, "metadata_kv_count", "%d entries cannot fit in a %d-byte file", nKV, len(data))
	}
	if nTensors > maxTensorCount || nTensors > uint64(len(data))/24 {
		return nil, formatErr(8, "tensor_count", "%d tensors is more than the file can hold", nTensors)
	}

	f.KV = make([]KV, 0, nKV)
	for i := uint64(0); i < nKV; i++ {
		at := r.off
		key := r.str(fmt.Sprintf("metadata[%d].key", i), maxKeyLen)
		if r.err != nil {
			return nil, r.err
		}
		field := fmt.Sprintf("metadata %q", key)
		typ := ValueType(r.u32(field + " type"))
		v := r.value(field, typ, 0)
		if r.err != nil {
			return nil, r.err
		}
		if _, dup := f.kv[key]; dup {
			return nil, formatErr(at, field, "duplicate key")
		}
		f.kv[key] = len(f.KV)
		f.KV = append(f.KV, KV{Key: key, Value: v})
	}

	f.Alignment = DefaultAlignment
	if v, ok := f.Get("general.alignment"); ok {
		a, ok := v.Int()
		if !ok || v.Type != TypeUint32 || a <= 0 || a&(a-1) != 0 || a > 1<<20 {
			return nil, formatErr(0, "metadata \"general.alignment\"", "must be a uint32 power of two ≤ 1 MiB, got %s %v", v.Type, v)
		}
		f.Alignment = uint64(a)
	}

	f.Tensors = make([]TensorInfo, 0, nTensors)
	for i := uint64(0); i < nTensors; i++ {
		at := r.off
		name := r.str(fmt.Sprintf("tensor[%d].name", i), maxTensorName)
		if r.err != nil {
			return nil, r.err
		}
		field := fmt.Sprintf("tensor %q", name)
		nDims := r.u32(field + " n_dims")
		if r.err == nil && (nDims == 0 || nDims > MaxDims) {
			return nil, formatErr(at, field+" n_dims", "%d dimensions (want 1 to %d)", nDims, MaxDims)
		}
		t := TensorInfo{Name: name, Dims: make([]uint64, 0, nDims)}
		n := uint64(1)
		for d := uint32(0); d < nDims && r.err == nil; d++ {
			dim := r.u64(fmt.Sprintf("%s ne[%d]", field, d))
			if r.err != nil {
				break
			}
			if dim == 0 || dim > math.MaxInt64/n {
				return nil, formatErr(r.off-8, fmt.Sprintf("%s ne[%d]", field, d), "absurd dimension %d", dim)
			}
			n *= dim
			t.Dims = append(t.Dims, dim)
		}
		t.Type = quant.Type(r.u32(field + " type"))
		t.Offset = r.u64(field + " offset")
		if r.err != nil {
			return nil, r.err
		}
		if !t.Type.Known() {
			return nil, formatErr(at, field+" type", "unknown tensor type %d", uint32(t.Type))
		}
		bs := uint64(t.Type.BlockSize())
		if t.Dims[0]%bs != 0 {
			return nil, formatErr(at, field, "ne[0] = %d is not a multiple of %s's block size %d", t.Dims[0], t.Type, bs)
		}
		if n/bs > math.MaxInt64/uint64(t.Type.TypeSize()) {
			return nil, formatErr(at, field, "size overflows")
		}
		t.Size = n / bs * uint64(t.Type.TypeSize())
		if t.Offset%f.Alignment != 0 {
			return nil, formatErr(at, field+" offset", "offset %d is not a multiple of the alignment %d", t.Offset, f.Alignment)
		}
		if _, dup := f.tensors[name]; dup {
			return nil, formatErr(at, field, "duplicate tensor name")
		}
		f.tensors[name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}

	f.DataOffset = alignUp(uint64(r.off), f.Alignment)
	if len(f.Tensors) > 0 && f.DataOffset > uint64(len(data)) {
		return nil, formatErr(r.off, "data section", "starts at %d, past the end of the %d-byte file", f.DataOffset, len(data))
	}
	dataLen := uint64(len(data)) - min(f.DataOffset, uint64(len(data)))
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if t.Offset > dataLen || t.Size > dataLen-t.Offset {
			return nil, formatErr(int(f.DataOffset+t.Offset), fmt.Sprintf("tensor %q data", t.Name),
				"%d bytes at data offset %d run past the end of the file (data section is %d bytes; file truncated?)", t.Size, t.Offset, dataLen)
		}
	}
	if err := checkOverlaps(f.Tensors); err != nil {
		return nil, err
	}
	return f, nil
}

func checkOverlaps(ts []TensorInfo) error {
	idx := make([]int, len(ts))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return ts[idx[a]].Offset < ts[idx[b]].Offset })
	for i := 1; i < len(idx); i++ {
		prev, cur := &ts[idx[i-1]], &ts[idx[i]]
		if prev.Offset+prev.Size > cur.Offset {
			return fmt.Errorf("%w: tensor %q data overlaps tensor %q", ErrFormat, cur.Name, prev.Name)
		}
	}
	return nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// Get returns the metadata value for key.
func (f *File) Get(key string) (Value, bool) {
	i, ok := f.kv[key]
	if !ok {
		return Value{}, false
	}
	return f.KV[i].Value, true
}

// Tensor returns the tensor named name.
func (f *File) Tensor(name string) (*TensorInfo, bool) {
	i, ok := f.tensors[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// Data returns the bytes of t, a view into the file.
func (f *File) Data(t *TensorInfo) []byte {
	start := f.DataOffset + t.Offset
	return f.data[start : start+t.Size : start+t.Size]
}

// TensorSection is the file's tensor data: every tensor's Offset is relative to its start.
func (f *File) TensorSection() []byte { return f.data[f.DataOffset:] }

// TensorData returns the bytes of the named tensor.
func (f *File) TensorData(name string) (*TensorInfo, []byte, error) {
	t, ok := f.Tensor(name)
	if !ok {
		return nil, nil, fmt.Errorf("gguf: no tensor %q", name)
	}
	return t, f.Data(t), nil
}

// formatErr builds an error that names the offset and the field.
func formatErr(off int, field, format string, args ...any) error {
	return fmt.Errorf("%w: at offset %d, %s: %s", ErrFormat, off, field, fmt.Sprintf(format, args...))
}

// reader decodes little-endian values and records the first error.
type reader struct {
	buf []byte
	off int
	err error
}

func (r *reader) need(n int, field string) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || n > len(r.buf)-r.off {
		r.err = formatErr(r.off, field, "needs %d bytes but only %d remain (file truncated?)", n, len(r.buf)-r.off)
		return false
	}
	return true
}

func (r *reader) u8(field string) uint8 {
	if !r.need(1, field) {
		return 0
	}
	v := r.buf[r.off]
	r.off++
	return v
}

func (r *reader) u16(field string) uint16 {
	if !r.need(2, field) {
		return 0
	}
	v := binary.LittleEndian.Uint16(r.buf[r.off:])
	r.off += 2
	return v
}

func (r *reader) u32(field string) uint32 {
	if !r.need(4, field) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.buf[r.off:])
	r.off += 4
	return v
}

func (r *reader) u64(field string) uint64 {
	if !r.need(8, field) {
		return 0
	}
	v := binary.LittleEndian.Uint64(r.buf[r.off:])
	r.off += 8
	return v
}

func (r *reader) str(field string, limit uint64) string {
	at := r.off
	n := r.u64(field + " length")
	if r.err != nil {
		return ""
	}
	if n > limit {
		r.err = formatErr(at, field, "string of %d bytes exceeds the limit of %d", n, limit)
		return ""
	}
	if !r.need(int(n), field) {
		return ""
	}
	s := string(r.buf[r.off : r.off+int(n)])
	r.off += int(n)
	return s
}

func (r *reader) value(field string, typ ValueType, depth int) Value {
	at := r.off - 4
	switch typ {
	case TypeUint8:
		return Value{Type: typ, v: r.u8(field)}
	case TypeInt8:
		return Value{Type: typ, v: int8(r.u8(field))}
	case TypeUint16:
		return Value{Type: typ, v: r.u16(field)}
	case TypeInt16:
		return Value{Type: typ, v: int16(r.u16(field))}
	case TypeUint32:
		return Value{Type: typ, v: r.u32(field)}
	case TypeInt32:
		return Value{Type: typ, v: int32(r.u32(field))}
	case TypeFloat32:
		return Value{Type: typ, v: math.Float32frombits(r.u32(field))}
	case TypeBool:
		b := r.u8(field)
		if r.err == nil && b > 1 {
			r.err = formatErr(r.off-1, field, "bool byte is %d (want 0 or 1)", b)
		}
		return Value{Type: typ, v: b == 1}
	case TypeString:
		return Value{Type: typ, v: r.str(field, maxStringLen)}
	case TypeUint64:
		return Value{Type: typ, v: r.u64(field)}
	case TypeInt64:
		return Value{Type: typ, v: int64(r.u64(field))}
	case TypeFloat64:
		return Value{Type: typ, v: math.Float64frombits(r.u64(field))}
	case TypeArray:
		return r.array(field, depth)
	}
	if r.err == nil {
		r.err = formatErr(at, field, "unknown value type %d", uint32(typ))
	}
	return Value{}
}

func (r *reader) array(field string, depth int) Value {
	at := r.off
	elem := ValueType(r.u32(field + " element type"))
	n := r.u64(field + " length")
	if r.err != nil {
		return Value{}
	}
	if depth >= maxArrayDepth && elem == TypeArray {
		r.err = formatErr(at, field, "arrays nested deeper than %d levels", maxArrayDepth)
		return Value{}
	}
	// The smallest encoding of one element bounds how many can be in the rest of the file.
	minSize := uint64(elem.size())
	switch elem {
	case TypeString:
		minSize = 8
	case TypeArray:
		minSize = 12
	}
	if minSize == 0 {
		r.err = formatErr(at, field, "unknown array element type %d", uint32(elem))
		return Value{}
	}
	if n > uint64(len(r.buf)-r.off)/minSize {
		r.err = formatErr(at, field, "array of %d %s elements cannot fit in the %d bytes left (file truncated?)", n, elem, len(r.buf)-r.off)
		return Value{}
	}
	v := Value{Type: TypeArray, Elem: elem}
	switch elem {
	case TypeUint8:
		v.v = readN(r, n, field, func() uint8 { return r.u8(field) })
	case TypeInt8:
		v.v = readN(r, n, field, func() int8 { return int8(r.u8(field)) })
	case TypeUint16:
		v.v = readN(r, n, field, func() uint16 { return r.u16(field) })
	case TypeInt16:
		v.v = readN(r, n, field, func() int16 { return int16(r.u16(field)) })
	case TypeUint32:
		v.v = readN(r, n, field, func() uint32 { return r.u32(field) })
	case TypeInt32:
		v.v = readN(r, n, field, func() int32 { return int32(r.u32(field)) })
	case TypeFloat32:
		v.v = readN(r, n, field, func() float32 { return math.Float32frombits(r.u32(field)) })
	case TypeBool:
		v.v = readN(r, n, field, func() bool { return r.value(field, TypeBool, depth).v == true })
	case TypeString:
		v.v = readN(r, n, field, func() string { return r.str(field, maxStringLen) })
	case TypeUint64:
		v.v = readN(r, n, field, func() uint64 { return r.u64(field) })
	case TypeInt64:
		v.v = readN(r, n, field, func() int64 { return int64(r.u64(field)) })
	case TypeFloat64:
		v.v = readN(r, n, field, func() float64 { return math.Float64frombits(r.u64(field)) })
	case TypeArray:
		v.v = readN(r, n, field, func() Value { return r.array(field, depth+1) })
	}
	return v
}

func readN[T any](r *reader, n uint64, field string, next func() T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = next()
		if r.err != nil {
			return nil
		}
	}
	return out
}
