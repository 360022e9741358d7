package main

import (
	"runtime"
	"strings"
	"testing"

	"github.com/redlite/batch/internal/fixtures"
)

// TestBackendFlag: the engine commands take --backend; a bad name is a usage error and
// metal off a Mac says what to use instead.
func TestBackendFlag(t *testing.T) {
	model := fixtures.Path(t, "models", "tiny-qwen3-Q8_0.gguf")
	for _, args := range [][]string{{"generate", "--prompt", "Hi"}, {"logits", "--prompt", "Hi", "--out", t.TempDir() + "/x"}, {"bench"}} {
		cmd := args[0]
		code, _, errs := redlite(t, append(args, "--model", model, "--backend", "gpu")...)
		if code != 2 || !strings.Contains(errs, `--backend: unknown backend "gpu"`) {
			t.Errorf("%s --backend gpu: exit %d, %s", cmd, code, errs)
		}
	}
	code, out, errs := redlite(t, "generate", "--model", model, "--backend", "cpu", "--prompt", "Hi", "--max-tokens", "2")
	if code != 0 || !strings.Contains(errs, "(cpu,") {
		t.Errorf("generate --backend cpu: exit %d, %s%s", code, out, errs)
	}
	if runtime.GOOS == "darwin" {
		return
	}
	code, _, errs = redlite(t, "generate", "--model", model, "--backend", "metal", "--prompt", "Hi")
	if code != 1 || !strings.Contains(errs, "the metal backend needs macOS; use metal-harness") {
		t.Errorf("generate --backend metal on %s: exit %d, %s", runtime.GOOS, code, errs)
	}
}

// TestHostileModel: a model whose header asks for 2^30 blocks is a bad --model (exit 2)
// that names the key, not an out-of-memory crash.
func TestHostileModel(t *testing.T) {
	hostile := fixtures.Edit(t, fixtures.Path(t, "models", "tiny-qwen3-Q4_K_M.gguf"), nil, map[string]any{"qwen3.block_count": uint32(1 << 30)})
	code, _, errs := redlite(t, "generate", "--model", hostile, "--backend", "cpu", "--prompt", "Hi", "--max-tokens", "2")
	if code != 2 || !strings.Contains(errs, "block_count = 1073741824 exceeds") {
		t.Errorf("exit %d, %s; want exit 2 naming block_count", code, errs)
	}
}
