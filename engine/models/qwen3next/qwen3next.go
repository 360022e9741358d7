// Package qwen3next is the Qwen3-Next architecture ("qwen3next" in GGUF): a hybrid of Gated
// DeltaNet (linear attention with a recurrent state) and gated full-attention layers, every
// layer followed by a mixture of experts with a gated shared expert.
//
// Each layer is h = x + mixer(norm(x)), out = h + moe(norm(h)). By default three DeltaNet
// layers are followed by one full-attention layer (full_attention_interval 4); only the
// full-attention layers keep a KV cache, the DeltaNet layers keep a conv window and a state
// matrix per head instead.
package qwen3next

import (
	"fmt"
	"math"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/engine/modelinfo"
)

func init() { model.Register("qwen3next", Load) }

const arch = "qwen3next"

// Model holds the bound weights. Shapes in comments are GGUF order (input dimension first):
// d embedding, hd attention head dim, H/KV query/key-value heads, hk/hv DeltaNet key/value
// heads of dk/dv, r = hv/hk, C = 2·hk·dk + hv·dv conv channels, E experts of ff, ffs shared.
type Model struct {
	cfg  model.Config
	eps  float32
	rope ml.RoPE

	convKernel     int // causal conv width
	hk, hv, dk, dv int
	convCh         int
	experts, used  int
	ffExp, ffShexp int

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
	ba     ml.Weight // (d, 2·hv): per key head β of its r heads, then α of them
	dtBias ml.Weight // (hv)
	a      ml.Weight // (hv) −exp(A_log)
	norm   ml.Weight // (dv) gated RMSNorm
	out    ml.Weight // (hv·dv, d)

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

// Load binds a qwen3next GGUF's weights on b and validates every shape.
func Load(f *gguf.File, b ml.Backend) (model.Graph, error) {
	bd := &model.Binder{Arch: arch, File: f, B: b}
	m := &Model{}
	c := &m.cfg
	c.Arch = arch
	blocks := bd.Int("block_count")
	nextn := bd.IntOr("nextn_predict_layers", 0)
	c.Layers = blocks - nextn
	c.Embedding = bd.Int("embedding_length")
	c.Heads = bd.Int("attention.head_count")
	c.KVHeads = bd.Int("attention.head_count_kv")
	c.ContextLength = bd.IntOr("context_length", 0)
	c.HeadDim = bd.IntOr("attention.key_length", 0)
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Embedding / c.Heads
	}
	vdim := bd.IntOr("attention.value_length", c.HeadDim)
	m.eps = bd.FloatOr("attention.layer_norm_rms_epsilon", 1e-6)
	m.rope = ml.RoPE{Dims: bd.IntOr("rope.dimension_count", c.HeadDim), Base: bd.FloatOr("rope.freq_base", 1e7), NeoX: true}
	m.convKernel = bd.Int("ssm.conv_kernel")
	inner := bd.Int("ssm.inner_size")
	m.dk = bd.Int("ssm.state_size")
	m.hk = bd.Int("ssm.group_count")
	m.hv = bd.Int("ssm.time_step_rank")
	m.experts = bd.Int("expert_count")
	m.used = bd.Int("expert_used_count")
	m.ffExp = bd.IntOr("expert_feed_forward_length", 0)
	m.ffShexp = bd.IntOr("expert_shared_feed_forward_length", 0)
	ff := bd.IntOr("feed_forward_length", 0)
	interval := bd.IntOr("full_attention_interval", 4)
	if err := bd.Err(); err != nil {
		return nil, err
	}
	if m.ffExp == 0 && m.used > 0 {
		m.ffExp = ff / m.used
	}
	if m.ffShexp == 0 {
		m.ffShexp = ff
	}
	bd.Check(c.Layers > 0 && nextn >= 0, "block_count %d with nextn_predict_layers %d leaves no layers", blocks, nextn)
	// Every block has tensors, so a count beyond the file's tensors is corrupt (and would
	// size the per-layer tables).
	bd.Check(blocks <= len(f.Tensors), "block_count %d exceeds the file's %d tensors", blocks, len(f.Tensors))
	bd.Check(c.Embedding > 0 && c.Heads > 0 && c.HeadDim > 0, "embedding_length, head_count and key_length must be positive")
	bd.Check(c.KVHeads > 0 && c.Heads%c.KVHeads == 0, "head_count %d is not a multiple of head_count_kv %d", c.Heads, c.KVHeads)
	bd.Check(vdim == c.HeadDim, "value_length %d differs from key_length %d", vdim, c.HeadDim)
	bd.Check(m.rope.Dims > 0 && m.rope.Dims <= c.HeadDim && m.rope.Dims%2 == 0, "rope.dimension_count %d does not fit head dim %d", m.rope.Dims, c.HeadDim)
	bd.Check(m.convKernel > 0, "ssm.conv_kernel %d must be positive", m.convKernel)
	bd.Check(m.dk > 0 && m.hk > 0 && m.hv > 0 && m.hv%m.hk == 0, "ssm.time_step_rank %d (value heads) must be a positive multiple of ssm.group_count %d (key heads)", m.hv, m.hk)
	bd.Check(m.hv > 0 && inner%max(m.hv, 1) == 0 && inner/max(m.hv, 1) == m.dk, "ssm.inner_size %d is not ssm.time_step_rank %d × ssm.state_size %d", inner, m.hv, m.dk)
	bd.Check(m.experts > 0 && m.used > 0 && m.used <= m.experts, "expert_used_count %d must be in 1 … expert_count %d", m.used, m.experts)
	bd.Check(m.ffExp > 0 && m.ffShexp > 0, "expert_feed_forward_length %d and expert_shared_feed_forward_length %d must be positive", m.ffExp, m.ffShexp)
	bd.Check(interval > 0, "full_attention_interval %d must be positive", interval)
	if err := bd.Err(); err != nil {
		return nil, err
	}
	m.dv = inner / m.hv
	m.convCh = 2*m.hk*m.dk + m.hv*m.dv

	recurrent, err := layerKinds(f, blocks, c.Layers, interval)
	if err != nil {
		return nil, err
	}
	m.cacheLayer = make([]int, c.Layers)
	m.stateLayer = make([]int, c.Layers)
	for i, r := range recurrent {
		m.cacheLayer[i], m.stateLayer[i] = -1, -1
		if r {
			m.stateLayer[i] = m.deltaCount
			m.deltaCount++
		} else {
			m.cacheLayer[i] = c.AttnLayers
			c.AttnLayers++
		}
	}

	d := c.Embedding
	m.tokenEmbd = bd.Weight("token_embd.weight")
	if m.tokenEmbd != nil {
		c.Vocab = m.tokenEmbd.Dims()[len(m.tokenEmbd.Dims())-1]
		bd.Check(m.tokenEmbd.Dims()[0] == d, "token_embd.weight has rows of %d, want embedding_length %d", m.tokenEmbd.Dims()[0], d)
	}
	m.outputNorm = bd.Weight("output_norm.weight", d)
	m.output = bd.Optional("output.weight", d, c.Vocab)
	if m.output == nil {
		m.output = m.tokenEmbd
	}
	r := m.hv / m.hk
	m.layers = make([]layer, c.Layers)
	for i := range m.layers {
		l := &m.layers[i]
		l.recurrent = recurrent[i]
		l.attnNorm = bd.Layer(i, "attn_norm.weight", d)
		l.postNorm = bd.Layer(i, "post_attention_norm.weight", d)
		if l.recurrent {
			if has(f, i, "attn_qkv.weight") || !has(f, i, "ssm_in.weight") {
				l.qkv = bd.Layer(i, "attn_qkv.weight", d, m.convCh)
				l.z = bd.Layer(i, "attn_gate.weight", d, m.hv*m.dv)
			} else {
				l.in = bd.Layer(i, "ssm_in.weight", d, m.hk*(2*m.dk+2*r*m.dv))
			}
			l.conv = bd.Layer(i, "ssm_conv1d.weight", m.convKernel, m.convCh)
			l.ba = bd.Layer(i, "ssm_ba.weight", d, 2*m.hv)
			l.dtBias = bd.Layer(i, "ssm_dt.bias", m.hv)
			l.a = bd.Layer(i, "ssm_a", m.hv)
			l.norm = bd.Layer(i, "ssm_norm.weight", m.dv)
			l.out = bd.Layer(i, "ssm_out.weight", m.hv*m.dv, d)
		} else {
			m.bindAttention(bd, i, l)
		}
		m.bindMoE(bd, i, l)
	}
	if nextn > 0 {
		bd.Check(nextn == 1, "nextn_predict_layers %d: only one MTP block is supported", nextn)
		i := c.Layers
		opt := func(suffix string, want ...int) ml.Weight {
			return bd.Optional(fmt.Sprintf("blk.%d.%s", i, suffix), want...)
		}
		t := &mtpBlock{
			ehProj:   bd.Layer(i, "nextn.eh_proj.weight", 2*d, d),
			enorm:    bd.Layer(i, "nextn.enorm.weight", d),
			hnorm:    bd.Layer(i, "nextn.hnorm.weight", d),
			embed:    opt("nextn.embed_tokens.weight", d, c.Vocab),
			headNorm: opt("nextn.shared_head_norm.weight", d),
			head:     opt("nextn.shared_head_head.weight", d, c.Vocab),
		}
		t.attnNorm = bd.Layer(i, "attn_norm.weight", d)
		t.postNorm = bd.Layer(i, "post_attention_norm.weight", d)
		m.bindAttention(bd, i, &t.layer)
		m.bindMoE(bd, i, &t.layer)
		m.mtp = t
	}
	if err := bd.Err(); err != nil {
		return nil, err
	}
	m.facts = newFacts(f, m)
	return m, nil
}

func (m *Model) bindAttention(bd *model.Binder, i int, l *layer) {
	c := m.cfg
	d, hd := c.Embedding, c.HeadDim
	l.q = bd.Layer(i, "attn_q.weight", d, c.Heads*2*hd)
	l.k = bd.Layer(i, "attn_k.weight", d, c.KVHeads*hd)
	l.v = bd.Layer(i, "attn_v.weight", d, c.KVHeads*hd)
	l.qNorm = bd.Layer(i, "attn_q_norm.weight", hd)
	l.kNorm = bd.Layer(i, "attn_k_norm.weight", hd)
	l.o = bd.Layer(i, "attn_output.weight", c.Heads*hd, d)
}

func (m *Model) bindMoE(bd *model.Binder, i int, l *layer) {
	d := m.cfg.Embedding
	l.router = bd.Layer(i, "ffn_gate_inp.weight", d, m.experts)
	l.gateExps = bd.Layer(i, "ffn_gate_exps.weight", d, m.ffExp, m.experts)
	l.upExps = bd.Layer(i, "ffn_up_exps.weight", d, m.ffExp, m.experts)
	l.downExps = bd.Layer(i, "ffn_down_exps.weight", m.ffExp, d, m.experts)
	l.shGate = bd.Layer(i, "ffn_gate_inp_shexp.weight", d)
	l.shGateFF = bd.Layer(i, "ffn_gate_shexp.weight", d, m.ffShexp)
	l.shUp = bd.Layer(i, "ffn_up_shexp.weight", d, m.ffShexp)
	l.shDown = bd.Layer(i, "ffn_down_shexp.weight", m.ffShexp, d)
}

func has(f *gguf.File, layer int, suffix string) bool {
	_, ok := f.Tensor(fmt.Sprintf("blk.%d.%s", layer, suffix))
	return ok
}

// layerKinds says which of the first n layers are DeltaNet (recurrent) layers: from
// attention.recurrent_layers (one flag per block, or one for all) when present, else layer
// i is recurrent unless (i+1) is a multiple of the full-attention interval.
func layerKinds(f *gguf.File, blocks, n, interval int) ([]bool, error) {
	kinds := make([]bool, n)
	key := arch + ".attention.recurrent_layers"
	v, ok := f.Get(key)
	if !ok {
		for i := range kinds {
			kinds[i] = (i+1)%interval != 0
		}
		return kinds, nil
	}
	flags, err := boolFlags(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", arch, key, err)
	}
	switch len(flags) {
	case 1:
		for i := range kinds {
			kinds[i] = flags[0]
		}
	case blocks:
		copy(kinds, flags)
	default:
		return nil, fmt.Errorf("%s: %s has %d entries, want block_count %d", arch, key, len(flags), blocks)
	}
	return kinds, nil
}

// boolFlags reads a bool or integer, or an array of them.
func boolFlags(v gguf.Value) ([]bool, error) {
	if b, ok := v.Bool(); ok {
		return []bool{b}, nil
	}
	if i, ok := v.Int(); ok {
		return []bool{i != 0}, nil
	}
	switch x := v.Any().(type) {
	case []bool:
		return x, nil
	}
	if is, ok := v.Ints(); ok {
		out := make([]bool, len(is))
		for i, n := range is {
			out[i] = n != 0
		}
		return out, nil
	}
	return nil, fmt.Errorf("is %s, want bools or integers", v.Type)
}

func (m *Model) Config() model.Config { return m.cfg }

// State is one sequence: the KV cache of the full-attention layers and, per DeltaNet layer,
// the conv window [kernel−1, C] and the delta-rule state [hv, dv, dk].
type State struct {
	m     *Model
	kv    ml.Cache
	conv  []ml.Tensor
	delta []ml.Tensor
	mtp   *mtpState // set by EnableDraft
	b     ml.Backend
}

// mtpState is the MTP head's part of a sequence: its one-layer KV cache, the main model's
// last hidden state (paired with the next token), and copies of the recurrent states for
// rolling back a rejected draft.
type mtpState struct {
	kv      ml.Cache
	pending ml.Tensor // [1, d]
	saved   []ml.Tensor
}

func (m *Model) NewState(b ml.Backend, capacity int, kv ml.DType) (model.State, error) {
	c, err := b.NewCache(m.cfg.AttnLayers, m.cfg.KVHeads, m.cfg.HeadDim, capacity, kv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", arch, err)
	}
	return m.newState(b, c)
}

func (m *Model) NewKVPool(b ml.Backend, blocks, blockSize int, kv ml.DType) (ml.KVPool, error) {
	p, err := b.NewKVPool(m.cfg.AttnLayers, m.cfg.KVHeads, m.cfg.HeadDim, blocks, blockSize, kv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", arch, err)
	}
	return p, nil
}

func (m *Model) NewPooledState(b ml.Backend, pool ml.KVPool, capacity int) (model.State, error) {
	c, err := pool.Alloc(capacity)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", arch, err)
	}
	return m.newState(b, c)
}

// newState adds the recurrent state (one per sequence: llama.cpp's per-slot ssm state) to
// the KV cache c.
func (m *Model) newState(b ml.Backend, c ml.Cache) (model.State, error) {
	s := &State{m: m, b: b, kv: c}
	for range m.deltaCount {
		conv, err := b.NewTensor(m.convKernel-1, m.convCh)
		if err == nil {
			s.conv = append(s.conv, conv)
			var delta ml.Tensor
			delta, err = b.NewTensor(m.hv, m.dv, m.dk)
			if err == nil {
				s.delta = append(s.delta, delta)
			}
		}
		if err != nil {
			s.Free()
			return nil, fmt.Errorf("%s: %w", arch, err)
		}
	}
	return s, nil
}

func (s *State) Capacity() int { return s.kv.Capacity() }
func (s *State) Bytes() int64 {
	n := s.kv.Bytes() + s.m.RecurrentBytes()
	if s.mtp != nil {
		n += s.mtp.kv.Bytes() + s.m.RecurrentBytes() + 2*int64(s.m.cfg.Embedding)*4
	}
	return n
}

func (s *State) Snapshot(b ml.Backend, pos int) ([]byte, error) {
	out, err := model.AppendKV(nil, b, s.kv, s.m.cfg.AttnLayers, pos)
	if err == nil {
		out, err = model.AppendTensors(out, b, s.conv...)
	}
	if err == nil {
		out, err = model.AppendTensors(out, b, s.delta...)
	}
	if err == nil && s.mtp != nil {
		out, err = model.AppendKV(out, b, s.mtp.kv, 1, pos)
		if err == nil {
			out, err = model.AppendTensors(out, b, s.mtp.pending)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", arch, err)
	}
	return out, nil
}

// Free releases the caches and every state tensor, the MTP head's included.
func (s *State) Free() {
	s.kv.Free()
	for _, t := range s.recurrent() {
		s.b.Release(t)
	}
	if s.mtp != nil {
		s.mtp.kv.Free()
		for _, t := range s.mtp.saved {
			s.b.Release(t)
		}
	}
	s.conv, s.delta, s.mtp = nil, nil, nil
}

func (s *State) Restore(b ml.Backend, pos int, data []byte) error {
	c := s.m.cfg
	rest, err := model.RestoreKV(data, b, s.kv, c.AttnLayers, pos, c.KVHeads, c.HeadDim)
	if err == nil {
		rest, err = model.RestoreTensors(rest, b, s.conv...)
	}
	if err == nil {
		rest, err = model.RestoreTensors(rest, b, s.delta...)
	}
	if err == nil && s.mtp != nil {
		rest, err = model.RestoreKV(rest, b, s.mtp.kv, 1, pos, c.KVHeads, c.HeadDim)
		if err == nil {
			rest, err = model.RestoreTensors(rest, b, s.mtp.pending)
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", arch, err)
	}
	if len(rest) != 0 {
		return fmt.Errorf("%s: snapshot has %d bytes past its states", arch, len(rest))
	}
	return nil
}

func (m *Model) Forward(ctx ml.Context, b model.Batch) ml.Tensor {
	runs := b.MustRuns()
	n := len(b.Tokens)
	kvs := make([]ml.Cache, len(runs))
	for j, r := range runs {
		kvs[j] = r.State.(*State).kv
	}

	x := ctx.Embed(m.tokenEmbd, ctx.InputIDs(b.Tokens)) // [n, d]
	for i := range m.layers {
		l := &m.layers[i]
		// Mixer block: h = x + mixer(norm(x))
		xn := ctx.Name(ctx.RMSNorm(x, l.attnNorm, m.eps), "attn_norm", i)
		var a ml.Tensor
		if l.recurrent {
			a = m.deltaNet(ctx, runs, block{idx: i, slot: m.stateLayer[i], l: l}, xn, n)
		} else {
			a = m.attention(ctx, runs, kvs, block{idx: i, slot: m.cacheLayer[i], l: l}, xn, n)
		}
		h := ctx.Name(ctx.Add(a, x), "attn_residual", i)

		// MoE block: out = h + moe(norm(h))
		hn := ctx.Name(ctx.RMSNorm(h, l.postNorm, m.eps), "attn_post_norm", i)
		x = ctx.Name(ctx.Add(m.moe(ctx, block{idx: i, l: l}, hn, n), h), "l_out", i)
	}
	rows := b.LogitRows()
	drafting := false
	for _, r := range runs {
		drafting = drafting || r.State.(*State).mtp != nil
	}
	if !drafting {
		if len(rows) == 0 {
			return nil
		}
		x = ctx.Name(ctx.RMSNorm(model.GatherRows(ctx, x, rows), m.outputNorm, m.eps), "result_norm", -1)
		return ctx.Name(ctx.MatMul(m.output, x), "result_output", -1)
	}
	h := ctx.Name(ctx.RMSNorm(x, m.outputNorm, m.eps), "h_nextn", -1) // [n, d]
	for j, r := range runs {
		s := r.State.(*State)
		if s.mtp == nil {
			continue
		}
		// The MTP head follows the sequence: token t at position p is paired with the
		// hidden state of position p−1 (the one that predicted it).
		hr := model.RunRows(ctx, runs, j, h)
		prev := s.mtp.pending
		if r.N > 1 {
			d := m.cfg.Embedding
			flat := ctx.Concat(ctx.Reshape(prev, 1, d), ctx.Reshape(ctx.Rows(hr, 0, r.N-1), 1, (r.N-1)*d))
			prev = ctx.Reshape(flat, r.N, d)
		}
		m.mtpForward(ctx, s, b.Tokens[r.Start:r.Start+r.N], prev, r.Pos0, false)
		ctx.Assign(s.mtp.pending, ctx.Rows(hr, r.N-1, 1))
	}
	if len(rows) == 0 {
		return nil
	}
	return ctx.Name(ctx.MatMul(m.output, ctx.Name(model.GatherRows(ctx, h, rows), "result_norm", -1)), "result_output", -1)
}

// mtpForward runs the MTP head for tokens at pos0 … paired with hidden states h [n, d],
// writing its KV cache; with logits set it returns the head's logits for the last token,
// else nil.
func (m *Model) mtpForward(ctx ml.Context, s *State, tokens []int32, h ml.Tensor, pos0 int, logits bool) ml.Tensor {
	t, n, il := m.mtp, len(tokens), m.cfg.Layers
	embed := t.embed
	if embed == nil {
		embed = m.tokenEmbd
	}
	e := ctx.RMSNorm(ctx.Embed(embed, ctx.InputIDs(tokens)), t.enorm, m.eps)
	hn := ctx.RMSNorm(h, t.hnorm, m.eps)
	x := ctx.Name(ctx.MatMul(t.ehProj, ctx.Concat(e, hn)), "mtp_eh_proj", il) // [n, d]

	xn := ctx.RMSNorm(x, t.attnNorm, m.eps)
	b := block{idx: il, slot: 0, l: &t.layer} // the head's own one-layer cache
	if !logits {
		// Following the sequence only needs the head's keys and values.
		k, v := m.projectKV(ctx, b, xn, n)
		m.storeKV(ctx, s.mtp.kv, b, k, v, span{n, pos0})
		return nil
	}
	a := m.attention(ctx, []model.Run{{State: s, N: n, Pos0: pos0}}, []ml.Cache{s.mtp.kv}, b, xn, n)
	hr := ctx.Add(a, x)
	out := ctx.Name(ctx.Add(m.moe(ctx, b, ctx.RMSNorm(hr, t.postNorm, m.eps), n), hr), "mtp_post_ffn", il)
	norm, head := t.headNorm, t.head
	if norm == nil {
		norm = m.outputNorm
	}
	if head == nil {
		head = m.output
	}
	out = ctx.RMSNorm(ctx.Rows(out, n-1, 1), norm, m.eps)
	return ctx.Name(ctx.MatMul(head, out), "mtp_result_output", il)
}

// block is the block an operation belongs to: idx names its tensors in dumps, slot is its
// layer in the KV cache (attention) or in the recurrent state (DeltaNet), l its weights.
type block struct {
	idx, slot int
	l         *layer
}

// span is the tokens of a pass: n of them, from position pos0.
type span struct{ n, pos0 int }

// attention is gated full attention: softmax attention of normed, partially rotated q and k,
// multiplied by sigmoid of a gate that the q projection carries beside each head's query.
// Each run of the batch rotates its own positions and attends over its own cache, kvs[run].
func (m *Model) attention(ctx ml.Context, runs []model.Run, kvs []ml.Cache, b block, xn ml.Tensor, n int) ml.Tensor {
	c, l, i := m.cfg, b.l, b.idx
	hd := c.HeadDim
	qg := ctx.Reshape(ctx.MatMul(l.q, xn), n, c.Heads, 2*hd)                       // per head: query | gate
	q := ctx.RMSNorm(ctx.Slice(qg, 0, hd), l.qNorm, m.eps)                         // [n, H, hd], per-head norm
	gate := ctx.Name(ctx.Reshape(ctx.Slice(qg, hd, hd), n, c.Heads*hd), "gate", i) // [n, H·hd]
	k, v := m.projectKV(ctx, b, xn, n)
	// Every run's keys are stored and queries rotated before any attends, so that the
	// batch's q, k and v are gone by then and several runs hold no more than one.
	qr := make([]ml.Tensor, len(runs))
	for j, r := range runs {
		m.storeKV(ctx, kvs[j], b, model.RunRows(ctx, runs, j, k), model.RunRows(ctx, runs, j, v), span{r.N, r.Pos0})
		qr[j] = ctx.Name(ctx.RoPE(model.RunRows(ctx, runs, j, q), r.Pos0, m.rope), "Qcur", i) // rotate the first rope.Dims
	}
	parts := make([]ml.Tensor, len(runs))
	for j, r := range runs {
		parts[j] = ctx.Attention(qr[j], kvs[j], b.slot, r.Pos0, float32(1/math.Sqrt(float64(hd))))
	}
	a := ctx.Name(ctx.Mul(model.ConcatRows(ctx, parts...), ctx.Sigmoid(gate)), "attn_gated", i) // [n, H·hd]
	return ctx.Name(ctx.MatMul(l.o, a), "attn_output", i)
}

// projectKV projects xn to normalized keys (not yet rotated) and values, [n, KV, hd] each.
func (m *Model) projectKV(ctx ml.Context, b block, xn ml.Tensor, n int) (k, v ml.Tensor) {
	c, l := m.cfg, b.l
	k = ctx.RMSNorm(ctx.Reshape(ctx.MatMul(l.k, xn), n, c.KVHeads, c.HeadDim), l.kNorm, m.eps)
	v = ctx.Reshape(ctx.MatMul(l.v, xn), n, c.KVHeads, c.HeadDim)
	return k, v
}

// storeKV rotates the keys of a span and writes them and the values to the block's layer
// of kv.
func (m *Model) storeKV(ctx ml.Context, kv ml.Cache, b block, k, v ml.Tensor, sp span) {
	k = ctx.Name(ctx.RoPE(k, sp.pos0, m.rope), "Kcur", b.idx)
	ctx.StoreKV(kv, b.slot, sp.pos0, k, v)
}

// deltaNet is a Gated DeltaNet layer: project to q, k, v (and the output gate z), run them
// through the causal conv and SiLU, L2-normalize q and k, apply the gated delta rule with
// per-head decay g = softplus(α + dt_bias)·A and write strength β = sigmoid(b), then the
// gated RMSNorm (norm(o)·silu(z)) and the output projection.
func (m *Model) deltaNet(ctx ml.Context, runs []model.Run, b block, xn ml.Tensor, n int) ml.Tensor {
	hk, hv, dk, dv := m.hk, m.hv, m.dk, m.dv
	l, i, j := b.l, b.idx, b.slot
	r := hv / hk
	var qkv, z ml.Tensor
	if l.qkv != nil {
		qkv = ctx.MatMul(l.qkv, xn) // [n, C]: q | k | v
		z = ctx.MatMul(l.z, xn)     // [n, hv·dv]
	} else {
		// Legacy layout: per key head q, k, v of its r value heads, z of them.
		mixed := ctx.Reshape(ctx.MatMul(l.in, xn), n, hk, 2*dk+2*r*dv)
		q := ctx.Reshape(ctx.Slice(mixed, 0, dk), n, hk*dk)
		k := ctx.Reshape(ctx.Slice(mixed, dk, dk), n, hk*dk)
		v := ctx.Reshape(ctx.Slice(mixed, 2*dk, r*dv), n, hv*dv)
		z = ctx.Reshape(ctx.Slice(mixed, 2*dk+r*dv, r*dv), n, hv*dv)
		qkv = ctx.Concat(q, k, v)
	}
	ctx.Name(qkv, "qkv_mixed", i)
	ctx.Name(z, "z", i)

	ba := ctx.Reshape(ctx.MatMul(l.ba, xn), n, hk, 2*r)             // per key head: β of its r heads | α of them
	beta := ctx.Sigmoid(ctx.Reshape(ctx.Slice(ba, 0, r), n, hv))    // [n, hv]
	alpha := ctx.Reshape(ctx.Slice(ba, r, r), n, hv)                // [n, hv]
	g := ctx.MulVec(ctx.Softplus(ctx.AddVec(alpha, l.dtBias)), l.a) // log decay ≤ 0
	ctx.Name(g, "gate", i)

	// The conv window and the delta rule's state are the sequence's own: per run.
	parts := make([]ml.Tensor, len(runs))
	for ri, r := range runs {
		s := r.State.(*State)
		conv := ctx.SiLU(ctx.Conv1DCausal(model.RunRows(ctx, runs, ri, qkv), l.conv, s.conv[j])) // [r.N, C]
		ctx.Name(conv, "conv_output_silu", i)
		q := ctx.L2Norm(ctx.Reshape(ctx.Slice(conv, 0, hk*dk), r.N, hk, dk), m.eps)
		k := ctx.L2Norm(ctx.Reshape(ctx.Slice(conv, hk*dk, hk*dk), r.N, hk, dk), m.eps)
		v := ctx.Reshape(ctx.Slice(conv, 2*hk*dk, hv*dv), r.N, hv, dv)
		gr, br := model.RunRows(ctx, runs, ri, g), model.RunRows(ctx, runs, ri, beta)
		parts[ri] = ctx.DeltaNet(q, k, v, gr, br, s.delta[j], float32(1/math.Sqrt(float64(dk)))) // [r.N, hv, dv]
	}
	o := model.ConcatRows(ctx, parts...)
	// The delta rule's output ("attn_output" is full attention's projection, not this).
	ctx.Name(o, "delta_output", i)

	o = ctx.Mul(ctx.Reshape(ctx.RMSNorm(o, l.norm, m.eps), n, hv*dv), ctx.SiLU(z))
	ctx.Name(o, "final_output", i)
	return ctx.Name(ctx.MatMul(l.out, o), "linear_attn_out", i)
}

// moe is the routed experts (softmax router, top-k, weights renormalized to 1, SwiGLU
// experts) plus the SwiGLU shared expert scaled by sigmoid(w_shexp · x).
func (m *Model) moe(ctx ml.Context, b block, hn ml.Tensor, n int) ml.Tensor {
	l, i := b.l, b.idx
	logits := ctx.Name(ctx.MatMul(l.router, hn), "ffn_moe_logits", i) // [n, E]
	ids, w := ctx.Route(logits, m.used, true)                         // [n, k] each
	gate := ctx.MatMulExperts(l.gateExps, hn, ids)                    // [n, k, ff]
	up := ctx.MatMulExperts(l.upExps, hn, ids)
	y := ctx.MatMulExperts(l.downExps, ctx.SwiGLU(gate, up), ids) // [n, k, d]
	routed := ctx.Name(ctx.WeightedSum(y, w), "ffn_moe_out", i)   // [n, d]

	sh := ctx.MatMul(l.shDown, ctx.SwiGLU(ctx.MatMul(l.shGateFF, hn), ctx.MatMul(l.shUp, hn))) // [n, d]
	sg := ctx.Sigmoid(ctx.MatMul(l.shGate, hn))                                                // [n, 1]
	shared := ctx.Name(ctx.WeightedSum(ctx.Reshape(sh, n, 1, m.cfg.Embedding), sg), "ffn_shexp_gated", i)
	return ctx.Name(ctx.Add(routed, shared), "ffn_out", i)
}

// facts are the planner's sizes, computed once at load.
type facts struct {
	expert    []int64 // per layer
	slice     []int64 // one expert's gate+up+down per layer
	dense     int64
	recurrent int64
	mtp       int64
}

func newFacts(f *gguf.File, m *Model) facts {
	fc := facts{expert: make([]int64, m.cfg.Layers), slice: make([]int64, m.cfg.Layers)}
	for _, t := range f.Tensors {
		size := int64(t.Size)
		// The MTP blocks follow the m.cfg.Layers blocks of the main stack.
		switch i, role := modelinfo.TensorRole(t.Name, m.cfg.Layers); role {
		case modelinfo.RoleMTP:
			fc.mtp += size
		case modelinfo.RoleRoutedExpert:
			fc.expert[i] += size
			fc.slice[i] += size / int64(m.experts)
		default:
			fc.dense += size
		}
	}
	fc.recurrent = modelinfo.GatedDeltaNetStateBytes(int64(m.deltaCount), int64(m.hv), int64(m.dk), int64(m.dv), int64(m.convKernel), int64(m.convCh))
	return fc
}

func (m *Model) ExpertBytes() []int64 { return append([]int64(nil), m.facts.expert...) }

func (m *Model) ExpertTotalBytes() int64 {
	var t int64
	for _, b := range m.facts.expert {
		t += b
	}
	return t
}

func (m *Model) ExpertSliceBytes(l int) int64 {
	if l < 0 || l >= len(m.facts.slice) {
		return 0
	}
	return m.facts.slice[l]
}

func (m *Model) DenseBytes() int64 { return m.facts.dense }
func (m *Model) KVBytesPerPosition(dt ml.DType) int64 {
	return ml.KVBytesPerPosition(m.cfg.AttnLayers, m.cfg.KVHeads, m.cfg.HeadDim, m.cfg.HeadDim, dt)
}
func (m *Model) RecurrentBytes() int64 { return m.facts.recurrent }

// MTPBytes is the next-token-prediction block's weights (0 without one); not in DenseBytes.
func (m *Model) MTPBytes() int64 { return m.facts.mtp }

var _ model.Facts = (*Model)(nil)
