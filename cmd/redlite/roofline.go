package main

import (
	"context"
	"io"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/metalkit"
)

func init() {
	register(command{name: "roofline", summary: "count what the Metal backend dispatches for a model's passes and bound their time on M4 GPUs", run: runRoofline})
}

func runRoofline(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("roofline", stderr)
	modelPath := fs.String("model", "", "GGUF model `file`; a layout-only file (redlite synth --layout) will do, nothing is read")
	depths := fs.String("depths", "4096,32768", "decode steps to count, after this many positions each (comma-separated)")
	chunk := fs.Int("chunk", 2048, "prefill chunk to count (0: none)")
	kv := fs.String("kv", "f16", "KV cache precision: f32|f16|q8_0")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *modelPath == "" {
		return usageErr("--model is required")
	}
	ds, err := parseInts(*depths)
	if err != nil {
		return usageErr("--depths: %v", err)
	}
	dt, err := ml.ParseDType(*kv)
	if err != nil {
		return usageErr("--kv: %v", err)
	}
	if *chunk < 0 {
		return usageErr("--chunk must be ≥ 0")
	}
	passes, err := metalkit.CountPasses(ctx, *modelPath, metalkit.CountOptions{Depths: ds, Chunk: *chunk, KV: dt})
	if err != nil {
		return err
	}
	metalkit.WriteRoofline(stdout, passes)
	return nil
}
