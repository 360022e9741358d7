package cpu

import (
	"fmt"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// kvPool stores keys and values per layer as blocks of [blockSize, kvHeads, headDim], in
// float32, in float16 bits or in Q8_0 blocks (each head's row a whole number of them); a
// sequence's cache is a table of its blocks. A cache made by
// NewCache has a pool of its own with a single block of its whole capacity, so a lone
// sequence's keys are contiguous as they always were.
type kvPool struct {
	dtype             ml.DType
	layers, kvHeads   int
	headDim           int
	blockSize, blocks int
	k32, v32          [][]float32 // per layer: blocks·blockSize·kvHeads·headDim
	k16, v16          [][]uint16
	k8, v8            [][]byte
	// rotK and rotV are the sizes of the Walsh–Hadamard rotations a q8_0 cache stores
	// keys and values under (0: none); see ml.KVRotations.
	rotK, rotV int
	list       *ml.BlockList
}

// cache is one sequence's view of a pool: position p lives in block pages[p/blockSize].
type cache struct {
	*kvPool
	pages    []int32
	capacity int
	shared   int  // positions in blocks shared by reference: read-only
	private  bool // the pool is the cache's own: freeing the cache frees it
	freed    bool
}

func (b *Backend) NewKVPool(layers, kvHeads, headDim, blocks, blockSize int, dtype ml.DType) (ml.KVPool, error) {
	return newKVPool(layers, kvHeads, headDim, blocks, blockSize, dtype)
}

func newKVPool(layers, kvHeads, headDim, blocks, blockSize int, dtype ml.DType) (*kvPool, error) {
	if layers < 0 || kvHeads <= 0 || headDim <= 0 || blocks <= 0 || blockSize <= 0 {
		return nil, fmt.Errorf("cpu: bad cache shape: %d layers, %d kv heads of %d, %d blocks of %d positions", layers, kvHeads, headDim, blocks, blockSize)
	}
	if blocks > 1 && blockSize > attnBlock && blockSize%attnBlock != 0 {
		// Attention walks the cache in runs that never cross a block.
		return nil, fmt.Errorf("cpu: a KV block of %d positions is neither at most %d nor a multiple of it", blockSize, attnBlock)
	}
	if !dtype.RowFits(headDim) {
		return nil, fmt.Errorf("cpu: a head of %d features is not a whole number of %v blocks of %d", headDim, dtype, ml.Q8_0Block)
	}
	p := &kvPool{dtype: dtype, layers: layers, kvHeads: kvHeads, headDim: headDim, blockSize: blockSize, blocks: blocks}
	p.rotK, p.rotV = ml.KVRotations(dtype, headDim)
	n := blocks * blockSize * kvHeads * headDim
	for range layers {
		switch dtype {
		case ml.F32:
			p.k32 = append(p.k32, make([]float32, n))
			p.v32 = append(p.v32, make([]float32, n))
		case ml.F16:
			p.k16 = append(p.k16, make([]uint16, n))
			p.v16 = append(p.v16, make([]uint16, n))
		case ml.Q8_0:
			p.k8 = append(p.k8, make([]byte, ml.Q8_0.RowBytes(n)))
			p.v8 = append(p.v8, make([]byte, ml.Q8_0.RowBytes(n)))
		default:
			return nil, fmt.Errorf("cpu: cache precision %v not supported", dtype)
		}
	}
	p.list = ml.NewBlockList(blocks, blockSize)
	return p, nil
}

func (b *Backend) NewCache(layers, kvHeads, headDim, capacity int, dtype ml.DType) (ml.Cache, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("cpu: bad cache shape: %d layers, %d kv heads of %d, %d positions", layers, kvHeads, headDim, capacity)
	}
	p, err := newKVPool(layers, kvHeads, headDim, 1, capacity, dtype)
	if err != nil {
		return nil, err
	}
	c, err := p.alloc(capacity)
	if err != nil {
		return nil, err
	}
	c.private = true
	return c, nil
}

func (p *kvPool) DType() ml.DType { return p.dtype }
func (p *kvPool) BlockSize() int  { return p.blockSize }
func (p *kvPool) Blocks() int     { return p.blocks }
func (p *kvPool) BlockBytes() int64 {
	return int64(p.blockSize) * ml.KVBytesPerPosition(p.layers, p.kvHeads, p.headDim, p.headDim, p.dtype)
}
func (p *kvPool) Bytes() int64 { return int64(p.blocks) * p.BlockBytes() }

func (p *kvPool) FreeBlocks() int { return p.list.Free() }

func (p *kvPool) Alloc(positions int) (ml.Cache, error) { return p.alloc(positions) }

func (p *kvPool) alloc(positions int) (*cache, error) {
	pages, err := p.list.Take(positions)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	return &cache{kvPool: p, pages: pages, capacity: len(pages) * p.blockSize}, nil
}

func (p *kvPool) Share(c ml.Cache, blocks int) (*ml.SharedBlocks, error) {
	cc, ok := c.(*cache)
	if !ok || cc.kvPool != p || cc.private || cc.freed {
		return nil, fmt.Errorf("cpu: sharing blocks of a cache not drawn from this pool")
	}
	if blocks < 0 || blocks > len(cc.pages) {
		return nil, fmt.Errorf("cpu: sharing %d blocks of a cache of %d", blocks, len(cc.pages))
	}
	h, err := p.list.Hold(cc.pages[:blocks])
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	cc.shared = max(cc.shared, blocks*p.blockSize)
	return h, nil
}

func (p *kvPool) AllocShared(prefix *ml.SharedBlocks, positions int) (ml.Cache, error) {
	pages, err := p.list.TakeAfter(prefix, positions)
	if err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	return &cache{kvPool: p, pages: pages, capacity: len(pages) * p.blockSize, shared: prefix.Len() * p.blockSize}, nil
}

// Free drops the pool's memory; operations on its caches afterwards panic (and fail their
// pass).
func (p *kvPool) Free() {
	p.list.Close()
	p.k32, p.v32, p.k16, p.v16, p.k8, p.v8 = nil, nil, nil, nil, nil, nil
}

// Free gives the cache's blocks back to its pool (and frees a private pool).
func (c *cache) Free() {
	if c.freed {
		return
	}
	c.freed = true
	if c.private {
		c.kvPool.Free()
		return
	}
	c.kvPool.list.Give(c.pages)
	c.pages = nil
}

// check refuses a freed cache where the operation is issued.
func (c *cache) check(what string) {
	if c.freed || c.kvPool.list.Closed() {
		panic("cpu: " + what + " a freed KV cache")
	}
}

func (c *cache) Capacity() int { return c.capacity }
func (c *cache) Bytes() int64 {
	return int64(len(c.pages)) * c.BlockBytes()
}

// run returns the end of the run of positions from p that lie in one block, at most end.
func (c *cache) run(p, end int) int {
	return min(end, (p/c.blockSize+1)*c.blockSize)
}

// at is the offset of position p's row in a layer's slice.
func (c *cache) at(p int) int {
	return (int(c.pages[p/c.blockSize])*c.blockSize + p%c.blockSize) * c.kvHeads * c.headDim
}

// span returns the float32 keys and values of positions [p0, p1) of a layer, which must lie
// in one block (see run): rows of kvHeads·headDim.
func (c *cache) span32(layer, p0, p1 int) (k, v []float32) {
	lo, hi := c.at(p0), c.at(p0)+(p1-p0)*c.kvHeads*c.headDim
	return c.k32[layer][lo:hi], c.v32[layer][lo:hi]
}

func (c *cache) span16(layer, p0, p1 int) (k, v []uint16) {
	lo, hi := c.at(p0), c.at(p0)+(p1-p0)*c.kvHeads*c.headDim
	return c.k16[layer][lo:hi], c.v16[layer][lo:hi]
}

// span8 is span32 for a Q8_0 cache: the blocks of the rows.
func (c *cache) span8(layer, p0, p1 int) (k, v []byte) {
	lo := ml.Q8_0.RowBytes(c.at(p0))
	hi := lo + ml.Q8_0.RowBytes((p1-p0)*c.kvHeads*c.headDim)
	return c.k8[layer][lo:hi], c.v8[layer][lo:hi]
}

// attnRun is the positions attention takes at a time: a run never crosses a block.
func (c *cache) attnRun() int {
	if len(c.pages) == 1 {
		return attnBlock
	}
	return min(attnBlock, c.blockSize)
}

// runs calls f for each run [p, e) of positions [pos0, pos0+n) that lies in one block, with
// off the run's first value in rows of kvHeads·headDim starting at pos0.
func (c *cache) runs(pos0, n int, f func(p, e, off, m int)) {
	row := c.kvHeads * c.headDim
	for p := pos0; p < pos0+n; {
		e := c.run(p, pos0+n)
		f(p, e, (p-pos0)*row, (e-p)*row)
		p = e
	}
}

// store writes rows of kvHeads·headDim values at positions pos0….
func (c *cache) store(layer, pos0 int, k, v []float32) { c.storeWith(layer, pos0, k, v, nil) }

// storeWith is store with buf (len(k) values, or nil to allocate) for the rotated copies a
// q8_0 cache quantizes.
func (c *cache) storeWith(layer, pos0 int, k, v, buf []float32) {
	n := len(k) / (c.kvHeads * c.headDim)
	if pos0 < 0 || pos0+n > c.capacity {
		panic(fmt.Sprintf("cpu: cache write at %d+%d past capacity %d", pos0, n, c.capacity))
	}
	if pos0 < c.shared {
		panic(fmt.Sprintf("cpu: cache write at %d inside the %d positions shared with other sequences", pos0, c.shared))
	}
	c.runs(pos0, n, func(p, e, off, m int) {
		switch c.dtype {
		case ml.F32:
			dk, dv := c.span32(layer, p, e)
			copy(dk, k[off:off+m])
			copy(dv, v[off:off+m])
		case ml.F16:
			dk, dv := c.span16(layer, p, e)
			quant.F32ToF16Slice(dk, k[off:off+m])
			quant.F32ToF16Slice(dv, v[off:off+m])
		case ml.Q8_0:
			dk, dv := c.span8(layer, p, e)
			if c.rotK == 0 {
				quant.QuantizeQ8_0Ref(k[off:off+m], dk)
				quant.QuantizeQ8_0Ref(v[off:off+m], dv)
				break
			}
			if len(buf) < len(k) {
				buf = make([]float32, len(k))
			}
			r := buf[off : off+m]
			copy(r, k[off:off+m])
			hadamardRows(r, c.rotK)
			quant.QuantizeQ8_0Ref(r, dk)
			copy(r, v[off:off+m])
			hadamardRows(r, c.rotV)
			quant.QuantizeQ8_0Ref(r, dv)
		}
	})
}

// load reads positions [pos0, pos0+n) of a layer as float32 rows into k and v.
func (c *cache) load(layer, pos0, n int, k, v []float32) {
	c.runs(pos0, n, func(p, e, off, m int) {
		switch c.dtype {
		case ml.F32:
			sk, sv := c.span32(layer, p, e)
			copy(k[off:off+m], sk)
			copy(v[off:off+m], sv)
		case ml.F16:
			sk, sv := c.span16(layer, p, e)
			quant.F16ToF32Slice(k[off:off+m], sk)
			quant.F16ToF32Slice(v[off:off+m], sv)
		case ml.Q8_0:
			sk, sv := c.span8(layer, p, e)
			dequantQ8(k[off:off+m], sk)
			dequantQ8(v[off:off+m], sv)
			hadamardRows(k[off:off+m], c.rotK)
			hadamardRows(v[off:off+m], c.rotV)
		}
	})
}

// scores sets s[i] to q · the key of head g at position p+i; the positions lie in one block
// (see run).
func (c *cache) scores(layer, g, p int, q, s []float32) {
	row := c.kvHeads * c.headDim
	switch c.dtype {
	case ml.F32:
		k, _ := c.span32(layer, p, p+len(s))
		scoresStrided(k[g*c.headDim:], row, q, s)
		return
	case ml.Q8_0:
		var b [256]float32 // a head's row: decode should not allocate
		buf := rowBuf(b[:], c.headDim)
		for i := range s {
			s[i] = quant.Dot(c.key(layer, p+i, g, buf), q)
		}
		return
	}
	k, _ := c.span16(layer, p, p+len(s))
	scoresStridedF16(k[g*c.headDim:], row, q, s)
}

// weighted sets out to Σ w[i] · the value of head g at position p+i, summed in i order; the
// positions lie in one block.
func (c *cache) weighted(layer, g, p int, w, out []float32) {
	row := c.kvHeads * c.headDim
	switch c.dtype {
	case ml.F32:
		_, v := c.span32(layer, p, p+len(w))
		weightedRows(w, v[g*c.headDim:], row, out)
		return
	case ml.Q8_0:
		var b [256]float32
		buf := rowBuf(b[:], c.headDim)
		clear(out)
		for i, x := range w {
			quant.Axpy(x, c.value(layer, p+i, g, buf), out)
		}
		return
	}
	_, v := c.span16(layer, p, p+len(w))
	weightedRowsF16(w, v[g*c.headDim:], row, out)
}

// key returns position p's key of head g as float32 (converting into buf for f16).
func (c *cache) key(layer, p, g int, buf []float32) []float32 {
	off := c.at(p) + g*c.headDim
	switch c.dtype {
	case ml.F32:
		return c.k32[layer][off : off+c.headDim]
	case ml.Q8_0:
		lo := ml.Q8_0.RowBytes(off)
		dequantQ8(buf[:c.headDim], c.k8[layer][lo:lo+ml.Q8_0.RowBytes(c.headDim)])
		return buf[:c.headDim]
	}
	quant.F16ToF32Slice(buf, c.k16[layer][off:off+c.headDim])
	return buf
}

func (c *cache) value(layer, p, g int, buf []float32) []float32 {
	off := c.at(p) + g*c.headDim
	switch c.dtype {
	case ml.F32:
		return c.v32[layer][off : off+c.headDim]
	case ml.Q8_0:
		lo := ml.Q8_0.RowBytes(off)
		dequantQ8(buf[:c.headDim], c.v8[layer][lo:lo+ml.Q8_0.RowBytes(c.headDim)])
		return buf[:c.headDim]
	}
	quant.F16ToF32Slice(buf, c.v16[layer][off:off+c.headDim])
	return buf
}

// dequantQ8 expands Q8_0 blocks into y (len(y) values), as ggml's to_float does.
func dequantQ8(y []float32, blocks []byte) {
	if err := quant.Dequantize(quant.Q8_0, blocks, y); err != nil {
		panic("cpu: " + err.Error())
	}
}

// rowBuf is b when it holds n values, else a new slice: a head's row.
func rowBuf(b []float32, n int) []float32 {
	if n > len(b) {
		return make([]float32, n)
	}
	return b[:n]
}

// roundQ8_0 sets dst to src rounded through Q8_0 blocks (quantized, then expanded).
func roundQ8_0(dst, src []float32) {
	var blk [ml.Q8_0BlockBytes]byte
	for i := 0; i+ml.Q8_0Block <= len(src); i += ml.Q8_0Block {
		quant.QuantizeQ8_0Ref(src[i:i+ml.Q8_0Block], blk[:])
		dequantQ8(dst[i:i+ml.Q8_0Block], blk[:])
	}
}

// hadamardRows applies the orthonormal Walsh–Hadamard transform of size n (a power of two)
// to each run of n values of x: Sylvester's H with entries ±1/√n, H[i][j] = (−1)^popcount(i&j)/√n.
// It is its own inverse. n = 0 leaves x alone.
func hadamardRows(x []float32, n int) {
	if n == 0 {
		return
	}
	s := ml.HadamardScale(n)
	for r := 0; r+n <= len(x); r += n {
		v := x[r : r+n]
		for h := 1; h < n; h *= 2 {
			for i := 0; i < n; i += 2 * h {
				for j := i; j < i+h; j++ {
					a, b := v[j], v[j+h]
					v[j], v[j+h] = a+b, a-b
				}
			}
		}
		for i := range v {
			v[i] *= s
		}
	}
}
