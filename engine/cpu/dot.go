package cpu

import (
	"fmt"
	"unsafe"

	"github.com/redlite/batch/engine/quant"
)

// Dot chooses how quantized weights are multiplied with activations: in the dot-product
// paths (decode and small batches), and for the types whose 8-bit kernels take every batch
// size (four-token and repacked kernels) in place of the GEMM, which expands the weights
// and is exact.
type Dot int

const (
	// DotAuto uses 8-bit activations for the types where that is faster on this machine
	// (quant.Int8Faster; Q8_0 where its rows are repacked, see int8Q8_0) and the exact path
	// for the rest. It is the default.
	DotAuto Dot = iota
	// DotExact multiplies float32 activations with the weights as stored: the reference,
	// bit-stable across batch sizes and the one the parity tests hold tightest.
	DotExact
	// DotInt8 quantizes activations to 8 bits (ggml's Q8_K; Q8_0 for Q8_0 weights) for
	// every type that has an 8-bit kernel, as llama.cpp's CPU backend does, faster or not.
	DotInt8
)

var dotNames = [...]string{DotAuto: "auto", DotExact: "exact", DotInt8: "int8"}

func (d Dot) String() string {
	if d >= 0 && int(d) < len(dotNames) {
		return dotNames[d]
	}
	return fmt.Sprintf("Dot(%d)", int(d))
}

// ParseDot maps "auto", "exact" or "int8" ("" is auto) to a Dot.
func ParseDot(s string) (Dot, error) {
	if s == "" {
		return DotAuto, nil
	}
	for d, n := range dotNames {
		if n == s {
			return Dot(d), nil
		}
	}
	return 0, fmt.Errorf("unknown CPU dot path %q (want auto, exact or int8)", s)
}

// SetDot chooses the dot path of later passes (not of a pass running now).
func (b *Backend) SetDot(d Dot) { b.dot.Store(int32(d)) }

// Dot is the dot path in use.
func (b *Backend) Dot() Dot { return Dot(b.dot.Load()) }

// Int8 reports whether products with weights of type t take 8-bit activations on the
// dot path in use (Q8_0's included).
func (b *Backend) Int8(t quant.Type) bool {
	if t == quant.Q8_0 {
		return b.int8Q8_0()
	}
	return b.int8(t)
}

// int8 reports whether products with weights of type t take 8-bit activations (ggml's
// Q8_K; Q8_0 has its own, int8Q8_0).
func (b *Backend) int8(t quant.Type) bool {
	switch b.Dot() {
	case DotExact:
		return false
	case DotInt8:
		return quant.Int8Dot(t)
	}
	return quant.Int8Faster(t)
}

// int8Q8_0 reports whether products with Q8_0 weights take activations quantized to Q8_0
// (quant.DotRowsQ8_0 and its four-token and repacked forms, bit for bit alike) at every
// batch size, in place of the exact dots and the float32 GEMM: under DotInt8, and under
// DotAuto where the machine has the repacked kernels, which match the GEMM on prefill and
// beat the exact dots on decode. The row-major AVX2 kernels beat the exact dots on decode
// too, but lose to the GEMM on prefill, which long documents are made of, so DotAuto
// leaves them out. A token gets the same numbers in a prompt chunk and in a decode step
// only because the path never changes with the batch size (cmd/redlite's
// TestGenerateLogprobsMatchLogits): integer dots for decode beside the float GEMM for
// prefill moved a token's logits by up to 0.06 nats.
func (b *Backend) int8Q8_0() bool {
	switch b.Dot() {
	case DotExact:
		return false
	case DotInt8:
		return true
	}
	return quant.Int8Repacked(quant.Q8_0)
}

// fusedMaxTokens is the batch size up to which each row is dotted straight from its
// quantized bytes, a tile of rows with every token in turn (see matmul); beyond it expanding
// rows to float32 once and running the GEMM is cheaper, below it the GEMM would fill few of
// its micro-kernel's 12 rows. The types without a SIMD dot kernel (exact or 8-bit) are
// slower per token than the GEMM on expanded weights, so the GEMM wins from 2 tokens.
func (b *Backend) fusedMaxTokens(t quant.Type) int {
	switch t {
	case quant.F32, quant.F16, quant.Q8_0, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.IQ2_XXS:
		return 8
	}
	if b.int8(t) && quant.Int8Vector(t) {
		return 8
	}
	return 1
}

// quantizeActs quantizes n tokens of cols activations (x[i·cols …]) to 8 bits, once per
// product: token i's blocks are acts[i·cols/256 …]. release returns the scratch.
func (c *context) quantizeActs(x []float32, n, cols int) (acts []quant.Q8K, release func()) {
	nb := cols / quant.QK_K
	buf := c.b.pool.scratch.get(n * nb * quant.Q8KFloats)
	acts = quant.Q8KView(buf, n*nb)
	c.b.pool.parallel(n*nb, 64, func(lo, hi int) {
		quant.QuantizeQ8K(x[lo*quant.QK_K:hi*quant.QK_K], acts[lo:hi])
	})
	return acts, func() { c.b.pool.scratch.put(buf) }
}

// q8_0SerialBlocks is the most blocks quantizeActsQ8_0 quantizes on the calling goroutine:
// one token of up to 8,192 values, a few µs with the AVX2 quantizer
// (BenchmarkDotRowsQ8_0/QuantizeQ8_0Ref: 2 µs for 64 blocks on the loaded EPYC), less
// than waking the pool for a parallel pass, which decode pays once per product.
const q8_0SerialBlocks = 256

// quantizeActsQ8_0 quantizes n tokens of cols activations to Q8_0 blocks, once per product:
// token i's blocks are acts[i·cols/32·34 …]. release returns the scratch.
func (c *context) quantizeActsQ8_0(x []float32, n, cols int) (acts []byte, release func()) {
	const bs, ts = 32, 34
	nb := n * cols / bs
	buf := c.b.pool.scratch.get((nb*ts + 3) / 4)
	acts = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf))), nb*ts)
	release = func() { c.b.pool.scratch.put(buf) }
	if nb <= q8_0SerialBlocks {
		quant.QuantizeQ8_0Ref(x[:nb*bs], acts)
		return acts, release
	}
	c.b.pool.parallel(nb, 64, func(lo, hi int) {
		quant.QuantizeQ8_0Ref(x[lo*bs:hi*bs], acts[lo*ts:hi*ts])
	})
	return acts, release
}

// dotTileQ8_0 is dotTile for Q8_0 rows with activations quantized to Q8_0: acts holds n
// tokens of equal length.
func dotTileQ8_0(rows, acts []byte, n int, out []float32, ldo int) {
	ab := len(acts) / n
	nr := len(rows) / ab
	i := 0
	for ; i+4 <= n; i += 4 {
		quant.DotRows4Q8_0(rows, acts[i*ab:(i+4)*ab], out[i*ldo:], ldo)
	}
	for ; i < n; i++ {
		quant.DotRowsQ8_0(rows, acts[i*ab:(i+1)*ab], out[i*ldo:i*ldo+nr])
	}
}

// dotTileQ8K is dotTile with 8-bit activations: acts holds n tokens of nb blocks each; four
// tokens per kernel call where the type has a four-token kernel.
func dotTileQ8K(t quant.Type, rows []byte, acts []quant.Q8K, nb, n int, out []float32, ldo int) {
	nr := len(rows) / t.RowBytes(nb*quant.QK_K)
	i := 0
	if quant.Int8Rows4(t) {
		for ; i+4 <= n; i += 4 {
			quant.DotRows4Q8K(t, rows, acts[i*nb:(i+4)*nb], out[i*ldo:], ldo)
		}
	}
	for ; i < n; i++ {
		quant.DotRowsQ8K(t, rows, acts[i*nb:(i+1)*nb], out[i*ldo:i*ldo+nr])
	}
}
