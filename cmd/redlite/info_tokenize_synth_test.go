package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/modelinfo"
	"github.com/redlite/batch/internal/fixtures"
)

// redlite runs the CLI in-process and returns its exit code and output.
func redlite(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestInfoCommand(t *testing.T) {
	model := fixtures.Path(t, "models", "tiny-qwen3next-Q8_0.gguf")
	t.Run("Text", func(t *testing.T) {
		code, out, errs := redlite(t, "info", model)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		for _, want := range []string{"architecture:   qwen3next", "file type:      Q8_0 (7)",
			"ssm.state_size", "routed_experts", "recurrent state per sequence  823,296 bytes",
			"KV per position               2,048 bytes f32, 1,024 bytes f16", "chat template:  yes", "\nbackend: "} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("JSON", func(t *testing.T) {
		for _, args := range [][]string{{"info", model, "--json"}, {"info", "--json", model}} {
			code, out, errs := redlite(t, args...)
			if code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, errs)
			}
			var info modelinfo.Info
			if err := json.Unmarshal([]byte(out), &info); err != nil {
				t.Fatal(err)
			}
			if info.Architecture != "qwen3next" || info.TensorCount != 73 || len(info.Layers) != 4 ||
				info.Hyperparameters["expert_count"] != float64(16) {
				t.Errorf("%v: decoded %+v", args, info)
			}
			var withBackend struct{ Backend string }
			if err := json.Unmarshal([]byte(out), &withBackend); err != nil || withBackend.Backend == "" {
				t.Errorf("%v: backend %q, %v", args, withBackend.Backend, err)
			}
		}
	})
	t.Run("Errors", func(t *testing.T) {
		if code, _, errs := redlite(t, "info"); code != 2 || !strings.Contains(errs, "MODEL.gguf") {
			t.Errorf("no model: exit %d, %s", code, errs)
		}
		if code, _, errs := redlite(t, "info", model, "extra"); code != 2 || !strings.Contains(errs, `"extra"`) {
			t.Errorf("extra argument: exit %d, %s", code, errs)
		}
		if code, _, errs := redlite(t, "info", filepath.Join(t.TempDir(), "none.gguf")); code != 1 || !strings.Contains(errs, "none.gguf") {
			t.Errorf("missing file: exit %d, %s", code, errs)
		}
		if code, _, errs := redlite(t, "info", model, "--backend", "gpu"); code != 2 || !strings.Contains(errs, `--backend: unknown backend "gpu"`) {
			t.Errorf("unknown backend: exit %d, %s", code, errs)
		}
	})
}

func TestTokenizeCommand(t *testing.T) {
	dir := fixtures.Dir(t)
	var cases struct {
		Cases []struct {
			Text            string  `json:"text"`
			IDs             []int32 `json:"ids"`
			IDsParseSpecial []int32 `json:"ids_parse_special"`
		} `json:"cases"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "vocab", "tiny-bpe512-tokenize-cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	vocab := filepath.Join(dir, "vocab", "tiny-bpe512-vocab.gguf")
	for i, c := range cases.Cases {
		for _, special := range []bool{false, true} {
			want := c.IDs
			args := []string{"tokenize", "--model", vocab, "--text", c.Text}
			if special {
				want = c.IDsParseSpecial
				args = append(args, "--parse-special")
			}
			code, out, errs := redlite(t, args...)
			if code != 0 {
				t.Fatalf("case %d: exit %d: %s", i, code, errs)
			}
			var got []int32
			if s := strings.TrimSpace(out); s != "" {
				for _, f := range strings.Split(s, ",") {
					n, err := strconv.Atoi(f)
					if err != nil {
						t.Fatalf("case %d: output %q", i, out)
					}
					got = append(got, int32(n))
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("case %d %q (parse special %v): ids %v, llama.cpp %v", i, c.Text, special, got, want)
			}
		}
	}

	t.Run("JSONFileAndStdin", func(t *testing.T) {
		text := "<|im_start|>user\nHello<|im_end|>"
		path := filepath.Join(t.TempDir(), "in.txt")
		os.WriteFile(path, []byte(text), 0o600)
		code, out, errs := redlite(t, "tokenize", "--model", vocab, "--file", path, "--parse-special", "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var got struct {
			IDs    []int32  `json:"ids"`
			Tokens []string `json:"tokens"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if len(got.IDs) != len(got.Tokens) || got.IDs[0] != 510 || got.Tokens[0] != "<|im_start|>" || got.IDs[len(got.IDs)-1] != 511 {
			t.Fatalf("got %+v", got)
		}
		var stdout, stderr bytes.Buffer
		if err := tokenizeCmd([]string{"--model", vocab, "--parse-special", "--json"}, strings.NewReader(text), &stdout, &stderr); err != nil {
			t.Fatal(err)
		}
		if stdout.String() != out {
			t.Fatalf("stdin gave %s, --file gave %s", stdout.String(), out)
		}
	})
	t.Run("EmptyText", func(t *testing.T) {
		code, out, _ := redlite(t, "tokenize", "--model", vocab, "--text", "", "--json")
		if code != 0 || strings.TrimSpace(out) != `{"ids":[],"tokens":[]}` {
			t.Fatalf("exit %d, %q", code, out)
		}
	})
	t.Run("Errors", func(t *testing.T) {
		if code, _, errs := redlite(t, "tokenize", "--text", "x"); code != 2 || !strings.Contains(errs, "--model") {
			t.Errorf("no model: exit %d, %s", code, errs)
		}
		if code, _, errs := redlite(t, "tokenize", "--model", vocab, "--text", "x", "--file", "y"); code != 2 || !strings.Contains(errs, "--file") {
			t.Errorf("both inputs: exit %d, %s", code, errs)
		}
	})
}

func TestSynthCommand(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "tiny.gguf")
	code, stdout, errs := redlite(t, "synth", "--shape", "tiny-qwen3", "--type", "q8_0", "--seed", "5", "--out", out, "--quiet")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(stdout, "wrote "+out) {
		t.Errorf("stdout %q", stdout)
	}
	f, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, err := modelinfo.Inspect(f)
	if err != nil {
		t.Fatal(err)
	}
	// The same size as the fixture's llama-quantize Q8_0 file: same layout, same metadata.
	if info.FileType.Name != "Q8_0" || info.FileBytes != 1_830_176 || info.TensorCount != 24 {
		t.Errorf("file type %s, %d bytes, %d tensors", info.FileType.Name, info.FileBytes, info.TensorCount)
	}

	t.Run("VocabFromFile", func(t *testing.T) {
		vocab := filepath.Join(fixtures.Dir(t), "vocab", "tiny-bpe512-vocab.gguf")
		out := filepath.Join(dir, "tiny-vocab.gguf")
		if code, _, errs := redlite(t, "synth", "--shape", "tiny-qwen3", "--vocab", vocab, "--out", out, "--quiet"); code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
	})
	t.Run("List", func(t *testing.T) {
		code, stdout, _ := redlite(t, "synth", "--list")
		if code != 0 || !strings.Contains(stdout, "qwen3-0.6b") || !strings.Contains(stdout, "q4_k_m") {
			t.Fatalf("exit %d:\n%s", code, stdout)
		}
	})
	t.Run("Errors", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"synth", "--out", out}, "--shape"},
			{[]string{"synth", "--shape", "tiny-qwen3"}, "--out"},
			{[]string{"synth", "--shape", "huge", "--out", out}, "unknown shape"},
			{[]string{"synth", "--shape", "tiny-qwen3", "--type", "q3_k", "--out", out}, "unknown type"},
		} {
			if code, _, errs := redlite(t, tc.args...); code != 2 || !strings.Contains(errs, tc.want) {
				t.Errorf("%v: exit %d, %s", tc.args, code, errs)
			}
		}
		if code, _, errs := redlite(t, "synth", "--shape", "tiny-qwen3", "--vocab", filepath.Join(dir, "none.gguf"), "--out", out); code != 1 || !strings.Contains(errs, "--vocab") {
			t.Errorf("missing vocab: exit %d, %s", code, errs)
		}
	})
}
