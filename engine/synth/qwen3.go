package synth

import (
	"fmt"
	"math"

	"github.com/redlite/batch/engine/quant"
)

// qwen3Dims are the hyperparameters of a dense qwen3 model.
type qwen3Dims struct {
	name        string
	description string
	embd        int // hidden size
	layers      int
	heads       int
	kvHeads     int
	headDim     int
	ffn         int
	vocab       int // of the shape's own vocabulary
	context     int
	ropeBase    float32
	rmsEps      float32
	tied        bool    // no output.weight: the output projection is token_embd
	embStd      float64 // token_embd
	outStd      float64 // output.weight, when not tied
}

// tinyQwen3 is models/tiny-qwen3-*.gguf of the fixtures (generation-params.json).
var tinyQwen3 = qwen3Dims{
	name:        "tiny-qwen3",
	description: "random-weight test model, not trained",
	embd:        256, layers: 2, heads: 4, kvHeads: 2, headDim: 64, ffn: 768, vocab: 512,
	context: 40960, ropeBase: 1e6, rmsEps: 1e-6, tied: true, embStd: 0.125,
}

// qwen3_06b has the layout of Qwen3-0.6B.
var qwen3_06b = qwen3Dims{
	name:        "qwen3-0.6b",
	description: "random-weight test model, not trained",
	embd:        1024, layers: 28, heads: 16, kvHeads: 8, headDim: 128, ffn: 3072, vocab: 151936,
	context: 40960, ropeBase: 1e6, rmsEps: 1e-6, tied: true, embStd: 0.125,
}

// normStd is the spread of norm weights around 1.
const normStd = 0.05

// build lays out a qwen3 file: metadata keys in the order of the fixture models, tensors in
// llama.cpp's converter order.
func (d qwen3Dims) build(o Options, v *vocabulary) (*model, error) {
	const arch = "qwen3"
	m := &model{}
	m.set("general.architecture", arch)
	m.set("general.name", d.name)
	m.set("general.description", d.description)
	m.set(arch+".block_count", uint32(d.layers))
	m.set(arch+".context_length", uint32(d.context))
	m.set(arch+".embedding_length", uint32(d.embd))
	m.set(arch+".feed_forward_length", uint32(d.ffn))
	m.set(arch+".attention.head_count", uint32(d.heads))
	m.set(arch+".attention.head_count_kv", uint32(d.kvHeads))
	m.set(arch+".rope.freq_base", d.ropeBase)
	m.set(arch+".attention.layer_norm_rms_epsilon", d.rmsEps)
	m.set(arch+".attention.key_length", uint32(d.headDim))
	m.set(arch+".attention.value_length", uint32(d.headDim))
	m.set("general.file_type", o.Type.LlamaFileType())
	m.set("general.quantization_version", uint32(2))
	m.kv = append(m.kv, v.kv...)

	n := d.layers
	matrix := func(name string, in, out int, r role, il int) tensorSpec {
		return tensorSpec{name: name, dims: []uint64{uint64(in), uint64(out)},
			typ: o.Type.tensorType(r, il, n), std: 1 / math.Sqrt(float64(in))}
	}
	norm := func(name string, size int) tensorSpec {
		return tensorSpec{name: name, dims: []uint64{uint64(size)}, typ: quant.F32, mean: 1, std: normStd}
	}
	embedRole := roleEmbed
	if d.tied {
		embedRole = roleOutput
	}
	emb := matrix("token_embd.weight", d.embd, v.n, embedRole, 0)
	emb.std = d.embStd
	m.tensors = append(m.tensors, emb)
	q, kv := d.heads*d.headDim, d.kvHeads*d.headDim
	for il := range n {
		p := fmt.Sprintf("blk.%d.", il)
		m.tensors = append(m.tensors,
			norm(p+"attn_norm.weight", d.embd),
			matrix(p+"attn_q.weight", d.embd, q, roleMatrix, il),
			matrix(p+"attn_k.weight", d.embd, kv, roleMatrix, il),
			matrix(p+"attn_v.weight", d.embd, kv, roleAttnV, il),
			matrix(p+"attn_output.weight", q, d.embd, roleMatrix, il),
			norm(p+"attn_q_norm.weight", d.headDim),
			norm(p+"attn_k_norm.weight", d.headDim),
			norm(p+"ffn_norm.weight", d.embd),
			matrix(p+"ffn_gate.weight", d.embd, d.ffn, roleMatrix, il),
			matrix(p+"ffn_up.weight", d.embd, d.ffn, roleMatrix, il),
			matrix(p+"ffn_down.weight", d.ffn, d.embd, roleFFNDown, il),
		)
	}
	m.tensors = append(m.tensors, norm("output_norm.weight", d.embd))
	if !d.tied {
		out := matrix("output.weight", d.embd, v.n, roleOutput, 0)
		out.std = d.outStd
		m.tensors = append(m.tensors, out)
	}
	return m, nil
}
