package synth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/engine/tokenizer"
	"github.com/redlite/batch/internal/fixtures"
)

// synthFile writes a shape to a temporary file and opens it with our reader.
func synthFile(t *testing.T, shape string, o Options) *gguf.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), shape+".gguf")
	if _, err := WriteFile(context.Background(), path, shape, o); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestTinyQwen3MatchesFixture(t *testing.T) {
	for _, tc := range []struct {
		shape   string
		typ     FileType
		fixture string
	}{
		{"tiny-qwen3", F32, "tiny-qwen3-F32.gguf"},
		{"tiny-qwen3", Q8_0, "tiny-qwen3-Q8_0.gguf"},
		{"tiny-qwen3", Q4_K_M, "tiny-qwen3-Q4_K_M.gguf"},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			want, err := gguf.Open(fixtures.Path(t, "models", tc.fixture))
			if err != nil {
				t.Fatal(err)
			}
			defer want.Close()
			got := synthFile(t, tc.shape, Options{Type: tc.typ, Seed: 1})
			// Same layout, metadata and alignment: the same file size.
			if got.Size() != want.Size() {
				t.Errorf("%d bytes, fixture has %d", got.Size(), want.Size())
			}

			sameLayout(t, got, want)
			if tc.fixture == "tiny-qwen3-F32.gguf" {
				// Same order as the F32 original (the converter's order).
				for i := range want.Tensors {
					if got.Tensors[i].Name != want.Tensors[i].Name {
						t.Fatalf("tensor %d is %s, fixture has %s", i, got.Tensors[i].Name, want.Tensors[i].Name)
					}
				}
			}
		})
	}
}

// moments dequantizes a tensor and returns its mean and standard deviation.
func moments(t *testing.T, f *gguf.File, name string) (mean, std float64) {
	t.Helper()
	ti, data, err := f.TensorData(name)
	if err != nil {
		t.Fatal(err)
	}
	vals := make([]float32, ti.Elements())
	if err := quant.Dequantize(ti.Type, data, vals); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var s, ss float64
	for _, v := range vals {
		s += float64(v)
		ss += float64(v) * float64(v)
	}
	n := float64(len(vals))
	mean = s / n
	return mean, math.Sqrt(ss/n - mean*mean)
}

func TestTinyQwen3Distributions(t *testing.T) {
	for _, typ := range []FileType{F32, F16, Q8_0, Q4_K, Q4_K_M} {
		t.Run(typ.String(), func(t *testing.T) {
			f := synthFile(t, "tiny-qwen3", Options{Type: typ, Seed: 7})
			if ft, _ := f.Int("general.file_type"); ft != int64(typ.LlamaFileType()) {
				t.Errorf("general.file_type = %d, want %d", ft, typ.LlamaFileType())
			}
			for _, c := range []struct {
				name      string
				mean, std float64
			}{
				{"token_embd.weight", 0, 0.125},
				{"blk.0.attn_q.weight", 0, 1 / 16.0},
				{"blk.1.ffn_down.weight", 0, 1 / math.Sqrt(768)},
				{"blk.0.attn_norm.weight", 1, 0.05},
				{"output_norm.weight", 1, 0.05},
			} {
				mean, std := moments(t, f, c.name)
				// Tolerances: sampling error of >= 256 values plus 4-bit rounding error.
				if math.Abs(mean-c.mean) > 0.02+0.1*c.std || math.Abs(std-c.std) > 0.15*c.std {
					t.Errorf("%s: mean %.4f std %.4f, want about %.4f and %.4f", c.name, mean, std, c.mean, c.std)
				}
			}
			for _, ti := range f.Tensors {
				if len(ti.Dims) == 1 && ti.Type != quant.F32 {
					t.Errorf("%s is %s; 1-D tensors stay F32", ti.Name, ti.Type)
				}
			}
		})
	}
}

func TestReproducible(t *testing.T) {
	write := func(o Options) []byte {
		var b bytes.Buffer
		if _, err := Write(context.Background(), &b, "tiny-qwen3", o); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a := write(Options{Type: Q4_K, Seed: 3, Workers: 1})
	b := write(Options{Type: Q4_K, Seed: 3, Workers: 5})
	c := write(Options{Type: Q4_K, Seed: 4, Workers: 2})
	if !bytes.Equal(a, b) {
		t.Fatal("the same seed gave different files with 1 and 5 workers")
	}
	if bytes.Equal(a, c) {
		t.Fatal("seeds 3 and 4 gave the same file")
	}
}

func TestVocabFromGGUF(t *testing.T) {
	dir := fixtures.Dir(t)
	src, err := gguf.Open(filepath.Join(dir, "vocab", "tiny-bpe512-vocab.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	f := synthFile(t, "tiny-qwen3", Options{Type: Q8_0, Vocab: src})
	for _, kv := range src.KV {
		if !strings.HasPrefix(kv.Key, "tokenizer.") {
			continue
		}
		v, ok := f.Get(kv.Key)
		if !ok || !reflect.DeepEqual(v.Any(), kv.Value.Any()) {
			t.Errorf("key %s not copied", kv.Key)
		}
	}
}

func TestVocabFromGGUFSetsVocabSize(t *testing.T) {
	dir := fixtures.Dir(t)
	src, err := gguf.Open(filepath.Join(dir, "tokenizer", "qwen3-vocab.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	v, err := vocabFromGGUF(src)
	if err != nil {
		t.Fatal(err)
	}
	m, err := qwen3_06b.build(Options{Type: Q4_K_M}, v)
	if err != nil {
		t.Fatal(err)
	}
	if d := m.tensors[0].dims; m.tensors[0].name != "token_embd.weight" || d[0] != 1024 || d[1] != 151936 {
		t.Fatalf("first tensor %s %v, want token_embd.weight [1024 151936]", m.tensors[0].name, d)
	}
	var tmpl bool
	for _, kv := range m.kv {
		tmpl = tmpl || kv.Key == "tokenizer.chat_template"
	}
	if !tmpl {
		t.Fatal("chat template not copied")
	}
}

func TestQwen3_06BLayout(t *testing.T) {
	v, err := generatedVocab(qwen3_06b.vocab)
	if err != nil {
		t.Fatal(err)
	}
	const params, norms = 596_049_920, 28*(2*1024+2*128) + 1024 // norms stay F32
	for _, tc := range []struct {
		typ   FileType
		bytes uint64 // tensor data, without alignment padding
	}{
		{F32, params * 4},
		{Q8_0, (params-norms)/32*34 + norms*4},
		{Q4_K, (params-norms)/256*144 + norms*4},
	} {
		m, err := qwen3_06b.build(Options{Type: tc.typ}, v)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(m.tensors); got != 1+28*11+1 {
			t.Fatalf("%d tensors, want %d", got, 1+28*11+1)
		}
		var total, elems uint64
		byName := map[string]tensorSpec{}
		for _, ts := range m.tensors {
			byName[ts.name] = ts
			elems += ts.elements()
			total += uint64(ts.typ.RowBytes(int(ts.dims[0]))) * (ts.elements() / ts.dims[0])
		}
		if elems != params {
			t.Errorf("%d parameters, want 596,049,920", elems)
		}
		if total != tc.bytes {
			t.Errorf("%s: %d bytes of tensor data, want %d", tc.typ, total, tc.bytes)
		}
		for name, dims := range map[string][]uint64{
			"token_embd.weight":         {1024, 151936},
			"blk.0.attn_q.weight":       {1024, 2048},
			"blk.0.attn_k.weight":       {1024, 1024},
			"blk.27.attn_output.weight": {2048, 1024},
			"blk.27.ffn_down.weight":    {3072, 1024},
			"blk.3.attn_k_norm.weight":  {128},
		} {
			if !slices.Equal(byName[name].dims, dims) {
				t.Errorf("%s: dims %v, want %v", name, byName[name].dims, dims)
			}
		}
		if _, ok := byName["output.weight"]; ok {
			t.Error("output.weight present; qwen3-0.6b ties its embeddings")
		}
	}
}

func TestQ4KMMix(t *testing.T) {
	v, err := generatedVocab(qwen3_06b.vocab)
	if err != nil {
		t.Fatal(err)
	}
	m, err := qwen3_06b.build(Options{Type: Q4_K_M}, v)
	if err != nil {
		t.Fatal(err)
	}
	var q6 []string
	for _, ts := range m.tensors {
		if ts.typ == quant.Q6_K {
			q6 = append(q6, ts.name)
		}
	}
	// 28 layers: n/8 = 3, 7n/8 = 24 -> layers 0-2, 24-27 and (i-3)%3 == 2: 5, 8, ..., 23.
	var layers []int
	for i := range 28 {
		if i < 3 || i >= 24 || (i-3)%3 == 2 {
			layers = append(layers, i)
		}
	}
	want := []string{"token_embd.weight"}
	for _, il := range layers {
		want = append(want, fmt.Sprintf("blk.%d.attn_v.weight", il), fmt.Sprintf("blk.%d.ffn_down.weight", il))
	}
	slices.Sort(q6)
	slices.Sort(want)
	if !slices.Equal(q6, want) {
		t.Fatalf("Q6_K tensors %v, want %v", q6, want)
	}
}

func TestGeneratedVocab(t *testing.T) {
	v, err := generatedVocab(151936)
	if err != nil {
		t.Fatal(err)
	}
	// Load it through our reader and tokenizer, as a model file would be.
	w := gguf.NewWriter()
	w.Set("general.architecture", "qwen3")
	for _, kv := range v.kv {
		w.Set(kv.Key, kv.Value)
	}
	path := filepath.Join(t.TempDir(), "vocab.gguf")
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTo(fh); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tokens, _ := f.Strings("tokenizer.ggml.tokens")
	merges, _ := f.Strings("tokenizer.ggml.merges")
	if len(tokens) != 151936 || len(merges) != 151936-259 {
		t.Fatalf("%d tokens and %d merges, want 151936 and %d", len(tokens), len(merges), 151936-259)
	}
	// Every merge joins two earlier tokens into the next new token.
	index := map[string]int{}
	for i, tok := range tokens {
		if _, dup := index[tok]; dup {
			t.Fatalf("token %d %q is a duplicate", i, tok)
		}
		index[tok] = i
	}
	for r, m := range merges {
		a, b, ok := strings.Cut(m, " ")
		ia, oka := index[a]
		ib, okb := index[b]
		if !ok || !oka || !okb || ia >= 256+r || ib >= 256+r || index[a+b] != 256+r {
			t.Fatalf("merge %d %q does not build token %d from earlier tokens", r, m, 256+r)
		}
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"Hello, world! The quick brown fox.", "naïve 日本語 🙂\n\tcode()", ""} {
		ids := tok.Encode(text, false)
		if got := tok.Decode(ids); got != text {
			t.Errorf("round trip of %q gave %q", text, got)
		}
		if len(text) > 8 && len(ids) >= len(text) {
			t.Errorf("%q: %d ids for %d bytes; merges did not apply", text, len(ids), len(text))
		}
	}
	ids := tok.Encode("<|im_start|>user\nhi<|im_end|>", true)
	if ids[0] != 151934 || ids[len(ids)-1] != 151935 {
		t.Errorf("special tokens encoded as %v, want 151934 ... 151935", ids)
	}
	if tok.EOS() != 151935 || tok.BOS() != 151933 || !tok.IsEOG(151935) {
		t.Errorf("eos %d bos %d", tok.EOS(), tok.BOS())
	}
}

func TestByteTokensMatchFixtureVocab(t *testing.T) {
	v, err := tinyVocab()
	if err != nil {
		t.Fatal(err)
	}
	var tokens []string
	for _, kv := range v.kv {
		if kv.Key == "tokenizer.ggml.tokens" {
			tokens, _ = kv.Value.Strings()
		}
	}
	if !slices.Equal(tokens[:256], byteTokens()) {
		t.Fatal("generated byte tokens differ from the fixture vocabulary's first 256")
	}
}

func TestBadInput(t *testing.T) {
	if _, err := New(context.Background(), "no-such-shape", Options{}); err == nil || !strings.Contains(err.Error(), "tiny-qwen3") {
		t.Errorf("unknown shape: %v", err)
	}
	if _, err := ParseFileType("q3_k"); err == nil || !strings.Contains(err.Error(), "q4_k") {
		t.Errorf("unknown type: %v", err)
	}
	if _, err := New(context.Background(), "tiny-qwen3", Options{Type: FileType(99)}); err == nil {
		t.Error("invalid FileType accepted")
	}
	if _, err := generatedVocab(100); err == nil {
		t.Error("a 100-token generated vocabulary was accepted")
	}
	for _, name := range FileTypeNames() {
		ft, err := ParseFileType(strings.ToUpper(name))
		if err != nil || ft.String() != name {
			t.Errorf("ParseFileType(%q) = %v, %v", name, ft, err)
		}
	}
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	path := filepath.Join(t.TempDir(), "x.gguf")
	if _, err := WriteFile(ctx, path, "tiny-qwen3", Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 0 {
		t.Fatalf("left %d files behind after cancelling", len(ents))
	}
}

// sameLayout reports every metadata key (type and value) and every tensor (shape and type)
// in which got differs from the fixture want. Key order is not compared: llama-quantize
// reorders a few keys.
func sameLayout(t *testing.T, got, want *gguf.File) {
	t.Helper()
	if len(got.KV) != len(want.KV) {
		t.Errorf("%d metadata keys, fixture has %d", len(got.KV), len(want.KV))
	}
	for _, kv := range want.KV {
		v, ok := got.Get(kv.Key)
		if !ok {
			t.Errorf("missing key %s", kv.Key)
			continue
		}
		if v.Type != kv.Value.Type || v.Elem != kv.Value.Elem || !reflect.DeepEqual(v.Any(), kv.Value.Any()) {
			t.Errorf("key %s = %s (%s), fixture %s (%s)", kv.Key, v, v.Type, kv.Value, kv.Value.Type)
		}
	}
	if len(got.Tensors) != len(want.Tensors) {
		t.Errorf("%d tensors, fixture has %d", len(got.Tensors), len(want.Tensors))
	}
	for _, wt := range want.Tensors {
		gt, ok := got.Tensor(wt.Name)
		if !ok {
			t.Errorf("missing tensor %s", wt.Name)
			continue
		}
		if !slices.Equal(gt.Dims, wt.Dims) || gt.Type != wt.Type {
			t.Errorf("%s: %s %s, fixture %s %s", wt.Name, gt.Type, gt.ShapeString(), wt.Type, wt.ShapeString())
		}
	}
}

// TestIQ2XXSMix checks the iq2_xxs recipe against the types llama-quantize gave the
// fixtures' tiny-qwen3next-IQ2_XXS, tensor by tensor, and that a layout-only file is
// sparse, full-sized and reads as zeros.
func TestIQ2XXSMix(t *testing.T) {
	var manifest map[string]struct {
		Tensors []struct{ Name, Type string }
	}
	raw, err := os.ReadFile(fixtures.Path(t, "models", "tensor-types.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	want := manifest["tiny-qwen3next-IQ2_XXS"].Tensors
	if len(want) == 0 {
		t.Fatal("tensor-types.json lists no tensors for tiny-qwen3next-IQ2_XXS")
	}
	f := synthFile(t, "tiny-qwen3next", Options{Type: IQ2_XXS, Layout: true})
	if len(f.Tensors) != len(want) {
		t.Errorf("%d tensors, the fixture has %d", len(f.Tensors), len(want))
	}
	for _, w := range want {
		ti, ok := f.Tensor(w.Name)
		if !ok {
			t.Errorf("no %s", w.Name)
			continue
		}
		if ti.Type.String() != w.Type {
			t.Errorf("%s stored as %s, llama-quantize chose %s", w.Name, ti.Type, w.Type)
		}
	}
	if slices.ContainsFunc(f.TensorSection(), func(b byte) bool { return b != 0 }) {
		t.Error("a layout-only file has non-zero weights")
	}

	if _, err := Write(context.Background(), io.Discard, "tiny-qwen3next", Options{Type: IQ2_XXS}); err == nil || !strings.Contains(err.Error(), "cannot quantize") {
		t.Errorf("quantizing to IQ2_XXS: %v, want a refusal", err)
	}
}

// TestGemma3_4BLayout: Gemma 3 4B's text model has 3,880,099,328 parameters: 34 layers of
// q 2560×2048, k and v 2560×1024, o 2048×2560, GeGLU 3×2560×10240 and six norms, and the
// tied 262,144-token embedding.
func TestGemma3_4BLayout(t *testing.T) {
	v, err := generatedVocab(gemma3_4b.vocab)
	if err != nil {
		t.Fatal(err)
	}
	m, err := gemma3_4b.build(Options{Type: Q8_0}, v)
	if err != nil {
		t.Fatal(err)
	}
	var elems uint64
	byName := map[string]tensorSpec{}
	for _, ts := range m.tensors {
		byName[ts.name] = ts
		elems += ts.elements()
	}
	if elems != 3_880_099_328 {
		t.Errorf("%d parameters, want 3,880,099,328", elems)
	}
	if got := len(m.tensors); got != 1+34*13+1 {
		t.Errorf("%d tensors, want %d", got, 1+34*13+1)
	}
	for _, name := range []string{"blk.0.post_attention_norm.weight", "blk.33.post_ffw_norm.weight", "blk.5.attn_q_norm.weight"} {
		if _, ok := byName[name]; !ok {
			t.Errorf("%s missing", name)
		}
	}
	keys := map[string]string{}
	for _, kv := range m.kv {
		keys[kv.Key] = fmt.Sprint(kv.Value)
	}
	if keys["gemma3.attention.sliding_window"] != "1024" || keys["gemma3.rope.scaling.factor"] != "8" {
		t.Errorf("window %v, rope scaling %v; want 1024 and 8", keys["gemma3.attention.sliding_window"], keys["gemma3.rope.scaling.factor"])
	}
}
