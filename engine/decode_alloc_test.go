package engine

import (
	"context"
	"testing"

	"github.com/redlite/batch/engine/ml"
)

// BenchmarkDecodeSteadyState decodes token after token on both fixture architectures with
// -benchmem in mind: once the first passes have filled the backend's arena, a decode step
// takes every intermediate's buffer from it, so what remains per token is the pass's
// bookkeeping (recorded operations, closures, the logits copied out), not its tensors.
func BenchmarkDecodeSteadyState(b *testing.B) {
	for _, name := range []string{"tiny-qwen3-Q8_0", "tiny-qwen3next-IQ2_XXS"} {
		b.Run(name, func(b *testing.B) {
			m := loadModel(b, name+".gguf")
			const capacity = 2048
			ctx := context.Background()
			open := func() *Session {
				s, err := m.NewSession(SessionOptions{Context: capacity, KV: ml.F32})
				if err != nil {
					b.Fatal(err)
				}
				for range 4 { // warm the arena
					if _, err := s.Decode(ctx, 7); err != nil {
						b.Fatal(err)
					}
				}
				return s
			}
			s := open()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if s.Pos() == capacity {
					b.StopTimer()
					s.Close()
					s = open()
					b.StartTimer()
				}
				if _, err := s.Decode(ctx, 7); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			s.Close()
		})
	}
}
