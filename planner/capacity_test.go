package planner

import (
	"errors"
	"testing"

	"github.com/redlite/batch/engine/ml"
)

// TestLargest checks that Largest is the boundary of Choose: one more token does not fit.
func TestLargest(t *testing.T) {
	p, c := redLiteProfile(t), RedLiteMetal()
	b := Budget{LimitMiB: redLiteLimit, Source: SourceOverride}
	for _, kv := range []ml.DType{ml.F32, ml.F16} {
		pol := Policy{KV: ForceKV(kv)}
		l, err := Largest(pol, 1, p, c, b)
		if err != nil {
			t.Fatal(err)
		}
		if l.Context <= 1000 || l.Context >= p.ContextLength {
			t.Fatalf("%s: largest context %d", kv, l.Context)
		}
		if _, err := Choose(Job{PromptTokens: l.Context - 1000, MaxTokens: 1000, Policy: pol}, p, c, b); err != nil {
			t.Errorf("%s: the largest context %d does not fit: %v", kv, l.Context, err)
		}
		if _, err := Choose(Job{PromptTokens: l.Context - 999, MaxTokens: 1000, Policy: pol}, p, c, b); !errors.Is(err, ErrDoesNotFit) {
			t.Errorf("%s: one token beyond %d: %v, want does not fit", kv, l.Context, err)
		}
	}
	if l, err := Largest(Policy{}, 1, p, c, Budget{LimitMiB: 1024, Source: SourceOverride}); err != nil || l.Context != 0 {
		t.Errorf("1 GiB: %+v %v, want context 0", l, err)
	}
}
