package cpu

import (
	"fmt"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// cache stores keys and values per layer as [capacity, kvHeads, headDim], in float32 or in
// float16 bits.
type cache struct {
	dtype            ml.DType
	layers, capacity int
	kvHeads, headDim int
	k32, v32         [][]float32
	k16, v16         [][]uint16
	freed            bool
}

func (b *Backend) NewCache(layers, kvHeads, headDim, capacity int, dtype ml.DType) (ml.Cache, error) {
	if layers < 0 || kvHeads <= 0 || headDim <= 0 || capacity <= 0 {
		return nil, fmt.Errorf("cpu: bad cache shape: %d layers, %d kv heads of %d, %d positions", layers, kvHeads, headDim, capacity)
	}
	c := &cache{dtype: dtype, layers: layers, capacity: capacity, kvHeads: kvHeads, headDim: headDim}
	n := capacity * kvHeads * headDim
	for range layers {
		switch dtype {
		case ml.F32:
			c.k32 = append(c.k32, make([]float32, n))
			c.v32 = append(c.v32, make([]float32, n))
		case ml.F16:
			c.k16 = append(c.k16, make([]uint16, n))
			c.v16 = append(c.v16, make([]uint16, n))
		default:
			return nil, fmt.Errorf("cpu: cache precision %v not supported", dtype)
		}
	}
	return c, nil
}

// Free drops the cache's memory; operations on it afterwards panic (and fail their pass).
func (c *cache) Free() {
	c.k32, c.v32, c.k16, c.v16 = nil, nil, nil, nil
	c.freed = true
}

// check refuses a freed cache where the operation is issued.
func (c *cache) check(what string) {
	if c.freed {
		panic("cpu: " + what + " a freed KV cache")
	}
}

func (c *cache) DType() ml.DType { return c.dtype }
func (c *cache) Capacity() int   { return c.capacity }
func (c *cache) Bytes() int64 {
	return int64(c.layers) * 2 * int64(c.capacity*c.kvHeads*c.headDim) * int64(c.dtype.Bytes())
}

// store writes rows of kvHeads·headDim values at positions pos0….
func (c *cache) store(layer, pos0 int, k, v []float32) {
	row := c.kvHeads * c.headDim
	n := len(k) / row
	if pos0 < 0 || pos0+n > c.capacity {
		panic(fmt.Sprintf("cpu: cache write at %d+%d past capacity %d", pos0, n, c.capacity))
	}
	off := pos0 * row
	switch c.dtype {
	case ml.F32:
		copy(c.k32[layer][off:], k)
		copy(c.v32[layer][off:], v)
	case ml.F16:
		quant.F32ToF16Slice(c.k16[layer][off:off+len(k)], k)
		quant.F32ToF16Slice(c.v16[layer][off:off+len(v)], v)
	}
}

// keys returns position p's key of head g as float32 (converting into buf for f16).
func (c *cache) key(layer, p, g int, buf []float32) []float32 {
	off := (p*c.kvHeads + g) * c.headDim
	if c.dtype == ml.F32 {
		return c.k32[layer][off : off+c.headDim]
	}
	quant.F16ToF32Slice(buf, c.k16[layer][off:off+c.headDim])
	return buf
}

func (c *cache) value(layer, p, g int, buf []float32) []float32 {
	off := (p*c.kvHeads + g) * c.headDim
	if c.dtype == ml.F32 {
		return c.v32[layer][off : off+c.headDim]
	}
	quant.F16ToF32Slice(buf, c.v16[layer][off:off+c.headDim])
	return buf
}
