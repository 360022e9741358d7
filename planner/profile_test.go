package planner

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/modelinfo"
	"github.com/redlite/batch/internal/fixtures"
)

func TestTensorRole(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mtp   int
		layer int
		class modelinfo.Role
	}{
		{"token_embd.weight", 0, -1, modelinfo.RoleDense},
		{"output.weight", 48, -1, modelinfo.RoleDense},
		{"blk.3.ffn_down_exps.weight", 0, 3, modelinfo.RoleRoutedExpert},
		{"blk.12.ffn_gate_up_exps.weight", 48, 12, modelinfo.RoleRoutedExpert},
		{"blk.3.ffn_down_shexp.weight", 0, 3, modelinfo.RoleDense},
		{"blk.3.ffn_gate_inp.weight", 0, 3, modelinfo.RoleDense},
		{"blk.48.ffn_up_exps.weight", 48, 48, modelinfo.RoleMTP},
		{"blk.48.nextn.eh_proj.weight", 48, 48, modelinfo.RoleMTP},
		{"blk.x.attn_q.weight", 0, -1, modelinfo.RoleDense},
	} {
		layer, class := modelinfo.TensorRole(tc.name, tc.mtp)
		if layer != tc.layer || class != tc.class {
			t.Errorf("TensorRole(%q, %d) = %d, %s; want %d, %s", tc.name, tc.mtp, layer, class, tc.layer, tc.class)
		}
	}
}

// TestProfileFromFixture derives a profile from the tensor list llama.cpp's fixture set
// records for the tiny qwen3next IQ2_XXS model and checks it by hand-computed sizes.
func TestProfileFromFixture(t *testing.T) {
	dir := fixtures.Dir(t)
	raw, err := os.ReadFile(filepath.Join(dir, "models", "tensor-types.json"))
	if err != nil {
		t.Fatal(err)
	}
	var files map[string]struct {
		SizeBytes int64 `json:"size_bytes"`
		Tensors   []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Bytes int64  `json:"n_bytes"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal(raw, &files); err != nil {
		t.Fatal(err)
	}
	file, ok := files["tiny-qwen3next-IQ2_XXS"]
	if !ok {
		t.Fatal("tensor-types.json has no tiny-qwen3next-IQ2_XXS")
	}
	// README §2: 4 blocks (3 DeltaNet, 1 full attention with 1 KV head of 256 + 256), 16
	// experts of 4 used, DeltaNet with 4 value heads of 128 × 128 and a kernel-4 conv over
	// 1024 channels, no MTP.
	facts := Facts{
		Architecture: "qwen3next", Name: "tiny-qwen3next-IQ2_XXS", ContextLength: 262144,
		ExpertCount: 16, ExpertUsedCount: 4,
		AttentionLayers: 1, KVHeads: 1, KeyLength: 256, ValueLength: 256,
		RecurrentStateBytes: modelinfo.GatedDeltaNetStateBytes(3, 4, 128, 128, 4, 1024),
	}
	var total int64
	for _, tt := range file.Tensors {
		layer, class := modelinfo.TensorRole(tt.Name, 0)
		facts.Tensors = append(facts.Tensors, TensorFact{Name: tt.Name, Layer: layer, Class: class, Bytes: tt.Bytes})
		total += tt.Bytes
	}
	p, err := ProfileFromFacts(facts)
	if err != nil {
		t.Fatal(err)
	}
	// Each expert: gate, up, down of 256 × 256 in IQ2_XXS (66 bytes per 256 weights) =
	// 3 × 16,896 = 50,688 bytes, held in a 53,248-byte (13 × 4 KiB) slot.
	layer := func(i int) ExpertLayer {
		return ExpertLayer{Layer: i, Experts: 16, Bytes: 16 * 50688, SlotBytes: 53248}
	}
	want := Profile{
		Architecture: "qwen3next", Name: "tiny-qwen3next-IQ2_XXS", ContextLength: 262144,
		ExpertCount: 16, ExpertUsedCount: 4, ExpertLayerCount: 4,
		ExpertLayers:     []ExpertLayer{layer(0), layer(1), layer(2), layer(3)},
		ExpertBytes:      4 * 16 * 50688,
		ExpertCacheBytes: 4 * 16 * 53248,
		DenseBytes:       total - 4*16*50688,
		// q8_0: (256 + 256) values are 16 blocks of 34 bytes.
		KVBytesPerPosition: KVBytes{F32: 2048, F16: 1024, Q8_0: 544},
		// 3 × (4 × 128 × 128 + 3 × 1024) × 4.
		RecurrentStateBytes: 823296,
	}
	if d := diff(want, p); d != "" {
		t.Errorf("profile (-want +got):\n%s", d)
	}
	if total >= file.SizeBytes || file.SizeBytes-total > 1<<20 {
		t.Errorf("tensors add up to %d of a %d-byte file: the list is incomplete", total, file.SizeBytes)
	}
	if p.StatePositions(ml.F32) != 402 { // ⌈823,296 / 2,048⌉
		t.Errorf("state positions %d, want 402", p.StatePositions(ml.F32))
	}
}

func TestProfileFromFactsRejects(t *testing.T) {
	base := Facts{ContextLength: 4096, ExpertCount: 4, AttentionLayers: 1, KVHeads: 1, KeyLength: 64, ValueLength: 64,
		Tensors: []TensorFact{{Name: "token_embd.weight", Layer: -1, Class: modelinfo.RoleDense, Bytes: 1000}}}
	for _, tc := range []struct {
		name   string
		tensor TensorFact
		says   string
	}{
		{"Uneven", TensorFact{Name: "blk.0.ffn_up_exps.weight", Class: modelinfo.RoleRoutedExpert, Bytes: 4001}, "do not split into 4 experts"},
		{"Negative", TensorFact{Name: "blk.0.attn_q.weight", Class: modelinfo.RoleDense, Bytes: -1}, "negative size"},
		{"UnknownClass", TensorFact{Name: "blk.0.attn_q.weight", Class: "moe", Bytes: 8}, `unknown class "moe"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := base
			f.Tensors = append(f.Tensors[:1:1], tc.tensor)
			_, err := ProfileFromFacts(f)
			if !errors.Is(err, ErrBadProfile) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("err = %v, want ErrBadProfile saying %q", err, tc.says)
			}
		})
	}
	f := base
	f.AttentionLayers = 0
	if _, err := ProfileFromFacts(f); err == nil || !strings.Contains(err.Error(), "kv_bytes_per_position.f32 must be > 0") {
		t.Errorf("a model without KV: err = %v", err)
	}
}

func TestProfileValidateLayers(t *testing.T) {
	p := redLiteProfile(t)
	p.ExpertLayers = []ExpertLayer{{Layer: 0, Experts: 512, Bytes: 1, SlotBytes: 4096}}
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "expert_layers has 1 entries, expert_layer_count says 48") {
		t.Errorf("err = %v", err)
	}
	p.ExpertLayerCount = 1
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "expert_layers add up to") {
		t.Errorf("err = %v", err)
	}
	p.ExpertLayers[0].SlotBytes = 1000
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "expert_layers[0] (layer 0)") {
		t.Errorf("err = %v", err)
	}
}

func TestReadProfileRejectsUnknownField(t *testing.T) {
	_, err := ReadProfile(strings.NewReader(`{"context_length": 4096, "dense_byte": 5}`))
	if !errors.Is(err, ErrBadProfile) || !strings.Contains(err.Error(), "dense_byte") {
		t.Errorf("err = %v, want ErrBadProfile naming dense_byte", err)
	}
}

func TestRedLiteMetal(t *testing.T) {
	c := RedLiteMetal()
	want := Calibration{
		Name: "redlite-metal-qwen3next-iq2_xxs", Backend: "metal", Model: "Qwen3-Next-80B-A3B IQ2_XXS (bartowski)",
		Status: StatusPublished, Source: c.Source, BaseMiB: 580, ScratchMiBPerChunkToken: 572.0 / 1536,
		MinChunk: 512, AlignmentBytes: 16384, MTPMaxContext: 8192,
	}
	if d := diff(want, c); d != "" {
		t.Errorf("calibration (-want +got):\n%s", d)
	}
	cpu := CPUPlaceholder()
	if cpu.Status != StatusPlaceholder || cpu.Backend != "cpu" || cpu.Validate() != nil {
		t.Errorf("CPU placeholder %+v: want a valid placeholder for the cpu backend", cpu)
	}
	if _, err := ReadCalibration(strings.NewReader(`{"base_mb": 1}`)); !errors.Is(err, ErrBadCalibration) {
		t.Errorf("unknown field: err = %v", err)
	}
}

func TestBudgetFromRAM(t *testing.T) {
	b, err := BudgetFromRAM(24<<30, DefaultRAMFraction)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(Budget{LimitMiB: 18432, MarginMiB: DefaultMarginMiB, Source: SourceRAMFraction}, b); d != "" {
		t.Errorf("budget (-want +got):\n%s", d)
	}
	if b, _ := BudgetFromRAM(3*MiB+MiB/2, 1); b.LimitMiB != 3 {
		t.Errorf("3.5 MiB at 1.0 gives %d MiB, want 3 (rounded down)", b.LimitMiB)
	}
	for _, tc := range []struct {
		total    int64
		fraction float64
		says     string
	}{
		{0, 0.5, "physical memory must be > 0"},
		{24 << 30, 0, "RAM fraction must be within (0, 1]"},
		{24 << 30, 1.5, "RAM fraction must be within (0, 1]"},
		{MiB / 2, 1, "limit_mib must be > 0"},
	} {
		if _, err := BudgetFromRAM(tc.total, tc.fraction); !errors.Is(err, ErrBadBudget) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("BudgetFromRAM(%d, %v): err = %v, want %q", tc.total, tc.fraction, err, tc.says)
		}
	}
}

func TestCommas(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 21886: "21,886", 117845: "117,845", -1234567: "-1,234,567"} {
		if got := commas(n); got != want {
			t.Errorf("commas(%d) = %q, want %q", n, got, want)
		}
	}
}
