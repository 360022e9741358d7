package metalkit

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/kernels"
)

// The KV cache on the device, with the CPU backend's semantics (engine/cpu/cache.go): a
// pool of blocks of blockSize positions per layer, keys and values each a device buffer of
// [blocks·blockSize, kvHeads, headDim] in float32 or float16; a sequence's cache holds a
// table of its blocks, in host memory for Alloc/Free and in a device buffer of int32 block
// numbers that the kernels read (position p lives in row table[p/blockSize]·blockSize +
// p%blockSize). A cache made by newCache has a pool of its own with a single block of its
// whole capacity.

// attnSplit is the most positions one decode threadgroup attends (Red Lite measured blocks
// of 128 fastest at ~8400 positions: 112.8 ms against 164.3 for 256 and 146.5 for 64).
const attnSplit = kernels.AttnDecodeThreads

type kvPool struct {
	dev               device.Device
	dtype             ml.DType
	layers, kvHeads   int
	headDim           int
	blockSize, blocks int
	k, v              []device.Buffer // per layer

	list *ml.BlockList

	mu      sync.Mutex // guards the buffers below and the release of k and v
	freed   bool
	work    device.Buffer   // split-K partials of decode attention, grown on demand
	retired []device.Buffer // smaller work buffers a pass not yet run may still use
}

// cache is one sequence's view of a pool: its blocks in order, and that table on the device.
type cache struct {
	pool     *kvPool
	pages    []int32
	table    device.Buffer
	capacity int
	shared   int  // positions in blocks shared by reference: read-only
	private  bool // the pool is the cache's own: freeing the cache frees it
	freed    bool
}

var (
	_ ml.Cache  = (*cache)(nil)
	_ ml.KVPool = (*kvPool)(nil)
)

func newKVPool(dev device.Device, layers, kvHeads, headDim, blocks, blockSize int, dt ml.DType) (*kvPool, error) {
	if layers < 0 || kvHeads <= 0 || headDim <= 0 || blocks <= 0 || blockSize <= 0 {
		return nil, fmt.Errorf("metalkit: bad cache shape: %d layers, %d kv heads of %d, %d blocks of %d positions", layers, kvHeads, headDim, blocks, blockSize)
	}
	if dt != ml.F32 && dt != ml.F16 && dt != ml.Q8_0 {
		return nil, fmt.Errorf("metalkit: cache precision %v not supported", dt)
	}
	if dt == ml.Q8_0 && (!dt.RowFits(headDim) || headDim > kernels.AttnMaxHeadDim) {
		// kv_store_q8_0 quantizes a head in thread memory, in whole blocks.
		return nil, fmt.Errorf("metalkit: a %v cache needs heads of a multiple of %d features up to %d, not %d", dt, ml.Q8_0Block, kernels.AttnMaxHeadDim, headDim)
	}
	if headDim%4 != 0 {
		// The attention kernels load keys as float4/half4.
		return nil, fmt.Errorf("metalkit: a head of %d features is not a multiple of 4", headDim)
	}
	if blocks > 1 && blockSize > attnSplit && blockSize%attnSplit != 0 {
		// A decode split never crosses a block (its rows are contiguous): the split is the
		// block when it is smaller, and must divide it when it is larger.
		return nil, fmt.Errorf("metalkit: a KV block of %d positions is neither at most %d nor a multiple of it", blockSize, attnSplit)
	}
	p := &kvPool{dev: dev, dtype: dt, layers: layers, kvHeads: kvHeads, headDim: headDim, blockSize: blockSize, blocks: blocks}
	size := int64(blocks) * int64(blockSize) * dt.RowBytes(kvHeads*headDim)
	if size > dev.MaxBufferLength() {
		return nil, fmt.Errorf("metalkit: a layer's keys of %d blocks of %d positions take %d bytes, more than the device's largest buffer (%d)", blocks, blockSize, size, dev.MaxBufferLength())
	}
	for range layers {
		k, err := dev.NewBuffer(size)
		if err != nil {
			p.Free()
			return nil, fmt.Errorf("metalkit: KV cache of %d bytes per layer: %w", size, err)
		}
		p.k = append(p.k, k)
		v, err := dev.NewBuffer(size)
		if err != nil {
			p.Free()
			return nil, fmt.Errorf("metalkit: KV cache of %d bytes per layer: %w", size, err)
		}
		p.v = append(p.v, v)
	}
	p.list = ml.NewBlockList(blocks, blockSize)
	return p, nil
}

func newCache(dev device.Device, layers, kvHeads, headDim, capacity int, dt ml.DType) (*cache, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("metalkit: bad cache shape: %d layers, %d kv heads of %d, %d positions", layers, kvHeads, headDim, capacity)
	}
	p, err := newKVPool(dev, layers, kvHeads, headDim, 1, capacity, dt)
	if err != nil {
		return nil, err
	}
	c, err := p.alloc(capacity)
	if err != nil {
		p.Free()
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

func (p *kvPool) Share(c ml.Cache, blocks int) (*ml.SharedBlocks, error) {
	cc, ok := c.(*cache)
	if !ok || cc.pool != p || cc.private || cc.freed {
		return nil, fmt.Errorf("metalkit: sharing blocks of a cache not drawn from this pool")
	}
	if blocks < 0 || blocks > len(cc.pages) {
		return nil, fmt.Errorf("metalkit: sharing %d blocks of a cache of %d", blocks, len(cc.pages))
	}
	h, err := p.list.Hold(cc.pages[:blocks])
	if err != nil {
		return nil, fmt.Errorf("metalkit: %w", err)
	}
	cc.shared = max(cc.shared, blocks*p.blockSize)
	return h, nil
}

func (p *kvPool) AllocShared(prefix *ml.SharedBlocks, positions int) (ml.Cache, error) {
	pages, err := p.list.TakeAfter(prefix, positions)
	if err != nil {
		return nil, fmt.Errorf("metalkit: %w", err)
	}
	c, err := p.withTable(pages)
	if err != nil {
		return nil, err
	}
	c.shared = prefix.Len() * p.blockSize
	return c, nil
}

func (p *kvPool) alloc(positions int) (*cache, error) {
	pages, err := p.list.Take(positions)
	if err != nil {
		return nil, fmt.Errorf("metalkit: %w", err)
	}
	return p.withTable(pages)
}

// withTable makes the cache of pages, writing its block table to the device; on failure it
// gives the pages back.
func (p *kvPool) withTable(pages []int32) (*cache, error) {
	need := len(pages)
	table, err := p.dev.NewBuffer(int64(4 * need))
	if err != nil {
		p.list.Give(pages)
		return nil, fmt.Errorf("metalkit: block table of %d blocks: %w", need, err)
	}
	raw := make([]byte, 4*need)
	for i, b := range pages {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(b))
	}
	if err := table.Write(0, raw); err != nil {
		table.Release()
		p.list.Give(pages)
		return nil, fmt.Errorf("metalkit: block table of %d blocks: %w", need, err)
	}
	return &cache{pool: p, pages: pages, table: table, capacity: need * p.blockSize}, nil
}

// Free releases the pool's buffers; operations on its caches afterwards fail their pass.
func (p *kvPool) Free() {
	p.list.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range append(append(p.k, p.v...), p.retired...) {
		b.Release()
	}
	if p.work != nil {
		p.work.Release()
	}
	p.k, p.v, p.retired, p.work = nil, nil, nil, nil
	p.freed = true
}

// workspace returns size bytes of the pool's scratch for decode attention's partial
// results. Passes run one at a time over a pool (the scheduler's steps), and the dispatches
// of one pass run in order, so every attention of the pass can use the same bytes. A
// larger buffer replaces a smaller one at encoding time; the smaller one is kept until the
// pool is freed, since a pass encoded before may still read it.
func (p *kvPool) workspace(size int64) (Region, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.freed {
		return Region{}, fmt.Errorf("metalkit: attention over a freed KV pool")
	}
	if p.work == nil || p.work.Len() < size {
		if p.work != nil {
			size = max(size, 2*p.work.Len())
		}
		b, err := p.dev.NewBuffer(size)
		if err != nil {
			return Region{}, fmt.Errorf("metalkit: attention workspace of %d bytes: %w", size, err)
		}
		if p.work != nil {
			p.retired = append(p.retired, p.work)
		}
		p.work = b
	}
	return Region{Buf: p.work, Len: p.work.Len()}, nil
}

func (c *cache) DType() ml.DType { return c.pool.dtype }
func (c *cache) Capacity() int   { return c.capacity }
func (c *cache) Bytes() int64    { return int64(len(c.pages)) * c.pool.BlockBytes() }

// Free gives the cache's blocks back to its pool (and frees a private pool). Calling it
// twice is harmless.
func (c *cache) Free() {
	// Under the pool's lock, as usable reads it where an operation is encoded.
	c.pool.mu.Lock()
	done := c.freed
	c.freed = true
	c.pool.mu.Unlock()
	if done {
		return
	}
	c.table.Release()
	if c.private {
		c.pool.Free()
		return
	}
	c.pool.list.Give(c.pages)
	c.pages = nil
}

// usable refuses a freed cache, or one whose pool was freed, where an operation is encoded.
func (c *cache) usable(what string) error {
	c.pool.mu.Lock()
	defer c.pool.mu.Unlock()
	if c.freed || c.pool.freed {
		return fmt.Errorf("metalkit: %s a freed KV cache", what)
	}
	return nil
}

// split is the positions per decode split: attnSplit, or the block when blocks are smaller,
// so that a split's rows are contiguous in one block (a private cache is one block).
func (c *cache) split() int {
	if c.private || c.pool.blockSize%attnSplit == 0 {
		return attnSplit
	}
	s := min(attnSplit, c.pool.blockSize)
	if c.pool.blockSize%s != 0 {
		panic(fmt.Sprintf("metalkit: a decode split of %d positions would cross KV blocks of %d", s, c.pool.blockSize))
	}
	return s
}

// layerK and layerV are a layer's keys and values in the pool; tableRegion the block table.
func (c *cache) layerK(layer int) Region {
	return Region{Buf: c.pool.k[layer], Len: c.pool.k[layer].Len()}
}

func (c *cache) layerV(layer int) Region {
	return Region{Buf: c.pool.v[layer], Len: c.pool.v[layer].Len()}
}

func (c *cache) tableRegion() Region { return Region{Buf: c.table, Len: c.table.Len()} }

// rowFloats is one position's values of a layer: kvHeads·headDim.
func (c *cache) rowFloats() int { return c.pool.kvHeads * c.pool.headDim }

// checkSpan validates an operation on positions [pos0, pos0+n) of a layer.
func (c *cache) checkSpan(what string, layer, pos0, n int) error {
	if err := c.usable(what); err != nil {
		return err
	}
	if layer < 0 || layer >= c.pool.layers {
		return fmt.Errorf("metalkit: %s layer %d of a KV cache of %d layers", what, layer, c.pool.layers)
	}
	if pos0 < 0 || n < 0 || pos0+n > c.capacity {
		return fmt.Errorf("metalkit: %s positions [%d, %d) of a KV cache of %d", what, pos0, pos0+n, c.capacity)
	}
	return nil
}

// storeKV writes k and v [n, kvHeads, headDim] float32 at positions pos0 … of the cache's
// layer, converted to the cache's type.
func (e *encoder) storeKV(c *cache, layer, pos0, n int, k, v Region) {
	e.kvCopy(true, c, layer, pos0, n, k, v)
}

// loadKV reads positions [pos0, pos0+n) of the cache's layer as float32 k and v
// [n, kvHeads, headDim].
func (e *encoder) loadKV(c *cache, layer, pos0, n int, k, v Region) {
	e.kvCopy(false, c, layer, pos0, n, k, v)
}

// kvCopy encodes a store (kv_store_<type>) or a load (kv_load_<type>): one thread per
// value, its row found through the block table.
func (e *encoder) kvCopy(store bool, c *cache, layer, pos0, n int, k, v Region) {
	if e.err != nil {
		return
	}
	what, name := "load from", "kv_load_"
	if store {
		what, name = "store in", "kv_store_"
	}
	if err := c.checkSpan(what, layer, pos0, n); err != nil {
		e.err = err
		return
	}
	if store && pos0 < c.shared {
		e.err = fmt.Errorf("metalkit: store at %d inside the %d positions shared with other sequences", pos0, c.shared)
		return
	}
	if n == 0 {
		return
	}
	row := c.rowFloats()
	if err := regionsHold(name+"f32", int64(4*n*row), k, v); err != nil {
		e.err = err
		return
	}
	const threads = 256
	p := c.pool
	items := n * row // a thread per value; per head of a position for q8_0
	if p.dtype == ml.Q8_0 {
		items = n * p.kvHeads
	}
	groups := [3]int{ml.BlocksFor(items, threads), 1, 1}
	cost := kvCost(store, n, row, p.dtype)
	rk, rv := ml.KVRotations(p.dtype, p.headDim)
	args := kernels.KVStoreArgs{N: int32(n), Row: int32(row), Pos0: int32(pos0), BlockSize: int32(p.blockSize),
		HeadDim: int32(p.headDim), RotK: int32(rk), RotV: int32(rv), ScaleK: ml.HadamardScale(rk), ScaleV: ml.HadamardScale(rv)}
	if store {
		e.dispatch(name+p.dtype.String(), nil, groups, [3]int{threads, 1, 1}, 0, cost,
			args, k, v, c.layerK(layer), c.layerV(layer), c.tableRegion())
		return
	}
	e.dispatch(name+p.dtype.String(), nil, groups, [3]int{threads, 1, 1}, 0, cost,
		kernels.KVLoadArgs(args), c.layerK(layer), c.layerV(layer), c.tableRegion(), k, v)
}

// kvCost: the keys and values of n positions cross between float32 tensors and the cache.
func kvCost(store bool, n, row int, dt ml.DType) device.Cost {
	f32, cached := int64(2*n*row*4), 2*int64(n)*dt.RowBytes(row)
	if store {
		return device.Cost{Label: "kv store", Read: f32, Written: cached}
	}
	return device.Cost{Label: "kv load", Read: cached, Written: f32}
}

// regionsHold checks that every region holds at least size bytes.
func regionsHold(op string, size int64, rs ...Region) error {
	for i, r := range rs {
		if r.Buf == nil || r.Len < size {
			return fmt.Errorf("metalkit: %s: operand %d holds %d bytes, needs %d", op, i+1, r.Len, size)
		}
	}
	return nil
}
