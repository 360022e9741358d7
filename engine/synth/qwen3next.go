package synth

import (
	"cmp"
	"fmt"
	"math"

	"github.com/redlite/batch/engine/quant"
)

// The qwen3next shapes (issue 3): the fixtures' tiny model, and qwen3next-mini, which has
// the per-layer sizes of Qwen3-Next-80B-A3B with fewer layers and experts, for benchmarks.
// The "-mtp" variants append the next-token-prediction block (nextn_predict_layers 1) that
// llama.cpp loads as blk.<block_count−1>.
func init() {
	shapes = append(shapes,
		Shape{
			Name: "tiny-qwen3next", Arch: "qwen3next",
			Summary: "the fixtures' tiny qwen3next layout: 4 layers (3 DeltaNet + 1 attention), hidden 256, 16 experts (4 used) of 256, tiny-bpe512 vocabulary",
			vocab:   tinyVocab, build: tinyQwen3Next.build,
		},
		Shape{
			Name: "tiny-qwen3next-mtp", Arch: "qwen3next",
			Summary: "tiny-qwen3next with an MTP block",
			vocab:   tinyVocab, build: tinyQwen3Next.withMTP().build,
		},
		Shape{
			Name: "qwen3next-mini", Arch: "qwen3next",
			Summary: "Qwen3-Next-80B-A3B per-layer sizes (hidden 2048, 16/2 heads of 256, DeltaNet 16/32 heads of 128, experts of 512) with 8 layers (6 DeltaNet + 2 attention) and 64 experts (10 used), vocab 151936",
			vocab:   func() (*vocabulary, error) { return generatedVocab(qwen3NextMini.vocab) },
			build:   qwen3NextMini.build,
		},
		Shape{
			Name: "qwen3next-80b", Arch: "qwen3next",
			Summary: "Qwen3-Next-80B-A3B: 48 layers (36 DeltaNet + 12 attention), hidden 2048, 512 experts (10 used) of 512, vocab 151936; --layout for a sparse file to plan and count passes",
			vocab:   func() (*vocabulary, error) { return generatedVocab(qwen3Next80B.vocab) },
			build:   qwen3Next80B.build,
		},
		Shape{
			Name: "qwen3next-mini-mtp", Arch: "qwen3next",
			Summary: "qwen3next-mini with an MTP block",
			vocab:   func() (*vocabulary, error) { return generatedVocab(qwen3NextMini.vocab) },
			build:   qwen3NextMini.withMTP().build,
		},
		Shape{
			Name: "qwen3.5-9b", Arch: "qwen35",
			Summary: "Qwen3.5-9B: 32 layers (24 DeltaNet + 8 attention), hidden 4096, 16/4 heads of 256, DeltaNet 16/32 heads of 128, ffn 12288, vocab 248320; --layout for a sparse file to plan",
			vocab:   func() (*vocabulary, error) { return generatedVocab(qwen35_9B.vocab) },
			build:   qwen35_9B.build,
		},
		Shape{
			Name: "qwen3.5-mini", Arch: "qwen35",
			Summary: "qwen3.5-9b's per-layer sizes with 8 layers (6 DeltaNet + 2 attention), for benchmarks",
			vocab:   func() (*vocabulary, error) { return generatedVocab(qwen35Mini.vocab) },
			build:   qwen35Mini.build,
		},
		Shape{
			Name: "qwen3.5-35b-a3b", Arch: "qwen35moe",
			Summary: "Qwen3.5/3.6-35B-A3B: 40 layers (30 DeltaNet + 10 attention), hidden 2048, 16/2 heads of 256, DeltaNet 16/32 heads of 128, 256 experts (8 used) of 512 and a shared one of 512, vocab 248320; --layout for a sparse file to plan",
			vocab:   func() (*vocabulary, error) { return generatedVocab(qwen35_35BA3B.vocab) },
			build:   qwen35_35BA3B.build,
		},
		Shape{
			Name: "qwen3.5moe-mini", Arch: "qwen35moe",
			Summary: "qwen3.5-35b-a3b's per-layer sizes with 8 layers (6 DeltaNet + 2 attention) and 64 experts (8 used), for benchmarks",
			vocab:   func() (*vocabulary, error) { return generatedVocab(qwen35MoEMini.vocab) },
			build:   qwen35MoEMini.build,
		},
	)
}

// qwen3NextDims are the hyperparameters of a model of the qwen3next family.
type qwen3NextDims struct {
	arch           string // "" is qwen3next; qwen35 and qwen35moe lay out Qwen3.5's tensors
	name           string
	embd, layers   int
	heads, kvHeads int
	headDim        int // attention key and value length
	ropeDims       int
	kHeads, vHeads int // DeltaNet key and value heads
	stateSize      int // DeltaNet head dim of k and v
	convKernel     int
	experts, used  int
	ffExp, ffShexp int
	ff             int // qwen35's SwiGLU width (experts 0)
	interval       int // full_attention_interval
	vocab, context int
	mtp            bool
}

var tinyQwen3Next = qwen3NextDims{
	name: "tiny-qwen3next", embd: 256, layers: 4, heads: 8, kvHeads: 1, headDim: 256, ropeDims: 64,
	kHeads: 2, vHeads: 4, stateSize: 128, convKernel: 4, experts: 16, used: 4, ffExp: 256, ffShexp: 256,
	interval: 4, vocab: 512, context: 262144,
}

var qwen3NextMini = qwen3NextDims{
	name: "qwen3next-mini", embd: 2048, layers: 8, heads: 16, kvHeads: 2, headDim: 256, ropeDims: 64,
	kHeads: 16, vHeads: 32, stateSize: 128, convKernel: 4, experts: 64, used: 10, ffExp: 512, ffShexp: 512,
	interval: 4, vocab: 151936, context: 262144,
}

// qwen3Next80B is the released model's layout: qwen3next-mini's layers, 48 of them, with all
// 512 experts.
var qwen3Next80B = func() qwen3NextDims {
	d := qwen3NextMini
	d.name, d.layers, d.experts = "qwen3next-80b", 48, 512
	return d
}()

// The Qwen3.5 shapes, by the published configurations: rotary on a quarter of each head
// (64 of 256) in IMRoPE sections 11/11/10.
var (
	qwen35_9B = qwen3NextDims{
		arch: "qwen35", name: "qwen3.5-9b", embd: 4096, layers: 32, heads: 16, kvHeads: 4, headDim: 256, ropeDims: 64,
		kHeads: 16, vHeads: 32, stateSize: 128, convKernel: 4, ff: 12288, interval: 4, vocab: 248320, context: 262144,
	}
	qwen35Mini = func() qwen3NextDims {
		d := qwen35_9B
		d.name, d.layers = "qwen3.5-mini", 8
		return d
	}()
	qwen35_35BA3B = qwen3NextDims{
		arch: "qwen35moe", name: "qwen3.5-35b-a3b", embd: 2048, layers: 40, heads: 16, kvHeads: 2, headDim: 256, ropeDims: 64,
		kHeads: 16, vHeads: 32, stateSize: 128, convKernel: 4, experts: 256, used: 8, ffExp: 512, ffShexp: 512,
		interval: 4, vocab: 248320, context: 262144,
	}
	qwen35MoEMini = func() qwen3NextDims {
		d := qwen35_35BA3B
		d.name, d.layers, d.experts = "qwen3.5moe-mini", 8, 64
		return d
	}()
)

func (d qwen3NextDims) withMTP() qwen3NextDims {
	d.mtp = true
	d.name += "-mtp"
	return d
}

// build lays out a qwen3next file with the fixtures' conventions (generation-params.json):
// input projections N(0, 1/fan_in), output projections at half that spread so each block
// adds a moderate amount to the residual stream, conv weights N(0, 0.35²), dt_bias around
// softplus⁻¹(0.02) and ssm_a = −A around −5 (kept negative: a positive one would make the
// recurrent state grow). Norms, ssm_*, the conv and both router weights stay F32, as
// llama-quantize leaves them.
func (d qwen3NextDims) build(o Options, v *vocabulary) (*model, error) {
	arch := cmp.Or(d.arch, "qwen3next")
	qwen35 := arch != "qwen3next"
	blocks := d.layers
	if d.mtp {
		blocks++
	}
	m := &model{}
	m.set("general.architecture", arch)
	m.set("general.name", d.name)
	m.set("general.description", "random-weight test model, not trained")
	m.set(arch+".block_count", uint32(blocks))
	m.set(arch+".context_length", uint32(d.context))
	m.set(arch+".embedding_length", uint32(d.embd))
	m.set(arch+".feed_forward_length", uint32(cmp.Or(d.ff, d.ffExp*d.used)))
	m.set(arch+".attention.head_count", uint32(d.heads))
	m.set(arch+".attention.head_count_kv", uint32(d.kvHeads))
	m.set(arch+".rope.freq_base", float32(1e7))
	m.set(arch+".attention.layer_norm_rms_epsilon", float32(1e-6))
	if d.experts > 0 {
		m.set(arch+".expert_count", uint32(d.experts))
		m.set(arch+".expert_used_count", uint32(d.used))
	}
	m.set(arch+".attention.key_length", uint32(d.headDim))
	m.set(arch+".attention.value_length", uint32(d.headDim))
	if d.experts > 0 {
		m.set(arch+".expert_feed_forward_length", uint32(d.ffExp))
		m.set(arch+".expert_shared_feed_forward_length", uint32(d.ffShexp))
	}
	m.set(arch+".ssm.conv_kernel", uint32(d.convKernel))
	m.set(arch+".ssm.state_size", uint32(d.stateSize))
	m.set(arch+".ssm.group_count", uint32(d.kHeads))
	m.set(arch+".ssm.time_step_rank", uint32(d.vHeads))
	m.set(arch+".ssm.inner_size", uint32(d.vHeads*d.stateSize))
	m.set(arch+".full_attention_interval", uint32(d.interval))
	m.set(arch+".rope.dimension_count", uint32(d.ropeDims))
	if qwen35 {
		m.set(arch+".rope.dimension_sections", []int32{11, 11, 10, 0})
	}
	if d.mtp {
		m.set(arch+".nextn_predict_layers", uint32(1))
	}
	m.set("general.quantization_version", uint32(2))
	m.set("general.file_type", o.Type.LlamaFileType())
	m.kv = append(m.kv, v.kv...)

	n := blocks
	matrix := func(name string, in, out int, r role, il int) tensorSpec {
		return tensorSpec{name: name, dims: []uint64{uint64(in), uint64(out)},
			typ: o.Type.tensorType(r, il, n), std: 1 / math.Sqrt(float64(in))}
	}
	outProj := func(name string, in, out int, r role, il int) tensorSpec {
		t := matrix(name, in, out, r, il)
		t.std /= 2
		return t
	}
	experts := func(name string, in, out int, r role, il int, std float64) tensorSpec {
		t := matrix(name, in, out, r, il)
		t.dims = append(t.dims, uint64(d.experts))
		t.std = std
		return t
	}
	vec := func(name string, size int, mean, std float64) tensorSpec {
		return tensorSpec{name: name, dims: []uint64{uint64(size)}, typ: quant.F32, mean: mean, std: std}
	}
	norm := func(name string, size int) tensorSpec { return vec(name, size, 1, normStd) }
	f32 := func(name string, dims []uint64, std float64) tensorSpec {
		return tensorSpec{name: name, dims: dims, typ: quant.F32, std: std}
	}

	emb := matrix("token_embd.weight", d.embd, v.n, roleEmbed, 0)
	emb.std = 1
	out := matrix("output.weight", d.embd, v.n, roleOutput, 0)
	out.std = 0.125
	m.tensors = append(m.tensors, emb, out, norm("output_norm.weight", d.embd))

	key, value := d.kHeads*d.stateSize, d.vHeads*d.stateSize
	conv := 2*key + value
	attention := func(p string, il int) {
		m.tensors = append(m.tensors,
			matrix(p+"attn_q.weight", d.embd, 2*d.heads*d.headDim, roleMatrix, il),
			matrix(p+"attn_k.weight", d.embd, d.kvHeads*d.headDim, roleMatrix, il),
			matrix(p+"attn_v.weight", d.embd, d.kvHeads*d.headDim, roleAttnV, il),
			outProj(p+"attn_output.weight", d.heads*d.headDim, d.embd, roleMatrix, il),
			norm(p+"attn_q_norm.weight", d.headDim),
			norm(p+"attn_k_norm.weight", d.headDim),
		)
	}
	moe := func(p string, il int) {
		if d.experts == 0 {
			m.tensors = append(m.tensors,
				matrix(p+"ffn_gate.weight", d.embd, d.ff, roleMatrix, il),
				matrix(p+"ffn_up.weight", d.embd, d.ff, roleMatrix, il),
				outProj(p+"ffn_down.weight", d.ff, d.embd, roleFFNDown, il),
			)
			return
		}
		m.tensors = append(m.tensors,
			f32(p+"ffn_gate_inp.weight", []uint64{uint64(d.embd), uint64(d.experts)}, 1/math.Sqrt(float64(d.embd))),
			experts(p+"ffn_gate_exps.weight", d.embd, d.ffExp, roleMatrix, il, 1/math.Sqrt(float64(d.embd))),
			experts(p+"ffn_up_exps.weight", d.embd, d.ffExp, roleMatrix, il, 1/math.Sqrt(float64(d.embd))),
			experts(p+"ffn_down_exps.weight", d.ffExp, d.embd, roleFFNDown, il, 0.5/math.Sqrt(float64(d.ffExp))),
			vec(p+"ffn_gate_inp_shexp.weight", d.embd, 0, 1/math.Sqrt(float64(d.embd))),
			matrix(p+"ffn_gate_shexp.weight", d.embd, d.ffShexp, roleMatrix, il),
			matrix(p+"ffn_up_shexp.weight", d.embd, d.ffShexp, roleMatrix, il),
			outProj(p+"ffn_down_shexp.weight", d.ffShexp, d.embd, roleFFNDown, il),
		)
	}
	for il := range d.layers {
		p := fmt.Sprintf("blk.%d.", il)
		m.tensors = append(m.tensors, norm(p+"attn_norm.weight", d.embd), norm(p+"post_attention_norm.weight", d.embd))
		if (il+1)%d.interval != 0 {
			// qwen3next projects β and α together, per key head; Qwen3.5 one each.
			ba := []tensorSpec{matrix(p+"ssm_ba.weight", d.embd, 2*d.vHeads, roleMatrix, il)}
			if qwen35 {
				ba = []tensorSpec{matrix(p+"ssm_beta.weight", d.embd, d.vHeads, roleMatrix, il),
					matrix(p+"ssm_alpha.weight", d.embd, d.vHeads, roleMatrix, il)}
			}
			m.tensors = append(m.tensors,
				matrix(p+"attn_qkv.weight", d.embd, conv, roleAttnQKV, il),
				matrix(p+"attn_gate.weight", d.embd, value, roleMatrix, il),
				f32(p+"ssm_conv1d.weight", []uint64{uint64(d.convKernel), uint64(conv)}, 0.35))
			m.tensors = append(m.tensors, ba...)
			m.tensors = append(m.tensors,
				vec(p+"ssm_dt.bias", d.vHeads, -4, 1),
				vec(p+"ssm_a", d.vHeads, -5, 1),
				norm(p+"ssm_norm.weight", d.stateSize),
				outProj(p+"ssm_out.weight", value, d.embd, roleMatrix, il),
			)
		} else {
			attention(p, il)
		}
		moe(p, il)
	}
	if d.mtp {
		il := d.layers
		p := fmt.Sprintf("blk.%d.", il)
		m.tensors = append(m.tensors,
			norm(p+"attn_norm.weight", d.embd), norm(p+"post_attention_norm.weight", d.embd),
			matrix(p+"nextn.eh_proj.weight", 2*d.embd, d.embd, roleMatrix, il),
			norm(p+"nextn.enorm.weight", d.embd),
			norm(p+"nextn.hnorm.weight", d.embd),
		)
		attention(p, il)
		moe(p, il)
	}
	return m, nil
}
