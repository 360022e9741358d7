package modelinfo

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/internal/fixtures"
)

func inspect(t *testing.T, path string) Info {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := Inspect(f)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func classBytes(info Info) map[Class]uint64 {
	out := map[Class]uint64{}
	for _, c := range info.Classes {
		out[c.Class] = c.Bytes
	}
	return out
}

// checkTotals: classes, types and layers each add up to the tensor bytes.
func checkTotals(t *testing.T, info Info) {
	t.Helper()
	var byClass, byType, tensors uint64
	for _, c := range info.Classes {
		byClass += c.Bytes
		tensors += uint64(c.Tensors)
	}
	for _, ty := range info.Types {
		byType += ty.Bytes
	}
	if byClass != info.TensorBytes || byType != info.TensorBytes || int(tensors) != info.TensorCount {
		t.Errorf("classes sum to %d bytes in %d tensors, types to %d; file has %d bytes in %d tensors",
			byClass, tensors, byType, info.TensorBytes, info.TensorCount)
	}
	if info.Memory.DenseBytes+info.Memory.ExpertBytes != info.TensorBytes {
		t.Errorf("dense %d + experts %d != %d", info.Memory.DenseBytes, info.Memory.ExpertBytes, info.TensorBytes)
	}
}

func TestTinyQwen3(t *testing.T) {
	info := inspect(t, filepath.Join(fixtures.Dir(t), "models", "tiny-qwen3-F32.gguf"))
	checkTotals(t, info)
	if info.Architecture != "qwen3" || info.Name != "tiny-qwen3" || info.FileType != (FileType{0, "F32"}) {
		t.Errorf("arch %q name %q file type %+v", info.Architecture, info.Name, info.FileType)
	}
	if info.Vocab.Size != 512 || info.Vocab.Model != "gpt2" || info.Vocab.EOS != 511 || !info.ChatTemplate {
		t.Errorf("vocab %+v, chat template %v", info.Vocab, info.ChatTemplate)
	}
	if info.Hyperparameters["block_count"] != uint32(2) || info.Hyperparameters["attention.head_count_kv"] != uint32(2) {
		t.Errorf("hyperparameters %v", info.Hyperparameters)
	}
	// Hand-computed from the fixture README: 2 layers, hidden 256, q 256, kv 128, ffn 768, F32.
	want := map[Class]uint64{
		ClassEmbedding: 256 * 512 * 4,
		ClassAttention: 2 * (256*256 + 2*256*128 + 256*256) * 4,
		ClassFFNDense:  2 * 3 * 256 * 768 * 4,
		ClassNorms:     (2*(256+64+64+256) + 256) * 4,
	}
	for c, b := range classBytes(info) {
		if b != want[c] {
			t.Errorf("class %s: %d bytes, want %d", c, b, want[c])
		}
	}
	if info.TensorBytes != 6_821_888 || info.Parameters != 6_821_888/4 || info.TensorCount != 24 {
		t.Errorf("%d tensors, %d bytes, %d parameters", info.TensorCount, info.TensorBytes, info.Parameters)
	}
	// 2 layers × 2 KV heads × (64 + 64).
	if m := info.Memory; m.KVBytesPerPositionF32 != 2*2*128*4 || m.KVBytesPerPositionF16 != 2*2*128*2 || m.RecurrentBytesPerSequence != 0 {
		t.Errorf("memory %+v", m)
	}
	if len(info.Layers) != 2 || info.Layers[1].Kind != LayerAttention || info.Layers[1].ExpertBytes != 0 {
		t.Errorf("layers %+v", info.Layers)
	}
}

func TestTinyQwen3Next(t *testing.T) {
	dir := fixtures.Dir(t)
	// Hand-computed from the fixture README's tensor table for the F16 file (matrices F16;
	// conv1d, ssm_a, ssm_dt.bias, routers and norms F32).
	const (
		experts   = 4 * 3 * 256 * 256 * 16 * 2
		shared    = 4 * (3*256*256*2 + 256*4)
		recurrent = 3 * (256*1024*2 + 256*512*2 + 4*1024*4 + 256*8*2 + 4*4 + 4*4 + 512*256*2)
		attention = 256*4096*2 + 2*256*256*2 + 2048*256*2
		norms     = (4*2*256 + 3*128 + 2*256 + 256) * 4
		router    = 4 * 256 * 16 * 4
	)
	info := inspect(t, filepath.Join(dir, "models", "tiny-qwen3next-F16.gguf"))
	checkTotals(t, info)
	want := map[Class]uint64{
		ClassEmbedding: 256 * 512 * 2, ClassOutput: 256 * 512 * 2, ClassAttention: attention,
		ClassRecurrent: recurrent, ClassRoutedExperts: experts, ClassSharedExpert: shared,
		ClassNorms: norms, ClassOther: router,
	}
	for c, b := range classBytes(info) {
		if b != want[c] {
			t.Errorf("class %s: %d bytes, want %d", c, b, want[c])
		}
	}
	kinds := ""
	for _, l := range info.Layers {
		kinds += l.Kind[:1]
		if l.ExpertBytes != experts/4 {
			t.Errorf("layer %d: %d expert bytes, want %d", l.Index, l.ExpertBytes, experts/4)
		}
	}
	if kinds != "rrra" {
		t.Errorf("layer kinds %q, want rrra", kinds)
	}
	m := info.Memory
	// One attention layer × 1 KV head × (256 + 256); three DeltaNet layers × (3 × 1024 conv
	// + 128 × 512 state).
	if m.KVBytesPerPositionF32 != 512*4 || m.KVBytesPerPositionF16 != 512*2 || m.RecurrentBytesPerSequence != 3*(3*1024+128*512)*4 {
		t.Errorf("memory %+v", m)
	}
	if m.ExpertBytes != experts {
		t.Errorf("expert bytes %d, want %d", m.ExpertBytes, experts)
	}

	// The legacy layout's fused ssm_in is recurrent too; only the attention layer's attn_v
	// is Q4_K there, and the per-layer kinds are the same.
	legacy := inspect(t, filepath.Join(dir, "models", "tiny-qwen3next-legacy-IQ2_XXS.gguf"))
	checkTotals(t, legacy)
	kinds = ""
	for _, l := range legacy.Layers {
		kinds += l.Kind[:1]
	}
	if kinds != "rrra" || legacy.FileType != (FileType{19, "IQ2_XXS"}) {
		t.Errorf("legacy: kinds %q, file type %+v", kinds, legacy.FileType)
	}
	if cb := classBytes(legacy); cb[ClassRecurrent] == 0 || cb[ClassFFNDense] != 0 {
		t.Errorf("legacy classes %v", cb)
	}
}

func TestJSONIsStable(t *testing.T) {
	info := inspect(t, filepath.Join(fixtures.Dir(t), "models", "tiny-qwen3-Q4_K_M.gguf"))
	a, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(inspect(t, filepath.Join(fixtures.Dir(t), "models", "tiny-qwen3-Q4_K_M.gguf")))
	if string(a) != string(b) {
		t.Fatal("two inspections of one file marshal differently")
	}
	for _, key := range []string{`"architecture":"qwen3"`, `"file_type":{"id":15,"name":"Q4_K_M"}`,
		`"rope.freq_base":1000000`, `"classes":[{"class":"embedding"`, `"kv_bytes_per_position_f16":1024`,
		`{"type":"Q6_K","tensors":3,`} {
		if !strings.Contains(string(a), key) {
			t.Errorf("JSON lacks %s:\n%s", key, a)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name      string
		recurrent bool
		want      Class
	}{
		{"token_embd.weight", false, ClassEmbedding},
		{"token_embd_norm.weight", false, ClassNorms},
		{"output.weight", false, ClassOutput},
		{"output_norm.weight", false, ClassNorms},
		{"blk.0.attn_q.weight", false, ClassAttention},
		{"blk.0.attn_qkv.weight", false, ClassAttention},
		{"blk.0.attn_qkv.weight", true, ClassRecurrent},
		{"blk.0.attn_gate.weight", true, ClassRecurrent},
		{"blk.0.attn_q_norm.weight", false, ClassNorms},
		{"blk.0.ssm_in.weight", true, ClassRecurrent},
		{"blk.0.ssm_dt.bias", true, ClassRecurrent},
		{"blk.0.ssm_norm.weight", true, ClassNorms},
		{"blk.0.ffn_up.weight", false, ClassFFNDense},
		{"blk.0.ffn_down_exps.weight", false, ClassRoutedExperts},
		{"blk.0.ffn_gate_inp_shexp.weight", false, ClassSharedExpert},
		{"blk.0.ffn_gate_inp.weight", false, ClassOther},
		{"rope_freqs.weight", false, ClassOther},
		{"blk.x.attn_q.weight", false, ClassOther},
	} {
		if got := Classify(tc.name, tc.recurrent); got != tc.want {
			t.Errorf("Classify(%q, %v) = %s, want %s", tc.name, tc.recurrent, got, tc.want)
		}
	}
}

func TestBadMetadata(t *testing.T) {
	write := func(set func(w *gguf.Writer)) *gguf.File {
		w := gguf.NewWriter()
		set(w)
		path := filepath.Join(t.TempDir(), "m.gguf")
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
		t.Cleanup(func() { f.Close() })
		return f
	}
	if _, err := Inspect(write(func(w *gguf.Writer) {})); err == nil || !strings.Contains(err.Error(), "general.architecture") {
		t.Errorf("no architecture: %v", err)
	}
	f := write(func(w *gguf.Writer) {
		w.Set("general.architecture", "qwen3")
		w.Set("general.file_type", "q8")
	})
	if _, err := Inspect(f); err == nil || !strings.Contains(err.Error(), "general.file_type") {
		t.Errorf("string file type: %v", err)
	}
	f = write(func(w *gguf.Writer) {
		w.Set("general.architecture", "qwen3")
		w.Set("qwen3.attention.head_count", int32(4))
		w.Set("qwen3.attention.head_count_kv", int32(-2))
		w.AddTensorBytes("blk.0.attn_k.weight", 0, []uint64{4}, make([]byte, 16))
	})
	if _, err := Inspect(f); err == nil || !strings.Contains(err.Error(), "head_count_kv = -2") {
		t.Errorf("negative head count: %v", err)
	}
}
