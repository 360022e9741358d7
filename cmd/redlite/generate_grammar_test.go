package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/grammar/grammartest"
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
	code, out, errs = redlite(t, "generate", "--model", model, "--raw", "--prompt", "Hi", "--max-tokens", "3", "--logprobs", "2")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 4 || strings.Count(lines[1], `"`) != 6 {
		t.Errorf("--logprobs 2: exit %d, %q, %s", code, out, errs)
	}
}
