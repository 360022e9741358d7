package gguf_test

// The tests that read the fixtures live in package gguf_test: the fixtures package builds
// some of its files with this package's writer.

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/modelinfo"
	"github.com/redlite/batch/engine/quant"
	"github.com/redlite/batch/internal/fixtures"
)

// TestFixtureModels reads every fixture model and checks each tensor's name, type, shape and
// size against the manifest llama.cpp's tooling wrote.
func TestFixtureModels(t *testing.T) {
	raw, err := os.ReadFile(fixtures.Path(t, "models", "tensor-types.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest map[string]struct {
		File     string `json:"file"`
		Arch     string `json:"arch"`
		Size     int64  `json:"size_bytes"`
		FileType int64  `json:"general.file_type"`
		Tensors  []struct {
			Name  string   `json:"name"`
			Type  string   `json:"type"`
			Ne    []uint64 `json:"ne"`
			Bytes uint64   `json:"n_bytes"`
		} `json:"tensors"`
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest) == 0 {
		t.Fatal("empty manifest")
	}
	for name, m := range manifest {
		t.Run(name, func(t *testing.T) {
			f, err := gguf.Open(fixtures.Path(t, "models", m.File))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Size() != m.Size {
				t.Errorf("size %d, want %d", f.Size(), m.Size)
			}
			if arch, err := f.Architecture(); err != nil || arch != m.Arch {
				t.Errorf("architecture %q (%v), want %q", arch, err, m.Arch)
			}
			if ft, err := f.Int("general.file_type"); err != nil || ft != m.FileType {
				t.Errorf("file_type %d (%v), want %d", ft, err, m.FileType)
			}
			if len(f.Tensors) != len(m.Tensors) {
				t.Fatalf("%d tensors, want %d", len(f.Tensors), len(m.Tensors))
			}
			for _, want := range m.Tensors {
				got, ok := f.Tensor(want.Name)
				if !ok {
					t.Errorf("missing tensor %s", want.Name)
					continue
				}
				if got.Type.String() != want.Type || !reflect.DeepEqual(got.Dims, want.Ne) || got.Size != want.Bytes {
					t.Errorf("%s: %s %v %d bytes, want %s %v %d", want.Name, got.Type, got.Dims, got.Size, want.Type, want.Ne, want.Bytes)
				}
				if n := len(f.Data(got)); uint64(n) != want.Bytes {
					t.Errorf("%s: data view of %d bytes", want.Name, n)
				}
			}
			if _, err := f.Strings("tokenizer.ggml.tokens"); err != nil {
				t.Error(err)
			}
		})
	}
}

// FuzzParse: every input is parsed, and what parses is summarized (modelinfo.Inspect, what
// the planner reads), without a panic, in under fuzzRunLimit and fuzzAllocLimit, or is an
// error wrapping gguf.ErrFormat. The corpus starts from valid files and from headers with
// huge counts (hostileHeaders).
// A run of FuzzParse may take fuzzRunLimit and allocate fuzzAllocLimit: an input of a few
// bytes that asks for gigabytes (a count of 2^62, say) must be refused, not honoured. The
// time bound is generous (a parse takes microseconds); it catches loops as long as a count.
const (
	fuzzRunLimit   = time.Second
	fuzzAllocLimit = 256 << 20
)

func FuzzParse(f *testing.F) {
	w := gguf.NewWriter()
	w.Set("general.architecture", "qwen3")
	w.Set("a", []int32{1, 2})
	w.Set("s", []string{"x"})
	_ = w.AddTensorBytes("t", quant.Q8_0, []uint64{32}, make([]byte, 34))
	var buf bytes.Buffer
	_, _ = w.WriteTo(&buf)
	f.Add(buf.Bytes())
	if dir, ok := fixtures.Find(); ok {
		if b, err := os.ReadFile(filepath.Join(dir, "vocab", "tiny-bpe512-vocab.gguf")); err == nil {
			f.Add(b)
		}
	}
	for _, b := range hostileHeaders() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		defer func() {
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if n := after.TotalAlloc - before.TotalAlloc; n > fuzzAllocLimit {
				t.Errorf("allocated %d MiB for a %d-byte input", n>>20, len(data))
			}
			if took > fuzzRunLimit {
				t.Errorf("took %v for a %d-byte input", took, len(data))
			}
		}()
		file, err := gguf.Parse(data)
		if err != nil {
			if !errors.Is(err, gguf.ErrFormat) {
				t.Fatalf("error does not wrap gguf.ErrFormat: %v", err)
			}
			return
		}
		for i := range file.Tensors {
			_ = file.Data(&file.Tensors[i])
		}
		for _, kv := range file.KV {
			_ = kv.Value.String()
		}
		_, _ = modelinfo.Inspect(file)
	})
}
