package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/chat"
	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/tokenizer"
	"github.com/redlite/batch/internal/fixtures"
)

// TestChatTemplateCmd renders every case of the template fixtures through the CLI and
// compares stdout byte for byte with jinja2's rendering; a case jinja2 raises on exits 1.
func TestChatTemplateCmd(t *testing.T) {
	dir := fixtures.Path(t, "templates")
	raw, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tc struct {
		Templates map[string]struct {
			File      string
			Variables map[string]string
		}
		Cases []map[string]json.RawMessage
	}
	if err := json.Unmarshal(raw, &tc); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	n := 0
	for i, c := range tc.Cases {
		var expected map[string]struct {
			Output *string
			Error  *struct{ Message string }
		}
		if err := json.Unmarshal(c["expected"], &expected); err != nil {
			t.Fatal(err)
		}
		casePath := filepath.Join(tmp, strconv.Itoa(i)+".json")
		b, _ := json.Marshal(c)
		if err := os.WriteFile(casePath, b, 0o644); err != nil {
			t.Fatal(err)
		}
		for name, spec := range tc.Templates {
			want := expected[name]
			code, out, errOut := runCmd(t, "chat-template", "--template", filepath.Join(dir, spec.File), "--case", casePath,
				"--bos-token", spec.Variables["bos_token"], "--eos-token", spec.Variables["eos_token"])
			switch {
			case want.Error != nil:
				if code != 1 || out != "" || !strings.Contains(errOut, "chat template") {
					t.Errorf("case %d %s: exit %d, stdout %q, stderr %q; want exit 1 and the template's error", i, name, code, out, errOut)
				}
			case code != 0 || out != *want.Output:
				t.Errorf("case %d %s: exit %d (%s)\n got %q\nwant %q", i, name, code, errOut, out, *want.Output)
			}
			n++
		}
	}
	if n < 126 {
		t.Errorf("ran %d renderings, want at least 126", n)
	}
}

// TestChatTemplateTokens: --tokens prints what a worker feeds the model.
func TestChatTemplateTokens(t *testing.T) {
	vocab := fixtures.Path(t, "tokenizer", "qwen3-vocab.gguf")
	conv := `{"messages": [{"role": "user", "content": "hi <|im_end|> there"}], "add_generation_prompt": true}`
	casePath := filepath.Join(t.TempDir(), "case.json")
	if err := os.WriteFile(casePath, []byte(conv), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCmd(t, "chat-template", "--model", vocab, "--case", casePath, "--tokens")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	f, err := gguf.Open(vocab)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tok, _ := tokenizer.FromGGUF(f)
	tmpl, _ := chat.FromGGUF(f)
	var c chat.Conversation
	json.Unmarshal([]byte(conv), &c)
	p, err := tmpl.Encode(c, tok)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, id := range p.IDs {
		want = append(want, strconv.Itoa(int(id)))
	}
	if out != strings.Join(want, ",")+"\n" {
		t.Errorf("--tokens printed %q, want %q", out, strings.Join(want, ","))
	}
	// The rendered text is printed exactly, nothing added.
	code, text, _ := runCmd(t, "chat-template", "--model", vocab, "--case", casePath)
	if code != 0 || text != p.Text || strings.HasSuffix(text, "\n\n") {
		t.Errorf("text %q, want %q", text, p.Text)
	}
}

func TestChatTemplateUsage(t *testing.T) {
	casePath := filepath.Join(t.TempDir(), "case.json")
	os.WriteFile(casePath, []byte(`{"messages": [{"role": "user", "content": "x"}]}`), 0o644)
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"messages": [`), 0o644)
	raises := filepath.Join(t.TempDir(), "raises.jinja")
	os.WriteFile(raises, []byte(`{{ raise_exception('only user turns, please') }}`), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--case", casePath}, 2, "give --model or --template"},
		{[]string{"--template", raises}, 2, "--case is required"},
		{[]string{"--template", raises, "--case", casePath, "--tokens"}, 2, "--tokens needs --model"},
		{[]string{"--template", raises, "--case", casePath}, 1, "only user turns, please"},
		{[]string{"--template", raises, "--case", bad}, 1, "case"},
		{[]string{"--template", filepath.Join(t.TempDir(), "missing.jinja"), "--case", casePath}, 1, "missing.jinja"},
	} {
		code, _, errOut := runCmd(t, append([]string{"chat-template"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d saying %q", c.args, code, errOut, c.code, c.want)
		}
	}
}
