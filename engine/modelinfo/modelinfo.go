// Package modelinfo summarizes a GGUF model: architecture, hyperparameters, vocabulary,
// tensor types, and bytes by class and by layer, plus the per-position and per-sequence
// state sizes the planner needs. Its JSON form (Info) is a stable interface: fields are
// only ever added.
package modelinfo

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// Class groups tensors by what they do, for memory planning.
type Class string

// Tensor classes, in the order Info lists them.
const (
	ClassEmbedding     Class = "embedding"      // token_embd
	ClassOutput        Class = "output"         // output.weight (absent when tied to the embedding)
	ClassAttention     Class = "attention"      // q, k, v, output projections of attention layers
	ClassRecurrent     Class = "recurrent"      // ssm_* and the input/gate projections of recurrent (DeltaNet/Mamba) layers
	ClassFFNDense      Class = "ffn_dense"      // the feed-forward of dense layers
	ClassRoutedExperts Class = "routed_experts" // *_exps: the MoE experts, of which a few run per token
	ClassSharedExpert  Class = "shared_expert"  // *_shexp: the expert every token runs, and its gate
	ClassNorms         Class = "norms"          // every *norm weight and bias
	ClassOther         Class = "other"          // the MoE router, rope factors, MTP glue, anything unknown
)

// Classes lists every class in display order.
var Classes = []Class{ClassEmbedding, ClassOutput, ClassAttention, ClassRecurrent, ClassFFNDense,
	ClassRoutedExperts, ClassSharedExpert, ClassNorms, ClassOther}

// SplitLayer splits "blk.12.attn_q.weight" into 12 and "attn_q.weight"; names outside a
// block give -1 and the name itself.
func SplitLayer(name string) (int, string) {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1, name
	}
	num, base, ok := strings.Cut(rest, ".")
	if !ok {
		return -1, name
	}
	il, err := strconv.Atoi(num)
	if err != nil || il < 0 {
		return -1, name
	}
	return il, base
}

// MaxContextLength bounds a file's context_length: far above any model's trained context
// (the longest claim is 10M positions), far below what would overflow a plan's sums.
const MaxContextLength = 1 << 24

// TensorBlocks is how many distinct blocks f's tensors belong to ("blk.<i>.…"). Every block
// has tensors, so a block_count above it names blocks the file does not hold; it is bounded
// by the tensor count, which the file's size bounds, where the highest index is not (one
// tensor named blk.1073741823 would do).
func TensorBlocks(f *gguf.File) int {
	seen := map[int]bool{}
	for _, t := range f.Tensors {
		if il, _ := SplitLayer(t.Name); il >= 0 {
			seen[il] = true
		}
	}
	return len(seen)
}

// LargestDim is the largest dimension of any tensor in f. Every size hyperparameter (the
// embedding length, a head count, a head or feed-forward dimension, the expert count) is
// the dimension of some tensor or a factor of one, so none can exceed it.
func LargestDim(f *gguf.File) int64 {
	var m uint64
	for _, t := range f.Tensors {
		for _, d := range t.Dims {
			m = max(m, d)
		}
	}
	return int64(min(m, math.MaxInt64))
}

// Classify returns the class of the tensor with the given name. recurrentLayer says whether
// its layer is a recurrent one (it has ssm_* tensors): there, qwen3next names the DeltaNet
// input projections attn_qkv and attn_gate.
func Classify(name string, recurrentLayer bool) Class {
	_, base := SplitLayer(name)
	stem := strings.TrimSuffix(strings.TrimSuffix(base, ".weight"), ".bias")
	switch {
	case strings.HasSuffix(stem, "norm"):
		return ClassNorms
	case name == "token_embd.weight":
		return ClassEmbedding
	case name == "output.weight":
		return ClassOutput
	case strings.HasSuffix(stem, "_exps"):
		return ClassRoutedExperts
	case strings.HasSuffix(stem, "_shexp"):
		return ClassSharedExpert
	case strings.HasPrefix(stem, "ssm_"):
		return ClassRecurrent
	case strings.HasPrefix(stem, "attn_"):
		if recurrentLayer {
			return ClassRecurrent
		}
		return ClassAttention
	case stem == "ffn_gate" || stem == "ffn_up" || stem == "ffn_down" || stem == "ffn_gate_up":
		return ClassFFNDense
	}
	return ClassOther
}

// Role is a tensor's term in a plan's memory: the resident dense weights, the routed
// experts an expert cache may hold in part, or the MTP head's blocks.
type Role string

const (
	RoleDense        Role = "dense"
	RoleRoutedExpert Role = "routed_expert"
	RoleMTP          Role = "mtp"
)

// TensorRole places a GGUF tensor by its name: blocks at or after mtpFirstBlock (the
// NextN/MTP blocks that follow the main stack; ≤ 0 when there are none) are MTP, stacked
// routed experts (ffn_*_exps) are routed experts, everything else is dense. It also returns
// the block index, or -1 for tensors outside the blocks.
func TensorRole(name string, mtpFirstBlock int) (int, Role) {
	layer, _ := SplitLayer(name)
	switch {
	case mtpFirstBlock > 0 && layer >= mtpFirstBlock:
		return layer, RoleMTP
	case layer >= 0 && Classify(name, false) == ClassRoutedExperts:
		return layer, RoleRoutedExpert
	}
	return layer, RoleDense
}

// MTPFirstBlock is the first NextN (MTP) block of f: they follow the main stack and are
// counted in block_count. 0 when the file has none.
func MTPFirstBlock(f *gguf.File, arch string) int {
	n, err := f.IntOr(arch+".nextn_predict_layers", 0)
	if err != nil || n <= 0 {
		return 0
	}
	blocks, err := f.Int(arch + ".block_count")
	if err != nil || blocks <= n {
		return 0
	}
	return int(blocks - n)
}

// GatedDeltaNetStateBytes is one sequence's Gated DeltaNet state in f32: per recurrent layer
// a valueHeads × keyDim × valueDim delta-rule state and a (convKernel − 1) × convChannels
// window of the causal convolution (convChannels = q, k and v: 2·keyHeads·keyDim +
// valueHeads·valueDim). The engine allocates it, the planner plans with it, `redlite info`
// prints it.
func GatedDeltaNetStateBytes(layers, valueHeads, keyDim, valueDim, convKernel, convChannels int64) int64 {
	state := valueHeads * keyDim * valueDim
	conv := max(convKernel-1, 0) * convChannels
	return layers * (state + conv) * 4
}

// Info is the summary of one model file.
type Info struct {
	Path         string   `json:"path,omitempty"`
	Architecture string   `json:"architecture"`
	Name         string   `json:"name,omitempty"`
	FileType     FileType `json:"file_type"`
	FileBytes    int64    `json:"file_bytes"`
	// Hyperparameters holds every "<architecture>.*" key without the prefix, e.g.
	// "block_count", "attention.head_count".
	Hyperparameters map[string]any `json:"hyperparameters"`
	Vocab           Vocab          `json:"vocab"`
	ChatTemplate    bool           `json:"chat_template"`
	TensorCount     int            `json:"tensor_count"`
	TensorBytes     uint64         `json:"tensor_bytes"`
	Parameters      uint64         `json:"parameters"`
	Types           []TypeStat     `json:"types"`   // by type id
	Classes         []ClassStat    `json:"classes"` // every class, in Classes order
	Layers          []Layer        `json:"layers"`  // by index
	Memory          Memory         `json:"memory"`
}

// FileType is general.file_type (llama.cpp's llama_ftype); ID -1 when the key is absent.
type FileType struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

// Vocab describes the tokenizer metadata. Special ids are -1 when absent.
type Vocab struct {
	Size   int    `json:"size"`
	Model  string `json:"model,omitempty"`
	Pre    string `json:"pre,omitempty"`
	Merges int    `json:"merges"`
	BOS    int64  `json:"bos"`
	EOS    int64  `json:"eos"`
}

// TypeStat counts the tensors stored in one type.
type TypeStat struct {
	Type    string `json:"type"`
	Tensors int    `json:"tensors"`
	Bytes   uint64 `json:"bytes"`
}

// ClassStat counts the tensors of one class.
type ClassStat struct {
	Class      Class  `json:"class"`
	Tensors    int    `json:"tensors"`
	Bytes      uint64 `json:"bytes"`
	Parameters uint64 `json:"parameters"`
}

// Layer kinds.
const (
	LayerAttention = "attention" // has attention K/V: needs KV cache
	LayerRecurrent = "recurrent" // has ssm_* tensors: needs conv and recurrent state
	LayerOther     = "other"
)

// Layer sums one block's tensors.
type Layer struct {
	Index       int    `json:"index"`
	Kind        string `json:"kind"`
	Bytes       uint64 `json:"bytes"`
	ExpertBytes uint64 `json:"expert_bytes"` // routed experts
}

// Memory holds the facts the planner derives its model terms from.
type Memory struct {
	// DenseBytes is every tensor but the routed experts: what must stay resident.
	DenseBytes uint64 `json:"dense_bytes"`
	// ExpertBytes is the routed experts in all layers (cacheable).
	ExpertBytes uint64 `json:"expert_bytes"`
	// KV cache bytes per position of one sequence: attention layers × KV heads ×
	// (key_length + value_length) × element size.
	KVBytesPerPositionF32 uint64 `json:"kv_bytes_per_position_f32"`
	KVBytesPerPositionF16 uint64 `json:"kv_bytes_per_position_f16"`
	// KVBytesPerPositionQ8_0 is 0 when a layer's heads are not whole q8_0 blocks.
	KVBytesPerPositionQ8_0 uint64 `json:"kv_bytes_per_position_q8_0"`
	// RecurrentBytesPerSequence is the f32 conv and recurrent state of every recurrent
	// layer for one sequence: (conv_kernel-1) × (inner_size + 2 × group_count ×
	// state_size) + state_size × inner_size values per layer, as llama.cpp sizes them.
	RecurrentBytesPerSequence uint64 `json:"recurrent_bytes_per_sequence"`
}

// fileTypeNames are llama.cpp's llama_ftype values.
var fileTypeNames = map[int64]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
	11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
	17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
	23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
	29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
	38: "MXFP4_MOE", 39: "NVFP4", 40: "Q1_0", 41: "Q2_0",
}

// FileTypeName names a llama_ftype value.
func FileTypeName(id int64) string {
	if n, ok := fileTypeNames[id]; ok {
		return n
	}
	return fmt.Sprintf("unknown(%d)", id)
}

// Inspect summarizes f.
func Inspect(f *gguf.File) (Info, error) {
	arch, err := f.Architecture()
	if err != nil {
		return Info{}, fmt.Errorf("modelinfo: %w", err)
	}
	info := Info{
		Path:            f.Path,
		Architecture:    arch,
		FileBytes:       f.Size(),
		Hyperparameters: map[string]any{},
		TensorCount:     len(f.Tensors),
		FileType:        FileType{ID: -1, Name: "unknown"},
	}
	if info.Name, err = f.StringOr("general.name", ""); err != nil {
		return Info{}, fmt.Errorf("modelinfo: %w", err)
	}
	if v, ok := f.Get("general.file_type"); ok {
		id, ok := v.Int()
		if !ok {
			return Info{}, fmt.Errorf("modelinfo: general.file_type is %s, want an integer", v.Type)
		}
		info.FileType = FileType{ID: id, Name: FileTypeName(id)}
	}
	for _, kv := range f.KV {
		if k, ok := strings.CutPrefix(kv.Key, arch+"."); ok {
			info.Hyperparameters[k] = plain(kv.Value)
		}
	}
	if info.Vocab, err = vocab(f); err != nil {
		return Info{}, err
	}
	_, info.ChatTemplate = f.Get("tokenizer.chat_template")

	// Layers with ssm_* tensors are recurrent; layers with attn_k are attention layers.
	kinds := map[int]string{}
	for _, t := range f.Tensors {
		il, base := SplitLayer(t.Name)
		if il < 0 {
			continue
		}
		switch {
		case strings.HasPrefix(base, "ssm_"):
			kinds[il] = LayerRecurrent
		case strings.HasPrefix(base, "attn_k.") && kinds[il] != LayerRecurrent:
			kinds[il] = LayerAttention
		case kinds[il] == "":
			kinds[il] = LayerOther
		}
	}
	types := map[quant.Type]*TypeStat{}
	classes := map[Class]*ClassStat{}
	for _, c := range Classes {
		classes[c] = &ClassStat{Class: c}
	}
	layers := map[int]*Layer{}
	for il, k := range kinds {
		layers[il] = &Layer{Index: il, Kind: k}
	}
	for _, t := range f.Tensors {
		il, _ := SplitLayer(t.Name)
		c := Classify(t.Name, kinds[il] == LayerRecurrent)
		n := t.Elements()
		info.TensorBytes += t.Size
		info.Parameters += n
		ts := types[t.Type]
		if ts == nil {
			ts = &TypeStat{Type: t.Type.String()}
			types[t.Type] = ts
		}
		ts.Tensors++
		ts.Bytes += t.Size
		cs := classes[c]
		cs.Tensors++
		cs.Bytes += t.Size
		cs.Parameters += n
		if l := layers[il]; l != nil {
			l.Bytes += t.Size
			if c == ClassRoutedExperts {
				l.ExpertBytes += t.Size
			}
		}
	}
	for _, typ := range slices.Sorted(maps.Keys(types)) {
		info.Types = append(info.Types, *types[typ])
	}
	for _, c := range Classes {
		info.Classes = append(info.Classes, *classes[c])
	}
	info.Layers = []Layer{}
	for _, il := range slices.Sorted(maps.Keys(layers)) {
		info.Layers = append(info.Layers, *layers[il])
	}
	info.Memory.ExpertBytes = classes[ClassRoutedExperts].Bytes
	info.Memory.DenseBytes = info.TensorBytes - info.Memory.ExpertBytes
	if err := stateSizes(f, arch, &info); err != nil {
		return Info{}, err
	}
	return info, nil
}

// plain converts a metadata value to a JSON-friendly Go value: integer arrays as []int64
// (a []uint8 would marshal as base64), other arrays and scalars as they are.
func plain(v gguf.Value) any {
	if v.Type != gguf.TypeArray {
		return v.Any()
	}
	switch v.Elem {
	case gguf.TypeFloat32, gguf.TypeFloat64:
		if fs, ok := v.Floats(); ok {
			return fs
		}
	case gguf.TypeString:
		if ss, ok := v.Strings(); ok {
			return ss
		}
	default:
		if is, ok := v.Ints(); ok {
			return is
		}
	}
	return v.String()
}

func vocab(f *gguf.File) (Vocab, error) {
	v := Vocab{BOS: -1, EOS: -1}
	var err error
	if val, ok := f.Get("tokenizer.ggml.tokens"); ok {
		v.Size = val.Len()
	}
	if val, ok := f.Get("tokenizer.ggml.merges"); ok {
		v.Merges = val.Len()
	}
	if v.Model, err = f.StringOr("tokenizer.ggml.model", ""); err != nil {
		return v, fmt.Errorf("modelinfo: %w", err)
	}
	if v.Pre, err = f.StringOr("tokenizer.ggml.pre", ""); err != nil {
		return v, fmt.Errorf("modelinfo: %w", err)
	}
	if v.BOS, err = f.IntOr("tokenizer.ggml.bos_token_id", -1); err != nil {
		return v, fmt.Errorf("modelinfo: %w", err)
	}
	if v.EOS, err = f.IntOr("tokenizer.ggml.eos_token_id", -1); err != nil {
		return v, fmt.Errorf("modelinfo: %w", err)
	}
	return v, nil
}

// perLayer reads an integer hyperparameter that may be one value or one per layer.
func perLayer(f *gguf.File, key string, il int, def int64) (int64, error) {
	v, ok := f.Get(key)
	if !ok {
		return def, nil
	}
	if v.Type == gguf.TypeArray {
		is, ok := v.Ints()
		if !ok || il >= len(is) {
			return 0, fmt.Errorf("modelinfo: %s has no integer for layer %d", key, il)
		}
		return is[il], nil
	}
	n, ok := v.Int()
	if !ok {
		return 0, fmt.Errorf("modelinfo: %s is %s, want an integer", key, v.Type)
	}
	return n, nil
}

// stateSizes fills the KV and recurrent state sizes from the hyperparameters.
func stateSizes(f *gguf.File, arch string, info *Info) error {
	p := arch + "."
	embd, err := f.IntOr(p+"embedding_length", 0)
	if err != nil {
		return fmt.Errorf("modelinfo: %w", err)
	}
	// Sizes are bounded by the tensors before they are multiplied: no product of two can
	// overflow for a file that fits in memory.
	largest := LargestDim(f)
	var kvF32, kvF16, kvQ8, recBytes int64
	noQ8 := false
	for _, l := range info.Layers {
		switch l.Kind {
		case LayerAttention:
			heads, err := perLayer(f, p+"attention.head_count", l.Index, 0)
			if err != nil {
				return err
			}
			kvHeads, err := perLayer(f, p+"attention.head_count_kv", l.Index, heads)
			if err != nil {
				return err
			}
			def := int64(0)
			if heads > 0 {
				def = embd / heads
			}
			kLen, err := f.IntOr(p+"attention.key_length", def)
			if err != nil {
				return fmt.Errorf("modelinfo: %w", err)
			}
			vLen, err := f.IntOr(p+"attention.value_length", def)
			if err != nil {
				return fmt.Errorf("modelinfo: %w", err)
			}
			if err := sizes(p, largest, map[string]int64{"attention.head_count_kv": kvHeads,
				"attention.key_length": kLen, "attention.value_length": vLen}); err != nil {
				return err
			}
			kvF32 += ml.KVBytesPerPosition(1, int(kvHeads), int(kLen), int(vLen), ml.F32)
			kvF16 += ml.KVBytesPerPosition(1, int(kvHeads), int(kLen), int(vLen), ml.F16)
			if ml.Q8_0.RowFits(int(kLen)) && ml.Q8_0.RowFits(int(vLen)) {
				kvQ8 += ml.KVBytesPerPosition(1, int(kvHeads), int(kLen), int(vLen), ml.Q8_0)
			} else {
				noQ8 = true
			}
		case LayerRecurrent:
			var ssm [4]int64
			for i, k := range []string{"ssm.conv_kernel", "ssm.inner_size", "ssm.group_count", "ssm.state_size"} {
				if ssm[i], err = f.IntOr(p+k, 0); err != nil {
					return fmt.Errorf("modelinfo: %w", err)
				}
			}
			kernel, inner, groups, state := ssm[0], ssm[1], ssm[2], ssm[3]
			if err := sizes(p, largest, map[string]int64{"ssm.conv_kernel": kernel, "ssm.inner_size": inner,
				"ssm.group_count": groups, "ssm.state_size": state}); err != nil {
				return err
			}
			// inner = value heads × value dim, groups = key heads, state = key dim.
			recBytes += GatedDeltaNetStateBytes(1, inner, state, 1, kernel, inner+2*groups*state)
		}
	}
	info.Memory.KVBytesPerPositionF32 = uint64(kvF32)
	info.Memory.KVBytesPerPositionF16 = uint64(kvF16)
	if !noQ8 {
		info.Memory.KVBytesPerPositionQ8_0 = uint64(kvQ8)
	}
	info.Memory.RecurrentBytesPerSequence = uint64(recBytes)
	return nil
}

// sizes rejects a size hyperparameter that is negative or above the largest tensor
// dimension, by name (first in key order).
func sizes(prefix string, largest int64, vals map[string]int64) error {
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		switch v := vals[k]; {
		case v < 0:
			return fmt.Errorf("modelinfo: %s%s = %d is negative", prefix, k, v)
		case v > largest:
			return fmt.Errorf("modelinfo: %s%s = %d exceeds the largest tensor dimension of the file (%d)", prefix, k, v, largest)
		}
	}
	return nil
}
