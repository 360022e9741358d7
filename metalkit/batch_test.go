package metalkit

import (
	gocontext "context"
	"fmt"
	"math"
	"path/filepath"
	"sync"
	"testing"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/model"
	"github.com/redlite/batch/engine/synth"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/harness/harnesstest"
	"github.com/redlite/batch/metalkit/kernels"
)

// countingDevice runs dispatches on a device and counts them by cost label.
type countingDevice struct {
	device.Device
	mu     sync.Mutex
	counts map[string]int
}

type countingCommands struct {
	device.Commands
	d *countingDevice
}

func (d *countingDevice) NewCommands() device.Commands {
	return countingCommands{d.Device.NewCommands(), d}
}

func (c countingCommands) Encode(x device.Dispatch) {
	c.d.mu.Lock()
	c.d.counts[x.Cost.Label]++
	c.d.mu.Unlock()
	c.Commands.Encode(x)
}

// take returns the counts since the last take.
func (d *countingDevice) take() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.counts
	d.counts = map[string]int{}
	return c
}

// batchStep is one forward pass of a batch: the tokens each sequence feeds (none: it sits
// the step out).
type batchStep [][]int32

// runSteps runs steps over sequences of one KV pool (blocks of 16 positions, the tables
// scattered) and returns each step's logits of every token, and the dispatches per step.
func runSteps(t *testing.T, m *engine.Model, kv ml.DType, capacity int, steps []batchStep, dev *countingDevice) ([][]float32, []map[string]int) {
	t.Helper()
	pool, err := m.Graph.NewKVPool(m.Backend, 40, 16, kv)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	hold, err := pool.Alloc(16 * 5)
	if err != nil {
		t.Fatal(err)
	}
	seqs := len(steps[0])
	states := make([]model.State, seqs)
	fed := make([]int, seqs)
	var logits [][]float32
	var counts []map[string]int
	for si, step := range steps {
		if si == 1 {
			hold.Free()
		}
		var b model.Batch
		for i, toks := range step {
			if len(toks) == 0 {
				continue
			}
			if states[i] == nil {
				if states[i], err = m.Graph.NewPooledState(m.Backend, pool, capacity); err != nil {
					t.Fatal(err)
				}
				defer states[i].Free()
			}
			b = b.Add(states[i], toks, fed[i], true)
			for j := len(b.Logits) - len(toks); j < len(b.Logits); j++ {
				b.Logits[j] = true
			}
			fed[i] += len(toks)
		}
		if dev != nil {
			dev.take()
		}
		ctx := m.Backend.NewContext()
		x := m.Graph.Forward(ctx, b)
		if err := ctx.Compute(); err != nil {
			t.Fatalf("%s step %d: %v", m.Backend.Name(), si, err)
		}
		l, err := ctx.Read(x)
		ctx.Close()
		if err != nil {
			t.Fatal(err)
		}
		logits = append(logits, l)
		if dev != nil {
			counts = append(counts, dev.take())
		}
	}
	return logits, counts
}

// TestBatchedStepParity runs batched steps of four sequences of ragged lengths over one KV
// pool (prefill runs beside decode tokens, then steps where every sequence decodes) on the
// harness device, with BatchAttention on and off, and on the CPU backend. The batched
// attention computes what the per-sequence kernels compute, so its logits equal theirs bit
// for bit, and the CPU's within TestModelParity's tolerance; a step of four decoding
// sequences takes one decode and one merge dispatch per attention layer instead of one of
// each per sequence and four copies.
func TestBatchedStepParity(t *testing.T) {
	if testing.Short() {
		t.Skip("whole models on the harness device (-short skips it)")
	}
	seqs := [][]int32{make([]int32, 19), make([]int32, 3), make([]int32, 6), make([]int32, 1)}
	for i, s := range seqs {
		for j := range s {
			s[j] = int32((i*131 + j*7919 + 13) % 200)
		}
	}
	tok := func(i, k int) []int32 { return []int32{int32((i*17 + k*29 + 5) % 200)} }
	steps := []batchStep{
		{seqs[0][:16], seqs[1], nil, seqs[3]},         // prefill runs and a lone decode token
		{seqs[0][16:], tok(1, 0), seqs[2], tok(3, 0)}, // prefill runs beside two decode tokens
		{tok(0, 1), tok(1, 1), tok(2, 1), tok(3, 1)},  // every sequence decodes
		{tok(0, 2), tok(1, 2), tok(2, 2), tok(3, 2)},  // across a block (and a split) for seq 0
		{tok(0, 3), nil, tok(2, 3), tok(3, 3)},        // one sits out
	}
	const lastDecode = 3 // a step of four decode tokens
	// qwen3next prefills at about 0.2 s a token on the harness: f16 KV only (the flagship's).
	for _, tc := range []struct {
		name string
		kvs  []ml.DType
	}{{"tiny-qwen3next-Q8_0", []ml.DType{ml.F16}}, {"tiny-qwen3-Q8_0", []ml.DType{ml.F32, ml.F16}}} {
		name := tc.name
		for _, kv := range tc.kvs {
			t.Run(fmt.Sprintf("%s/%s", name, kv), func(t *testing.T) {
				path := fixtures.Path(t, "models", name+".gguf")
				dev := &countingDevice{Device: harnesstest.Device(t), counts: map[string]int{}}
				b := New(dev)
				ref, m := loadPair(t, path, b)
				want, _ := runSteps(t, ref, kv, 32, steps, nil)
				got, batched := runSteps(t, m, kv, 32, steps, dev)
				b.BatchAttention = false
				per, unbatched := runSteps(t, m, kv, 32, steps, dev)
				for s := range steps {
					if d, at := logitsDiff(per[s], got[s]); d != 0 {
						t.Errorf("step %d: batched attention's logits differ from the per-sequence kernels' by %g at %d", s, d, at)
					}
					d, at := logitsDiff(want[s], got[s])
					if d > 2e-3 || math.IsNaN(d) {
						t.Errorf("step %d: logits differ from the CPU's by %.3g at %d", s, d, at)
					}
				}
				layers := m.Config().AttnLayers
				b4, u4 := batched[lastDecode], unbatched[lastDecode]
				t.Logf("a step of 4 decode tokens, %d attention layers: batched %d dispatches (%v), per sequence %d (%v)",
					layers, total(b4), b4, total(u4), u4)
				if b4["attention decode"] != layers || b4["attention merge"] != layers {
					t.Errorf("batched: %d decode and %d merge dispatches, want %d of each", b4["attention decode"], b4["attention merge"], layers)
				}
				if u4["attention decode"] != 4*layers || u4["copy"]-b4["copy"] != 4*layers {
					t.Errorf("per sequence: %d decode dispatches and %d copies more than batched, want %d of each", u4["attention decode"], u4["copy"]-b4["copy"], 4*layers)
				}
			})
		}
	}
}

// TestGemma3BatchedPastWindow runs batched steps of tiny-gemma3-F32 (sliding window 32)
// where sequences prefill and decode past the window beside ones still inside it, on the
// harness device and on the CPU backend: the logits agree within TestModelParity's
// tolerance, f32 and f16 KV.
func TestGemma3BatchedPastWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("whole models on the harness device (-short skips it)")
	}
	seqs := [][]int32{make([]int32, 45), make([]int32, 3), make([]int32, 50), make([]int32, 30)}
	for i, s := range seqs {
		for j := range s {
			s[j] = int32((i*131 + j*7919 + 13) % 200)
		}
	}
	tok := func(i, k int) []int32 { return []int32{int32((i*17 + k*29 + 5) % 200)} }
	steps := []batchStep{
		{seqs[0][:40], seqs[1], nil, seqs[3]},         // one prefill crosses the window
		{seqs[0][40:], tok(1, 0), seqs[2], tok(3, 0)}, // a prefill past it, a decode at it
		{tok(0, 1), tok(1, 1), tok(2, 1), tok(3, 1)},  // decodes past the window and in it
		{tok(0, 2), tok(1, 2), tok(2, 2), tok(3, 2)},
	}
	path := fixtures.Path(t, "models", "tiny-gemma3-F32.gguf")
	ref, m := loadPair(t, path, New(harnesstest.Device(t)))
	for _, kv := range []ml.DType{ml.F32, ml.F16} {
		want, _ := runSteps(t, ref, kv, 64, steps, nil)
		got, _ := runSteps(t, m, kv, 64, steps, nil)
		for s := range steps {
			if d, at := logitsDiff(want[s], got[s]); d > 2e-3 || math.IsNaN(d) {
				t.Errorf("KV %s, step %d: logits differ from the CPU's by %.3g at %d", kv, s, d, at)
			}
		}
	}
}

func total(c map[string]int) (n int) {
	for _, v := range c {
		n += v
	}
	return n
}

// decodeBatch is a decode step of seqs sequences at depth positions each, over a pool of
// the scheduler's blocks in f16 (no prefill: a recording device runs nothing, so the
// positions need no keys). The states and pool are freed when the test ends.
func decodeBatch(t testing.TB, m *engine.Model, seqs, depth int) model.Batch {
	t.Helper()
	pool, err := m.Graph.NewKVPool(m.Backend, seqs*ml.BlocksFor(depth+1, engine.DefaultBlockSize), engine.DefaultBlockSize, ml.F16)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Free)
	var bt model.Batch
	for i := range seqs {
		s, err := m.Graph.NewPooledState(m.Backend, pool, depth+1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Free)
		bt = bt.Add(s, []int32{int32(i)}, depth, true)
	}
	return bt
}

// recordModel loads the model at path on a recording device, with BatchAttention as given.
func recordModel(t testing.TB, path string, batch bool) (*engine.Model, *device.Recorder) {
	t.Helper()
	rec := device.NewRecorder(kernels.Source())
	b := New(rec)
	b.BatchAttention = batch
	m, err := engine.Load(path, engine.Options{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, rec
}

// recordDecodeStep counts one decodeBatch step of the model at path on a recording device.
func recordDecodeStep(t testing.TB, path string, seqs, depth int, batch bool) (counts map[string]int, attnLayers int) {
	t.Helper()
	m, rec := recordModel(t, path, batch)
	bt := decodeBatch(t, m, seqs, depth)
	rec.Reset()
	ctx := m.Backend.NewContext()
	defer ctx.Close()
	m.Graph.Forward(ctx, bt)
	if err := ctx.Compute(); err != nil {
		t.Fatal(err)
	}
	counts = map[string]int{}
	for _, c := range rec.Counts() {
		counts[c.Label] = c.Dispatches
	}
	return counts, m.Config().AttnLayers
}

// TestBatchedDecodeDispatches counts a decode step of 4 sequences at 4,096 positions of a
// layout-only qwen3next-mini (Qwen3-Next-80B's attention: 16 query heads over 2 KV heads of
// 256, f16 KV, blocks of 256, so 32 splits a sequence): per attention layer the batch takes
// one decode and one merge dispatch, against a decode, a merge and a copy per sequence.
func TestBatchedDecodeDispatches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mini.gguf")
	if _, err := synth.WriteFile(gocontext.Background(), path, "qwen3next-mini", synth.Options{Type: synth.IQ2_XXS, Layout: true}); err != nil {
		t.Fatal(err)
	}
	const seqs, depth = 4, 4096
	per, _ := recordDecodeStep(t, path, seqs, depth, false)
	batched, layers := recordDecodeStep(t, path, seqs, depth, true)
	t.Logf("%d sequences at %d: %d dispatches per sequence (%v), %d batched (%v)", seqs, depth, total(per), per, total(batched), batched)
	if batched["attention decode"] != layers || batched["attention merge"] != layers {
		t.Errorf("batched: %d decode and %d merge dispatches, want %d of each", batched["attention decode"], batched["attention merge"], layers)
	}
	if per["attention decode"] != seqs*layers || per["attention merge"] != seqs*layers {
		t.Errorf("per sequence: %d decode and %d merge dispatches, want %d of each", per["attention decode"], per["attention merge"], seqs*layers)
	}
	if d := total(per) - total(batched); d != (3*seqs-2)*layers {
		t.Errorf("batching saves %d dispatches, want %d: %d decodes, %d merges and %d copies per attention layer", d, (3*seqs-2)*layers, seqs-1, seqs-1, seqs)
	}
}

// BenchmarkBatchedDecodeStep encodes a decode step of 4 sequences at 4,096 positions of
// Qwen3-Next-80B IQ2_XXS (a layout-only file, f16 KV, blocks of 256) on the recording
// device, with BatchAttention off and on: the host's encoding time and the dispatches.
//
//	go test -run XXX -bench BatchedDecodeStep ./metalkit
func BenchmarkBatchedDecodeStep(b *testing.B) {
	path := filepath.Join(b.TempDir(), "qwen3next-80b-iq2_xxs.gguf")
	if _, err := synth.WriteFile(gocontext.Background(), path, "qwen3next-80b", synth.Options{Type: synth.IQ2_XXS, Layout: true}); err != nil {
		b.Fatal(err)
	}
	const seqs, depth = 4, 4096
	for _, batch := range []bool{false, true} {
		b.Run(fmt.Sprintf("batch=%v", batch), func(b *testing.B) {
			m, rec := recordModel(b, path, batch)
			bt := decodeBatch(b, m, seqs, depth)
			b.ResetTimer()
			for range b.N {
				rec.Reset()
				ctx := m.Backend.NewContext()
				m.Graph.Forward(ctx, bt)
				err := ctx.Compute()
				ctx.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
			n := 0
			for _, c := range rec.Counts() {
				n += c.Dispatches
			}
			b.ReportMetric(float64(n), "dispatches/step")
		})
	}
}
