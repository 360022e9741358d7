package gguf

import (
	"fmt"
	"math"
)

// Value is a metadata value. Scalars hold the Go type of their tag (uint8 … float64, bool,
// string); arrays hold a typed slice ([]uint8 … []float64, []bool, []string) or, for arrays of
// arrays, []Value.
type Value struct {
	Type ValueType // the value's tag
	Elem ValueType // for arrays, the element tag
	v    any
}

// NewValue wraps a Go value of a type GGUF can hold. It panics on other types: it is for
// writers building metadata from constants, where a wrong type is a programming error.
func NewValue(v any) Value {
	switch x := v.(type) {
	case Value:
		return x
	case uint8:
		return Value{Type: TypeUint8, v: x}
	case int8:
		return Value{Type: TypeInt8, v: x}
	case uint16:
		return Value{Type: TypeUint16, v: x}
	case int16:
		return Value{Type: TypeInt16, v: x}
	case uint32:
		return Value{Type: TypeUint32, v: x}
	case int32:
		return Value{Type: TypeInt32, v: x}
	case float32:
		return Value{Type: TypeFloat32, v: x}
	case bool:
		return Value{Type: TypeBool, v: x}
	case string:
		return Value{Type: TypeString, v: x}
	case uint64:
		return Value{Type: TypeUint64, v: x}
	case int64:
		return Value{Type: TypeInt64, v: x}
	case float64:
		return Value{Type: TypeFloat64, v: x}
	case []uint8:
		return Value{Type: TypeArray, Elem: TypeUint8, v: x}
	case []int8:
		return Value{Type: TypeArray, Elem: TypeInt8, v: x}
	case []uint16:
		return Value{Type: TypeArray, Elem: TypeUint16, v: x}
	case []int16:
		return Value{Type: TypeArray, Elem: TypeInt16, v: x}
	case []uint32:
		return Value{Type: TypeArray, Elem: TypeUint32, v: x}
	case []int32:
		return Value{Type: TypeArray, Elem: TypeInt32, v: x}
	case []float32:
		return Value{Type: TypeArray, Elem: TypeFloat32, v: x}
	case []bool:
		return Value{Type: TypeArray, Elem: TypeBool, v: x}
	case []string:
		return Value{Type: TypeArray, Elem: TypeString, v: x}
	case []uint64:
		return Value{Type: TypeArray, Elem: TypeUint64, v: x}
	case []int64:
		return Value{Type: TypeArray, Elem: TypeInt64, v: x}
	case []float64:
		return Value{Type: TypeArray, Elem: TypeFloat64, v: x}
	}
	panic(fmt.Sprintf("gguf: cannot store %T as a metadata value", v))
}

// Any returns the underlying Go value.
func (v Value) Any() any { return v.v }

// Len is the number of elements of an array (0 for scalars).
func (v Value) Len() int {
	switch x := v.v.(type) {
	case []uint8:
		return len(x)
	case []int8:
		return len(x)
	case []uint16:
		return len(x)
	case []int16:
		return len(x)
	case []uint32:
		return len(x)
	case []int32:
		return len(x)
	case []float32:
		return len(x)
	case []bool:
		return len(x)
	case []string:
		return len(x)
	case []uint64:
		return len(x)
	case []int64:
		return len(x)
	case []float64:
		return len(x)
	case []Value:
		return len(x)
	}
	return 0
}

// Int returns an integer scalar of any width as int64.
func (v Value) Int() (int64, bool) {
	switch x := v.v.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

// Float returns a float or integer scalar as float64.
func (v Value) Float() (float64, bool) {
	switch x := v.v.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	if i, ok := v.Int(); ok {
		return float64(i), true
	}
	return 0, false
}

// Str returns a string scalar.
func (v Value) Str() (string, bool) { s, ok := v.v.(string); return s, ok }

// Bool returns a bool scalar.
func (v Value) Bool() (bool, bool) { b, ok := v.v.(bool); return b, ok }

// Strings returns an array of strings.
func (v Value) Strings() ([]string, bool) { s, ok := v.v.([]string); return s, ok }

// Ints returns an array of integers of any width as int64s.
func (v Value) Ints() ([]int64, bool) {
	var out []int64
	conv := func(n int, at func(int) int64) []int64 {
		out = make([]int64, n)
		for i := range out {
			out[i] = at(i)
		}
		return out
	}
	switch x := v.v.(type) {
	case []uint8:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []int8:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []uint16:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []int16:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []uint32:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []int32:
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []int64:
		return x, true
	case []uint64:
		for _, u := range x {
			if u > math.MaxInt64 {
				return nil, false
			}
		}
		return conv(len(x), func(i int) int64 { return int64(x[i]) }), true
	case []bool:
		return conv(len(x), func(i int) int64 {
			if x[i] {
				return 1
			}
			return 0
		}), true
	}
	return nil, false
}

// Floats returns an array of floats (or integers) as float32s.
func (v Value) Floats() ([]float32, bool) {
	switch x := v.v.(type) {
	case []float32:
		return x, true
	case []float64:
		out := make([]float32, len(x))
		for i, f := range x {
			out[i] = float32(f)
		}
		return out, true
	}
	if ints, ok := v.Ints(); ok {
		out := make([]float32, len(ints))
		for i, n := range ints {
			out[i] = float32(n)
		}
		return out, true
	}
	return nil, false
}

// String formats the value for display; long arrays are abbreviated.
func (v Value) String() string {
	if v.Type != TypeArray {
		if s, ok := v.v.(string); ok {
			return fmt.Sprintf("%q", s)
		}
		return fmt.Sprint(v.v)
	}
	n := v.Len()
	if n > 8 {
		return fmt.Sprintf("[%d × %s]", n, v.Elem)
	}
	return fmt.Sprint(v.v)
}
