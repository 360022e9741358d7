// Package gguf reads and writes GGUF files, the model format of llama.cpp and of this engine.
//
// The reader memory-maps the file and hands out tensor data as views into the mapping; it
// checks every count, length and offset against the file before using it, so a malformed
// file yields an error naming the offset and the field, never a panic or a huge allocation.
package gguf

import (
	"errors"
	"fmt"

	"github.com/redlite/batch/engine/quant"
)

// Magic is "GGUF" read as a little-endian uint32.
const Magic = 0x46554747

// DefaultAlignment applies when general.alignment is absent.
const DefaultAlignment = 32

// MaxDims is the largest tensor rank ggml supports.
const MaxDims = 4

// ErrFormat is wrapped by every error about a malformed file.
var ErrFormat = errors.New("gguf: malformed file")

// ValueType is the type tag of a metadata value.
type ValueType uint32

// Metadata value types, as numbered by the GGUF format.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32",
	"float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// size is the encoded size of a scalar of this type (0 for string and array).
func (t ValueType) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// KV is one metadata entry.
type KV struct {
	Key   string
	Value Value
}

// TensorInfo describes one tensor. Dims are in ggml order: Dims[0] (ne0) is the contiguous
// dimension, so a matrix with Dims {in, out} has out rows of in elements.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   quant.Type
	Offset uint64 // from the start of the data section
	Size   uint64 // bytes
}

// Elements is the number of elements in the tensor.
func (t *TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Rows is the number of ne0-element rows (all dimensions but the first).
func (t *TensorInfo) Rows() uint64 {
	if len(t.Dims) == 0 {
		return 1
	}
	return t.Elements() / t.Dims[0]
}

// RowBytes is the storage size of one row.
func (t *TensorInfo) RowBytes() int {
	if len(t.Dims) == 0 {
		return t.Type.TypeSize()
	}
	return t.Type.RowBytes(int(t.Dims[0]))
}

// Dim returns dimension i, or 1 past the tensor's rank.
func (t *TensorInfo) Dim(i int) uint64 {
	if i < len(t.Dims) {
		return t.Dims[i]
	}
	return 1
}

// ShapeString formats the dims as "[256, 512]".
func (t *TensorInfo) ShapeString() string {
	s := "["
	for i, d := range t.Dims {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprint(d)
	}
	return s + "]"
}
