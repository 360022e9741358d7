package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/redlite/batch/daemon"
	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/planner"
)

func init() {
	register(command{name: "calibrate", summary: "measure the engine's allocations for a model and fit the planner's constants", run: runCalibrate})
}

// calibrationReport is what calibrate prints with --json: the fitted constants and, for every
// measured configuration, the engine's allocation beside the planner's prediction.
type calibrationReport struct {
	Calibration planner.Calibration `json:"calibration"`
	Points      []calibrationPoint  `json:"points"`
}

type calibrationPoint struct {
	planner.Measurement
	Allocation     engine.Allocation `json:"allocation"`
	PredictedBytes int64             `json:"predicted_bytes"`
	Error          float64           `json:"relative_error"` // predicted / allocated − 1
}

func runCalibrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("calibrate", stderr)
	modelPath := fs.String("model", "", "GGUF model `file` (required)")
	contextsFlag := fs.String("contexts", "1024,1536,2048", "session contexts to measure, comma-separated")
	chunksFlag := fs.String("chunks", "512,1024", "prefill chunks to measure; the first must be the smallest chunk")
	kvFlag := fs.String("kv", "f32,f16", "KV precisions to measure")
	threads := fs.Int("threads", 0, "CPU threads (0: all)")
	backend := backendFlag(fs)
	out := fs.String("out", "", "write the fitted calibration JSON to `file`")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *modelPath == "" {
		return usageErr("--model is required")
	}
	contexts, err := parseInts(*contextsFlag)
	if err != nil {
		return usageErr("--contexts: %v", err)
	}
	chunks, err := parseInts(*chunksFlag)
	if err != nil {
		return usageErr("--chunks: %v", err)
	}
	var kvs []ml.DType
	for _, s := range strings.Split(*kvFlag, ",") {
		kv, err := ml.ParseDType(strings.TrimSpace(s))
		if err != nil {
			return usageErr("--kv: %v", err)
		}
		kvs = append(kvs, kv)
	}

	var cal planner.Calibration
	var points []calibrationPoint
	var profile planner.Profile
	for _, kv := range kvs {
		for _, n := range contexts {
			for _, chunk := range chunks {
				// A fresh load per point: the backend's scratch pool starts empty, so each
				// measurement includes what that configuration makes it hold.
				m, err := loadModel(*modelPath, *backend, *threads)
				if err != nil {
					return err
				}
				if profile.Name == "" {
					if profile, err = daemon.ProfileOf(m); err != nil {
						m.Close()
						return err
					}
					// The fit starts from the default of the backend measured, and
					// replaces its constants.
					be := m.Backend.Name()
					cal = planner.DefaultCalibration(be)
					cal.Name = be + "-" + strings.TrimSuffix(filepath.Base(*modelPath), ".gguf")
					cal.Backend = be
					cal.Source = "redlite calibrate"
					cal.Model = profile.Name
					cal.MinChunk = chunks[0]
				}
				a, err := m.MeasureAllocation(ctx, engine.SessionOptions{Context: n, KV: kv}, chunk)
				m.Close()
				if err != nil {
					return fmt.Errorf("context %d, chunk %d, %s KV: %w", n, chunk, kv, err)
				}
				points = append(points, calibrationPoint{
					Measurement: planner.Measurement{Context: n, Chunk: chunk, KV: kv, AllocatedBytes: a.TotalBytes()},
					Allocation:  a,
				})
			}
		}
	}
	ms := make([]planner.Measurement, len(points))
	for i, p := range points {
		ms[i] = p.Measurement
	}
	fitted, err := planner.FitCalibration(cal, profile, ms)
	if err != nil {
		return err
	}
	for i := range points {
		p := &points[i]
		b, err := planner.Estimate(planner.Config{Context: p.Context, Slots: 1, KV: p.KV, Chunk: p.Chunk, Residency: planner.ResidencyFull}, profile, fitted)
		if err != nil {
			return err
		}
		p.PredictedBytes = b.TotalBytes
		p.Error = float64(b.TotalBytes)/float64(p.AllocatedBytes) - 1
	}
	if *out != "" {
		data, err := json.MarshalIndent(fitted, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*out, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	report := calibrationReport{Calibration: fitted, Points: points}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	fmt.Fprintf(stdout, "calibration %s: base %.1f MiB, scratch %.4f MiB per chunk token above %d\n\n",
		fitted.Name, fitted.BaseMiB, fitted.ScratchMiBPerChunkToken, fitted.MinChunk)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "KV\tCONTEXT\tCHUNK\tWEIGHTS MiB\tKV MiB\tSTATE MiB\tSCRATCH MiB\tALLOCATED MiB\tPREDICTED MiB\tERROR\t")
	for _, p := range points {
		a := p.Allocation
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%+.1f%%\t\n", p.KV, p.Context, p.Chunk,
			mib(a.WeightsBytes), mib(a.KVBytes), mib(a.StateBytes), mib(a.ScratchBytes), mib(p.AllocatedBytes), mib(p.PredictedBytes), 100*p.Error)
	}
	return tw.Flush()
}

func parseInts(s string) ([]int, error) {
	var out []int
	for i, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("item %d (%q) is not a positive integer", i+1, part)
		}
		out = append(out, n)
	}
	return out, nil
}
