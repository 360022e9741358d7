// Package synth writes random-weight GGUF models of named shapes: the tiny models of the
// test fixtures and full-size shapes for benchmarks. The files carry the same metadata and
// tensor layout llama.cpp expects, so that both llama.cpp and our engine load them.
//
// Weights are drawn from normal distributions (matrices with std 1/sqrt(fan_in), norm
// weights 1 + N(0, 0.05), embeddings as the fixtures do), each block of rows from its own
// random stream derived from the seed and the tensor name, so a file depends only on the
// shape, the type and the seed, not on the number of cores that generated it. Tensors are
// generated one at a time while the file is written: a 3 GB model never sits in memory
// whole.
package synth

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/quant"
)

// FileType is the storage recipe of a synthesized model's matrices.
type FileType int

// File types. Norm weights and other 1-D tensors stay F32 in all of them, as llama-quantize
// leaves them.
const (
	F32     FileType = iota // every tensor F32
	F16                     // matrices F16
	Q8_0                    // matrices Q8_0
	Q4_K                    // every matrix Q4_K
	Q4_K_M                  // llama-quantize's Q4_K_M mix: Q4_K, with Q6_K for the embedding/output and some attn_v and ffn_down
	IQ2_XXS                 // llama-quantize's IQ2_XXS mix (layout only: see Options.Layout)
)

var fileTypes = []struct {
	name   string
	llama  uint32 // general.file_type: llama.cpp's llama_ftype number
	matrix quant.Type
	// roles overrides matrix for tensors of some roles.
	roles map[role]quant.Type
	doc   string
}{
	F32:    {"f32", 0, quant.F32, nil, "all F32"},
	F16:    {"f16", 1, quant.F16, nil, "matrices F16 (MOSTLY_F16)"},
	Q8_0:   {"q8_0", 7, quant.Q8_0, nil, "matrices Q8_0 (MOSTLY_Q8_0)"},
	Q4_K:   {"q4_k", 14, quant.Q4_K, nil, "every matrix Q4_K (labelled MOSTLY_Q4_K_S, the nearest llama_ftype)"},
	Q4_K_M: {"q4_k_m", 15, quant.Q4_K, nil, "Q4_K with Q6_K token_embd/output and attn_v/ffn_down where llama-quantize uses more bits (MOSTLY_Q4_K_M)"},
	// The types llama-quantize gave the fixtures' tiny-qwen3next-IQ2_XXS
	// (testdata/fixtures/models/tensor-types.json).
	IQ2_XXS: {"iq2_xxs", 19, quant.IQ2_XXS, map[role]quant.Type{
		roleEmbed: quant.Q2_K, roleOutput: quant.Q5_K, roleAttnV: quant.Q4_K, roleAttnQKV: quant.Q4_K,
	}, "IQ2_XXS, with Q2_K token_embd, Q5_K output and Q4_K attn_v/attn_qkv, as llama-quantize mixes it (MOSTLY_IQ2_XXS); with --layout only, since synth cannot quantize IQ2_XXS"},
}

// ParseFileType maps a name such as "q8_0" (any case) to its FileType.
func ParseFileType(s string) (FileType, error) {
	for i, ft := range fileTypes {
		if strings.EqualFold(ft.name, s) {
			return FileType(i), nil
		}
	}
	return 0, fmt.Errorf("synth: unknown type %q (want one of %s)", s, strings.Join(FileTypeNames(), ", "))
}

// FileTypeNames lists the accepted type names.
func FileTypeNames() []string {
	var out []string
	for _, ft := range fileTypes {
		out = append(out, ft.name)
	}
	return out
}

func (t FileType) valid() bool { return t >= 0 && int(t) < len(fileTypes) }

func (t FileType) String() string {
	if !t.valid() {
		return fmt.Sprintf("FileType(%d)", int(t))
	}
	return fileTypes[t].name
}

// Doc says what the type stores.
func (t FileType) Doc() string { return fileTypes[t].doc }

// LlamaFileType is the general.file_type value written for t.
func (t FileType) LlamaFileType() uint32 { return fileTypes[t].llama }

// role is what a tensor does, as far as the choice of its storage type goes.
type role int

const (
	roleVector  role = iota // norms, biases and other 1-D tensors: always F32
	roleMatrix              // any other matrix
	roleEmbed               // token_embd
	roleOutput              // output.weight, or token_embd when it doubles as the output
	roleAttnV               // attn_v
	roleFFNDown             // ffn_down
	roleAttnQKV             // a DeltaNet layer's fused attn_qkv input projection
)

// tensorType picks the storage type of a tensor of role r in layer il of n layers.
func (t FileType) tensorType(r role, il, n int) quant.Type {
	if r == roleVector {
		return quant.F32
	}
	if t != Q4_K_M {
		if typ, ok := fileTypes[t].roles[r]; ok {
			return typ
		}
		return fileTypes[t].matrix
	}
	switch r {
	case roleOutput:
		return quant.Q6_K
	case roleAttnV, roleFFNDown:
		if useMoreBits(il, n) {
			return quant.Q6_K
		}
	}
	return quant.Q4_K
}

// useMoreBits is llama-quantize's choice of the layers whose attn_v and ffn_down get a
// bigger type in the _M mixes: the first and last eighth and every third layer between.
func useMoreBits(il, n int) bool {
	return il < n/8 || il >= 7*n/8 || (il-n/8)%3 == 2
}

// Options control a synthesis.
type Options struct {
	// Type is the storage recipe. The zero value is F32.
	Type FileType
	// Seed selects the weights. Default 0.
	Seed uint64
	// Vocab, if set, supplies the vocabulary: every tokenizer.* key (tokens, merges, types,
	// special ids, chat template) is copied from it, and its token count sets the model's
	// vocabulary size. If nil, the shape's own vocabulary is used.
	Vocab *gguf.File
	// Workers is the number of goroutines generating and quantizing weights. If zero,
	// GOMAXPROCS is used. The output does not depend on it.
	Workers int
	// Layout writes every weight as zeros, and WriteFile leaves their bytes as a hole in a
	// sparse file: the file has the shape's full layout and size but takes almost no disk,
	// which is what planning and counting a pass of a full-size model need (the roofline
	// model of metalkit). Types synth cannot quantize (IQ2_XXS) need it.
	Layout bool
	// Progress, if set, is called before each tensor is generated.
	Progress func(done, total int, name string)
}

// A Shape is a named model layout with a builder for its architecture.
type Shape struct {
	Name    string
	Arch    string // general.architecture
	Summary string

	// vocab builds the shape's own vocabulary (used when Options.Vocab is nil).
	vocab func() (*vocabulary, error)
	// build lays out the model's metadata and tensors over a vocabulary.
	build func(o Options, v *vocabulary) (*model, error)
}

// shapes is the table of known shapes; each architecture contributes a builder in its own
// file, and may add its shapes from an init function (qwen3next.go does).
var shapes = []Shape{
	{
		Name:    "tiny-qwen3",
		Arch:    "qwen3",
		Summary: "the fixtures' tiny qwen3: 2 layers, hidden 256, 4/2 heads of 64, ffn 768, tiny-bpe512 vocabulary, tied embeddings",
		vocab:   tinyVocab,
		build:   tinyQwen3.build,
	},
	{
		Name:    "qwen3-0.6b",
		Arch:    "qwen3",
		Summary: "Qwen3-0.6B: 28 layers, hidden 1024, 16/8 heads of 128, ffn 3072, vocab 151936, tied embeddings",
		vocab:   func() (*vocabulary, error) { return generatedVocab(qwen3_06b.vocab) },
		build:   qwen3_06b.build,
	},
	{
		Name:    "qwen3moe-mini",
		Arch:    "qwen3moe",
		Summary: "Qwen3-30B-A3B per-layer sizes (hidden 2048, 32/4 heads of 128, experts of 768, 8 used) with 8 layers and 32 experts, vocab 151936",
		vocab:   func() (*vocabulary, error) { return generatedVocab(qwen3MoEMini.vocab) },
		build:   qwen3MoEMini.build,
	},
	{
		Name:    "qwen3moe-30b-a3b",
		Arch:    "qwen3moe",
		Summary: "Qwen3-30B-A3B: 48 layers, hidden 2048, 128 experts (8 used) of 768, vocab 151936; --layout for a sparse file to plan and count passes",
		vocab:   func() (*vocabulary, error) { return generatedVocab(qwen3MoE30B.vocab) },
		build:   qwen3MoE30B.build,
	},
	{
		Name:    "llama3.2-1b",
		Arch:    "llama",
		Summary: "Llama 3.2 1B: 16 layers, hidden 2048, 32/8 heads of 64, ffn 8192, vocab 128256, tied embeddings, Llama 3 rope_freqs",
		vocab:   func() (*vocabulary, error) { return generatedVocab(llama32_1b.vocab) },
		build:   llama32_1b.build,
	},
	{
		Name:    "gemma-3-1b",
		Arch:    "gemma3",
		Summary: "Gemma 3 1B: 26 layers, hidden 1152, 4/1 heads of 256, ffn 6912, vocab 262144, window 512 (5 of 6 layers), tied embeddings",
		vocab:   func() (*vocabulary, error) { return generatedVocab(gemma3_1b.vocab) },
		build:   gemma3_1b.build,
	},
	{
		Name:    "gemma-3-4b",
		Arch:    "gemma3",
		Summary: "Gemma 3 4B (text): 34 layers, hidden 2560, 8/4 heads of 256, ffn 10240, vocab 262144, window 1024 (5 of 6 layers), linear rope scaling 8, tied embeddings",
		vocab:   func() (*vocabulary, error) { return generatedVocab(gemma3_4b.vocab) },
		build:   gemma3_4b.build,
	},
	{
		Name:    "gpt-oss-20b",
		Arch:    "gpt-oss",
		Summary: "gpt-oss-20b: 24 layers, hidden 2880, 64/8 heads of 64 with sinks and biases, window 128 on every other layer, 32 experts (4 used) of 2880, vocab 201088, YaRN 32 over 4096; --layout for a sparse file to plan and count passes",
		vocab:   func() (*vocabulary, error) { return generatedVocab(gptOSS20b.vocab) },
		build:   gptOSS20b.build,
	},
}

// Shapes lists the known shapes.
func Shapes() []Shape { return slices.Clone(shapes) }

// LookupShape finds a shape by name.
func LookupShape(name string) (Shape, error) {
	for _, s := range shapes {
		if s.Name == name {
			return s, nil
		}
	}
	var names []string
	for _, s := range shapes {
		names = append(names, s.Name)
	}
	return Shape{}, fmt.Errorf("synth: unknown shape %q (known: %s)", name, strings.Join(names, ", "))
}

// model is a laid-out file: metadata in order and tensors in order.
type model struct {
	kv      []gguf.KV
	tensors []tensorSpec
}

func (m *model) set(key string, v any) {
	m.kv = append(m.kv, gguf.KV{Key: key, Value: gguf.NewValue(v)})
}

// New lays out the named shape and returns a writer that generates the weights while it
// writes. The writer may be written once; cancelling ctx stops it between tensors.
func New(ctx context.Context, shape string, o Options) (*gguf.Writer, error) {
	s, err := LookupShape(shape)
	if err != nil {
		return nil, err
	}
	if !o.Type.valid() {
		return nil, fmt.Errorf("synth: invalid file type %d", int(o.Type))
	}
	var v *vocabulary
	if o.Vocab != nil {
		v, err = vocabFromGGUF(o.Vocab)
	} else {
		v, err = s.vocab()
	}
	if err != nil {
		return nil, err
	}
	m, err := s.build(o, v)
	if err != nil {
		return nil, err
	}
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	g := &generator{seed: o.Seed, workers: workers, zeros: o.Layout}
	if !o.Layout {
		for _, t := range m.tensors {
			if !quant.CanQuantize(t.typ) {
				return nil, fmt.Errorf("synth: %s: %s: synth cannot quantize %s (write a layout-only file, or quantize an f16 file with llama-quantize)", shape, t.name, t.typ)
			}
		}
	}
	w := gguf.NewWriter()
	for _, kv := range m.kv {
		w.Set(kv.Key, kv.Value)
	}
	for i, t := range m.tensors {
		t := t
		err := w.AddTensor(t.name, t.typ, t.dims, func() ([]byte, error) {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if o.Progress != nil {
				o.Progress(i, len(m.tensors), t.name)
			}
			return g.fill(t)
		})
		if err != nil {
			return nil, fmt.Errorf("synth: %s: %w", shape, err)
		}
	}
	return w, nil
}

// Write synthesizes the named shape into dst and returns the number of bytes written.
func Write(ctx context.Context, dst io.Writer, shape string, o Options) (int64, error) {
	w, err := New(ctx, shape, o)
	if err != nil {
		return 0, err
	}
	return w.WriteTo(dst)
}

// WriteFile synthesizes the named shape into the file at path. It writes to a temporary
// file in the same directory and renames it, so a failed run leaves no partial model.
func WriteFile(ctx context.Context, path, shape string, o Options) (int64, error) {
	w, err := New(ctx, shape, o)
	if err != nil {
		return 0, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return 0, fmt.Errorf("synth: %w", err)
	}
	var dst io.Writer = tmp
	if o.Layout {
		dst = &sparseWriter{f: tmp}
	}
	n, err := w.WriteTo(dst)
	if err == nil && o.Layout {
		// A trailing hole must still count in the file's size.
		err = tmp.Truncate(n)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return n, fmt.Errorf("synth: write %s: %w", path, err)
	}
	return n, nil
}

// sparseWriter writes to a file, seeking over runs of zeros instead of writing them, so a
// layout-only model of tens of GB takes a few MB of disk on file systems with holes.
type sparseWriter struct {
	f *os.File
}

// sparseRun is the granularity of the hole check: whole file-system blocks.
const sparseRun = 1 << 16

func (w *sparseWriter) Write(p []byte) (int, error) {
	for done := 0; done < len(p); {
		n := min(sparseRun, len(p)-done)
		chunk := p[done : done+n]
		var err error
		if allZero(chunk) {
			_, err = w.f.Seek(int64(n), io.SeekCurrent)
		} else {
			_, err = w.f.Write(chunk)
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return len(p), nil
}

var zeroRun [sparseRun]byte

func allZero(b []byte) bool { return bytes.Equal(b, zeroRun[:len(b)]) }
