package metalkit

import (
	stdcontext "context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/synth"
	"github.com/redlite/batch/metalkit/device"
	"github.com/redlite/batch/metalkit/kernels"
)

// TestCountPasses counts the passes of a layout-only qwen3next-mini on the recording device:
// the decode step reads every weight the token needs once (the dense weights, the routed
// experts' share), so its bytes must lie between the active weights and the whole file.
func TestCountPasses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mini.gguf")
	if _, err := synth.WriteFile(stdcontext.Background(), path, "qwen3next-mini", synth.Options{Type: synth.IQ2_XXS, Layout: true}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	passes, err := CountPasses(stdcontext.Background(), path, CountOptions{Depths: []int{300}, Chunk: 64, KV: ml.F16})
	if err != nil {
		t.Fatal(err)
	}
	if len(passes) != 2 {
		t.Fatalf("%d passes", len(passes))
	}
	decode := passes[1]
	labels := map[string]bool{}
	for _, c := range decode.Counts {
		labels[strings.Fields(c.Label)[0]] = true
	}
	for _, want := range []string{"matvec", "attention", "deltanet"} {
		if !labels[want] {
			t.Errorf("the decode step dispatched no %s kernel: %v", want, labels)
		}
	}
	// qwen3next-mini: 64 experts of which 10 are used, so a token reads well under the file;
	// the output matrix alone (151936 × 2048 Q5_K) is over 200 MB.
	if b := decode.Bytes(); b < 200e6 || b > st.Size() {
		t.Errorf("a decode step moves %d bytes; the file has %d", b, st.Size())
	}
	// Prefill computes the output head for its last token only, and everything else for 64.
	if p := passes[0]; p.FLOPs() < 30*decode.FLOPs() {
		t.Errorf("a 64-token prefill does %d FLOPs, a decode step %d", p.FLOPs(), decode.FLOPs())
	}
	var sb strings.Builder
	WriteRoofline(&sb, passes)
	if !strings.Contains(sb.String(), "| decode @ 300 |") {
		t.Errorf("table:\n%s", sb.String())
	}
}

// BenchmarkEncodeDecodeStep times the host's side of one decode step of qwen3next-mini (the
// graph and the backend encoding every dispatch) on a device that runs nothing.
func BenchmarkEncodeDecodeStep(b *testing.B) {
	path := filepath.Join(b.TempDir(), "mini.gguf")
	if _, err := synth.WriteFile(stdcontext.Background(), path, "qwen3next-mini", synth.Options{Type: synth.IQ2_XXS, Layout: true}); err != nil {
		b.Fatal(err)
	}
	m, err := engine.Load(path, engine.Options{Backend: New(device.NewRecorder(kernels.Source()))})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	const capacity = 4096
	var s *engine.Session
	defer func() { s.Close() }()
	b.ReportAllocs()
	for b.Loop() {
		if s == nil || s.Pos() == capacity {
			if s != nil {
				s.Close()
			}
			if s, err = m.NewSession(engine.SessionOptions{Context: capacity, KV: ml.F16}); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := s.Decode(stdcontext.Background(), 1); err != nil {
			b.Fatal(err)
		}
	}
}
