package qwen3_test

import (
	"testing"

	"github.com/redlite/batch/engine"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/internal/modeltest"
)

// parity is modeltest.Parity: every architecture's files are held to the same bounds.
func parity(t *testing.T, model string) { modeltest.Parity(t, model) }

func prefill(t *testing.T, m *engine.Model, ids []int32, chunk int, kv ml.DType) []float32 {
	t.Helper()
	return modeltest.Prefill(t, m, ids, chunk, kv)
}
