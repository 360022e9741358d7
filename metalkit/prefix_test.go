package metalkit

import (
	"math"
	"slices"
	"testing"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/metalkit/harness/harnesstest"
)

// TestPrefixParity is engine's TestPrefixParity on the harness device: a sequence reads a
// prompt's first blocks, shares them as the prefix cache does (KV blocks by reference,
// kvPool.Share and AllocShared; the recurrent state copied, SaveRecurrent and
// RestoreRecurrent through device buffers), and a second sequence starts from them. Its
// logits equal, bit for bit, the same two passes over a state of its own (the restored
// values are the ones those passes compute), are within the batch parity tolerance of the
// prompt prefilled whole on this backend, and within TestModelParity's 2e-3 of the CPU's
// whole prefill (f32 and f16 KV; q8_0 rounds the queries on both backends, so a float32
// difference may move one to the next int8: TestKVQ8_0Parity). A dense fixture with every
// KV precision and the hybrid one.
func TestPrefixParity(t *testing.T) {
	if testing.Short() {
		t.Skip("whole models on the harness device (-short skips it)")
	}
	dev := harnesstest.Device(t)
	// Two blocks of 16 shared and 8 tokens after them. qwen3next prefills at about 0.4 s a
	// token on the harness (2 loaded cores; 50 s a case): f16 KV only, the flagship's, as
	// TestBatchedStepParity; sharing blocks by reference is the same for every precision.
	const bs, shared, rest = 16, 32, 8
	for _, tc := range []struct {
		name string
		kvs  []ml.DType
	}{{"tiny-qwen3-Q8_0", ml.KVTypes}, {"tiny-qwen3next-Q8_0", []ml.DType{ml.F16}}} {
		name := tc.name
		t.Run(name, func(t *testing.T) {
			path := fixtures.Path(t, "models", name+".gguf")
			ref, m := loadPair(t, path, New(dev))
			vocab := m.Config().Vocab
			a := make([]int32, shared+rest)
			for i := range a {
				a[i] = int32((i*7919 + 13) % (vocab - 3))
			}
			b := slices.Clone(a[:shared])
			for i := range rest {
				b = append(b, int32((i*131+57)%(vocab-3)))
			}
			for _, kv := range tc.kvs {
				t.Run(kv.String(), func(t *testing.T) {
					pool, err := m.Graph.NewKVPool(m.Backend, 8, bs, kv)
					if err != nil {
						t.Fatal(err)
					}
					defer pool.Free()
					first, err := m.Graph.NewPooledState(m.Backend, pool, len(a))
					if err != nil {
						t.Fatal(err)
					}
					forwardOn(t, m, first, a[:shared], 0)
					blocks, err := pool.Share(first.KV(), shared/bs)
					if err != nil {
						t.Fatal(err)
					}
					rec, err := first.SaveRecurrent(m.Backend)
					if err != nil {
						t.Fatal(err)
					}
					forwardOn(t, m, first, a[shared:], shared) // writes past the shared blocks only
					first.Free()

					c, err := pool.AllocShared(blocks, len(b))
					if err != nil {
						t.Fatal(err)
					}
					second, err := m.Graph.NewStateOn(m.Backend, c)
					if err != nil {
						t.Fatal(err)
					}
					if err := second.RestoreRecurrent(m.Backend, rec); err != nil {
						t.Fatal(err)
					}
					got := forwardOn(t, m, second, b[shared:], shared)
					second.Free()
					blocks.Release()
					if pool.FreeBlocks() != pool.Blocks() {
						t.Errorf("%d of %d blocks free after every holder let go", pool.FreeBlocks(), pool.Blocks())
					}

					fresh, err := m.Graph.NewPooledState(m.Backend, pool, len(b))
					if err != nil {
						t.Fatal(err)
					}
					forwardOn(t, m, fresh, b[:shared], 0)
					own := forwardOn(t, m, fresh, b[shared:], shared)
					fresh.Free()
					if d, at := logitsDiff(own, got); d != 0 {
						t.Errorf("restored prefix vs the same passes from nothing: %.3g at position %d, want equal", d, shared+at/vocab)
					}

					whole := prefill(t, m, b, kv, 0)[shared*vocab:]
					d, at := logitsDiff(whole, got)
					t.Logf("restored prefix vs whole prefill on the harness: %.3g at position %d", d, shared+at/vocab)
					if tol := fixtures.BatchTolerance(name, kv); d > tol {
						t.Errorf("restored prefix vs whole prefill on the harness: %.3g at position %d, want ≤ %g", d, shared+at/vocab, tol)
					}
					if kv != ml.Q8_0 {
						if d, at := logitsDiff(prefill(t, ref, b, kv, 0)[shared*vocab:], got); d > 2e-3 || math.IsNaN(d) {
							t.Errorf("restored prefix vs the CPU's whole prefill: %.3g at position %d, want ≤ 2e-3", d, shared+at/vocab)
						}
					}
				})
			}
		})
	}
}

// forwardOn runs tokens at positions pos0… of s in one pass and returns all their logits.
func forwardOn(t *testing.T, m *engine.Model, s model.State, tokens []int32, pos0 int) []float32 {
	t.Helper()
	ctx := m.Backend.NewContext()
	defer ctx.Close()
	x := m.Graph.Forward(ctx, model.Single(s, tokens, pos0, true))
	if err := ctx.Compute(); err != nil {
		t.Fatalf("%s: %d tokens at %d: %v", m.Backend.Name(), len(tokens), pos0, err)
	}
	out, err := ctx.Read(x)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
