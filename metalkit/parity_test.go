package metalkit

import (
	stdcontext "context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/synth"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/metalkit/harness/harnesstest"
)

// parityModels are the fixture models: both architectures and every weight format of the
// fixtures (F32, F16, Q8_0, Q4_K_M's K-quants, the IQ2_XXS and IQ3_XXS mixes with their Q2_K,
// Q4_K, Q5_K, Q6_K tensors, the legacy ssm_in layout).
var parityModels = []string{
	"tiny-qwen3-F32", "tiny-qwen3-Q8_0", "tiny-qwen3-Q4_K_M",
	"tiny-qwen3next-F16", "tiny-qwen3next-Q8_0", "tiny-qwen3next-IQ2_XXS",
	"tiny-qwen3next-IQ3_XXS", "tiny-qwen3next-legacy-IQ2_XXS",
}

// parityTolerance bounds the largest logit difference between the backends, relative to the
// largest logit: both accumulate in float32, in different orders.
const parityTolerance = 2e-4

// parityFull are the models run at every chunk size and KV precision in every run: one
// per architecture. The others run the two cases that cover their formats and both attention
// kernels, and the whole matrix with REDLITE_PARITY_FULL=1 (the harness is slow: CI's budget).
var parityFull = map[string]bool{"tiny-qwen3-Q8_0": true, "tiny-qwen3next-IQ2_XXS": true}

type parityCase struct {
	kv    ml.DType
	chunk int // 0: the whole prompt in one pass
}

// TestForwardParity runs every fixture model's whole forward pass through this backend on
// the harness device and compares every token's logits with the CPU backend's: prefill in
// chunks of 1 (the decode kernels), 8 and the whole prompt, with f32 and f16 KV caches.
func TestForwardParity(t *testing.T) {
	dev := harnesstest.Device(t)
	tokens := make([]int32, 24)
	for i := range tokens {
		tokens[i] = int32((i*37 + 11) % 500)
	}
	for _, name := range parityModels {
		t.Run(name, func(t *testing.T) {
			cases := []parityCase{{ml.F32, 0}, {ml.F16, 1}}
			if parityFull[name] || os.Getenv("REDLITE_PARITY_FULL") != "" {
				cases = nil
				for _, kv := range []ml.DType{ml.F32, ml.F16} {
					for _, chunk := range []int{1, 8, 0} {
						cases = append(cases, parityCase{kv, chunk})
					}
				}
			}
			path := fixtures.Path(t, "models", name+".gguf")
			ref, err := engine.Load(path, engine.Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			m, err := engine.Load(path, engine.Options{Backend: New(dev)})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			want := map[ml.DType][]float32{}
			for _, c := range cases {
				if want[c.kv] == nil {
					want[c.kv] = prefill(t, ref, tokens, c.kv, 0)
				}
				got := prefill(t, m, tokens, c.kv, c.chunk)
				if d := relDiff(got, want[c.kv]); !(d <= parityTolerance) {
					t.Errorf("kv %s, chunk %d: logits differ from the CPU's by %.3g of the largest (tolerance %g)", c.kv, c.chunk, d, parityTolerance)
				} else {
					t.Logf("kv %s, chunk %d: %.2g", c.kv, c.chunk, d)
				}
			}
		})
	}
}

// TestMTPParity decodes greedily with the next-token-prediction head (draft, verify,
// roll back) on this backend and checks the tokens against the CPU's without the head.
func TestMTPParity(t *testing.T) {
	dev := harnesstest.Device(t)
	path := filepath.Join(t.TempDir(), "tiny-qwen3next-mtp.gguf")
	if _, err := synth.WriteFile(stdcontext.Background(), path, "tiny-qwen3next-mtp", synth.Options{Type: synth.Q8_0, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	greedy := func(o engine.Options, mtp bool) ([]int32, engine.SpecStats) {
		m, err := engine.Load(path, o)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		s, err := m.NewSession(engine.SessionOptions{Context: 32, KV: ml.F16, MTP: mtp})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		logits, err := s.Prefill(stdcontext.Background(), []int32{5, 77, 300, 12, 9, 480}, engine.PrefillOptions{})
		if err != nil {
			t.Fatal(err)
		}
		toks, st, err := s.DecodeGreedy(stdcontext.Background(), logits, 12)
		if err != nil {
			t.Fatal(err)
		}
		return toks, st
	}
	want, _ := greedy(engine.Options{Threads: 1}, false)
	got, st := greedy(engine.Options{Backend: New(dev)}, true)
	if fmt.Sprint(got) != fmt.Sprint(want) || st.Drafted == 0 {
		t.Fatalf("metal-harness with MTP %v (%+v); the CPU without %v", got, st, want)
	}
}

func prefill(t *testing.T, m *engine.Model, tokens []int32, kv ml.DType, chunk int) []float32 {
	t.Helper()
	s, err := m.NewSession(engine.SessionOptions{Context: len(tokens), KV: kv})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.Prefill(stdcontext.Background(), tokens, engine.PrefillOptions{Chunk: chunk, AllLogits: true})
	if err != nil {
		t.Fatal(fmt.Errorf("%s, kv %s, chunk %d: %w", m.Backend.Name(), kv, chunk, err))
	}
	return out
}

// relDiff is max|a−b| / max|b|; NaN anywhere makes it NaN.
func relDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var d, top float64
	for i := range a {
		if math.IsNaN(float64(a[i])) {
			return math.NaN()
		}
		d = max(d, math.Abs(float64(a[i]-b[i])))
		top = max(top, math.Abs(float64(b[i])))
	}
	return d / top
}
