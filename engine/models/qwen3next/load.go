package qwen3next

import (
	"fmt"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
)

// Load binds the weights of a GGUF of the family (qwen3next, qwen35, qwen35moe) on b and
// validates every shape.
func Load(f *gguf.File, b ml.Backend) (model.Graph, error) {
	name, err := f.Architecture()
	if err != nil {
		return nil, fmt.Errorf("qwen3next: %w", err)
	}
	v, ok := variants[name]
	if !ok {
		return nil, fmt.Errorf("qwen3next: architecture %q is not of the family", name)
	}
	arch := v.arch
	bd := &model.Binder{Arch: arch, File: f, B: b}
	m := &Model{v: v}
	c := &m.cfg
	c.Arch = arch
	blocks := bd.Blocks("block_count")
	nextn := bd.IntOr("nextn_predict_layers", 0)
	c.Layers = blocks - nextn
	vdim := bd.Attention(c)
	m.eps = bd.FloatOr("attention.layer_norm_rms_epsilon", 1e-6)
	m.rope = ml.RoPE{Dims: bd.DimOr("rope.dimension_count", c.HeadDim), Base: bd.FloatOr("rope.freq_base", 1e7), NeoX: true}
	m.convKernel = bd.Dim("ssm.conv_kernel")
	inner := bd.Dim("ssm.inner_size")
	m.dk = bd.Dim("ssm.state_size")
	m.hk = bd.Dim("ssm.group_count")
	m.hv = bd.Dim("ssm.time_step_rank")
	ff := bd.DimOr("feed_forward_length", 0)
	if v.moe {
		m.experts = bd.Dim("expert_count")
		m.used = bd.Dim("expert_used_count")
		m.ffExp = bd.DimOr("expert_feed_forward_length", 0)
		m.ffShexp = bd.DimOr("expert_shared_feed_forward_length", 0)
	} else {
		m.ff = ff
	}
	interval := bd.IntOr("full_attention_interval", 4)
	if err := bd.Err(); err != nil {
		return nil, err
	}
	bd.Product("head_count × key_length", c.Heads, c.HeadDim)
	bd.Product("ssm.group_count × ssm.state_size", m.hk, m.dk)
	if m.ffExp == 0 && m.used > 0 {
		m.ffExp = ff / m.used
	}
	if m.ffShexp == 0 && v.moe {
		m.ffShexp = ff
	}
	bd.Check(c.Layers > 0 && nextn >= 0, "block_count %d with nextn_predict_layers %d leaves no layers", blocks, nextn)
	bd.Check(c.Embedding > 0 && c.Heads > 0 && c.HeadDim > 0, "embedding_length, head_count and key_length must be positive")
	bd.Check(c.KVHeads > 0 && c.Heads%c.KVHeads == 0, "head_count %d is not a multiple of head_count_kv %d", c.Heads, c.KVHeads)
	bd.Check(vdim == c.HeadDim, "value_length %d differs from key_length %d", vdim, c.HeadDim)
	bd.Check(m.rope.Dims > 0 && m.rope.Dims <= c.HeadDim && m.rope.Dims%2 == 0, "rope.dimension_count %d does not fit head dim %d", m.rope.Dims, c.HeadDim)
	bd.Check(m.convKernel > 0, "ssm.conv_kernel %d must be positive", m.convKernel)
	bd.Check(m.dk > 0 && m.hk > 0 && m.hv > 0 && m.hv%m.hk == 0, "ssm.time_step_rank %d (value heads) must be a positive multiple of ssm.group_count %d (key heads)", m.hv, m.hk)
	bd.Check(m.hv > 0 && inner%max(m.hv, 1) == 0 && inner/max(m.hv, 1) == m.dk, "ssm.inner_size %d is not ssm.time_step_rank %d × ssm.state_size %d", inner, m.hv, m.dk)
	if v.moe {
		bd.Check(m.experts > 0 && m.used > 0 && m.used <= m.experts, "expert_used_count %d must be in 1 … expert_count %d", m.used, m.experts)
		bd.Check(m.ffExp > 0 && m.ffShexp > 0, "expert_feed_forward_length %d and expert_shared_feed_forward_length %d must be positive", m.ffExp, m.ffShexp)
	} else {
		bd.Check(m.ff > 0, "feed_forward_length %d must be positive", m.ff)
	}
	if v.qwen35 {
		if err := textSections(f, arch, m.rope.Dims); err != nil {
			bd.Check(false, "%v", err)
		}
	}
	bd.Check(interval > 0, "full_attention_interval %d must be positive", interval)
	if err := bd.Err(); err != nil {
		return nil, err
	}
	m.dv = inner / m.hv
	m.convCh = 2*m.hk*m.dk + m.hv*m.dv

	recurrent, err := layerKinds(f, arch, blocks, c.Layers, interval)
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
	m.tokenEmbd = bd.Embedding("token_embd.weight", "output.weight")
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
			if v.qwen35 || has(f, i, "attn_qkv.weight") || !has(f, i, "ssm_in.weight") {
				l.qkv = bd.Layer(i, "attn_qkv.weight", d, m.convCh)
				l.z = bd.Layer(i, "attn_gate.weight", d, m.hv*m.dv)
			} else {
				l.in = bd.Layer(i, "ssm_in.weight", d, m.hk*(2*m.dk+2*r*m.dv))
			}
			l.conv = bd.Layer(i, "ssm_conv1d.weight", m.convKernel, m.convCh)
			if v.qwen35 {
				l.beta = bd.Layer(i, "ssm_beta.weight", d, m.hv)
				l.alpha = bd.Layer(i, "ssm_alpha.weight", d, m.hv)
			} else {
				l.ba = bd.Layer(i, "ssm_ba.weight", d, 2*m.hv)
			}
			l.dtBias = bd.Layer(i, "ssm_dt.bias", m.hv)
			l.a = bd.Layer(i, "ssm_a", m.hv)
			l.norm = bd.Layer(i, "ssm_norm.weight", m.dv)
			l.out = bd.Layer(i, "ssm_out.weight", m.hv*m.dv, d)
		} else {
			m.bindAttention(bd, i, l)
		}
		m.bindFFN(bd, i, l)
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
		m.bindFFN(bd, i, &t.layer)
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

// bindFFN binds layer i's feed-forward: the experts, or qwen35's SwiGLU.
func (m *Model) bindFFN(bd *model.Binder, i int, l *layer) {
	d := m.cfg.Embedding
	if !m.v.moe {
		l.gate = bd.Layer(i, "ffn_gate.weight", d, m.ff)
		l.up = bd.Layer(i, "ffn_up.weight", d, m.ff)
		l.down = bd.Layer(i, "ffn_down.weight", m.ff, d)
		return
	}
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
func layerKinds(f *gguf.File, arch string, blocks, n, interval int) ([]bool, error) {
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

// textSections checks arch's rope.dimension_sections (Qwen3.5's interleaved multi-axis
// RoPE) against dims rotated features. Text tokens fill the time, height and width
// positions alike and leave the fourth 0, so the rotation is plain NeoX RoPE exactly when
// every rotated pair takes one of the first three: pair k falls in sector k mod Σ sections,
// and sector s takes axis s mod 3 while s < 3 × that axis's section (llama.cpp's IMRoPE).
// A missing key is read as no sections (plain RoPE).
func textSections(f *gguf.File, arch string, dims int) error {
	key := arch + ".rope.dimension_sections"
	v, ok := f.Get(key)
	if !ok {
		return nil
	}
	is, ok := v.Ints()
	if !ok || len(is) < 3 || len(is) > 4 {
		return fmt.Errorf("%s is %s, want 3 or 4 integers", key, v.Type)
	}
	var sec [4]int64
	copy(sec[:], is)
	total := sec[0] + sec[1] + sec[2] + sec[3]
	if total <= 0 || total > int64(dims/2) || sec[0] < 0 || sec[1] < 0 || sec[2] < 0 || sec[3] < 0 {
		return fmt.Errorf("%s %v does not divide %d rotated pairs", key, is, dims/2)
	}
	for k := range int64(dims / 2) {
		s := k % total
		if s >= 3*sec[s%3] {
			return fmt.Errorf("%s %v: rotated pair %d takes the fourth position axis, which text leaves at 0; not supported", key, is, k)
		}
	}
	return nil
}
