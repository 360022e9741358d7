package metalkit

import (
	"fmt"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/kernels"
)

// A q8_0 cache (engine/cpu's semantics, as llama.cpp stores it) holds its heads rotated
// (ml.KVRotations) in Q8_0 blocks: attention over it takes the queries rotated as the keys
// and rounded to q8_0, and rotates its output back from the values' rotation. The kernels
// read the blocks themselves (kv_q8_0 in kv_cache.h); these two graph steps are the rest.

// kvQuery is the queries q as attention over kc reads them: q itself for a plain cache.
func (c *context) kvQuery(q *tensor, kc *cache) *tensor {
	if kc.pool.dtype != ml.Q8_0 {
		return q
	}
	rk, _ := ml.KVRotations(kc.pool.dtype, kc.pool.headDim)
	return c.kvRows("kv q8_0 query", q, kc.pool.headDim, rk, true)
}

// kvOutput is attention's output over caches of precision dt as the model reads it.
func (c *context) kvOutput(out *tensor, dt ml.DType, hd int) *tensor {
	if _, rv := ml.KVRotations(dt, hd); rv != 0 {
		return c.kvRows("kv q8_0 output", out, hd, rv, false)
	}
	return out
}

// kvRows records kv_q8_0_rows over x's rows of hd values into a new tensor.
func (c *context) kvRows(name string, x *tensor, hd, rot int, round bool) *tensor {
	if x.n%hd != 0 || hd > kernels.AttnMaxHeadDim {
		panic(fmt.Sprintf("metalkit: %s of %v in rows of %d", name, x.shape, hd))
	}
	out := c.out(x.shape...)
	c.record(name, true, func(e *encoder) { e.kvRows(c.region(x), c.region(out), hd, rot, round) }, []*tensor{out}, x)
	return out
}

// kvRows encodes kv_q8_0_rows: x's rows of hd float32 rotated by rot (0: none), then
// rounded to q8_0 when round is set, into y.
func (e *encoder) kvRows(x, y Region, hd, rot int, round bool) {
	if e.err != nil {
		return
	}
	if hd <= 0 || hd%ml.Q8_0Block != 0 || hd > kernels.AttnMaxHeadDim || x.Len%int64(4*hd) != 0 {
		e.err = fmt.Errorf("metalkit: kv_q8_0_rows of %d bytes in rows of %d", x.Len, hd)
		return
	}
	if err := regionsHold("kv_q8_0_rows", x.Len, y); err != nil {
		e.err = err
		return
	}
	rows := int(x.Len / int64(4*hd))
	args := kernels.KVRowsArgs{Rows: int32(rows), Len: int32(hd), Rot: int32(rot), Scale: ml.HadamardScale(rot)}
	if round {
		args.Round = 1
	}
	const threads = 64
	e.dispatch("kv_q8_0_rows", nil, [3]int{ml.BlocksFor(rows, threads), 1, 1}, [3]int{threads, 1, 1}, 0,
		device.Cost{Label: "kv q8_0 rows", Read: x.Len, Written: x.Len}, args, x, y)
}
