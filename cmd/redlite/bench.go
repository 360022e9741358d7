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
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/cpu"
	"github.com/redlite/batch/engine/ml"
)

func init() {
	register(command{name: "bench", summary: "measure prefill and decode speed (pp512, tg128) like llama-bench", run: runBench})
}

// benchResult is one test's measurement, named as llama-bench names them.
type benchResult struct {
	Model     string `json:"model"`
	SizeBytes int64  `json:"size_bytes"`
	Backend   string `json:"backend"`
	// Kernels is cpuKernels: the CPU's kernel set and the 8-bit kernels of the model's types.
	Kernels string `json:"kernels,omitempty"`
	Threads int    `json:"threads"`
	Test    string `json:"test"` // "pp512", "tg128", "tg64 @ d4096"
	// Depth is the tokens already in the cache when the test starts (-d); 0 without.
	Depth int `json:"depth,omitempty"`
	// Parallel is the number of sequences run together (--npl); 0 without --npl.
	Parallel int `json:"parallel,omitempty"`
	// Tokens counts one sequence's tokens; TokensPerS is the aggregate over all of them,
	// PerSequence a sequence's share.
	Tokens      int       `json:"tokens"`
	TokensPerS  float64   `json:"tokens_per_second"`
	PerSequence float64   `json:"tokens_per_second_per_sequence,omitempty"`
	StdDev      float64   `json:"stddev"`
	Repetitions int       `json:"repetitions"`
	Samples     []float64 `json:"samples_tokens_per_second"`
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", stderr)
	modelPath := fs.String("model", "", "GGUF model `file` (required)")
	threadsFlag := fs.String("threads", strconv.Itoa(runtime.GOMAXPROCS(0)), "CPU threads, or a comma-separated `list` of counts to run every test at (llama-bench's -t 1,2)")
	backend := backendFlag(fs)
	pp := fs.Int("p", 512, "prompt tokens for the prefill test (0 skips it)")
	tg := fs.Int("n", 128, "tokens for the decode test (0 skips it)")
	depth := fs.Int("d", 0, "tokens already in the cache before each test (llama-bench's -d): prefilled once, untimed, and restored before every run")
	reps := fs.Int("r", 3, "repetitions of each test")
	kvName := fs.String("kv", "f16", "KV cache precision: f16 (llama-bench's default), f32 or q8_0")
	dot := fs.String("dot", "auto", "CPU dot path of quantized products: auto, exact or int8 (the daemon's REDLITE_CPU_DOT)")
	asJSON := fs.Bool("json", false, "print JSON")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the timed runs to `file`")
	expertCache := fs.Int("expert-cache-mib", 0, "hold the routed experts in a bounded cache of this many MiB, filled from the mapped file (0: every expert resident); the hits and misses go to stderr")
	nplFlag := fs.String("npl", "", "run N sequences together through the batch scheduler for each N of this comma-separated `list` (llama-batched-bench's -npl): each prefills -p tokens and decodes -n")
	shared := fs.Int("shared", 0, "measure the prefix cache: --jobs prompts of this many shared document tokens and --question tokens each, run together with the cache off and on, -n generated tokens each (greedy)")
	jobsN := fs.Int("jobs", 8, "prompts of the --shared measurement")
	question := fs.Int("question", 32, "tokens after the shared document in each prompt of --shared")
	cacheMiB := fs.Int("prefix-cache-mib", 1024, "recurrent checkpoints the prefix cache holds in --shared (REDLITE_PREFIX_CACHE_MIB)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *shared > 0 {
		return benchShared(ctx, stdout, *modelPath, *backend, *threadsFlag, *dot, *kvName, *asJSON,
			engine.SharedPrefixRun{Document: *shared, Question: *question, Jobs: *jobsN, MaxTokens: *tg, CacheBytes: int64(*cacheMiB) << 20})
	}
	var npl []int
	if *nplFlag != "" {
		var err error
		if npl, err = parseInts(*nplFlag); err != nil {
			return usageErr("--npl: %v", err)
		}
	}
	threadList, err := parseInts(*threadsFlag)
	if err != nil {
		return usageErr("--threads: %v", err)
	}
	if *modelPath == "" {
		return usageErr("--model is required")
	}
	if *pp < 0 || *tg < 0 || *depth < 0 || *reps < 1 || *expertCache < 0 {
		return usageErr("-p, -n, -d and --expert-cache-mib must be ≥ 0, -r ≥ 1")
	}
	if *depth > 0 && len(npl) > 0 {
		return usageErr("-d and --npl cannot be combined")
	}
	if _, err := cpu.ParseDot(*dot); err != nil {
		return usageErr("--dot: %v", err)
	}
	kv, err := ml.ParseDType(*kvName)
	if err != nil {
		return usageErr("--kv: %v", err)
	}
	// The model is loaded once, with the most threads (for the depth's prefill); each
	// count of the list then runs every test.
	m, err := loadModelDot(*modelPath, *backend, slices.Max(threadList), *dot, *expertCache)
	if err != nil {
		return err
	}
	defer m.Close()
	setThreads, canSet := m.Backend.(interface{ SetThreads(int) })
	if len(threadList) > 1 && !canSet {
		return usageErr("--threads: a list needs the CPU backend, not %s", m.Backend.Name())
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
	base := benchResult{Model: m.Config().Arch, SizeBytes: m.File.Size(), Backend: m.Backend.Name(), Kernels: cpuKernels(m.Backend, m.File), Repetitions: *reps}
	var results []benchResult
	// prefix is the depth's state, prefilled once: every run restores it, so the timed part
	// is only the test's own tokens, as llama-bench's -d.
	var prefix []byte
	if *depth > 0 {
		s, err := m.NewSession(engine.SessionOptions{Context: *depth, KV: kv})
		if err != nil {
			return err
		}
		_, err = s.Prefill(ctx, tokens(*depth), engine.PrefillOptions{Chunk: benchDepthChunk})
		if err == nil {
			prefix, err = s.Snapshot()
		}
		s.Close()
		if err != nil {
			return fmt.Errorf("bench: prefill of the depth: %w", err)
		}
	}
	// The profile starts after the depth's prefill, which is not part of any test.
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
	// session opens a session for a test of n tokens, holding the depth's tokens.
	session := func(n int) (*engine.Session, error) {
		o := engine.SessionOptions{Context: *depth + n, KV: kv}
		if prefix == nil {
			return m.NewSession(o)
		}
		return m.RestoreSession(prefix, o)
	}
	// measure times run over a fresh session per run; opening it (and restoring the depth)
	// is not timed.
	measure := func(test string, n int, run func(*engine.Session) error) error {
		r := base
		r.Test, r.Tokens, r.Depth = benchTestName(test, *depth), n, *depth
		once := func() (time.Duration, error) {
			s, err := session(n)
			if err != nil {
				return 0, err
			}
			defer s.Close()
			start := time.Now()
			err = run(s)
			return time.Since(start), err
		}
		// One untimed run warms caches and page-faults the mapped weights in.
		if _, err := once(); err != nil {
			return err
		}
		for range *reps {
			d, err := once()
			if err != nil {
				return err
			}
			r.Samples = append(r.Samples, float64(n)/d.Seconds())
		}
		r.TokensPerS, r.StdDev = meanStd(r.Samples)
		results = append(results, r)
		return nil
	}
	for _, th := range threadList {
		if canSet {
			setThreads.SetThreads(th)
		}
		base.Threads = th
		if len(npl) > 0 {
			for _, n := range npl {
				rs, err := benchParallel(ctx, m, base, kv, n, tokens, *pp, *tg, *reps)
				if err != nil {
					return err
				}
				results = append(results, rs...)
			}
		}
		if *pp > 0 && len(npl) == 0 {
			prompt := tokens(*pp)
			err := measure(fmt.Sprintf("pp%d", *pp), *pp, func(s *engine.Session) error {
				_, err := s.Prefill(ctx, prompt, engine.PrefillOptions{})
				return err
			})
			if err != nil {
				return err
			}
		}
		if *tg > 0 && len(npl) == 0 {
			gen := tokens(*tg)
			err := measure(fmt.Sprintf("tg%d", *tg), *tg, func(s *engine.Session) error {
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
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	// The same markdown table llama-bench prints, so the two can be read side by side.
	rows := [][]string{{"model", "size", "backend", "threads", "test", "t/s"}}
	right := []bool{false, true, false, true, true, true}
	if len(npl) > 0 {
		rows[0] = append(rows[0], "parallel", "t/s per sequence")
		right = append(right, true, true)
	}
	for _, r := range results {
		row := []string{r.Model, fmt.Sprintf("%.2f MiB", float64(r.SizeBytes)/(1<<20)), r.Backend,
			fmt.Sprint(r.Threads), r.Test, fmt.Sprintf("%.2f ± %.2f", r.TokensPerS, r.StdDev)}
		if len(npl) > 0 {
			row = append(row, fmt.Sprint(r.Parallel), fmt.Sprintf("%.2f", r.PerSequence))
		}
		rows = append(rows, row)
	}
	if base.Kernels != "" {
		// On stderr, as llama-bench's system information: stdout stays the table.
		fmt.Fprintf(stderr, "cpu kernels: %s\n", base.Kernels)
	}
	if er, ok := m.Backend.(ml.ExpertResidency); ok && *expertCache > 0 {
		st := er.ExpertStats()
		fmt.Fprintf(stderr, "expert cache: %d MiB; %d hits, %d misses (hit rate %.1f%%), %d evictions over every run\n",
			*expertCache, st.Hits, st.Misses, 100*float64(st.Hits)/float64(max(st.Hits+st.Misses, 1)), st.Evictions)
	}
	return writeMarkdownTable(stdout, rows, right)
}

// benchDepthChunk is the prefill chunk of the depth's tokens: llama-bench's default
// micro-batch, and it bounds the attention scratch of a long depth.
const benchDepthChunk = 512

// benchTestName names a test as llama-bench does: "tg128", or "tg64 @ d4096" at a depth.
func benchTestName(test string, depth int) string {
	if depth == 0 {
		return test
	}
	return fmt.Sprintf("%s @ d%d", test, depth)
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

// benchParallel runs n sequences together through a scheduler, each prefilling pp tokens and
// decoding tg, reps times after one untimed run. Prefill is timed over the steps that
// carried prompt tokens, decode over the steps where all n sequences decoded: the rates are
// aggregates over the n sequences, as llama-batched-bench's S_PP and S_TG.
func benchParallel(ctx context.Context, m *engine.Model, base benchResult, kv ml.DType, n int, tokens func(int) []int32, pp, tg, reps int) ([]benchResult, error) {
	if pp < 1 || tg < 1 {
		return nil, usageErr("--npl needs -p and -n ≥ 1")
	}
	capacity := pp + tg + 1
	var mu sync.Mutex
	var steps []engine.StepStats
	sch, err := m.NewScheduler(engine.SchedulerOptions{
		KV: kv, Slots: n, Blocks: n * ml.BlocksFor(capacity, engine.DefaultBlockSize),
		// Every prompt in one pass, as llama-batched-bench prefills its whole batch at once.
		StepTokens: max(engine.DefaultStepTokens, n*pp),
		OnStep:     func(s engine.StepStats) { mu.Lock(); steps = append(steps, s); mu.Unlock() },
	})
	if err != nil {
		return nil, err
	}
	defer sch.Close()
	prompts := make([][]int32, n)
	for i := range prompts {
		prompts[i] = tokens(pp)
	}
	ppRes, tgRes := base, base
	ppRes.Test, ppRes.Tokens, ppRes.Parallel = fmt.Sprintf("pp%d", pp), pp, n
	tgRes.Test, tgRes.Tokens, tgRes.Parallel = fmt.Sprintf("tg%d", tg), tg, n
	for rep := 0; rep <= reps; rep++ {
		mu.Lock()
		steps = steps[:0]
		mu.Unlock()
		// All sequences start in the same step. MaxTokens tg+1: the first token comes from
		// the prompt's logits, then tg decode steps; no end-of-generation token stops it.
		if err := sch.GenerateTogether(ctx, prompts, capacity, engine.GenerateOptions{MaxTokens: tg + 1, Stream: engine.DiscardText{}}); err != nil {
			return nil, err
		}
		if rep == 0 {
			continue // warm-up
		}
		var ppTok, tgTok int
		var ppDur, tgDur time.Duration
		mu.Lock()
		for _, s := range steps {
			switch {
			case s.Decoding < s.Sequences:
				ppTok += s.Tokens - s.Decoding
				ppDur += s.Duration
			case s.Decoding == n && s.Sequences == n:
				tgTok += s.Tokens
				tgDur += s.Duration
			}
		}
		mu.Unlock()
		if ppDur > 0 {
			ppRes.Samples = append(ppRes.Samples, float64(ppTok)/ppDur.Seconds())
		}
		if tgDur > 0 {
			tgRes.Samples = append(tgRes.Samples, float64(tgTok)/tgDur.Seconds())
		}
	}
	var out []benchResult
	for _, r := range []benchResult{ppRes, tgRes} {
		r.TokensPerS, r.StdDev = meanStd(r.Samples)
		r.PerSequence = r.TokensPerS / float64(n)
		out = append(out, r)
	}
	return out, nil
}
