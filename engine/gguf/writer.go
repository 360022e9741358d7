package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/redlite/batch/engine/quant"
)

// Writer builds a GGUF file: metadata first, then tensors whose bytes are produced one at a
// time while writing, so that a multi-gigabyte model never has to sit in memory whole.
type Writer struct {
	Alignment uint64 // 0 means DefaultAlignment

	kv      []KV
	keys    map[string]bool
	tensors []writerTensor
	names   map[string]bool
}

type writerTensor struct {
	info TensorInfo
	data func() ([]byte, error)
}

// NewWriter returns an empty GGUF v3 writer.
func NewWriter() *Writer {
	return &Writer{keys: map[string]bool{}, names: map[string]bool{}}
}

// Set adds a metadata entry; v is any Go type NewValue accepts.
func (w *Writer) Set(key string, v any) {
	if w.keys[key] {
		for i := range w.kv {
			if w.kv[i].Key == key {
				w.kv[i].Value = NewValue(v)
			}
		}
		return
	}
	w.keys[key] = true
	w.kv = append(w.kv, KV{Key: key, Value: NewValue(v)})
}

// AddTensor declares a tensor; data is called once while writing and must return exactly the
// tensor's size in bytes.
func (w *Writer) AddTensor(name string, typ quant.Type, dims []uint64, data func() ([]byte, error)) error {
	if w.names[name] {
		return fmt.Errorf("gguf: tensor %q added twice", name)
	}
	if len(dims) == 0 || len(dims) > MaxDims {
		return fmt.Errorf("gguf: tensor %q has %d dimensions (want 1 to %d)", name, len(dims), MaxDims)
	}
	if !typ.Known() {
		return fmt.Errorf("gguf: tensor %q has unknown type %d", name, typ)
	}
	if dims[0]%uint64(typ.BlockSize()) != 0 {
		return fmt.Errorf("gguf: tensor %q: ne[0] = %d is not a multiple of %s's block size %d", name, dims[0], typ, typ.BlockSize())
	}
	t := TensorInfo{Name: name, Dims: append([]uint64(nil), dims...), Type: typ}
	t.Size = t.Elements() / uint64(typ.BlockSize()) * uint64(typ.TypeSize())
	w.names[name] = true
	w.tensors = append(w.tensors, writerTensor{info: t, data: data})
	return nil
}

// AddTensorBytes declares a tensor whose bytes are already in memory.
func (w *Writer) AddTensorBytes(name string, typ quant.Type, dims []uint64, data []byte) error {
	return w.AddTensor(name, typ, dims, func() ([]byte, error) { return data, nil })
}

// WriteTo writes the file.
func (w *Writer) WriteTo(dst io.Writer) (int64, error) {
	align := w.Alignment
	if align == 0 {
		align = DefaultAlignment
	}
	if align&(align-1) != 0 {
		return 0, fmt.Errorf("gguf: alignment %d is not a power of two", align)
	}
	if align != DefaultAlignment {
		w.Set("general.alignment", uint32(align))
	}
	var off uint64
	for i := range w.tensors {
		t := &w.tensors[i].info
		off = alignUp(off, align)
		t.Offset = off
		off += t.Size
	}

	cw := &countWriter{w: bufio.NewWriterSize(dst, 1<<20)}
	e := encoder{w: cw}
	e.u32(Magic)
	e.u32(3)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(w.kv)))
	for _, kv := range w.kv {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.Type))
		e.value(kv.Value)
	}
	for _, wt := range w.tensors {
		t := wt.info
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(t.Offset)
	}
	if e.err != nil {
		return cw.n, e.err
	}
	start := uint64(cw.n)
	e.pad(alignUp(start, align) - start)
	base := uint64(cw.n)
	for _, wt := range w.tensors {
		t := wt.info
		e.pad(base + t.Offset - uint64(cw.n))
		if e.err != nil {
			return cw.n, e.err
		}
		b, err := wt.data()
		if err != nil {
			return cw.n, fmt.Errorf("gguf: tensor %q: %w", t.Name, err)
		}
		if uint64(len(b)) != t.Size {
			return cw.n, fmt.Errorf("gguf: tensor %q: got %d bytes, want %d (%s %s)", t.Name, len(b), t.Size, t.Type, t.ShapeString())
		}
		if _, err := cw.Write(b); err != nil {
			return cw.n, err
		}
	}
	if e.err != nil {
		return cw.n, e.err
	}
	return cw.n, cw.w.(*bufio.Writer).Flush()
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type encoder struct {
	w   io.Writer
	err error
	b   [8]byte
}

func (e *encoder) write(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
	}
}

func (e *encoder) u8(v uint8) { e.b[0] = v; e.write(e.b[:1]) }
func (e *encoder) u16(v uint16) {
	binary.LittleEndian.PutUint16(e.b[:], v)
	e.write(e.b[:2])
}
func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.b[:], v)
	e.write(e.b[:4])
}
func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.b[:], v)
	e.write(e.b[:8])
}
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.write([]byte(s)) }
func (e *encoder) pad(n uint64) {
	var zero [64]byte
	for n > 0 {
		k := min(n, uint64(len(zero)))
		e.write(zero[:k])
		n -= k
	}
}

func (e *encoder) value(v Value) {
	switch x := v.v.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		if x {
			e.u8(1)
		} else {
			e.u8(0)
		}
	case string:
		e.str(x)
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	default:
		e.u32(uint32(v.Elem))
		e.u64(uint64(v.Len()))
		e.array(x)
	}
}

func (e *encoder) array(x any) {
	switch a := x.(type) {
	case []uint8:
		e.write(a)
	case []int8:
		for _, y := range a {
			e.u8(uint8(y))
		}
	case []uint16:
		for _, y := range a {
			e.u16(y)
		}
	case []int16:
		for _, y := range a {
			e.u16(uint16(y))
		}
	case []uint32:
		for _, y := range a {
			e.u32(y)
		}
	case []int32:
		for _, y := range a {
			e.u32(uint32(y))
		}
	case []float32:
		for _, y := range a {
			e.u32(math.Float32bits(y))
		}
	case []bool:
		for _, y := range a {
			e.value(NewValue(y))
		}
	case []string:
		for _, y := range a {
			e.str(y)
		}
	case []uint64:
		for _, y := range a {
			e.u64(y)
		}
	case []int64:
		for _, y := range a {
			e.u64(uint64(y))
		}
	case []float64:
		for _, y := range a {
			e.u64(math.Float64bits(y))
		}
	case []Value:
		for _, y := range a {
			e.value(y)
		}
	}
}
