// Package qwen3 is the Qwen3 dense architecture ("qwen3" in GGUF): pre-norm transformer
// layers of grouped-query attention with per-head Q/K RMS norms and NeoX RoPE, and SwiGLU
// feed-forward blocks.
package qwen3

import (
	"fmt"
	"math"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
)

func init() { model.Register("qwen3", Load) }

// Model holds the bound weights. Shapes in comments are GGUF order (input dimension first).
type Model struct {
	cfg  model.Config
	eps  float32
	rope ml.RoPE
	ffn  int

	tokenEmbd  ml.Weight // (d, vocab)
	outputNorm ml.Weight // (d)
	output     ml.Weight // (d, vocab); the embedding table when tied
	layers     []layer
}

type layer struct {
	attnNorm ml.Weight // (d)
	q        ml.Weight // (d, heads·hd)
	k        ml.Weight // (d, kvHeads·hd)
	v        ml.Weight // (d, kvHeads·hd)
	qNorm    ml.Weight // (hd)
	kNorm    ml.Weight // (hd)
	o        ml.Weight // (heads·hd, d)
	ffnNorm  ml.Weight // (d)
	gate     ml.Weight // (d, ffn)
	up       ml.Weight // (d, ffn)
	down     ml.Weight // (ffn, d)
}

// Load binds a qwen3 GGUF's weights on b and validates every shape.
func Load(f *gguf.File, b ml.Backend) (model.Graph, error) {
	bd := &model.Binder{Arch: "qwen3", File: f, B: b}
	m := &Model{}
	c := &m.cfg
	c.Arch = "qwen3"
	c.Layers = bd.Blocks("block_count")
	c.Embedding = bd.Dim("embedding_length")
	c.Heads = bd.Dim("attention.head_count")
	c.KVHeads = bd.Dim("attention.head_count_kv")
	c.ContextLength = bd.ContextLength(0)
	m.ffn = bd.Dim("feed_forward_length")
	c.HeadDim = bd.DimOr("attention.key_length", 0)
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Embedding / c.Heads
	}
	vdim := bd.DimOr("attention.value_length", c.HeadDim)
	m.eps = bd.FloatOr("attention.layer_norm_rms_epsilon", 1e-6)
	m.rope = ml.RoPE{Dims: bd.DimOr("rope.dimension_count", c.HeadDim), Base: bd.FloatOr("rope.freq_base", 1e6), NeoX: true}
	if err := bd.Err(); err != nil {
		return nil, err
	}
	bd.Product("head_count × key_length", c.Heads, c.HeadDim)
	bd.Check(c.Layers > 0 && c.Embedding > 0 && c.Heads > 0 && c.HeadDim > 0 && m.ffn > 0,
		"block_count, embedding_length, head_count, key_length and feed_forward_length must be positive")
	bd.Check(c.KVHeads > 0 && c.Heads%c.KVHeads == 0, "head_count %d is not a multiple of head_count_kv %d", c.Heads, c.KVHeads)
	bd.Check(vdim == c.HeadDim, "value_length %d differs from key_length %d", vdim, c.HeadDim)
	bd.Check(m.rope.Dims > 0 && m.rope.Dims <= c.HeadDim && m.rope.Dims%2 == 0, "rope.dimension_count %d does not fit head dim %d", m.rope.Dims, c.HeadDim)
	if err := bd.Err(); err != nil {
		return nil, err
	}
	c.AttnLayers = c.Layers

	d, hd := c.Embedding, c.HeadDim
	m.tokenEmbd = bd.Weight("token_embd.weight")
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
		l.qNorm = bd.Layer(i, "attn_q_norm.weight", hd)
		l.kNorm = bd.Layer(i, "attn_k_norm.weight", hd)
		l.o = bd.Layer(i, "attn_output.weight", c.Heads*hd, d)
		l.ffnNorm = bd.Layer(i, "ffn_norm.weight", d)
		l.gate = bd.Layer(i, "ffn_gate.weight", d, m.ffn)
		l.up = bd.Layer(i, "ffn_up.weight", d, m.ffn)
		l.down = bd.Layer(i, "ffn_down.weight", m.ffn, d)
	}
	if err := bd.Err(); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Model) Config() model.Config { return m.cfg }

// State is the KV cache of every layer.
type State struct {
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
		return fmt.Errorf("qwen3: %w", err)
	}
	if len(rest) != 0 {
		return fmt.Errorf("qwen3: snapshot has %d bytes past its KV cache", len(rest))
	}
	return nil
}

func (m *Model) NewState(b ml.Backend, capacity int, kv ml.DType) (model.State, error) {
	c, err := b.NewCache(m.cfg.Layers, m.cfg.KVHeads, m.cfg.HeadDim, capacity, kv)
	if err != nil {
		return nil, fmt.Errorf("qwen3: %w", err)
	}
	return m.newState(c), nil
}

func (m *Model) NewKVPool(b ml.Backend, blocks, blockSize int, kv ml.DType) (ml.KVPool, error) {
	p, err := b.NewKVPool(m.cfg.Layers, m.cfg.KVHeads, m.cfg.HeadDim, blocks, blockSize, kv)
	if err != nil {
		return nil, fmt.Errorf("qwen3: %w", err)
	}
	return p, nil
}

func (m *Model) NewPooledState(b ml.Backend, pool ml.KVPool, capacity int) (model.State, error) {
	c, err := pool.Alloc(capacity)
	if err != nil {
		return nil, fmt.Errorf("qwen3: %w", err)
	}
	return m.newState(c), nil
}

func (m *Model) newState(c ml.Cache) *State {
	return &State{kv: c, layers: m.cfg.Layers, kvHeads: m.cfg.KVHeads, headDim: m.cfg.HeadDim}
}

func (m *Model) Forward(ctx ml.Context, b model.Batch) ml.Tensor {
	runs := b.MustRuns()
	states := model.RunStates[*State](runs)
	c := m.cfg
	n := len(b.Tokens)
	scale := float32(1 / math.Sqrt(float64(c.HeadDim)))

	x := ctx.Embed(m.tokenEmbd, ctx.InputIDs(b.Tokens)) // [n, d]
	for i, l := range m.layers {
		// Attention block: h = x + Wo · attn(rope(norm(Wq·x̂)), rope(norm(Wk·x̂)), Wv·x̂)
		xn := ctx.Name(ctx.RMSNorm(x, l.attnNorm, m.eps), "attn_norm", i)
		q := ctx.Reshape(ctx.MatMul(l.q, xn), n, c.Heads, c.HeadDim)
		k := ctx.Reshape(ctx.MatMul(l.k, xn), n, c.KVHeads, c.HeadDim)
		v := ctx.Reshape(ctx.MatMul(l.v, xn), n, c.KVHeads, c.HeadDim)
		q = ctx.RMSNorm(q, l.qNorm, m.eps) // per-head norms; each run rotates its own positions
		k = ctx.RMSNorm(k, l.kNorm, m.eps)
		// Every run's keys are stored and queries rotated before any attends, so that the
		// batch's q, k and v are gone by then and several runs hold no more than one.
		qr := make([]ml.Tensor, len(runs))
		for j, r := range runs {
			kr := ctx.RoPE(model.RunRows(ctx, runs, j, k), r.Pos0, m.rope)
			ctx.StoreKV(states[j].kv, i, r.Pos0, kr, model.RunRows(ctx, runs, j, v))
			qr[j] = ctx.RoPE(model.RunRows(ctx, runs, j, q), r.Pos0, m.rope)
		}
		a := ctx.Name(model.PerRun(ctx, runs, func(j int, r model.Run) ml.Tensor {
			return ctx.Attention(qr[j], states[j].kv, i, r.Pos0, scale)
		}), "kqv_out", i) // [n, heads·hd]
		h := ctx.Add(x, ctx.MatMul(l.o, a))

		// Feed-forward block: out = h + Wdown · (silu(Wgate·ĥ) ⊙ Wup·ĥ)
		hn := ctx.Name(ctx.RMSNorm(h, l.ffnNorm, m.eps), "ffn_norm", i)
		f := ctx.SwiGLU(ctx.MatMul(l.gate, hn), ctx.MatMul(l.up, hn))
		x = ctx.Name(ctx.Add(h, ctx.MatMul(l.down, f)), "l_out", i)
	}
	rows := b.LogitRows()
	if len(rows) == 0 {
		return nil
	}
	x = ctx.Name(ctx.RMSNorm(model.GatherRows(ctx, x, rows), m.outputNorm, m.eps), "result_norm", -1)
	return ctx.Name(ctx.MatMul(m.output, x), "result_output", -1)
}
