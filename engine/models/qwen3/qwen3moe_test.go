package qwen3_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/cpu"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/engine/synth"
	"github.com/redlite/batch/internal/fixtures"
)

func TestQwen3MoEParity(t *testing.T) { parity(t, "tiny-qwen3moe-F32") }

// TestQwen3MoEFacts: the planner's sizes add up to the file's tensors, the experts being
// the ffn_*_exps tensors of each layer and one expert an eighth of them.
func TestQwen3MoEFacts(t *testing.T) {
	f, g, err := load(t, fixtures.Path(t, "models", "tiny-qwen3moe-F32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	facts := g.(model.Facts)
	var total, exps int64
	for _, ti := range f.Tensors {
		total += int64(ti.Size)
	}
	per := facts.ExpertBytes()
	if len(per) != 2 {
		t.Fatalf("ExpertBytes has %d layers, want 2", len(per))
	}
	for l, b := range per {
		var want int64
		for _, n := range []string{"gate", "up", "down"} {
			ti, ok := f.Tensor("blk." + string(rune('0'+l)) + ".ffn_" + n + "_exps.weight")
			if !ok {
				t.Fatalf("layer %d has no ffn_%s_exps", l, n)
			}
			want += int64(ti.Size)
		}
		if b != want {
			t.Errorf("layer %d: ExpertBytes %d, want %d", l, b, want)
		}
		if s := facts.ExpertSliceBytes(l); s != want/8 {
			t.Errorf("layer %d: ExpertSliceBytes %d, want %d (8 experts)", l, s, want/8)
		}
		exps += b
	}
	if facts.ExpertTotalBytes() != exps || facts.DenseBytes()+exps != total {
		t.Errorf("ExpertTotalBytes %d + DenseBytes %d, want %d + %d", facts.ExpertTotalBytes(), facts.DenseBytes(), exps, total-exps)
	}
	// 2 layers × 2 KV heads × (64 + 64) × 4 bytes.
	if kv := facts.KVBytesPerPosition(ml.F32); kv != 2048 {
		t.Errorf("KVBytesPerPosition(f32) = %d, want 2048", kv)
	}
	if facts.RecurrentBytes() != 0 || facts.MTPBytes() != 0 {
		t.Errorf("RecurrentBytes %d, MTPBytes %d, want 0", facts.RecurrentBytes(), facts.MTPBytes())
	}
}

func TestQwen3MoELoadErrors(t *testing.T) {
	src := fixtures.Path(t, "models", "tiny-qwen3moe-F32.gguf")
	loadErrors(t, src, []loadErrorCase{
		{"MissingExperts", []string{"blk.1.ffn_up_exps.weight", "blk.0.ffn_gate_inp.weight"}, nil,
			[]string{"missing tensor blk.1.ffn_up_exps.weight", "missing tensor blk.0.ffn_gate_inp.weight"}},
		{"TooManyUsed", nil, map[string]any{"qwen3moe.expert_used_count": uint32(9)},
			[]string{"expert_used_count 9 must be in 1 … expert_count 8"}},
		{"ExpertWidth", nil, map[string]any{"qwen3moe.expert_feed_forward_length": uint32(32)},
			[]string{"ffn_gate_exps.weight"}},
	})
}

// TestQwen3MoEExpertCache: with room for only two experts' slices the logits equal the
// all-resident ones bit for bit and llama.cpp's within 1e-4, and the cache really evicts.
func TestQwen3MoEExpertCache(t *testing.T) {
	const name = "tiny-qwen3moe-F32"
	ref := fixtures.LoadLogits(t, name, "seq64-nofa-kvf32")
	resident, err := engine.Load(fixtures.Path(t, "models", name+".gguf"), engine.Options{CPUDot: "exact"})
	if err != nil {
		t.Fatal(err)
	}
	defer resident.Close()
	want := prefill(t, resident, ref.Tokens, 5, ml.F32)

	b := cpu.New(0)
	slice := resident.Graph.(model.Facts).ExpertSliceBytes(0)
	if err := b.SetExpertCache(2 * slice); err != nil {
		t.Fatal(err)
	}
	m, err := engine.Load(fixtures.Path(t, "models", name+".gguf"), engine.Options{Backend: b, CPUDot: "exact"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	got := prefill(t, m, ref.Tokens, 5, ml.F32)
	if d := fixtures.Compare(got, want, 512); d.Max != 0 {
		t.Errorf("2-expert cache vs all resident: %v, want identical", d)
	}
	if d := fixtures.Compare(got, ref.Values, 512); d.Max > 1e-4 {
		t.Errorf("2-expert cache vs llama.cpp: %v, want max ≤ 1e-4", d)
	}
	if st := b.ExpertStats(); st.Misses == 0 || st.Evictions == 0 || st.Bytes > st.Capacity {
		t.Errorf("cache stats %+v: want misses and evictions within capacity %d", st, 2*slice)
	}
}

// TestSynthShapes: the synth shapes of this package's architectures (laid out as sparse
// files of zeros) load with the shape their summaries promise.
func TestSynthShapes(t *testing.T) {
	for _, tc := range []struct {
		shape                           string
		layers, embd, heads, kv, hd, ex int
	}{
		{"qwen3moe-mini", 8, 2048, 32, 4, 128, 32},
		{"llama3.2-1b", 16, 2048, 32, 8, 64, 0},
		{"gpt-oss-20b", 24, 2880, 64, 8, 64, 32},
	} {
		t.Run(tc.shape, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.shape+".gguf")
			if _, err := synth.WriteFile(context.Background(), path, tc.shape, synth.Options{Type: synth.Q8_0, Layout: true}); err != nil {
				t.Fatal(err)
			}
			_, g, err := load(t, path)
			if err != nil {
				t.Fatal(err)
			}
			c := g.Config()
			if c.Layers != tc.layers || c.Embedding != tc.embd || c.Heads != tc.heads || c.KVHeads != tc.kv || c.HeadDim != tc.hd {
				t.Errorf("config %+v", c)
			}
			facts := g.(model.Facts)
			if len(facts.ExpertBytes()) != tc.layers || (tc.ex > 0) != (facts.ExpertTotalBytes() > 0) {
				t.Errorf("expert bytes %v with %d experts", facts.ExpertBytes(), tc.ex)
			}
		})
	}
}
