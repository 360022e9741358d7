package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/planner"
)

// TestCalibrate measures the engine on both fixture architectures at three contexts, two
// chunks and both KV precisions, fits the planner's constants, and requires every prediction
// to cover the allocation and to be within 5 % of it.
func TestCalibrate(t *testing.T) {
	for _, name := range []string{"tiny-qwen3-Q8_0", "tiny-qwen3next-IQ2_XXS"} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "cal.json")
			code, stdout, stderr := runCmd(t, "calibrate", "--model", fixtures.Path(t, "models", name+".gguf"),
				"--contexts", "1024,1536,2048", "--chunks", "512,1024", "--kv", "f32,f16", "--out", out, "--json")
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
