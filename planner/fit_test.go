package planner

import (
	"errors"
	"math"
	"testing"

	"github.com/redlite/batch/engine/ml"
)

// TestFitCalibration fits constants to allocations made by a known calibration and checks
// that it recovers them and that its plans cover every measurement.
func TestFitCalibration(t *testing.T) {
	p := redLiteProfile(t)
	truth := RedLiteMetal()
	// A backend that also copies the cache for attention (the CPU backend does).
	truth.AttentionScratchBytesPerPositionF32 = 2048
	truth.AttentionScratchBytesPerPositionF16 = 6144
	var ms []Measurement
	for _, ctx := range []int{4096, 8192, 16384} {
		for _, chunk := range []int{512, 1024, 2048} {
			for _, kv := range []ml.DType{ml.F32, ml.F16} {
				b, err := Estimate(Config{Context: ctx, Slots: 1, KV: kv, Chunk: chunk, Residency: ResidencyFull}, p, truth)
				if err != nil {
					t.Fatal(err)
				}
				ms = append(ms, Measurement{Context: ctx, Chunk: chunk, KV: kv, AllocatedBytes: b.TotalBytes})
			}
		}
	}
	start := truth
	start.BaseMiB, start.ScratchMiBPerChunkToken = 0, 0
	got, err := FitCalibration(start, p, ms)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != StatusMeasured || math.Abs(got.BaseMiB-truth.BaseMiB) > 0.01 ||
		math.Abs(got.ScratchMiBPerChunkToken-truth.ScratchMiBPerChunkToken) > 1e-4 {
		t.Errorf("fit base %v MiB, scratch %v MiB/token; want %v, %v", got.BaseMiB, got.ScratchMiBPerChunkToken, truth.BaseMiB, truth.ScratchMiBPerChunkToken)
	}
	if math.Abs(got.AttentionScratchBytesPerPositionF32-2048) > 8 || math.Abs(got.AttentionScratchBytesPerPositionF16-6144) > 8 {
		t.Errorf("fit attention scratch %v (f32), %v (f16) bytes per position; want 2048, 6144",
			got.AttentionScratchBytesPerPositionF32, got.AttentionScratchBytesPerPositionF16)
	}
	for _, m := range ms {
		b, err := Estimate(Config{Context: m.Context, Slots: 1, KV: m.KV, Chunk: m.Chunk, Residency: ResidencyFull}, p, got)
		if err != nil {
			t.Fatal(err)
		}
		if b.TotalBytes < m.AllocatedBytes {
			t.Errorf("%+v: predicted %d bytes, below the measured %d", m, b.TotalBytes, m.AllocatedBytes)
		}
	}

	t.Run("NeedsBothChunks", func(t *testing.T) {
		if _, err := FitCalibration(start, p, ms[:2]); !errors.Is(err, ErrBadMeasurements) {
			t.Errorf("only MinChunk measurements: %v", err)
		}
		var big []Measurement
		for _, m := range ms {
			if m.Chunk > start.MinChunk {
				big = append(big, m)
			}
		}
		if _, err := FitCalibration(start, p, big); !errors.Is(err, ErrBadMeasurements) {
			t.Errorf("no MinChunk measurement: %v", err)
		}
		if _, err := FitCalibration(start, p, []Measurement{{Context: 100, Chunk: 512, KV: ml.F32}}); !errors.Is(err, ErrBadMeasurements) {
			t.Errorf("chunk above context: %v", err)
		}
	})
}

func TestDefaultCalibration(t *testing.T) {
	for backend, want := range map[string]string{
		"metal":         RedLiteMetal().Name,
		"metal-harness": RedLiteMetal().Name,
		"cpu":           CPUPlaceholder().Name,
		"":              CPUPlaceholder().Name,
	} {
		if got := DefaultCalibration(backend).Name; got != want {
			t.Errorf("DefaultCalibration(%q) = %s, want %s", backend, got, want)
		}
	}
}
