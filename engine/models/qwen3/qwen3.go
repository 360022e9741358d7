// Package qwen3 is the pre-norm grouped-query-attention transformer family with a KV cache
// and nothing else: "qwen3" (per-head Q/K RMS norms, NeoX RoPE, SwiGLU feed-forward),
// "qwen3moe" (the same attention, a routed-expert feed-forward without a shared expert:
// Qwen3-30B-A3B) and "llama" (no Q/K norms, RoPE on adjacent pairs with Llama 3's
// frequency factors, SwiGLU feed-forward: Llama 2/3, Mistral) and "gemma3" (qwen3's
// attention with the queries scaled, sliding-window layers between global ones with their
// own RoPE base, norms after attention and after the feed-forward block too, a GeGLU
// feed-forward, the embeddings scaled by √d: Gemma 3) and "gpt-oss" (biases on the
// projections, attention sinks, sliding-window layers between global ones, YaRN, routed
// experts with biases and a clamped SwiGLU). One graph serves the five, as their layers
// differ only in those parts.
package qwen3

import (
	"fmt"
	"math"
	"strings"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/engine/modelinfo"
	"github.com/redlite/batch/engine/quant"
)

func init() {
	model.Register("qwen3", Load)
	model.Register("qwen3moe", Load)
	model.Register("llama", Load)
	model.Register("gemma3", Load)
	model.Register("gpt-oss", Load)
}

// Model holds the bound weights. Shapes in comments are GGUF order (input dimension first).
type Model struct {
	cfg     model.Config
	eps     float32
	rope    ml.RoPE
	kqScale float32
	qkNorm  bool // per-head RMS norms of q and k before RoPE (the qwen3 family)
	// gemma3: the embeddings are multiplied by embScale, the rotated queries by qScale (the
	// attention's own scale is then 1), the feed-forward is GeGLU, and sliding-window layers
	// rotate by swaRope (0 and nil elsewhere).
	embScale, qScale float32
	geglu            bool
	swaRope          ml.RoPE
	ffn              int
	experts          int // routed experts per layer (qwen3moe), 0 for a dense feed-forward
	used             int // experts each token uses
	facts            model.WeightFacts

	tokenEmbd  ml.Weight // (d, vocab)
	outputNorm ml.Weight // (d)
	output     ml.Weight // (d, vocab); the embedding table when tied
	layers     []layer
}

type layer struct {
	attnNorm ml.Weight // (d)
	// gpt-oss: biases of q, k, v and o, and a sink logit per head; nil elsewhere.
	qBias, kBias, vBias, oBias, sinks ml.Weight
	q                                 ml.Weight // (d, heads·hd)
	k                                 ml.Weight // (d, kvHeads·hd)
	v                                 ml.Weight // (d, kvHeads·hd)
	qNorm                             ml.Weight // (hd); nil for llama
	kNorm                             ml.Weight // (hd); nil for llama
	o                                 ml.Weight // (heads·hd, d)
	ffnNorm                           ml.Weight // (d)
	// gemma3: norms of the attention's and the feed-forward's output before each residual
	// add; window > 0 makes the layer attend to the last window positions only.
	postAttnNorm, postFFNNorm ml.Weight // (d)
	window                    int
	gate                      ml.Weight // (d, ffn); dense layers
	up                        ml.Weight // (d, ffn)
	down                      ml.Weight // (ffn, d)
	exps                      model.Experts
}

// Load binds a qwen3, qwen3moe, llama, gemma3 or gpt-oss GGUF's weights on b and validates every shape.
func Load(f *gguf.File, b ml.Backend) (model.Graph, error) {
	arch, err := f.Architecture()
	if err != nil {
		return nil, err
	}
	llama, gemma, oss := arch == "llama", arch == "gemma3", arch == "gpt-oss"
	bd := &model.Binder{Arch: arch, File: f, B: b}
	m := &Model{qkNorm: !llama && !oss}
	c := &m.cfg
	c.Arch = arch
	c.Layers = bd.Blocks("block_count")
	vdim := bd.Attention(c)
	m.experts = bd.DimOr("expert_count", 0)
	if arch == "qwen3moe" || oss {
		m.used = bd.Dim("expert_used_count")
		m.ffn = bd.DimOr("expert_feed_forward_length", 0)
		if m.ffn == 0 && m.used > 0 { // as llama.cpp: the dense length split among the used
			m.ffn = bd.DimOr("feed_forward_length", 0) / m.used
		}
	} else {
		m.ffn = bd.Dim("feed_forward_length")
	}
	// llama.cpp's defaults where a key is absent: Llama's RMS epsilon and base are older.
	eps, base := 1e-6, 1e6
	switch arch {
	case "llama":
		eps, base = 1e-5, 1e4
	case "gemma3", "gpt-oss":
		base = 1e4
	}
	m.eps = bd.FloatOr("attention.layer_norm_rms_epsilon", eps)
	m.rope = ml.RoPE{Dims: bd.DimOr("rope.dimension_count", c.HeadDim), Base: bd.FloatOr("rope.freq_base", base), NeoX: !llama}
	m.kqScale = bd.FloatOr("attention.scale", 0)
	if err := bd.Err(); err != nil {
		return nil, err
	}
	m.rope.Scale, m.rope.YaRN = ropeScaling(bd, c.ContextLength)
	if m.rope.YaRN.OrigContext > 0 {
		// The planner may plan up to the context YaRN stretches the original one to.
		c.ContextLength = max(c.ContextLength, int(min(float64(m.rope.YaRN.OrigContext)/float64(m.rope.Scale), modelinfo.MaxContextLength)))
	}
	bd.Product("head_count × key_length", c.Heads, c.HeadDim)
	bd.Check(c.Layers > 0 && c.Embedding > 0 && c.Heads > 0 && c.HeadDim > 0 && m.ffn > 0,
		"block_count, embedding_length, head_count, key_length and feed_forward_length must be positive")
	bd.Check(c.KVHeads > 0 && c.Heads%c.KVHeads == 0, "head_count %d is not a multiple of head_count_kv %d", c.Heads, c.KVHeads)
	bd.Check(vdim == c.HeadDim, "value_length %d differs from key_length %d", vdim, c.HeadDim)
	bd.Check(m.rope.Dims > 0 && m.rope.Dims <= c.HeadDim && m.rope.Dims%2 == 0, "rope.dimension_count %d does not fit head dim %d", m.rope.Dims, c.HeadDim)
	bd.Check(!(m.kqScale < 0) && !math.IsInf(float64(m.kqScale), 0), "attention.scale %g is not a positive number", m.kqScale)
	var window, pattern int
	if gemma {
		window, pattern = m.gemma3(bd)
	}
	if oss {
		window, pattern = m.gptOSS(bd)
	}
	switch arch {
	case "qwen3moe", "gpt-oss":
		bd.Check(m.used > 0 && m.used <= m.experts, "expert_used_count %d must be in 1 … expert_count %d", m.used, m.experts)
	default:
		bd.Check(m.experts == 0, "expert_count %d: %s files with routed experts (Mixtral) are not supported", m.experts, arch)
	}
	// llama.cpp reads optional biases of the projections (some llama-architecture files
	// have them); this graph has none, so such a file is refused rather than misread.
	for _, t := range f.Tensors {
		if !oss && strings.HasPrefix(t.Name, "blk.") && strings.HasSuffix(t.Name, ".bias") {
			bd.Check(false, "%s: projection biases are not supported", t.Name)
			break
		}
	}
	if err := bd.Err(); err != nil {
		return nil, err
	}
	if m.kqScale == 0 {
		m.kqScale = float32(1 / math.Sqrt(float64(c.HeadDim)))
	}
	if oss {
		// As llama.cpp: the scale is by the rotated dims, whatever the file says.
		m.kqScale = float32(1 / math.Sqrt(float64(m.rope.Dims)))
	}
	if gemma {
		// As llama.cpp: the queries carry the scale, Gemma 3 27B's by the embedding width
		// per head, the others' by the head dim.
		per := c.HeadDim
		if c.Layers == 62 {
			per = c.Embedding / c.Heads
		}
		m.qScale, m.kqScale = float32(1/math.Sqrt(float64(per))), 1
		m.embScale = float32(math.Sqrt(float64(c.Embedding)))
		m.geglu = true
	}
	if llama {
		m.rope.Factors = ropeFactors(bd, m.rope.Dims)
	}
	c.AttnLayers = c.Layers

	d, hd := c.Embedding, c.HeadDim
	m.tokenEmbd = bd.Embedding("token_embd.weight", "output.weight")
	if m.tokenEmbd != nil {
		c.Vocab = m.tokenEmbd.Dims()[len(m.tokenEmbd.Dims())-1]
		bd.Check(m.tokenEmbd.Dims()[0] == d, "token_embd.weight has rows of %d, want embedding_length %d", m.tokenEmbd.Dims()[0], d)
	}
	m.outputNorm = bd.Weight("output_norm.weight", d)
	m.output = bd.Optional("output.weight", d, c.Vocab)
	if m.output == nil {
		m.output = m.tokenEmbd // tied embeddings
	}
	m.layers = make([]layer, c.Layers)
	for i := range m.layers {
		l := &m.layers[i]
		l.attnNorm = bd.Layer(i, "attn_norm.weight", d)
		l.q = bd.Layer(i, "attn_q.weight", d, c.Heads*hd)
		l.k = bd.Layer(i, "attn_k.weight", d, c.KVHeads*hd)
		l.v = bd.Layer(i, "attn_v.weight", d, c.KVHeads*hd)
		if m.qkNorm {
			l.qNorm = bd.Layer(i, "attn_q_norm.weight", hd)
			l.kNorm = bd.Layer(i, "attn_k_norm.weight", hd)
		}
		l.o = bd.Layer(i, "attn_output.weight", c.Heads*hd, d)
		if oss {
			l.qBias = bd.Layer(i, "attn_q.bias", c.Heads*hd)
			l.kBias = bd.Layer(i, "attn_k.bias", c.KVHeads*hd)
			l.vBias = bd.Layer(i, "attn_v.bias", c.KVHeads*hd)
			l.oBias = bd.Layer(i, "attn_output.bias", d)
			l.sinks = bd.Layer(i, "attn_sinks.weight", c.Heads)
			// Its post-attention norm is the feed-forward's input norm.
			l.ffnNorm = bd.Layer(i, "post_attention_norm.weight", d)
		} else {
			l.ffnNorm = bd.Layer(i, "ffn_norm.weight", d)
		}
		if window > 0 && (gemma || oss) && (pattern == 0 || i%pattern < pattern-1) {
			// llama.cpp's set_swa_pattern: the last layer of every pattern is global.
			l.window = window
		}
		if gemma {
			l.postAttnNorm = bd.Layer(i, "post_attention_norm.weight", d)
			l.postFFNNorm = bd.Layer(i, "post_ffw_norm.weight", d)
		}
		if m.experts > 0 {
			l.exps = model.Experts{
				Router: bd.Layer(i, "ffn_gate_inp.weight", d, m.experts),
				Gate:   bd.Layer(i, "ffn_gate_exps.weight", d, m.ffn, m.experts),
				Up:     bd.Layer(i, "ffn_up_exps.weight", d, m.ffn, m.experts),
				Down:   bd.Layer(i, "ffn_down_exps.weight", m.ffn, d, m.experts),
			}
			if oss {
				e := &l.exps
				e.RouterBias = bd.Layer(i, "ffn_gate_inp.bias", m.experts)
				e.GateBias = bd.Layer(i, "ffn_gate_exps.bias", m.ffn, m.experts)
				e.UpBias = bd.Layer(i, "ffn_up_exps.bias", m.ffn, m.experts)
				e.DownBias = bd.Layer(i, "ffn_down_exps.bias", d, m.experts)
				// llama.cpp's constants for LLM_FFN_SWIGLU_OAI_MOE (no GGUF keys).
				e.Alpha, e.Limit = 1.702, 7
			}
			continue
		}
		l.gate = bd.Layer(i, "ffn_gate.weight", d, m.ffn)
		l.up = bd.Layer(i, "ffn_up.weight", d, m.ffn)
		l.down = bd.Layer(i, "ffn_down.weight", m.ffn, d)
	}
	if err := bd.Err(); err != nil {
		return nil, err
	}
	m.facts = model.NewWeightFacts(f, c.Layers, m.experts)
	return m, nil
}

// ropeScaling reads the file's rope scaling as llama.cpp does for these architectures:
// linear (the default type) multiplies the angles by 1/rope.scaling.factor; yarn does too
// for the slow pairs, with rope.scaling.original_context_length (default the trained
// context ctx), rope.scaling.attn_factor (default 1) and beta fast/slow 32 and 1 (llama.cpp
// reads no yarn_beta_* keys for them); other types are refused by name.
func ropeScaling(bd *model.Binder, ctx int) (scale float32, yarn ml.YaRN) {
	typ, err := bd.File.StringOr(bd.Arch+".rope.scaling.type", "linear")
	if err != nil {
		bd.Check(false, "%v", err)
		return 0, yarn
	}
	factor := bd.FloatOr("rope.scaling.factor", float64(bd.FloatOr("rope.scale_linear", 0)))
	positive := func(key string, v float32) bool {
		ok := !(v < 0) && !math.IsInf(float64(v), 0) && !math.IsNaN(float64(v))
		bd.Check(ok, "%s %g is not a positive number", key, v)
		return ok
	}
	switch typ {
	case "none":
		return 0, yarn
	case "linear", "yarn":
		if !positive("rope.scaling.factor", factor) {
			return 0, yarn
		}
		if factor != 0 {
			scale = 1 / factor
		}
		if typ == "linear" {
			return scale, yarn
		}
		if scale == 0 {
			scale = 1
		}
		n, err := bd.File.IntOr(bd.Arch+".rope.scaling.original_context_length", int64(ctx))
		bd.Check(err == nil && n > 0 && n <= modelinfo.MaxContextLength, "rope.scaling.original_context_length %d is not within [1, %d]", n, modelinfo.MaxContextLength)
		attn := bd.FloatOr("rope.scaling.attn_factor", 1)
		positive("rope.scaling.attn_factor", attn)
		// llama.cpp's yarn_attn_factor: get_mscale(factor) cancelled by 1/(1 + 0.1·ln factor),
		// in float32 as it computes them.
		f := 1 / scale
		g := float32(1)
		if f > 1 {
			g = 0.1*float32(math.Log(float64(f))) + 1
		}
		a := float32(g*(1/(1+0.1*float32(math.Log(float64(f)))))) * attn
		return scale, ml.YaRN{OrigContext: int(n), BetaFast: 32, BetaSlow: 1, AttnFactor: a}
	default:
		bd.Check(false, "rope.scaling.type %q is not supported (none, linear and yarn are)", typ)
		return 0, yarn
	}
}

// gemma3 reads what only gemma3 files have: the sliding window (0: none) and the period of
// its layers (attention.sliding_window_pattern, default 6: five sliding-window layers, then
// a global one), the sliding-window layers' RoPE base (rope.freq_base_swa, default 10000,
// no scaling); a final logit softcap, which Gemma 3's own files do not set, is refused.
func (m *Model) gemma3(bd *model.Binder) (window, pattern int) {
	w, err := bd.File.IntOr(bd.Arch+".attention.sliding_window", 0)
	bd.Check(err == nil && w >= 0 && w <= modelinfo.MaxContextLength, "attention.sliding_window %d is not within [0, %d]", w, modelinfo.MaxContextLength)
	window = int(w)
	n, err := bd.File.IntOr(bd.Arch+".attention.sliding_window_pattern", 6)
	bd.Check(err == nil && n >= 0 && n <= int64(max(m.cfg.Layers, 6)), "attention.sliding_window_pattern %d is not within [0, %d]", n, max(m.cfg.Layers, 6))
	m.swaRope = ml.RoPE{Dims: m.rope.Dims, Base: bd.FloatOr("rope.freq_base_swa", 1e4), NeoX: true}
	bd.Check(m.swaRope.Base > 0 && !math.IsInf(float64(m.swaRope.Base), 0), "rope.freq_base_swa %g is not a positive number", m.swaRope.Base)
	softcap := bd.FloatOr("final_logit_softcapping", 0)
	bd.Check(softcap == 0, "final_logit_softcapping %g: logit softcapping is not supported", softcap)
	return window, int(n)
}

// gptOSS reads gpt-oss's sliding window (attention.sliding_window, required) and the period
// of its layers (attention.sliding_window_pattern, default 2: sliding-window and global
// layers alternate); its sliding-window layers rotate as the others do, with their own base
// when rope.freq_base_swa is set.
func (m *Model) gptOSS(bd *model.Binder) (window, pattern int) {
	window = bd.Int("attention.sliding_window")
	bd.Check(window > 0 && window <= modelinfo.MaxContextLength, "attention.sliding_window %d is not within [1, %d]", window, modelinfo.MaxContextLength)
	n, err := bd.File.IntOr(bd.Arch+".attention.sliding_window_pattern", 2)
	bd.Check(err == nil && n >= 0 && n <= int64(max(m.cfg.Layers, 2)), "attention.sliding_window_pattern %d is not within [0, %d]", n, max(m.cfg.Layers, 2))
	m.swaRope = m.rope
	m.swaRope.Base = bd.FloatOr("rope.freq_base_swa", float64(m.rope.Base))
	bd.Check(m.swaRope.Base > 0 && !math.IsInf(float64(m.swaRope.Base), 0), "rope.freq_base_swa %g is not a positive number", m.swaRope.Base)
	return window, int(n)
}

// ropeFactors reads rope_freqs.weight (Llama 3's per-frequency divisors, dims/2 of them,
// shared by every layer), nil when the file has none.
func ropeFactors(bd *model.Binder, dims int) []float32 {
	t, raw, err := bd.File.TensorData("rope_freqs.weight")
	if err != nil {
		return nil
	}
	if len(t.Dims) != 1 || t.Dims[0] != uint64(dims/2) {
		bd.Check(false, "rope_freqs.weight has shape %s, want [%d] (rope.dimension_count / 2)", t.ShapeString(), dims/2)
		return nil
	}
	ff := make([]float32, dims/2)
	if err := quant.Dequantize(t.Type, raw, ff); err != nil {
		bd.Check(false, "rope_freqs.weight: %v", err)
		return nil
	}
	for i, v := range ff {
		if !(v > 0) || math.IsInf(float64(v), 0) {
			bd.Check(false, "rope_freqs.weight[%d] = %g is not a positive number", i, v)
			return nil
		}
	}
	return ff
}

func (m *Model) Config() model.Config { return m.cfg }

// State is the KV cache of every layer.
type State struct {
	arch            string // names the architecture in errors
	kv              ml.Cache
	layers, kvHeads int
	headDim         int
}

func (s *State) Capacity() int { return s.kv.Capacity() }
func (s *State) Bytes() int64  { return s.kv.Bytes() }

func (s *State) Snapshot(b ml.Backend, pos int) ([]byte, error) {
	return model.AppendKV(nil, b, s.kv, s.layers, pos)
}

func (s *State) Free() { s.kv.Free() }

func (s *State) Restore(b ml.Backend, pos int, data []byte) error {
	rest, err := model.RestoreKV(data, b, s.kv, s.layers, pos, s.kvHeads, s.headDim)
	if err != nil {
		return fmt.Errorf("%s: %w", s.arch, err)
	}
	if len(rest) != 0 {
		return fmt.Errorf("%s: snapshot has %d bytes past its KV cache", s.arch, len(rest))
	}
	return nil
}

func (m *Model) NewState(b ml.Backend, capacity int, kv ml.DType) (model.State, error) {
	c, err := b.NewCache(m.cfg.Layers, m.cfg.KVHeads, m.cfg.HeadDim, capacity, kv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.cfg.Arch, err)
	}
	return m.newState(c), nil
}

func (m *Model) NewKVPool(b ml.Backend, blocks, blockSize int, kv ml.DType) (ml.KVPool, error) {
	p, err := b.NewKVPool(m.cfg.Layers, m.cfg.KVHeads, m.cfg.HeadDim, blocks, blockSize, kv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.cfg.Arch, err)
	}
	return p, nil
}

func (m *Model) NewPooledState(b ml.Backend, pool ml.KVPool, capacity int) (model.State, error) {
	c, err := pool.Alloc(capacity)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.cfg.Arch, err)
	}
	return m.newState(c), nil
}

func (m *Model) NewStateOn(b ml.Backend, c ml.Cache) (model.State, error) { return m.newState(c), nil }

func (s *State) KV() ml.Cache { return s.kv }

// The dense architectures hold no recurrent memory: their KV entries are the whole state.
func (s *State) SaveRecurrent(ml.Backend) ([]byte, error) { return nil, nil }

func (s *State) RestoreRecurrent(_ ml.Backend, data []byte) error {
	if len(data) != 0 {
		return fmt.Errorf("%s: %d bytes of recurrent state for a model without one", s.arch, len(data))
	}
	return nil
}

func (m *Model) newState(c ml.Cache) *State {
	return &State{arch: m.cfg.Arch, kv: c, layers: m.cfg.Layers, kvHeads: m.cfg.KVHeads, headDim: m.cfg.HeadDim}
}

func (m *Model) Forward(ctx ml.Context, b model.Batch) ml.Tensor {
	runs := b.MustRuns()
	states := model.RunStates[*State](runs)
	kvs := make([]ml.Cache, len(states))
	for j, s := range states {
		kvs[j] = s.kv
	}
	c := m.cfg
	n := len(b.Tokens)
	scale := m.kqScale

	x := ctx.Embed(m.tokenEmbd, ctx.InputIDs(b.Tokens)) // [n, d]
	if m.embScale != 0 {
		x = ctx.Name(ctx.Scale(x, m.embScale), "inp_scaled", -1)
	}
	for i, l := range m.layers {
		// Attention block: h = x + Wo · attn(rope(norm(Wq·x̂)), rope(norm(Wk·x̂)), Wv·x̂)
		xn := ctx.Name(ctx.RMSNorm(x, l.attnNorm, m.eps), "attn_norm", i)
		q := ctx.Reshape(bias(ctx, ctx.MatMul(l.q, xn), l.qBias), n, c.Heads, c.HeadDim)
		k := ctx.Reshape(bias(ctx, ctx.MatMul(l.k, xn), l.kBias), n, c.KVHeads, c.HeadDim)
		v := ctx.Reshape(bias(ctx, ctx.MatMul(l.v, xn), l.vBias), n, c.KVHeads, c.HeadDim)
		if m.qkNorm {
			q = ctx.RMSNorm(q, l.qNorm, m.eps) // per-head norms; each run rotates its own positions
			k = ctx.RMSNorm(k, l.kNorm, m.eps)
		}
		// Every run's keys are stored and queries rotated before any attends, so that the
		// batch's q, k and v are gone by then and several runs hold no more than one.
		rope := m.rope
		if l.window > 0 {
			rope = m.swaRope
		}
		qr := make([]ml.Tensor, len(runs))
		for j, r := range runs {
			kr := ctx.RoPE(model.RunRows(ctx, runs, j, k), r.Pos0, rope)
			ctx.StoreKV(kvs[j], i, r.Pos0, kr, model.RunRows(ctx, runs, j, v))
			qr[j] = ctx.RoPE(model.RunRows(ctx, runs, j, q), r.Pos0, rope)
			if m.qScale != 0 {
				qr[j] = ctx.Scale(qr[j], m.qScale)
			}
		}
		var a ml.Tensor
		switch {
		case l.sinks != nil:
			a = model.PerRun(ctx, runs, func(j int, r model.Run) ml.Tensor {
				return ctx.SinkAttention(qr[j], kvs[j], i, r.Pos0, scale, l.window, l.sinks)
			})
		case l.window > 0:
			// The batched path has no window: sliding layers attend run by run.
			a = model.PerRun(ctx, runs, func(j int, r model.Run) ml.Tensor {
				return ctx.SlidingAttention(qr[j], kvs[j], i, r.Pos0, scale, l.window)
			})
		default:
			a = model.Attend(ctx, runs, qr, kvs, i, scale)
		}
		a = ctx.Name(a, "kqv_out", i) // [n, heads·hd]
		o := bias(ctx, ctx.MatMul(l.o, a), l.oBias)
		if l.postAttnNorm != nil {
			o = ctx.Name(ctx.RMSNorm(o, l.postAttnNorm, m.eps), "attn_post_norm", i)
		}
		h := ctx.Add(x, o)

		// Feed-forward block: out = h + Wdown · (silu(Wgate·ĥ) ⊙ Wup·ĥ), or the routed
		// experts' weighted sum of the same (weights renormalized, as llama.cpp's qwen3moe).
		hn := ctx.Name(ctx.RMSNorm(h, l.ffnNorm, m.eps), "ffn_norm", i)
		var f ml.Tensor
		if m.experts > 0 {
			f = l.exps.Forward(ctx, hn, m.used, true, i)
		} else if m.geglu {
			f = ctx.MatMul(l.down, ctx.GeGLU(ctx.MatMul(l.gate, hn), ctx.MatMul(l.up, hn)))
		} else {
			f = ctx.MatMul(l.down, ctx.SwiGLU(ctx.MatMul(l.gate, hn), ctx.MatMul(l.up, hn)))
		}
		if l.postFFNNorm != nil {
			f = ctx.Name(ctx.RMSNorm(f, l.postFFNNorm, m.eps), "ffn_post_norm", i)
		}
		x = ctx.Name(ctx.Add(h, f), "l_out", i)
	}
	rows := b.LogitRows()
	if len(rows) == 0 {
		return nil
	}
	x = ctx.Name(ctx.RMSNorm(model.GatherRows(ctx, x, rows), m.outputNorm, m.eps), "result_norm", -1)
	return ctx.Name(ctx.MatMul(m.output, x), "result_output", -1)
}

// bias adds b to every row of x, or returns x when b is nil.
func bias(ctx ml.Context, x ml.Tensor, b ml.Weight) ml.Tensor {
	if b == nil {
		return x
	}
	return ctx.AddVec(x, b)
}
