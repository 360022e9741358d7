package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/redlite/batch/jobs"
)

func TestCLIHelpAndProgress(t *testing.T) {
	t.Run("Version", func(t *testing.T) {
		code, out, _ := redlite(t, "--version")
		if code != 0 || !regexp.MustCompile(`^redlite \S+ \(commit \S+, go1\.[0-9.]+, [a-z0-9]+/[a-z0-9]+\)\n$`).MatchString(out) {
			t.Errorf("redlite --version: exit %d, %q", code, out)
		}
	})
	t.Run("EnqueueHelpListsBothTypes", func(t *testing.T) {
		code, _, errs := redlite(t, "enqueue", "--help")
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		for _, want := range []string{"redlite enqueue summarize [flags]", "-input-file", "-style",
			"redlite enqueue generate [flags]", "-temperature", "-prompt", "-user"} {
			if !strings.Contains(errs, want) {
				t.Errorf("enqueue --help lacks %q:\n%s", want, errs)
			}
		}
	})
	t.Run("NumericDefaultsOnce", func(t *testing.T) {
		_, _, errs := redlite(t, "enqueue", "generate", "-h")
		for _, line := range strings.Split(errs, "\n") {
			if strings.Count(line, "(default") > 1 || strings.Contains(line, "(default -1)") {
				t.Errorf("help line with a doubled or sentinel default: %q", line)
			}
		}
		if !strings.Contains(errs, "(default 0.7)") {
			t.Errorf("the temperature's default is not stated:\n%s", errs)
		}
	})
	t.Run("SynthProgressOnPipe", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if isTerminal(w) {
			t.Error("a pipe is taken for a terminal")
		}
		w.Close()
		code, _, errs := redlite(t, "synth", "--shape", "tiny-qwen3next", "--out", filepath.Join(t.TempDir(), "m.gguf"))
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		lines := strings.Count(errs, "\n")
		if lines > 11 || strings.Contains(errs, "\r") {
			t.Errorf("synth on a non-terminal wrote %d lines (want at most one per tenth, no carriage returns):\n%s", lines, errs)
		}
	})
	t.Run("WaitProgressShowsElapsed", func(t *testing.T) {
		var buf bytes.Buffer
		p := newProgressLine(&buf)
		p.show(jobs.Progress{Phase: jobs.PhasePrefill, PromptTokens: 4000, Prefilled: 300})
		p.show(jobs.Progress{Phase: jobs.PhaseDecode, PromptTokens: 4000, Prefilled: 4000, Generated: 2, MaxTokens: 8})
		p.end()
		want := regexp.MustCompile(`(?m)^prefill 300/4000 prompt tokens, [0-9.]+m?s elapsed\ndecode 2/8 tokens, [0-9.]+m?s elapsed\n$`)
		if !want.MatchString(buf.String()) {
			t.Errorf("progress lines:\n%s", buf.String())
		}
	})
}
