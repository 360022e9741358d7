package gguf_test

import (
	"encoding/binary"
	"math"
)

// hostileHeaders are GGUF images whose counts, lengths and sizes ask for far more than the
// file holds (2^30 … 2^64 − 1): FuzzParse starts from them. Each is a few dozen bytes.
func hostileHeaders() [][]byte {
	type kv struct {
		key  string
		body func(b []byte) []byte // the value's type tag and bytes
	}
	u32 := func(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
	u64 := func(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }
	str := func(b []byte, s string) []byte { return append(u64(b, uint64(len(s))), s...) }
	file := func(nTensors, nKV uint64, kvs []kv, tail func(b []byte) []byte) []byte {
		b := u32(u32(nil, 0x46554747), 3)
		b = u64(u64(b, nTensors), nKV)
		for _, e := range kvs {
			b = e.body(str(b, e.key))
		}
		if tail != nil {
			b = tail(b)
		}
		return append(b, make([]byte, 64)...)
	}
	const (
		tU32    = 4
		tString = 8
		tArray  = 9
		tU64    = 10
	)
	scalar := func(v uint64) func([]byte) []byte {
		return func(b []byte) []byte { return u64(u32(b, tU64), v) }
	}
	arch := kv{"general.architecture", func(b []byte) []byte { return str(u32(b, tString), "qwen3") }}
	huge := []uint64{1 << 30, 1 << 32, 1 << 62, math.MaxUint64}
	var out [][]byte
	for _, n := range huge {
		out = append(out,
			file(n, 0, nil, nil), // tensor_count
			file(0, n, nil, nil), // metadata_kv_count
			file(0, 1, nil, func(b []byte) []byte { return u64(b, n) }),                                      // a key's length
			file(0, 1, []kv{{"s", func(b []byte) []byte { return u64(u32(b, tString), n) }}}, nil),           // a string's length
			file(0, 1, []kv{{"a", func(b []byte) []byte { return u64(u32(u32(b, tArray), tU32), n) }}}, nil), // an array's count
			file(0, 1, []kv{{"a", func(b []byte) []byte { // an array of arrays, each huge
				return u64(u32(u64(u32(u32(b, tArray), tArray), 2), tU32), n)
			}}}, nil),
			file(0, 1, []kv{{"a", func(b []byte) []byte { return u64(u32(u32(b, tArray), tString), n) }}}, nil), // strings
			// Hyperparameters that size a model, in a file with no tensors.
			file(0, 4, []kv{arch, {"qwen3.block_count", scalar(n)}, {"qwen3.embedding_length", scalar(n)},
				{"qwen3.attention.head_count", scalar(n)}}, nil),
			// One tensor: its rank, its dimensions, its offset.
			file(1, 0, nil, func(b []byte) []byte { return u32(str(b, "t"), uint32(min(n, math.MaxUint32))) }),
			file(1, 0, nil, func(b []byte) []byte { return u64(u32(u64(u64(u32(str(b, "t"), 2), n), n), 0), 0) }),
			file(1, 0, nil, func(b []byte) []byte { return u64(u32(u64(u32(str(b, "t"), 1), 32), 0), n) }),
		)
	}
	return out
}
