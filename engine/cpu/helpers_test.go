package cpu

import (
	"testing"

	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/quant"
)

// weightOf binds data as a weight, as a model file's tensor would be.
func weightOf(b *Backend, name string, typ quant.Type, dims []int, data []byte) (ml.Weight, error) {
	m, err := b.Map(data)
	if err != nil {
		return nil, err
	}
	return b.Weight(m, name, typ, dims, 0)
}

// values runs what c has recorded and returns x's values.
func values(t testing.TB, c ml.Context, x ml.Tensor) []float32 {
	t.Helper()
	if err := c.Compute(); err != nil {
		t.Fatal(err)
	}
	v, err := c.Read(x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// hostTensor wraps data as a tensor made outside any pass, as a state tensor is.
func hostTensor(data []float32, shape ...int) *tensor {
	if ml.Numel(shape) != len(data) {
		panic("hostTensor: data does not fit the shape")
	}
	return &tensor{shape: shape, data: data, n: len(data)}
}
