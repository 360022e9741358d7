package main

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redlite/batch/grammar/grammartest"
	"github.com/redlite/batch/internal/fixtures"
)

// TestGenerateConstrained: on the random-weight fixture the output follows --json-schema,
// --grammar and --regex; a refused keyword is a usage error naming it; --logprobs prints a
// line per token.
func TestGenerateConstrained(t *testing.T) {
	model := fixtures.Path(t, "models", "tiny-qwen3-Q8_0.gguf")
	dir := t.TempDir()
	schema := grammartest.Schemas["person"]
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := []string{"generate", "--model", model, "--raw", "--prompt", "JSON:", "--temperature", "1", "--max-tokens", "1000"}
	code, out, errs := redlite(t, append(base, "--json-schema", write("s.json", schema), "--seed", "5")...)
	if code != 0 || !strings.Contains(errs, "finish: stop") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if err := grammartest.Validate([]byte(schema), []byte(strings.TrimSuffix(out, "\n"))); err != nil {
		t.Error(err)
	}
	code, out, errs = redlite(t, append(base, "--grammar", write("g.gbnf", `root ::= "yes" | "no" | [0-9]{3}`))...)
	if got := strings.TrimSpace(out); code != 0 || !(got == "yes" || got == "no" || len(got) == 3 && strings.Trim(got, "0123456789") == "") {
		t.Errorf("--grammar: exit %d, %q, %s", code, out, errs)
	}
	code, out, errs = redlite(t, append(base, "--regex", `[a-c]{2}-\d`)...)
	if got := strings.TrimSpace(out); code != 0 || len(got) != 4 || strings.Trim(got[:2], "abc") != "" || got[2] != '-' {
		t.Errorf("--regex: exit %d, %q, %s", code, out, errs)
	}
	code, _, errs = redlite(t, append(base, "--json-schema", write("bad.json", `{"type":"string","format":"uri"}`))...)
	if code != 2 || !strings.Contains(errs, `format "uri" is not supported`) {
		t.Errorf("refused keyword: exit %d, %s", code, errs)
	}
}

// TestGenerateLogprobsMatchLogits: each logprob `generate --logprobs` prints is the
// log-softmax of the logits `redlite logits` writes for the prompt and the tokens before it.
func TestGenerateLogprobsMatchLogits(t *testing.T) {
	model := fixtures.Path(t, "models", "tiny-qwen3-Q8_0.gguf")
	code, out, errs := redlite(t, "tokenize", "--model", model, "--text", "Logprobs of")
	if code != 0 {
		t.Fatalf("tokenize: exit %d, %s", code, errs)
	}
	ids := strings.Split(strings.TrimSpace(out), ",")
	prompt := len(ids)
	code, out, errs = redlite(t, "generate", "--model", model, "--raw", "--prompt", "Logprobs of", "--max-tokens", "6",
		"--temperature", "0.9", "--seed", "4", "--logprobs", "2")
	if code != 0 {
		t.Fatalf("generate: exit %d, %s", code, errs)
	}
	// The text (which may hold newlines), then a line per token.
	all := strings.Split(strings.TrimSpace(out), "\n")
	first := len(all)
	for first > 0 && regexp.MustCompile(`^-?[0-9]+\.[0-9]{6} [0-9]+ "`).MatchString(all[first-1]) {
		first--
	}
	lines := all[first:]
	var want []float64
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 3 || strings.Count(l, `"`) != 6 {
			t.Fatalf("logprob line %q", l)
		}
		lp, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, lp)
		ids = append(ids, f[1])
	}
	if len(want) == 0 {
		t.Fatalf("no logprob lines in %q", out)
	}
	bin := filepath.Join(t.TempDir(), "logits.bin")
	if code, _, errs := redlite(t, "logits", "--model", model, "--tokens", strings.Join(ids, ","), "--out", bin); code != 0 {
		t.Fatalf("logits: exit %d, %s", code, errs)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	vocab := len(data) / 4 / len(ids)
	for i, lp := range want {
		row := make([]float64, vocab)
		at := (prompt - 1 + i) * vocab * 4
		for j := range row {
			row[j] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[at+4*j:])))
		}
		id, _ := strconv.Atoi(ids[prompt+i])
		m := slices.Max(row)
		var sum float64
		for _, x := range row {
			sum += math.Exp(x - m)
		}
		if got := row[id] - m - math.Log(sum); math.Abs(got-lp) > 1e-4 {
			t.Errorf("token %d (%d): generate says %v, log-softmax of redlite logits %v", i, id, lp, got)
		}
	}
}
