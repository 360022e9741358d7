// Package qwen3next is the Qwen3-Next architecture ("qwen3next" in GGUF): a hybrid of Gated
// DeltaNet (linear attention with a recurrent state) and gated full-attention layers, every
// layer followed by a mixture of experts with a gated shared expert. The Qwen3.5/3.6
// hybrids ("qwen35" with a SwiGLU feed-forward, "qwen35moe" with qwen3next's experts) are
// variants of the same graph: see variant.
//
// Each layer is h = x + mixer(norm(x)), out = h + ffn(norm(h)). By default three DeltaNet
// layers are followed by one full-attention layer (full_attention_interval 4); only the
// full-attention layers keep a KV cache, the DeltaNet layers keep a conv window and a state
// matrix per head instead.
package qwen3next

import (
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
)

func init() {
	for name := range variants {
		model.Register(name, Load)
	}
}

// variant is what sets an architecture of the family apart.
type variant struct {
	arch string
	// qwen35 is Qwen3.5's DeltaNet and attention: β and α from projections of their own
	// (ssm_beta, ssm_alpha, one column per value head), value head h reading key head
	// h mod hk (qwen3next: h / (hv/hk)), and rotary sections (rope.dimension_sections) that
	// text positions fill alike.
	qwen35 bool
	// moe: routed experts and a gated shared expert; else a SwiGLU feed-forward.
	moe bool
}

var variants = map[string]variant{
	"qwen3next": {arch: "qwen3next", moe: true},
	"qwen35":    {arch: "qwen35", qwen35: true},
	"qwen35moe": {arch: "qwen35moe", qwen35: true, moe: true},
}

// Model holds the bound weights. Shapes in comments are GGUF order (input dimension first):
// d embedding, hd attention head dim, H/KV query/key-value heads, hk/hv DeltaNet key/value
// heads of dk/dv, r = hv/hk, C = 2·hk·dk + hv·dv conv channels, E experts of ff, ffs shared.
type Model struct {
	v    variant
	cfg  model.Config
	eps  float32
	rope ml.RoPE

	convKernel     int // causal conv width
	hk, hv, dk, dv int
	convCh         int
	experts, used  int
	ffExp, ffShexp int
	ff             int // the SwiGLU feed-forward's width (qwen35)

	tokenEmbd  ml.Weight // (d, vocab)
	outputNorm ml.Weight // (d)
	output     ml.Weight // (d, vocab); the embedding table when tied
	layers     []layer

	cacheLayer []int // per layer: index in the KV cache, or −1 for DeltaNet layers
	stateLayer []int // per layer: index of its recurrent state, or −1 for attention layers
	deltaCount int

	mtp *mtpBlock // nil without a next-token-prediction block

	facts facts
}

// mtpBlock is the next-token-prediction (NextN) head stored after the main layers: it mixes
// the embedding of a token with the main model's final hidden state at the position before
// it and runs one full-attention + MoE layer to predict the token after.
type mtpBlock struct {
	layer              // full attention and MoE, as the trunk's
	ehProj   ml.Weight // (2·d, d) over [norm(embedding) | norm(hidden)]
	enorm    ml.Weight // (d)
	hnorm    ml.Weight // (d)
	embed    ml.Weight // (d, vocab) or nil: the main embedding table
	headNorm ml.Weight // (d) or nil: output_norm
	head     ml.Weight // (d, vocab) or nil: the main output matrix
}

type layer struct {
	recurrent bool
	attnNorm  ml.Weight // (d)
	postNorm  ml.Weight // (d) before the MoE

	// Gated full attention.
	q     ml.Weight // (d, H·2·hd): per head the query, then the output gate
	k     ml.Weight // (d, KV·hd)
	v     ml.Weight // (d, KV·hd)
	qNorm ml.Weight // (hd)
	kNorm ml.Weight // (hd)
	o     ml.Weight // (H·hd, d)

	// Gated DeltaNet.
	qkv    ml.Weight // (d, C): q (hk·dk), k (hk·dk), v (hv·dv); nil in the legacy layout
	z      ml.Weight // (d, hv·dv) output gate; nil in the legacy layout
	in     ml.Weight // legacy (d, hk·(2·dk + 2·r·dv)): per key head q, k, v of its r heads, z
	conv   ml.Weight // (kernel, C) depthwise causal conv
	ba     ml.Weight // (d, 2·hv): per key head β of its r heads, then α of them; nil in qwen35
	beta   ml.Weight // qwen35 (d, hv)
	alpha  ml.Weight // qwen35 (d, hv)
	dtBias ml.Weight // (hv)
	a      ml.Weight // (hv) −exp(A_log)
	norm   ml.Weight // (dv) gated RMSNorm
	out    ml.Weight // (hv·dv, d)

	// SwiGLU feed-forward (qwen35).
	gate ml.Weight // (d, ff)
	up   ml.Weight // (d, ff)
	down ml.Weight // (ff, d)

	// Mixture of experts.
	router   ml.Weight // (d, E)
	gateExps ml.Weight // (d, ff, E)
	upExps   ml.Weight // (d, ff, E)
	downExps ml.Weight // (ff, d, E)
	shGate   ml.Weight // (d) → one logit per token for the shared expert's sigmoid gate
	shGateFF ml.Weight // (d, ffs)
	shUp     ml.Weight // (d, ffs)
	shDown   ml.Weight // (ffs, d)
}

func (m *Model) Config() model.Config { return m.cfg }
