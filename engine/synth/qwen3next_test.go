package synth

import (
	"fmt"
	"slices"
	"testing"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/internal/fixtures"
)

// TestTinyQwen3NextMatchesFixture checks that the synthesized tiny-qwen3next has the
// fixture files' metadata and tensor table (names, shapes, types).
func TestTinyQwen3NextMatchesFixture(t *testing.T) {
	for _, tc := range []struct {
		typ     FileType
		fixture string
	}{
		{F16, "tiny-qwen3next-F16.gguf"},
		{Q8_0, "tiny-qwen3next-Q8_0.gguf"},
	} {
		t.Run(tc.typ.String(), func(t *testing.T) {
			want, err := gguf.Open(fixtures.Path(t, "models", tc.fixture))
			if err != nil {
				t.Fatal(err)
			}
			defer want.Close()
			got := synthFile(t, "tiny-qwen3next", Options{Type: tc.typ, Seed: 1})
			sameLayout(t, got, want)
		})
	}
}

// TestQwen3NextShapes checks the layouts of the larger and the MTP shapes without writing
// gigabytes: the planned tensors and metadata.
func TestQwen3NextShapes(t *testing.T) {
	plan := func(shape string, typ FileType) (*model, map[string]tensorSpec) {
		t.Helper()
		s, err := LookupShape(shape)
		if err != nil {
			t.Fatal(err)
		}
		v, err := s.vocab()
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.build(Options{Type: typ}, v)
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]tensorSpec{}
		for _, ts := range m.tensors {
			byName[ts.name] = ts
		}
		return m, byName
	}
	meta := func(m *model, key string) any {
		for _, kv := range m.kv {
			if kv.Key == key {
				return kv.Value.Any()
			}
		}
		return nil
	}

	m, ts := plan("qwen3next-mini", Q8_0)
	for key, want := range map[string]any{
		"qwen3next.block_count": uint32(8), "qwen3next.embedding_length": uint32(2048),
		"qwen3next.attention.head_count": uint32(16), "qwen3next.attention.head_count_kv": uint32(2),
		"qwen3next.attention.key_length": uint32(256), "qwen3next.ssm.group_count": uint32(16),
		"qwen3next.ssm.time_step_rank": uint32(32), "qwen3next.ssm.state_size": uint32(128),
		"qwen3next.expert_count": uint32(64), "qwen3next.expert_used_count": uint32(10),
		"qwen3next.expert_feed_forward_length": uint32(512), "qwen3next.expert_shared_feed_forward_length": uint32(512),
		"general.file_type": uint32(7),
	} {
		if got := meta(m, key); got != want {
			t.Errorf("qwen3next-mini %s = %v, want %v", key, got, want)
		}
	}
	attn, delta := 0, 0
	for il := range 8 {
		if _, ok := ts[blk(il, "attn_q.weight")]; ok {
			attn++
		}
		if _, ok := ts[blk(il, "attn_qkv.weight")]; ok {
			delta++
		}
	}
	if attn != 2 || delta != 6 {
		t.Errorf("qwen3next-mini has %d attention and %d DeltaNet layers, want 2 and 6", attn, delta)
	}
	for name, want := range map[string][]uint64{
		"token_embd.weight":               {2048, 151936},
		"blk.0.attn_qkv.weight":           {2048, 8192},
		"blk.0.attn_gate.weight":          {2048, 4096},
		"blk.0.ssm_conv1d.weight":         {4, 8192},
		"blk.0.ssm_ba.weight":             {2048, 64},
		"blk.0.ssm_out.weight":            {4096, 2048},
		"blk.3.attn_q.weight":             {2048, 8192},
		"blk.3.attn_k.weight":             {2048, 512},
		"blk.3.attn_output.weight":        {4096, 2048},
		"blk.7.ffn_gate_exps.weight":      {2048, 512, 64},
		"blk.7.ffn_down_exps.weight":      {512, 2048, 64},
		"blk.7.ffn_gate_inp.weight":       {2048, 64},
		"blk.7.ffn_gate_inp_shexp.weight": {2048},
		"blk.7.ffn_down_shexp.weight":     {512, 2048},
	} {
		if got := ts[name].dims; !slices.Equal(got, want) {
			t.Errorf("qwen3next-mini %s: %v, want %v", name, got, want)
		}
	}
	if typ := ts["blk.7.ffn_up_exps.weight"].typ; typ.String() != "Q8_0" {
		t.Errorf("experts stored as %s, want Q8_0", typ)
	}

	m, ts = plan("qwen3next-80b", IQ2_XXS)
	if meta(m, "qwen3next.block_count") != uint32(48) || meta(m, "qwen3next.expert_count") != uint32(512) {
		t.Errorf("qwen3next-80b: block_count %v, expert_count %v", meta(m, "qwen3next.block_count"), meta(m, "qwen3next.expert_count"))
	}
	if got := ts["blk.47.ffn_down_exps.weight"].dims; !slices.Equal(got, []uint64{512, 2048, 512}) {
		t.Errorf("qwen3next-80b ffn_down_exps %v", got)
	}

	m, ts = plan("tiny-qwen3next-mtp", F16)
	if meta(m, "qwen3next.block_count") != uint32(5) || meta(m, "qwen3next.nextn_predict_layers") != uint32(1) {
		t.Errorf("tiny-qwen3next-mtp: block_count %v, nextn_predict_layers %v", meta(m, "qwen3next.block_count"), meta(m, "qwen3next.nextn_predict_layers"))
	}
	for _, name := range []string{"blk.4.nextn.eh_proj.weight", "blk.4.nextn.enorm.weight", "blk.4.nextn.hnorm.weight", "blk.4.attn_q.weight", "blk.4.ffn_down_exps.weight"} {
		if _, ok := ts[name]; !ok {
			t.Errorf("tiny-qwen3next-mtp lacks %s", name)
		}
	}
	if got := ts["blk.4.nextn.eh_proj.weight"].dims; !slices.Equal(got, []uint64{512, 256}) {
		t.Errorf("eh_proj %v", got)
	}
}

func blk(il int, suffix string) string { return fmt.Sprintf("blk.%d.%s", il, suffix) }
