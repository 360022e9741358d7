package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
)

func init() {
	register(command{name: "bench", summary: "measure prefill and decode speed (pp512, tg128) like llama-bench", run: runBench})
}

// benchResult is one test's measurement, named as llama-bench names them.
type benchResult struct {
	Model       string    `json:"model"`
	SizeBytes   int64     `json:"size_bytes"`
	Backend     string    `json:"backend"`
	Threads     int       `json:"threads"`
	Test        string    `json:"test"` // "pp512" or "tg128"
	Tokens      int       `json:"tokens"`
	TokensPerS  float64   `json:"tokens_per_second"`
	StdDev      float64   `json:"stddev"`
	Repetitions int       `json:"repetitions"`
	Samples     []float64 `json:"samples_tokens_per_second"`
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", stderr)
	modelPath := fs.String("model", "", "GGUF model `file` (required)")
	threads := fs.Int("threads", runtime.GOMAXPROCS(0), "CPU threads")
	pp := fs.Int("p", 512, "prompt tokens for the prefill test (0 skips it)")
	tg := fs.Int("n", 128, "tokens for the decode test (0 skips it)")
	reps := fs.Int("r", 3, "repetitions of each test")
	kvName := fs.String("kv", "f32", "KV cache precision: f32 or f16")
	asJSON := fs.Bool("json", false, "print JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the timed runs to `file`")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *modelPath == "" {
		return usageErr("--model is required")
	}
	if *pp < 0 || *tg < 0 || *reps < 1 || *threads < 1 {
		return usageErr("-p and -n must be ≥ 0, -r and --threads ≥ 1")
	}
	kv, err := ml.ParseDType(*kvName)
	if err != nil {
		return usageErr("--kv: %v", err)
	}
	m, err := engine.Load(*modelPath, engine.Options{Threads: *threads})
	if err != nil {
		return err
	}
	defer m.Close()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	vocab := m.Config().Vocab
	// Random tokens, as llama-bench uses: the speed does not depend on which ids they are.
	rng := rand.New(rand.NewPCG(1, 2))
	tokens := func(n int) []int32 {
		t := make([]int32, n)
		for i := range t {
			t[i] = int32(rng.IntN(vocab))
		}
		return t
	}
	base := benchResult{Model: m.Config().Arch, SizeBytes: m.File.Size(), Backend: m.Backend.Name(), Threads: *threads, Repetitions: *reps}
	var results []benchResult
	measure := func(test string, n int, run func() error) error {
		r := base
		r.Test, r.Tokens = test, n
		// One untimed run warms caches and page-faults the mapped weights in.
		if err := run(); err != nil {
			return err
		}
		for range *reps {
			start := time.Now()
			if err := run(); err != nil {
				return err
			}
			r.Samples = append(r.Samples, float64(n)/time.Since(start).Seconds())
		}
		r.TokensPerS, r.StdDev = meanStd(r.Samples)
		results = append(results, r)
		return nil
	}
	if *pp > 0 {
		prompt := tokens(*pp)
		err := measure(fmt.Sprintf("pp%d", *pp), *pp, func() error {
			s, err := m.NewSession(engine.SessionOptions{Context: *pp, KV: kv})
			if err != nil {
				return err
			}
			defer s.Close()
			_, err = s.Prefill(ctx, prompt, engine.PrefillOptions{})
			return err
		})
		if err != nil {
			return err
		}
	}
	if *tg > 0 {
		gen := tokens(*tg)
		err := measure(fmt.Sprintf("tg%d", *tg), *tg, func() error {
			s, err := m.NewSession(engine.SessionOptions{Context: *tg, KV: kv})
			if err != nil {
				return err
			}
			defer s.Close()
			for _, t := range gen {
				if _, err := s.Decode(ctx, t); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	// The same markdown table llama-bench prints, so the two can be read side by side.
	rows := [][]string{{"model", "size", "backend", "threads", "test", "t/s"}}
	for _, r := range results {
		rows = append(rows, []string{r.Model, fmt.Sprintf("%.2f MiB", float64(r.SizeBytes)/(1<<20)), r.Backend,
			fmt.Sprint(r.Threads), r.Test, fmt.Sprintf("%.2f ± %.2f", r.TokensPerS, r.StdDev)})
	}
	return writeMarkdownTable(stdout, rows, []bool{false, true, false, true, true, true})
}

// writeMarkdownTable prints rows (the first is the header) as a markdown table with padded
// columns; right[i] right-aligns column i.
func writeMarkdownTable(w io.Writer, rows [][]string, right []bool) error {
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, cell := range row {
			width[i] = max(width[i], utf8.RuneCountInString(cell))
		}
	}
	line := func(cells []string) string {
		var b strings.Builder
		for i, c := range cells {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if right[i] {
				b.WriteString("| " + pad + c + " ")
			} else {
				b.WriteString("| " + c + pad + " ")
			}
		}
		return b.String() + "|\n"
	}
	rule := make([]string, len(width))
	for i, n := range width {
		rule[i] = strings.Repeat("-", n)
		if right[i] {
			rule[i] = strings.Repeat("-", n-1) + ":"
		}
	}
	out := line(rows[0]) + line(rule)
	for _, row := range rows[1:] {
		out += line(row)
	}
	_, err := io.WriteString(w, out)
	return err
}

func meanStd(x []float64) (float64, float64) {
	var sum float64
	for _, v := range x {
		sum += v
	}
	mean := sum / float64(len(x))
	if len(x) < 2 {
		return mean, 0
	}
	var ss float64
	for _, v := range x {
		ss += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(ss / float64(len(x)-1))
}
