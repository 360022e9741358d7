package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/redlite/batch/daemon"
	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/planner"
)

func init() {
	register(command{name: "plan", summary: "choose context, chunk, KV precision, expert residency and MTP for a job", run: runPlan})
}

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("plan", stderr)
	modelPath := fs.String("model", "", "GGUF model `file` to profile (instead of --profile)")
	profilePath := fs.String("profile", "", "model profile JSON `file` (see planner/testdata)")
	calPath := fs.String("calibration", "", "backend calibration JSON `file` (default: with --profile Red Lite's Metal set for Qwen3-Next IQ2_XXS, with --model the daemon's default)")
	prompt := fs.Int("prompt-tokens", 0, "prompt tokens, chat template included (required)")
	maxTokens := fs.Int("max-tokens", 0, "most tokens to generate (required)")
	limit := fs.Int64("gpu-limit-mib", 0, "GPU limit in MiB (default: --ram-fraction of physical memory, Linux only)")
	fraction := fs.Float64("ram-fraction", planner.DefaultRAMFraction, "share of physical memory to plan into when --gpu-limit-mib is not given")
	margin := fs.Int64("margin-mib", planner.DefaultMarginMiB, "safety margin kept free below the limit, MiB")
	kv := fs.String("kv", "auto", "KV cache precision: auto, f32, f16 or q8_0")
	maxChunk := fs.Int("max-chunk", 0, "cap on the prefill chunk in tokens (0: no cap)")
	noMTP := fs.Bool("no-mtp", false, "never use MTP")
	slots := fs.Int("slots", 1, "parallel slots, each sized for this job")
	concurrency := fs.Int("concurrency", 1, "above 1: plan the KV pool and expert residency of a batching worker running this many jobs at once (the daemon's REDLITE_CONCURRENCY) instead of one job; --prompt-tokens and --max-tokens are then not needed")
	expertCache := fs.String("expert-cache", string(planner.CacheAuto), "bounded expert cache: auto (only when the experts cannot be resident at all), never or allow")
	prefer := fs.String("prefer", "kv,mtp,chunk", "order in which the choices are preferred")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if (*modelPath == "") == (*profilePath == "") {
		return usageErr("give exactly one of --model and --profile")
	}
	if *concurrency < 1 {
		return usageErr("--concurrency %d: want ≥ 1", *concurrency)
	}
	job := planner.Job{PromptTokens: *prompt, MaxTokens: *maxTokens, Slots: *slots,
		Policy: planner.Policy{MaxChunk: *maxChunk, DisableMTP: *noMTP, ExpertCache: planner.ExpertCachePolicy(*expertCache)}}
	if *kv != "auto" {
		p, err := ml.ParseDType(*kv)
		if err != nil {
			return usageErr("--kv %q: want auto, f32, f16 or q8_0", *kv)
		}
		job.Policy.KV = &p
	}
	pref, err := planner.ParsePreference(*prefer)
	if err != nil {
		return usageErr("--prefer: %v", err)
	}
	job.Policy.Preference = pref

	var profile planner.Profile
	cal := planner.RedLiteMetal()
	if *modelPath != "" {
		m, err := engine.Load(*modelPath, engine.Options{})
		if err != nil {
			return err
		}
		profile, err = daemon.ProfileOf(m)
		m.Close()
		if err != nil {
			return err
		}
		cal = planner.DefaultCalibration(m.Backend.Name())
	} else if profile, err = readJSONFile(*profilePath, planner.ReadProfile); err != nil {
		return err
	}
	if *calPath != "" {
		if cal, err = readJSONFile(*calPath, planner.ReadCalibration); err != nil {
			return err
		}
	}
	budget := planner.Budget{LimitMiB: *limit, MarginMiB: *margin, Source: planner.SourceOverride}
	if *limit == 0 {
		total, err := physicalMemory()
		if err != nil {
			return usageErr("--gpu-limit-mib is required on this system: %v", err)
		}
		if budget, err = planner.BudgetFromRAM(total, *fraction); err != nil {
			return usageErr("--ram-fraction: %v", err)
		}
		budget.MarginMiB = *margin
	}

	if *concurrency > 1 {
		pool, err := planner.PlanPool(profile, cal, budget, job.Policy, *concurrency, engine.DefaultStepTokens, engine.DefaultBlockSize)
		switch {
		case errors.Is(err, planner.ErrBadJob), errors.Is(err, planner.ErrBadBudget):
			return usageErr("%v", err)
		case err != nil:
			return err
		case *asJSON:
			return writeJSON(stdout, pool)
		}
		printPool(stdout, pool, profile, cal, budget)
		return nil
	}
	plan, err := planner.Choose(job, profile, cal, budget)
	var dnf *planner.DoesNotFitError
	switch {
	case errors.As(err, &dnf):
		if *asJSON {
			out := struct {
				Error string `json:"error"`
				*planner.DoesNotFitError
			}{dnf.Error(), dnf}
			if err := writeJSON(stdout, out); err != nil {
				return err
			}
		} else {
			printAlternatives(stdout, dnf.Alternatives, job.Policy.Preference)
		}
		return err
	case errors.Is(err, planner.ErrBadJob), errors.Is(err, planner.ErrBadBudget):
		return usageErr("%v", err)
	case err != nil:
		return err
	}
	if *asJSON {
		return writeJSON(stdout, plan)
	}
	printPlan(stdout, plan, profile, cal)
	return nil
}

func readJSONFile[T any](path string, read func(io.Reader) (T, error)) (T, error) {
	f, err := os.Open(path)
	if err != nil {
		var zero T
		return zero, err
	}
	defer f.Close()
	v, err := read(f)
	if err != nil {
		return v, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func printPlan(w io.Writer, p planner.Plan, prof planner.Profile, cal planner.Calibration) {
	residency := residencyText(p.Residency, p.ExpertCacheBytes)
	fmt.Fprintf(w, "plan:        %s; %s\n", p.Config, residency)
	slots := "1 slot"
	if p.Slots > 1 {
		slots = fmt.Sprintf("%d slots", p.Slots)
	}
	fmt.Fprintf(w, "job:         %s prompt + %s output tokens = %s positions × %s\n",
		planner.Commas(int64(p.PromptTokens)), planner.Commas(int64(p.MaxTokens)), planner.Commas(int64(p.Context)), slots)
	fmt.Fprintf(w, "model:       %s (%s)\n", prof.Name, prof.Architecture)
	fmt.Fprintf(w, "calibration: %s (%s)\n", cal.Name, cal.Status)
	if cal.Status == planner.StatusPlaceholder {
		fmt.Fprintln(w, "             warning: placeholder constants, not measured on this backend")
	}
	fmt.Fprintf(w, "need:        %s MiB of %s MiB (GPU limit %s − margin %s, source %s); headroom %s MiB\n\n",
		planner.Commas(p.NeedMiB), planner.Commas(p.LimitMiB), planner.Commas(p.GPULimitMiB), planner.Commas(p.MarginMiB),
		p.BudgetSource, planner.Commas(p.HeadroomMiB))
	printBreakdown(w, p.Breakdown, p.KV, p.Slots, residency, p.NeedMiB, cal)
	fmt.Fprintln(w)
	printAlternatives(w, p.Alternatives, p.Preference)
}

// residencyText says how the experts are held.
func residencyText(r planner.Residency, cacheBytes int64) string {
	if r == planner.ResidencyCache {
		return fmt.Sprintf("bounded expert cache of %s MiB", planner.Commas(cacheBytes/planner.MiB))
	}
	return "experts fully resident"
}

// printPool prints a batching worker's pool: its slots, blocks, precision and expert
// residency, and the memory terms of the full pool.
func printPool(w io.Writer, p planner.Pool, prof planner.Profile, cal planner.Calibration, b planner.Budget) {
	residency := residencyText(p.Residency, p.ExpertCacheBytes)
	fmt.Fprintf(w, "pool:        %d slots, %s KV, %s blocks of %d positions (%s per slot when all are full), steps of %d tokens; %s\n",
		p.Slots, p.KV, planner.Commas(int64(p.Blocks)), p.BlockSize, planner.Commas(int64(p.SlotContext)), p.StepTokens, residency)
	why := fmt.Sprintf("every expert resident leaves each slot ≥ %s positions", planner.Commas(planner.PoolMinSlotContext))
	switch {
	case p.Residency == planner.ResidencyCache:
		why = fmt.Sprintf("every expert resident would leave a slot < %s positions: the cache takes what %s positions per slot leave (%.0f%% of %s MiB of experts; at least %s MiB, one layer)",
			planner.Commas(planner.PoolMinSlotContext), planner.Commas(int64(p.SlotContext)), 100*float64(p.ExpertCacheBytes)/float64(prof.ExpertCacheBytes),
			planner.Commas(prof.ExpertCacheBytes/planner.MiB), planner.Commas((prof.MinCacheBytes()+planner.MiB-1)/planner.MiB))
	case prof.ExpertCacheBytes == 0:
		why = "the model has no routed experts"
	case p.SlotContext < planner.PoolMinSlotContext:
		why = "the smallest expert cache does not fit beside the minimum pool, so a shorter pool keeps every expert"
	}
	fmt.Fprintf(w, "why:         %s\n", why)
	fmt.Fprintf(w, "model:       %s (%s)\n", prof.Name, prof.Architecture)
	fmt.Fprintf(w, "calibration: %s (%s)\n", cal.Name, cal.Status)
	fmt.Fprintf(w, "need:        %s MiB of %s MiB (GPU limit %s − margin %s, source %s)\n\n",
		planner.Commas(p.NeedMiB), planner.Commas(p.LimitMiB), planner.Commas(b.LimitMiB), planner.Commas(b.MarginMiB), b.Source)
	printBreakdown(w, p.Breakdown, p.KV, p.Slots, residency, p.NeedMiB, cal)
}

// printBreakdown prints every term of a plan's or a pool's memory need.
func printBreakdown(w io.Writer, b planner.Breakdown, kv ml.DType, slots int, residency string, needMiB int64, cal planner.Calibration) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "TERM\t%10s\tDETAIL\n", "MiB")
	row := func(term string, bytes int64, detail string) {
		fmt.Fprintf(tw, "%s\t%10s\t%s\n", term, mib(bytes), detail)
	}
	row("expert cache", b.ExpertCacheBytes, residency)
	row("dense", b.DenseBytes, "")
	row("base", b.BaseBytes, "")
	kvDetail := fmt.Sprintf("%s positions × %s (%s)", planner.Commas(b.KVPositions), kib(b.KVBytesPerPosition), kv)
	if slots > 1 {
		kvDetail += fmt.Sprintf(", incl. %d × %s state positions", slots-1, planner.Commas(b.StatePositions))
	}
	row("kv", b.KVBytes, kvDetail)
	row("scratch", b.ScratchBytes, fmt.Sprintf("%s chunk tokens above %d", planner.Commas(int64(b.ScratchTokens)), cal.MinChunk))
	if b.AttentionScratchBytes > 0 {
		row("attention", b.AttentionScratchBytes, "transient copy of the cache for a chunk's attention")
	}
	row("mtp", b.MTPBytes, "")
	row("total", b.TotalBytes, fmt.Sprintf("rounded up to %s MiB", planner.Commas(needMiB)))
	tw.Flush()
}

func printAlternatives(w io.Writer, alts []planner.Alternative, pref []planner.Dimension) {
	if len(pref) == 0 {
		pref = planner.DefaultPreference
	}
	names := make([]string, len(pref))
	for i, d := range pref {
		names[i] = string(d)
	}
	fmt.Fprintf(w, "alternatives (preference: %s; full residency before a bounded cache):\n", strings.Join(names, ", "))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KV\tMTP\tCHUNK\tEXPERTS\tNEED MiB\tFITS\tNOTE")
	for _, a := range alts {
		experts := "full"
		if a.Residency == planner.ResidencyCache {
			experts = "cache " + planner.Commas(a.ExpertCacheBytes/planner.MiB)
		}
		note := a.Excluded
		if a.Chosen {
			note = "chosen"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", a.KV, onOff(a.MTP), a.Chunk, experts, planner.Commas(a.NeedMiB), yesNo(a.Fits), note)
	}
	tw.Flush()
}

// mib prints bytes as MiB with one decimal: 196,608,000 → "187.5".
func mib(bytes int64) string {
	tenths := int64(math.Round(float64(bytes) * 10 / planner.MiB))
	return fmt.Sprintf("%s.%d", planner.Commas(tenths/10), tenths%10)
}

func kib(bytes int64) string {
	if bytes%1024 == 0 {
		return planner.Commas(bytes/1024) + " KiB"
	}
	return planner.Commas(bytes) + " bytes"
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// physicalMemory reads MemTotal from /proc/meminfo (Linux). On macOS the limit will come
// from metalkit; until then it must be given.
func physicalMemory() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("cannot read physical memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && fields[0] == "MemTotal:" && fields[2] == "kB" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo MemTotal %q: %w", fields[1], err)
			}
			return kb * 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("/proc/meminfo has no MemTotal line")
}
