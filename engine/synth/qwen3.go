package synth

import (
	"fmt"
	"math"

	"github.com/redlite/batch/engine/quant"
)

// qwen3Dims are the hyperparameters of a model of the qwen3 graph's family: dense qwen3,
// qwen3moe (experts > 0), llama, gemma3 or gpt-oss.
type qwen3Dims struct {
	arch        string // "" is qwen3
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
	// qwen3moe: routed experts of ffExp, used per token (ffn is then unused but written,
	// as Qwen's converter does)
	experts, used, ffExp int
	// llama: Llama 3's rope_freqs.weight for this factor and original context (0: none)
	ropeFactor  float64
	ropeOrigCtx int
	// gemma3: the sliding window and its period (0: no window), linear rope scaling of the
	// global layers (0: none)
	window, pattern int
	linearScale     float32
	// gpt-oss: YaRN over the original context (0: none)
	yarnFactor  float32
	yarnOrigCtx int
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

// qwen3MoEMini has the per-layer sizes of Qwen3-30B-A3B (hidden 2048, 32/4 heads of 128,
// experts of 768, 8 used) with 8 layers and 32 experts, for benchmarks.
var qwen3MoEMini = qwen3Dims{
	arch: "qwen3moe", name: "qwen3moe-mini", description: "random-weight test model, not trained",
	embd: 2048, layers: 8, heads: 32, kvHeads: 4, headDim: 128, ffn: 6144, vocab: 151936,
	context: 40960, ropeBase: 1e6, rmsEps: 1e-6, embStd: 1, outStd: 0.125,
	experts: 32, used: 8, ffExp: 768,
}

// qwen3MoE30B is Qwen3-30B-A3B's layout: qwen3moe-mini's layers, 48 of them, 128 experts.
var qwen3MoE30B = func() qwen3Dims {
	d := qwen3MoEMini
	d.name, d.layers, d.experts = "qwen3moe-30b-a3b", 48, 128
	return d
}()

// llama32_1b has the layout of Llama 3.2 1B (its rope_freqs from factor 32, original
// context 8192).
var llama32_1b = qwen3Dims{
	arch: "llama", name: "llama3.2-1b", description: "random-weight test model, not trained",
	embd: 2048, layers: 16, heads: 32, kvHeads: 8, headDim: 64, ffn: 8192, vocab: 128256,
	context: 131072, ropeBase: 500000, rmsEps: 1e-5, tied: true, embStd: 0.125,
	ropeFactor: 32, ropeOrigCtx: 8192,
}

// gemma3_1b has the layout of Gemma 3 1B (text): sliding window 512, five of every six
// layers windowed, no rope scaling.
var gemma3_1b = qwen3Dims{
	arch: "gemma3", name: "gemma-3-1b", description: "random-weight test model, not trained",
	embd: 1152, layers: 26, heads: 4, kvHeads: 1, headDim: 256, ffn: 6912, vocab: 262144,
	context: 32768, ropeBase: 1e6, rmsEps: 1e-6, tied: true, embStd: 1 / math.Sqrt(1152),
	window: 512, pattern: 6,
}

// gemma3_4b has the layout of Gemma 3 4B (its text model): window 1024, linear rope
// scaling 8 on the global layers.
var gemma3_4b = qwen3Dims{
	arch: "gemma3", name: "gemma-3-4b", description: "random-weight test model, not trained",
	embd: 2560, layers: 34, heads: 8, kvHeads: 4, headDim: 256, ffn: 10240, vocab: 262144,
	context: 131072, ropeBase: 1e6, rmsEps: 1e-6, tied: true, embStd: 1 / math.Sqrt(2560),
	window: 1024, pattern: 6, linearScale: 8,
}

// gptOSS20b has the layout of gpt-oss-20b: 24 layers alternating a window of 128 with
// global attention, 64/8 heads of 64, 32 experts (4 used) of 2880, YaRN 32 over 4096.
var gptOSS20b = qwen3Dims{
	arch: "gpt-oss", name: "gpt-oss-20b", description: "random-weight test model, not trained",
	embd: 2880, layers: 24, heads: 64, kvHeads: 8, headDim: 64, ffn: 2880, vocab: 201088,
	context: 131072, ropeBase: 150000, rmsEps: 1e-5, embStd: 1, outStd: 0.125,
	experts: 32, used: 4, ffExp: 2880, window: 128, yarnFactor: 32, yarnOrigCtx: 4096,
}

// llama3RopeFreqs are Llama 3.1's published per-frequency divisors (low and high frequency
// factors 1 and 4) for head dimension dims.
func llama3RopeFreqs(dims int, base, factor float64, origCtx int) []float32 {
	const low, high = 1.0, 4.0
	ff := make([]float32, dims/2)
	for i := range ff {
		freq := 1 / math.Pow(base, float64(2*i)/float64(dims))
		wl := 2 * math.Pi / freq
		switch {
		case wl < float64(origCtx)/high:
			ff[i] = 1
		case wl > float64(origCtx)/low:
			ff[i] = float32(factor)
		default:
			smooth := (float64(origCtx)/wl - low) / (high - low)
			ff[i] = float32(1 / ((1-smooth)/factor + smooth))
		}
	}
	return ff
}

// normStd is the spread of norm weights around 1.
const normStd = 0.05

// build lays out a qwen3 file: metadata keys in the order of the fixture models, tensors in
// llama.cpp's converter order.
func (d qwen3Dims) build(o Options, v *vocabulary) (*model, error) {
	arch := d.arch
	if arch == "" {
		arch = "qwen3"
	}
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
	if d.window > 0 {
		m.set(arch+".attention.sliding_window", uint32(d.window))
		if d.pattern > 0 {
			m.set(arch+".attention.sliding_window_pattern", uint32(d.pattern))
		}
	}
	if d.yarnFactor > 0 {
		m.set(arch+".rope.scaling.type", "yarn")
		m.set(arch+".rope.scaling.factor", d.yarnFactor)
		m.set(arch+".rope.scaling.original_context_length", uint32(d.yarnOrigCtx))
	}
	if d.linearScale > 0 {
		m.set(arch+".rope.scaling.type", "linear")
		m.set(arch+".rope.scaling.factor", d.linearScale)
	}
	if d.experts > 0 {
		m.set(arch+".expert_count", uint32(d.experts))
		m.set(arch+".expert_used_count", uint32(d.used))
		m.set(arch+".expert_feed_forward_length", uint32(d.ffExp))
	}
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
	oss := arch == "gpt-oss"
	// gpt-oss's biases and sinks stay F32, as llama-quantize leaves vectors.
	vec := func(name string, std float64, dims ...int) tensorSpec {
		t := tensorSpec{name: name, typ: quant.F32, std: std}
		for _, x := range dims {
			t.dims = append(t.dims, uint64(x))
		}
		return t
	}
	embedRole := roleEmbed
	if d.tied {
		embedRole = roleOutput
	}
	emb := matrix("token_embd.weight", d.embd, v.n, embedRole, 0)
	emb.std = d.embStd
	m.tensors = append(m.tensors, emb)
	if d.ropeFactor != 0 {
		ff := llama3RopeFreqs(d.headDim, float64(d.ropeBase), d.ropeFactor, d.ropeOrigCtx)
		m.tensors = append(m.tensors, tensorSpec{name: "rope_freqs.weight", dims: []uint64{uint64(len(ff))}, typ: quant.F32, values: ff})
	}
	q, kv := d.heads*d.headDim, d.kvHeads*d.headDim
	for il := range n {
		p := fmt.Sprintf("blk.%d.", il)
		m.tensors = append(m.tensors,
			norm(p+"attn_norm.weight", d.embd),
			matrix(p+"attn_q.weight", d.embd, q, roleMatrix, il),
			matrix(p+"attn_k.weight", d.embd, kv, roleMatrix, il),
			matrix(p+"attn_v.weight", d.embd, kv, roleAttnV, il),
			matrix(p+"attn_output.weight", q, d.embd, roleMatrix, il),
		)
		switch arch {
		case "llama":
		case "gpt-oss":
			m.tensors = append(m.tensors, vec(p+"attn_q.bias", 0.1, q), vec(p+"attn_k.bias", 0.1, kv),
				vec(p+"attn_v.bias", 0.1, kv), vec(p+"attn_output.bias", 0.1, d.embd), vec(p+"attn_sinks.weight", 1, d.heads))
		default:
			m.tensors = append(m.tensors, norm(p+"attn_q_norm.weight", d.headDim), norm(p+"attn_k_norm.weight", d.headDim))
		}
		if arch == "gemma3" || oss {
			m.tensors = append(m.tensors, norm(p+"post_attention_norm.weight", d.embd))
		}
		if !oss { // gpt-oss's post-attention norm is its feed-forward's input norm
			m.tensors = append(m.tensors, norm(p+"ffn_norm.weight", d.embd))
		}
		if d.experts > 0 {
			experts := func(name string, in, out int, r role) tensorSpec {
				t := matrix(name, in, out, r, il)
				t.dims = append(t.dims, uint64(d.experts))
				return t
			}
			// The router stays F32, as llama-quantize leaves it.
			router := tensorSpec{name: p + "ffn_gate_inp.weight", dims: []uint64{uint64(d.embd), uint64(d.experts)},
				typ: quant.F32, std: 1 / math.Sqrt(float64(d.embd))}
			m.tensors = append(m.tensors, router,
				experts(p+"ffn_gate_exps.weight", d.embd, d.ffExp, roleMatrix),
				experts(p+"ffn_up_exps.weight", d.embd, d.ffExp, roleMatrix),
				experts(p+"ffn_down_exps.weight", d.ffExp, d.embd, roleFFNDown))
			if oss {
				m.tensors = append(m.tensors, vec(p+"ffn_gate_inp.bias", 0.1, d.experts),
					vec(p+"ffn_gate_exps.bias", 0.1, d.ffExp, d.experts), vec(p+"ffn_up_exps.bias", 0.1, d.ffExp, d.experts),
					vec(p+"ffn_down_exps.bias", 0.1, d.embd, d.experts))
			}
			continue
		}
		m.tensors = append(m.tensors,
			matrix(p+"ffn_gate.weight", d.embd, d.ffn, roleMatrix, il),
			matrix(p+"ffn_up.weight", d.embd, d.ffn, roleMatrix, il),
			matrix(p+"ffn_down.weight", d.ffn, d.embd, roleFFNDown, il),
		)
		if arch == "gemma3" {
			m.tensors = append(m.tensors, norm(p+"post_ffw_norm.weight", d.embd))
		}
	}
	m.tensors = append(m.tensors, norm("output_norm.weight", d.embd))
	if !d.tied {
		out := matrix("output.weight", d.embd, v.n, roleOutput, 0)
		out.std = d.outStd
		m.tensors = append(m.tensors, out)
	}
	return m, nil
}
