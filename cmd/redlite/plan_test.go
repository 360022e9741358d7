package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/internal/fixtures"
	"github.com/redlite/batch/planner"
)

const redLiteProfile = "../../planner/testdata/qwen3next-80b-a3b-iq2_xxs.profile.json"

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func planArgs(prompt, maxTokens string, extra ...string) []string {
	return append([]string{"plan", "--profile", redLiteProfile, "--prompt-tokens", prompt, "--max-tokens", maxTokens,
		"--gpu-limit-mib", "21741"}, extra...)
}

func TestPlanCommand(t *testing.T) {
	t.Run("Table", func(t *testing.T) {
		code, out, errs := runCmd(t, planArgs("3000", "1000")...)
		if code != 0 {
			t.Fatalf("exit %d, stderr %s", code, errs)
		}
		for _, want := range []string{
			"plan:        f32 KV, 2048-token chunks, MTP; experts fully resident",
			"need:        21,526 MiB of 21,741 MiB",
			"headroom 215 MiB",
			"4,000 positions × 48 KiB (f32)",
			"21,525.5",
			"calibration: redlite-metal-qwen3next-iq2_xxs (published)",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		// The chosen row and an excluded alternative.
		if !strings.Contains(out, "21,526    yes   chosen") {
			t.Errorf("no chosen row in:\n%s", out)
		}
	})

	t.Run("JSON", func(t *testing.T) {
		code, out, errs := runCmd(t, planArgs("60000", "4000", "--json")...)
		if code != 0 {
			t.Fatalf("exit %d, stderr %s", code, errs)
		}
		var p planner.Plan
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatalf("%v in %s", err, out)
		}
		if p.KV != ml.F16 || p.Chunk != 2048 || p.MTP || p.NeedMiB != 21051 || p.Context != 64000 {
			t.Errorf("plan %v needing %d MiB for %d positions, want f16, 2048, no MTP, 21,051, 64,000", p.Config, p.NeedMiB, p.Context)
		}
	})

	t.Run("Knobs", func(t *testing.T) {
		code, out, errs := runCmd(t, planArgs("3000", "1000", "--json", "--kv", "f16", "--max-chunk", "1024", "--no-mtp", "--slots", "2", "--margin-mib", "100")...)
		if code != 0 {
			t.Fatalf("exit %d, stderr %s", code, errs)
		}
		var p planner.Plan
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatal(err)
		}
		// 18,979 + (8,000 + 3,072) × 24 KiB (259.5) + 190.67 = 19,429.2.
		if p.KV != ml.F16 || p.Chunk != 1024 || p.MTP || p.Slots != 2 || p.NeedMiB != 19430 || p.LimitMiB != 21641 {
			t.Errorf("plan %v needing %d of %d MiB, want f16, 1024, no MTP, 2 slots, 19,430 of 21,641", p.Config, p.NeedMiB, p.LimitMiB)
		}
	})

	t.Run("DoesNotFit", func(t *testing.T) {
		code, out, errs := runCmd(t, planArgs("120000", "4000")...)
		if code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
		if !strings.Contains(errs, "needs 21,886 MiB (f16 KV, 512-token chunks) but the limit is 21,741 MiB") ||
			!strings.Contains(errs, "at most 117,845 tokens") {
			t.Errorf("stderr lacks the explanation: %s", errs)
		}
		if !strings.Contains(out, "beyond the MTP limit of 8,192") {
			t.Errorf("alternatives table missing from stdout:\n%s", out)
		}
	})

	t.Run("DoesNotFitJSON", func(t *testing.T) {
		code, out, _ := runCmd(t, planArgs("110000", "10000", "--json")...)
		if code != 1 {
			t.Fatalf("exit %d, want 1", code)
		}
		var got struct {
			Error            string `json:"error"`
			SmallestLimitMiB int64  `json:"smallest_limit_mib"`
			MaxTokensFit     int    `json:"max_tokens_fit"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v in %s", err, out)
		}
		if got.SmallestLimitMiB != 21792 || got.MaxTokensFit != 7845 || !strings.Contains(got.Error, "max_tokens ≤ 7,845") {
			t.Errorf("got %+v, want smallest limit 21,792 and max_tokens_fit 7,845", got)
		}
	})

	t.Run("CalibrationFile", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "cpu.json")
		b, _ := json.Marshal(planner.CPUPlaceholder())
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errs := runCmd(t, planArgs("3000", "1000", "--calibration", path)...)
		if code != 0 {
			t.Fatalf("exit %d, stderr %s", code, errs)
		}
		if !strings.Contains(out, "cpu-placeholder (placeholder)") || !strings.Contains(out, "warning: placeholder constants") {
			t.Errorf("output does not flag the placeholder calibration:\n%s", out)
		}
	})

	t.Run("RAMFraction", func(t *testing.T) {
		if _, err := os.Stat("/proc/meminfo"); err != nil {
			t.Skip("no /proc/meminfo")
		}
		code, out, errs := runCmd(t, "plan", "--profile", redLiteProfile, "--prompt-tokens", "10", "--max-tokens", "10", "--json", "--expert-cache", "allow")
		if code != 0 && code != 1 {
			t.Fatalf("exit %d, stderr %s", code, errs)
		}
		if code == 0 && !strings.Contains(out, `"budget_source": "ram_fraction"`) {
			t.Errorf("budget source is not ram_fraction:\n%s", out)
		}
	})

	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"NoProfile", []string{"plan", "--prompt-tokens", "1", "--max-tokens", "1"}, "exactly one of --model and --profile"},
		{"NoPrompt", planArgs("0", "10"), "prompt_tokens must be ≥ 1"},
		{"NegativeMax", planArgs("10", "-1"), "max_tokens must be ≥ 1, got -1"},
		{"ZeroLimit", planArgs("10", "10", "--gpu-limit-mib", "-5"), "limit_mib must be > 0, got -5"},
		{"BadKV", planArgs("10", "10", "--kv", "q4"), `--kv "q4": want auto, f32, f16 or q8_0`},
		{"BadPrefer", planArgs("10", "10", "--prefer", "kv,speed,chunk"), `unknown dimension "speed"`},
		{"BadExpertCache", planArgs("10", "10", "--expert-cache", "sometimes"), `expert_cache "sometimes"`},
		{"ChunkBelowMin", planArgs("10", "10", "--max-chunk", "100"), "max_chunk 100 is below the backend's smallest chunk 512"},
		{"Argument", append(planArgs("10", "10"), "extra"), `unexpected argument "extra"`},
	} {
		t.Run("Usage"+tc.name, func(t *testing.T) {
			code, _, errs := runCmd(t, tc.args...)
			if code != 2 || !strings.Contains(errs, tc.says) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, errs, tc.says)
			}
		})
	}

	t.Run("BadProfileFile", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "p.json")
		if err := os.WriteFile(path, []byte(`{"context_length": 0}`), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errs := runCmd(t, "plan", "--profile", path, "--prompt-tokens", "1", "--max-tokens", "1", "--gpu-limit-mib", "100")
		if code != 1 || !strings.Contains(errs, path) || !strings.Contains(errs, "context_length must be > 0") {
			t.Errorf("exit %d, stderr %q; want 1 naming the file and the field", code, errs)
		}
	})
}

// TestPlanFromModel profiles a GGUF through the engine instead of a profile file.
func TestPlanFromModel(t *testing.T) {
	model := fixtures.Path(t, "models", "tiny-qwen3next-IQ2_XXS.gguf")
	code, out, errs := runCmd(t, "plan", "--model", model, "--prompt-tokens", "100", "--max-tokens", "28",
		"--gpu-limit-mib", "100000", "--json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errs)
	}
	var p planner.Plan
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	// One attention layer of one KV head of 256 key and 256 value floats: 2 KiB per position.
	if p.Context != 128 || p.Breakdown.KVBytes < 128*2048 {
		t.Errorf("plan for 128 positions: context %d, kv bytes %d", p.Context, p.Breakdown.KVBytes)
	}
	if code, _, errs := runCmd(t, "plan", "--model", model, "--profile", redLiteProfile, "--prompt-tokens", "1", "--max-tokens", "1"); code != 2 || !strings.Contains(errs, "exactly one of --model and --profile") {
		t.Errorf("both --model and --profile: exit %d, %s", code, errs)
	}
}

// TestPlanPoolCommand: with --concurrency the command plans a batching worker's pool and
// says how it holds the experts: all resident at Red Lite's 24 GiB limit, a bounded cache at
// 2/3 of a 16 GiB Mac's memory, and the JSON carries both.
func TestPlanPoolCommand(t *testing.T) {
	pool := func(limit string, extra ...string) []string {
		return append([]string{"plan", "--profile", redLiteProfile, "--gpu-limit-mib", limit, "--concurrency", "4"}, extra...)
	}
	for _, tc := range []struct {
		limit string
		want  []string
	}{
		{"21741", []string{"pool:        4 slots, f32 KV, 212 blocks of 256 positions (13,568 per slot", "experts fully resident",
			"every expert resident leaves each slot ≥ 4,096 positions"}},
		{"10922", []string{"pool:        4 slots, f16 KV, 64 blocks of 256 positions (4,096 per slot", "bounded expert cache of 8,659 MiB",
			"50% of 17,316 MiB of experts; at least 361 MiB, one layer", "need:        10,922 MiB"}},
	} {
		code, out, errs := runCmd(t, pool(tc.limit)...)
		if code != 0 {
			t.Fatalf("%s MiB: exit %d, stderr %s", tc.limit, code, errs)
		}
		for _, want := range tc.want {
			if !strings.Contains(out, want) {
				t.Errorf("%s MiB: output lacks %q:\n%s", tc.limit, want, out)
			}
		}
	}
	code, out, errs := runCmd(t, pool("10922", "--json")...)
	var p planner.Pool
	if code != 0 || json.Unmarshal([]byte(out), &p) != nil || p.Residency != planner.ResidencyCache || p.ExpertCacheBytes != 8659*planner.MiB || p.Slots != 4 {
		t.Errorf("--json: exit %d, %+v, stderr %s", code, p, errs)
	}
	code, _, errs = runCmd(t, pool("2048")...)
	if code == 0 || !strings.Contains(errs, "smallest expert cache") || !strings.Contains(errs, "REDLITE_CONCURRENCY") {
		t.Errorf("2,048 MiB: exit %d, stderr %s; want the numbers of the smallest pools", code, errs)
	}
}
