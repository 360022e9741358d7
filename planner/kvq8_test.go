package planner

import (
	"errors"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/modelinfo"
)

// TestKVQ8_0 prices the q8_0 cache: 34 bytes per 32 values, chosen after f16 on the CPU
// and on Metal.
func TestKVQ8_0(t *testing.T) {
	p, b := redLiteProfile(t), budget(redLiteLimit)
	// Qwen3-Next: 12 layers × 2 KV heads × (256 + 256) values = 12,288 values per position,
	// 384 blocks of 34 bytes.
	if got := ml.KVBytesPerPosition(12, 2, 256, 256, ml.Q8_0); got != 13056 {
		t.Fatalf("q8_0 bytes per position = %d, want 13056", got)
	}
	if got := ml.KVBytesPerPosition(12, 2, 256, 256, ml.F16); got != 24576 {
		t.Fatalf("f16 bytes per position = %d, want 24576 (DESIGN.md's 24 KiB)", got)
	}
	pf, err := ProfileFromFacts(Facts{Architecture: "qwen3next", Name: "x", ContextLength: 262144,
		AttentionLayers: 12, KVHeads: 2, KeyLength: 256, ValueLength: 256,
		Tensors: []TensorFact{{Name: "token_embd.weight", Layer: -1, Class: modelinfo.RoleDense, Bytes: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	if pf.KVPerPosition(ml.Q8_0) != 13056 {
		t.Fatalf("profile q8_0 = %d, want 13056", pf.KVPerPosition(ml.Q8_0))
	}
	p.KVBytesPerPosition.Q8_0 = 13056

	cpu := CPUPlaceholder()
	f16, err := Largest(Policy{KV: ForceKV(ml.F16)}, 1, p, cpu, b)
	if err != nil {
		t.Fatal(err)
	}
	q8, err := Largest(Policy{KV: ForceKV(ml.Q8_0)}, 1, p, cpu, b)
	if err != nil {
		t.Fatal(err)
	}
	// The KV term is the same MiB in both at the largest context.
	if r := float64(q8.Context) / float64(f16.Context); r < 1.7 || r > 24576.0/13056+0.01 {
		t.Errorf("largest context q8_0 %d vs f16 %d: ratio %.3f, want about 24576/13056", q8.Context, f16.Context, r)
	}
	job := Job{PromptTokens: f16.Context + 1000, MaxTokens: 1000}
	plan, err := Choose(job, p, cpu, b)
	if err != nil {
		t.Fatal(err)
	}
	if plan.KV != ml.Q8_0 || plan.Breakdown.KVBytesPerPosition != 13056 {
		t.Errorf("a job past f16's largest context got %v at %d bytes per position, want q8_0 at 13056", plan.KV, plan.Breakdown.KVBytesPerPosition)
	}

	t.Run("OnMetal", func(t *testing.T) {
		// The Metal kernels read q8_0 caches: a job past f16's largest context there gets q8_0.
		metal := RedLiteMetal()
		f16m, err := Largest(Policy{KV: ForceKV(ml.F16)}, 1, p, metal, b)
		if err != nil {
			t.Fatal(err)
		}
		plan, err := Choose(Job{PromptTokens: f16m.Context + 1000, MaxTokens: 1000}, p, metal, b)
		if err != nil {
			t.Fatal(err)
		}
		if plan.KV != ml.Q8_0 || plan.Breakdown.KVBytesPerPosition != 13056 {
			t.Errorf("Metal: a job past f16's largest context got %v at %d bytes per position, want q8_0 at 13056", plan.KV, plan.Breakdown.KVBytesPerPosition)
		}
		if _, err := Choose(Job{PromptTokens: 100, MaxTokens: 100, Policy: Policy{KV: ForceKV(ml.Q8_0)}}, p, metal, b); err != nil {
			t.Errorf("forced q8_0 on Metal: %v", err)
		}
	})
	t.Run("OldProfile", func(t *testing.T) {
		old := redLiteProfile(t) // written before q8_0: no size, never chosen
		_, err := Choose(job, old, cpu, b)
		var dnf *DoesNotFitError
		if !errors.As(err, &dnf) {
			t.Fatalf("err = %v, want does not fit", err)
		}
	})
}
