package kernels

import (
	"strings"

	"github.com/redlite/batch/engine/quant"
)

//go:generate go run ./gen

// MatMulTypes are the weight formats the matrix kernels (mul_mv_*, mul_mm_*, mul_mv_id_*,
// mul_mm_id_*, get_rows_*) are written for: every type of the fixture models and of
// Bartowski's Qwen3-Next GGUFs, and every other type engine/quant computes with, so that
// the Metal backend runs any model the CPU backend runs. The kernel entry points in
// mul_mat.metal and get_rows.metal are generated from this list (go generate), so adding a
// type here and its decoder in quant_blocks.h is the whole change.
var MatMulTypes = []quant.Type{
	quant.F32, quant.F16, quant.BF16,
	quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q8_0,
	quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K,
	quant.IQ2_XXS, quant.IQ2_XS, quant.IQ2_S, quant.IQ3_XXS, quant.IQ3_S,
	quant.IQ1_S, quant.IQ1_M, quant.IQ4_NL, quant.IQ4_XS,
	quant.MXFP4,
}

// Geometry of the matrix kernels. go generate writes it into mul_mat_geometry.h as the
// kernels' macros, so that the kernels and the host's dispatch sizes (package metalkit)
// share one definition.
const (
	// Mat-vec: MvSimdgroups SIMD groups of 32 lanes per threadgroup, MvTokens tokens per
	// threadgroup; a lane decodes MvSpan chunks of 16 values of a row before moving on.
	MvSimdgroups = 2
	MvSpan       = 8
	MvTokens     = 4
	// Mat-mat: a threadgroup of MmThreads threads computes MmRows rows by MmTokens tokens,
	// MmDepth columns at a time, a SIMD group per 16 × 16 part; the weight tile's
	// MmRows·MmDepth/16 chunks are decoded by that many threads, the activations copied by
	// the rest (kernels/mul_mat.h asserts what these must satisfy).
	MmRows    = 32
	MmTokens  = 32
	MmDepth   = 32
	MmThreads = 128
	// Row lookups: threads per threadgroup, one chunk of 16 values each.
	GetRowsThreads = 64
)

// TypeSuffix is the suffix of a kernel's name for weight type t, spelled as ggml spells its
// type names: lower case but for the K of the K-quants ("q4_K", "iq2_xxs", "f16").
func TypeSuffix(t quant.Type) string {
	s := strings.ToLower(t.String())
	if strings.HasSuffix(s, "_k") {
		s = s[:len(s)-1] + "K"
	}
	return s
}
