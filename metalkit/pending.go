package metalkit

// PENDING — DELETE THIS FILE AT MERGE.
//
// Stand-ins for the operations that other branches implement (metal.md's contracts): the
// matrix kernels (branch matmul: matmul.go) and the KV cache, attention and recurrent-state
// kernels (branch attn: cache.go, attention.go, deltanet.go). They let this branch build and
// test alone: binding works, and a pass that uses one of these operations fails at Compute
// with "metalkit: <op> not implemented yet". The signatures are the contracts'.

import (
	"errors"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/metalkit/device"
)

func (e *encoder) pending(op string) {
	if e.err == nil {
		e.err = errors.New("metalkit: " + op + " not implemented yet")
	}
}

// matMulSupported: every type the engine knows, so that models bind (branch matmul decides).
func matMulSupported(t quant.Type) bool { return quant.Supported(t) }

func (e *encoder) matMul(t quant.Type, w Region, rows, cols int, x, y Region, n int) {
	e.pending("MatMul")
}

func (e *encoder) matMulExperts(t quant.Type, w Region, experts, rows, cols int, x Region, xPerSlot bool, ids Region, k int, y Region, n int) {
	e.pending("MatMulExperts")
}

func (e *encoder) getRows(t quant.Type, table Region, cols int, ids Region, y Region, n int) {
	e.pending("Embed")
}

// cache and kvPool: the fields context.go's shape checks read are the attn branch's.
type cache struct {
	pool     *kvPool
	capacity int
}

func (c *cache) DType() ml.DType { return c.pool.dtype }
func (c *cache) Capacity() int   { return c.capacity }
func (c *cache) Bytes() int64    { return 0 }
func (c *cache) Free()           {}

type kvPool struct {
	ml.KVPool
	layers, kvHeads, headDim int
	dtype                    ml.DType
}

var errPendingCache = errors.New("metalkit: KV caches not implemented yet")

func newCache(dev device.Device, layers, kvHeads, headDim, capacity int, dt ml.DType) (*cache, error) {
	return nil, errPendingCache
}

func newKVPool(dev device.Device, layers, kvHeads, headDim, blocks, blockSize int, dt ml.DType) (*kvPool, error) {
	return nil, errPendingCache
}

func (e *encoder) storeKV(c *cache, layer, pos0, n int, k, v Region) { e.pending("StoreKV") }

func (e *encoder) attention(q Region, n, heads int, c *cache, layer, pos0 int, scale float32, out Region) {
	e.pending("Attention")
}

func (e *encoder) loadKV(c *cache, layer, pos0, n int, k, v Region) { e.pending("LoadKV") }

func (e *encoder) conv1dCausal(x Region, n, channels int, w Region, wType quant.Type, kernel int, state, y Region) {
	e.pending("Conv1DCausal")
}

func (e *encoder) deltaNet(q, k, v, g, beta, state Region, n, kHeads, vHeads, dk, dv int, scale float32, out Region) {
	e.pending("DeltaNet")
}
