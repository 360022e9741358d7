package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/redlite/batch/internal/fixtures"
)

func TestBench(t *testing.T) {
	model := fixtures.Path(t, "models", "tiny-qwen3-Q8_0.gguf")
	code, out, errs := runCmd(t, "bench", "--model", model, "--threads", "2", "-p", "32", "-n", "8", "-r", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "| model") || !strings.Contains(lines[2], "| pp32 |") || !strings.Contains(lines[3], " tg8 |") {
		t.Errorf("table:\n%s", out)
	}
	if !strings.Contains(errs, "cpu kernels: ") {
		t.Errorf("no kernel line on stderr: %q", errs)
	}
	// A list of thread counts runs every test at each.
	code, out, errs = runCmd(t, "bench", "--model", model, "--threads", "1,2", "-p", "16", "-n", "4", "-r", "1", "--json")
	if code != 0 {
		t.Fatalf("--threads 1,2: exit %d: %s", code, errs)
	}
	var byThreads []benchResult
	if err := json.Unmarshal([]byte(out), &byThreads); err != nil {
		t.Fatal(err)
	}
	if len(byThreads) != 4 || byThreads[0].Threads != 1 || byThreads[1].Threads != 1 || byThreads[2].Threads != 2 || byThreads[3].Test != "tg4" || byThreads[3].Threads != 2 {
		t.Errorf("--threads 1,2: %+v", byThreads)
	}
	if code, _, errs = runCmd(t, "bench", "--model", model, "--threads", "2,x"); code != 2 || !strings.Contains(errs, "--threads") {
		t.Errorf("--threads 2,x: exit %d: %s", code, errs)
	}
	code, out, errs = runCmd(t, "bench", "--model", model, "-p", "16", "-n", "0", "-r", "1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rs []benchResult
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Test != "pp16" || rs[0].Tokens != 16 || rs[0].TokensPerS <= 0 || len(rs[0].Samples) != 1 || rs[0].Model != "qwen3" {
		t.Errorf("json: %+v", rs)
	}
	// Sequences run together: per N one prefill and one decode row, the aggregate rate
	// and each sequence's share.
	code, out, errs = runCmd(t, "bench", "--model", model, "-p", "16", "-n", "4", "-r", "1", "--npl", "1,3", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	rs = nil
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 || rs[0].Test != "pp16" || rs[1].Test != "tg4" || rs[2].Parallel != 3 || rs[3].Parallel != 3 || rs[3].Test != "tg4" {
		t.Fatalf("--npl rows: %+v", rs)
	}
	for _, r := range rs {
		if r.TokensPerS <= 0 || math.Abs(r.PerSequence*float64(r.Parallel)-r.TokensPerS) > 1e-6*r.TokensPerS {
			t.Errorf("--npl row %s parallel %d: %g t/s, %g per sequence", r.Test, r.Parallel, r.TokensPerS, r.PerSequence)
		}
	}
	// At a depth the rows say so, as llama-bench's; the depth is restored for every run.
	code, out, errs = runCmd(t, "bench", "--model", model, "-p", "8", "-n", "4", "-d", "24", "-r", "2", "--json")
	if code != 0 {
		t.Fatalf("-d: exit %d: %s", code, errs)
	}
	rs = nil
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Test != "pp8 @ d24" || rs[1].Test != "tg4 @ d24" || rs[0].Depth != 24 || len(rs[1].Samples) != 2 || rs[1].TokensPerS <= 0 {
		t.Errorf("-d rows: %+v", rs)
	}
	if code, _, errs := runCmd(t, "bench", "--model", model, "--dot", "fp8"); code != 2 || !strings.Contains(errs, "--dot") {
		t.Errorf("bad --dot: exit %d, %s", code, errs)
	}
	if code, _, errs := runCmd(t, "bench", "--model", model, "-d", "-1"); code != 2 || !strings.Contains(errs, "-d") {
		t.Errorf("bad -d: exit %d, %s", code, errs)
	}
	if code, _, errs := runCmd(t, "bench", "--model", model, "--npl", "0,2"); code != 2 || !strings.Contains(errs, "--npl") {
		t.Errorf("bad --npl: exit %d, %s", code, errs)
	}
	if code, _, errs := runCmd(t, "bench", "--model", model, "--kv", "q8"); code != 2 || !strings.Contains(errs, "--kv") {
		t.Errorf("bad --kv: exit %d, %s", code, errs)
	}
}
