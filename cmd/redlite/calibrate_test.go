package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/redlite/batch/daemon"
	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/planner"
)

// TestCalibrate measures the engine on both fixture architectures at three contexts, two
// chunks and both KV precisions, fits the planner's constants, and requires every prediction
// to cover the allocation and to be within 5 % of it.
func TestCalibrate(t *testing.T) {
	names := []string{"tiny-qwen3-Q8_0", "tiny-qwen3next-IQ2_XXS"}
	if testing.Short() {
		names = names[:1]
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "cal.json")
			// One thread: with more, how many of the pool's per-worker buffers are held at once
			// depends on scheduling, and on a loaded machine the peaks wander by ~10 %.
			code, stdout, stderr := runCmd(t, "calibrate", "--model", fixtures.Path(t, "models", name+".gguf"),
				"--contexts", "1024,1536,2048", "--chunks", "512,1024", "--kv", "f32,f16", "--threads", "1", "--out", out, "--json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var r calibrationReport
			if err := json.Unmarshal([]byte(stdout), &r); err != nil {
				t.Fatal(err)
			}
			if len(r.Points) != 12 {
				t.Fatalf("%d points, want 12", len(r.Points))
			}
			for _, p := range r.Points {
				if p.Allocation.KVBytes <= 0 || p.Allocation.ScratchBytes <= 0 || p.Allocation.WeightsBytes <= 0 {
					t.Errorf("%s KV, context %d, chunk %d: implausible allocation %+v", p.KV, p.Context, p.Chunk, p.Allocation)
				}
				if p.Error < 0 || p.Error > 0.05 {
					t.Errorf("%s KV, context %d, chunk %d: predicted %d bytes for %d allocated (%+.1f%%), want within [0, 5%%]",
						p.KV, p.Context, p.Chunk, p.PredictedBytes, p.AllocatedBytes, 100*p.Error)
				}
			}
			f, err := os.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cal, err := planner.ReadCalibration(f)
			if err != nil {
				t.Fatal(err)
			}
			if cal.Status != planner.StatusMeasured || cal.Backend != "cpu" || cal != r.Calibration {
				t.Errorf("written calibration %+v differs from the report's %+v", cal, r.Calibration)
			}
		})
	}
}

// TestCalibrationPredicts fits the planner's constants on some configurations and checks
// its predictions on others it was not fitted on (larger contexts, a larger chunk), both
// KV precisions and both fixture architectures: the calibration must predict the engine's
// memory, not only cover the points it saw. Each point is measured on a fresh load, as
// calibrate does.
func TestCalibrationPredicts(t *testing.T) {
	if testing.Short() {
		t.Skip("prefills up to 4096 tokens per configuration")
	}
	type config struct {
		context, chunk int
		kv             ml.DType
	}
	var fit []config
	for _, kv := range []ml.DType{ml.F32, ml.F16} {
		for _, n := range []int{1024, 2048} {
			for _, chunk := range []int{512, 1024} {
				fit = append(fit, config{n, chunk, kv})
			}
		}
	}
	// A larger context and a larger chunk than any fitted, in each precision.
	check := []config{{4096, 2048, ml.F32}, {2048, 2048, ml.F16}}
	for _, name := range []string{"tiny-qwen3-Q8_0", "tiny-qwen3next-IQ2_XXS"} {
		t.Run(name, func(t *testing.T) {
			path := fixtures.Path(t, "models", name+".gguf")
			var profile planner.Profile
			measure := func(c config) planner.Measurement {
				m, err := engine.Load(path, engine.Options{Threads: 1}) // deterministic peaks, as in TestCalibrate
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				if profile.Name == "" {
					if profile, err = daemon.ProfileOf(m); err != nil {
						t.Fatal(err)
					}
				}
				a, err := m.MeasureAllocation(context.Background(), engine.SessionOptions{Context: c.context, KV: c.kv}, c.chunk)
				if err != nil {
					t.Fatal(err)
				}
				return planner.Measurement{Context: c.context, Chunk: c.chunk, KV: c.kv, AllocatedBytes: a.TotalBytes()}
			}
			var ms []planner.Measurement
			for _, c := range fit {
				ms = append(ms, measure(c))
			}
			cal := planner.DefaultCalibration("cpu")
			cal, err := planner.FitCalibration(cal, profile, ms)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range check {
				got := measure(c)
				b, err := planner.Estimate(planner.Config{Context: c.context, Slots: 1, KV: got.KV, Chunk: c.chunk, Residency: planner.ResidencyFull}, profile, cal)
				if err != nil {
					t.Fatal(err)
				}
				e := float64(b.TotalBytes)/float64(got.AllocatedBytes) - 1
				t.Logf("%s KV, context %d, chunk %d: predicted %d bytes, measured %d (%+.1f%%)", c.kv, c.context, c.chunk, b.TotalBytes, got.AllocatedBytes, 100*e)
				if math.Abs(e) > 0.10 {
					t.Errorf("%s KV, context %d, chunk %d: predicted %d bytes for %d measured (%+.1f%%), want within 10%%",
						c.kv, c.context, c.chunk, b.TotalBytes, got.AllocatedBytes, 100*e)
				}
			}
			// A full batch: 4 slots sharing a pool of 4 × 1,024 positions in 256-position
			// blocks, steps of 512 tokens — never fitted — against the pool plan's terms.
			for _, kv := range []ml.DType{ml.F32, ml.F16} {
				m, err := engine.Load(path, engine.Options{Threads: 1})
				if err != nil {
					t.Fatal(err)
				}
				a, err := m.MeasureBatch(context.Background(), engine.SchedulerOptions{KV: kv, Slots: 4, Blocks: 16, BlockSize: 256, StepTokens: 512})
				m.Close()
				if err != nil {
					t.Fatal(err)
				}
				b, err := planner.Estimate(planner.Config{Context: 1024, Slots: 4, KV: kv, Chunk: 512, Residency: planner.ResidencyFull}, profile, cal)
				if err != nil {
					t.Fatal(err)
				}
				e := float64(b.TotalBytes)/float64(a.TotalBytes()) - 1
				t.Logf("%s KV, batch of 4 × 1024: predicted %d bytes, measured %d (%+.1f%%); scratch measured %d, base + scratch predicted %d",
					kv, b.TotalBytes, a.TotalBytes(), 100*e, a.ScratchBytes, b.BaseBytes+b.ScratchBytes+b.AttentionScratchBytes)
				if math.Abs(e) > 0.10 {
					t.Errorf("%s KV, batch of 4 × 1024: predicted %d bytes for %d measured (%+.1f%%), want within 10%%", kv, b.TotalBytes, a.TotalBytes(), 100*e)
				}
			}
		})
	}
}
