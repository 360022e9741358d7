package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
)

// sharedResult is one run of `redlite bench --shared`.
type sharedResult struct {
	Model    string  `json:"model"`
	Cache    bool    `json:"prefix_cache"`
	Jobs     int     `json:"jobs"`
	Document int     `json:"document_tokens"`
	Question int     `json:"question_tokens"`
	Computed int     `json:"prefill_tokens_computed"`
	Cached   int     `json:"cached_tokens"`
	WallS    float64 `json:"wall_seconds"`
	// Ratio is this run's wall time over the run without the cache; Identical whether every
	// job's greedy output equals the run without the cache.
	Ratio     float64 `json:"wall_ratio"`
	Identical bool    `json:"greedy_identical"`
}

// benchShared runs the prefix cache's measurement (engine.MeasureSharedPrefix) and prints a
// row per run.
func benchShared(ctx context.Context, stdout io.Writer, path, backend, threads, dot, kvName string, asJSON bool, r engine.SharedPrefixRun) error {
	th, err := strconv.Atoi(threads)
	if err != nil {
		return usageErr("--threads: --shared takes one count")
	}
	kv, err := ml.ParseDType(kvName)
	if err != nil {
		return usageErr("--kv: %v", err)
	}
	r.KV = kv
	m, err := loadModelDot(path, backend, th, dot, 0)
	if err != nil {
		return err
	}
	defer m.Close()
	runs, err := m.MeasureSharedPrefix(ctx, r)
	if err != nil {
		return err
	}
	var out []sharedResult
	for _, run := range runs {
		same := true
		for j := range run.Tokens {
			same = same && slices.Equal(run.Tokens[j], runs[0].Tokens[j])
		}
		out = append(out, sharedResult{Model: m.Config().Arch, Cache: run.Cache, Jobs: r.Jobs, Document: r.Document, Question: r.Question,
			Computed: run.Computed, Cached: run.Cached, WallS: run.Wall.Seconds(), Ratio: run.Wall.Seconds() / runs[0].Wall.Seconds(), Identical: same})
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	rows := [][]string{{"model", "prefix cache", "jobs", "prompt", "prefill computed", "cached", "wall s", "× without", "greedy identical"}}
	for _, o := range out {
		rows = append(rows, []string{o.Model, fmt.Sprint(o.Cache), fmt.Sprint(o.Jobs), fmt.Sprintf("%d + %d", o.Document, o.Question),
			fmt.Sprint(o.Computed), fmt.Sprint(o.Cached), fmt.Sprintf("%.2f", o.WallS), fmt.Sprintf("%.3f", o.Ratio), fmt.Sprint(o.Identical)})
	}
	return writeMarkdownTable(stdout, rows, []bool{false, false, true, true, true, true, true, true, false})
}
