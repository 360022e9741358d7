package synth

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// The built-in default model: the tiny-qwen3 shape (2 layers, 512-token vocabulary, ChatML
// template, 1.8 MB in Q8_0) with random weights. It exists so that redlited and redlite demo
// run on a fresh machine; its output is meaningless text.
const (
	defaultModelShape = "tiny-qwen3"
	defaultModelFile  = "tiny-qwen3-q8_0.gguf"
	defaultModelSeed  = 1
)

// DefaultModel returns the path of the built-in default model, writing it to cacheDir on
// first use. The file depends only on the shape, type and seed, so a copy written by another
// version is the same model.
func DefaultModel(cacheDir string) (string, error) {
	path := filepath.Join(cacheDir, defaultModelFile)
	if st, err := os.Stat(path); err == nil && st.Mode().IsRegular() {
		return path, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("default model: %w (set REDLITE_CACHE_DIR or REDLITE_MODEL)", err)
	}
	// WriteFile renames a finished temporary file into place: two daemons starting at once
	// both write the same bytes, and neither sees a partial file.
	if _, err := WriteFile(context.Background(), path, defaultModelShape, Options{Type: Q8_0, Seed: defaultModelSeed}); err != nil {
		return "", fmt.Errorf("default model: %w", err)
	}
	return path, nil
}
