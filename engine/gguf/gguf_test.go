package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/quant"
)

func TestRoundTrip(t *testing.T) {
	w := NewWriter()
	w.Set("general.architecture", "test")
	w.Set("u8", uint8(7))
	w.Set("i8", int8(-7))
	w.Set("u16", uint16(700))
	w.Set("i16", int16(-700))
	w.Set("u32", uint32(70000))
	w.Set("i32", int32(-70000))
	w.Set("f32", float32(1.5))
	w.Set("bool", true)
	w.Set("u64", uint64(1)<<40)
	w.Set("i64", int64(-1)<<40)
	w.Set("f64", 2.25)
	w.Set("strs", []string{"a", "", "ü"})
	w.Set("i32s", []int32{1, -2, 3})
	w.Set("f32s", []float32{0.5, -1})
	w.Set("bools", []bool{true, false})
	w.Set("nested", Value{Type: TypeArray, Elem: TypeArray, v: []Value{NewValue([]int32{1, 2}), NewValue([]int32{3})}})
	a := make([]byte, 4*6)
	for i := range a {
		a[i] = byte(i)
	}
	b := make([]byte, quant.Q8_0.RowBytes(64)*2)
	for i := range b {
		b[i] = byte(255 - i)
	}
	if err := w.AddTensorBytes("a", quant.F32, []uint64{3, 2}, a); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensorBytes("b", quant.Q8_0, []uint64{64, 2}, b); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(f.KV) != len(w.kv) {
		t.Fatalf("%d keys, want %d", len(f.KV), len(w.kv))
	}
	for i, kv := range w.kv {
		got := f.KV[i]
		if got.Key != kv.Key || got.Value.Type != kv.Value.Type || !reflect.DeepEqual(got.Value.Any(), kv.Value.Any()) {
			t.Errorf("key %d: got %s=%v, want %s=%v", i, got.Key, got.Value.Any(), kv.Key, kv.Value.Any())
		}
	}
	if _, data, err := f.TensorData("a"); err != nil || !bytes.Equal(data, a) {
		t.Errorf("tensor a: %v %v", data, err)
	}
	if _, data, err := f.TensorData("b"); err != nil || !bytes.Equal(data, b) {
		t.Errorf("tensor b mismatch: %v", err)
	}
	tb, _ := f.Tensor("b")
	if tb.Offset%DefaultAlignment != 0 || f.DataOffset%DefaultAlignment != 0 {
		t.Errorf("unaligned: data %d, b at %d", f.DataOffset, tb.Offset)
	}
	if n, err := f.Int("u64"); err != nil || n != 1<<40 {
		t.Errorf("Int(u64) = %d, %v", n, err)
	}
	if _, err := f.String("u8"); err == nil || !strings.Contains(err.Error(), `"u8" is uint8, want string`) {
		t.Errorf("type error = %v", err)
	}
	if _, err := f.Int("absent"); err == nil || !strings.Contains(err.Error(), `"absent" is missing`) {
		t.Errorf("missing error = %v", err)
	}
}

// TestMalformed checks that damaged files give errors that name the offset and the field.
func TestMalformed(t *testing.T) {
	good := func() []byte {
		w := NewWriter()
		w.Set("general.architecture", "test")
		w.Set("tokens", []string{"a", "b"})
		if err := w.AddTensorBytes("t", quant.F32, []uint64{4}, make([]byte, 16)); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	put64 := func(b []byte, off int, v uint64) []byte { binary.LittleEndian.PutUint64(b[off:], v); return b }
	put32 := func(b []byte, off int, v uint32) []byte { binary.LittleEndian.PutUint32(b[off:], v); return b }
	// Offsets in the good file: header 24 bytes, then key "general.architecture" (8+20), type (4),
	// value (8+4) = 68, then key "tokens" (8+6), type (4), elem (4), count (8) at 94.
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"Empty", nil, "at offset 0, magic"},
		{"BadMagic", put32(good(), 0, 0x12345678), "magic: got 0x12345678"},
		{"Version1", put32(good(), 4, 1), "unsupported version 1"},
		{"TooManyKV", put64(good(), 16, 1<<40), "metadata_kv_count"},
		{"TooManyTensors", put64(good(), 8, 1<<40), "tensor_count"},
		{"HugeString", put64(good(), 24, 1<<50), "metadata[0].key"},
		{"HugeArray", put64(good(), 94, 1<<50), `metadata "tokens"`},
		{"UnknownValueType", put32(good(), 52, 99), "unknown value type 99"},
		{"Truncated", good()[:100], "file truncated"},
		{"TruncatedData", func() []byte { b := good(); return b[:len(b)-4] }(), `tensor "t" data`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.data)
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("error %v does not wrap ErrFormat", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
	if _, err := Parse(good()); err != nil {
		t.Fatalf("good file: %v", err)
	}
}

func TestUnknownTensorType(t *testing.T) {
	w := NewWriter()
	if err := w.AddTensorBytes("t", quant.F32, []uint64{4}, make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	// The tensor info is the last thing before the data: name (8+1), n_dims, ne[0], type, offset.
	i := bytes.Index(b, []byte{1, 0, 0, 0, 0, 0, 0, 0, 't'}) + 9 + 4 + 8
	binary.LittleEndian.PutUint32(b[i:], 77)
	_, err := Parse(b)
	if err == nil || !strings.Contains(err.Error(), `tensor "t" type: unknown tensor type 77`) {
		t.Fatalf("error = %v", err)
	}
}
