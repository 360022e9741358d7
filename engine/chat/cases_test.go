package chat

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/redlite/batch/engine/chat/jinja"
	"github.com/redlite/batch/internal/fixtures"
)

// templateCases is ../shared/fixtures/templates/cases.json: real Qwen-family templates and
// what Python's jinja2, set up as transformers sets it up, renders for each case.
type templateCases struct {
	Templates map[string]struct {
		File      string            `json:"file"`
		SHA256    string            `json:"sha256"`
		Variables map[string]string `json:"variables"`
	} `json:"templates"`
	Cases []struct {
		Name string `json:"name"`
		Conversation
		Expected map[string]struct {
			Output *string `json:"output"`
			Error  *struct {
				Type, Message string
			} `json:"error"`
		} `json:"expected"`
	} `json:"cases"`
}

func loadCases(t testing.TB) (templateCases, map[string]*Template) {
	t.Helper()
	dir := fixtures.Path(t, "templates")
	raw, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tc templateCases
	if err := json.Unmarshal(raw, &tc); err != nil {
		t.Fatal(err)
	}
	tmpls := map[string]*Template{}
	for name, spec := range tc.Templates {
		src, err := os.ReadFile(filepath.Join(dir, spec.File))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(src); hex.EncodeToString(sum[:]) != spec.SHA256 {
			t.Fatalf("%s: sha256 differs from cases.json", spec.File)
		}
		tmpl, err := New(name, string(src))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tmpl.BOSToken, tmpl.EOSToken = spec.Variables["bos_token"], spec.Variables["eos_token"]
		tmpls[name] = tmpl
	}
	if len(tmpls) < 6 || len(tc.Cases) < 21 {
		t.Fatalf("cases.json has %d templates and %d cases, want at least 6 and 21", len(tmpls), len(tc.Cases))
	}
	return tc, tmpls
}

// TestTemplateCases renders every case with every template and compares byte for byte with
// jinja2's rendering; where jinja2 raised, the render must fail with a template error.
func TestTemplateCases(t *testing.T) {
	tc, tmpls := loadCases(t)
	names := make([]string, 0, len(tmpls))
	for n := range tmpls {
		names = append(names, n)
	}
	sort.Strings(names)
	checked := 0
	for _, c := range tc.Cases {
		for _, name := range names {
			want, ok := c.Expected[name]
			if !ok {
				continue
			}
			checked++
			got, err := tmpls[name].Render(c.Conversation)
			switch {
			case want.Error != nil:
				var je *jinja.Error
				if err == nil {
					t.Errorf("%s/%s: rendered, want jinja2's %s: %s", c.Name, name, want.Error.Type, want.Error.Message)
				} else if !errors.Is(err, ErrTemplate) || !errors.As(err, &je) {
					t.Errorf("%s/%s: error %v is not a template error", c.Name, name, err)
				}
			case err != nil:
				t.Errorf("%s/%s: %v", c.Name, name, err)
			case got != *want.Output:
				i := 0
				for i < len(got) && i < len(*want.Output) && got[i] == (*want.Output)[i] {
					i++
				}
				t.Errorf("%s/%s: differs at byte %d:\n got …%q\nwant …%q", c.Name, name, i,
					got[max(0, i-30):min(len(got), i+50)], (*want.Output)[max(0, i-30):min(len(*want.Output), i+50)])
			}
		}
	}
	if checked != len(tc.Cases)*len(tmpls) {
		t.Errorf("checked %d renderings, want %d", checked, len(tc.Cases)*len(tmpls))
	}
}

// BenchmarkRenderQwen3 renders the Qwen3 template for a system message and a 64 KiB document.
func BenchmarkRenderQwen3(b *testing.B) {
	_, tmpls := loadCases(b)
	conv := Conversation{Messages: Messages(Message{"system", "Be brief."}, Message{"user", strings.Repeat("The quarterly report says revenue grew. ", 1600)}), AddGenerationPrompt: true}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tmpls["qwen3"].Render(conv); err != nil {
			b.Fatal(err)
		}
	}
}
