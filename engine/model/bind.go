package model

import (
	"errors"
	"fmt"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
)

// Binder looks weights up by GGUF tensor name, checks their shapes and binds them on a
// backend. It collects every problem instead of stopping at the first, so a broken file
// reports all missing or mis-shaped tensors at once; Err returns them.
type Binder struct {
	Arch string
	File *gguf.File
	B    ml.Backend
	errs []error
	// mapping is the file's tensor section wrapped by the backend once: every weight is an
	// offset into it.
	mapping ml.Mapping
}

// Weight binds tensor name with GGUF dims want (ne0 first). A nil want skips the shape check.
func (b *Binder) Weight(name string, want ...int) ml.Weight {
	t, ok := b.File.Tensor(name)
	if !ok {
		b.errs = append(b.errs, fmt.Errorf("%s: missing tensor %s", b.Arch, name))
		return nil
	}
	dims := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		dims[i] = int(d)
	}
	if want != nil && !sameDims(dims, want) {
		b.errs = append(b.errs, fmt.Errorf("%s: tensor %s has shape %v, want %v", b.Arch, name, dims, want))
		return nil
	}
	if b.mapping == nil {
		m, err := b.B.Map(b.File.TensorSection())
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s: map the tensor data: %w", b.Arch, err))
			return nil
		}
		b.mapping = m
	}
	w, err := b.B.Weight(b.mapping, name, t.Type, dims, int64(t.Offset))
	if err != nil {
		b.errs = append(b.errs, err)
		return nil
	}
	return w
}

// Optional binds name if the file has it, else returns nil.
func (b *Binder) Optional(name string, want ...int) ml.Weight {
	if _, ok := b.File.Tensor(name); !ok {
		return nil
	}
	return b.Weight(name, want...)
}

// Layer binds "blk.<layer>.<suffix>".
func (b *Binder) Layer(layer int, suffix string, want ...int) ml.Weight {
	return b.Weight(fmt.Sprintf("blk.%d.%s", layer, suffix), want...)
}

// Int reads the hyperparameter "<arch>.<key>".
func (b *Binder) Int(key string) int {
	n, err := b.File.Int(b.Arch + "." + key)
	if err != nil {
		b.errs = append(b.errs, err)
	}
	return int(n)
}

// IntOr reads "<arch>.<key>", or def when absent.
func (b *Binder) IntOr(key string, def int) int {
	n, err := b.File.IntOr(b.Arch+"."+key, int64(def))
	if err != nil {
		b.errs = append(b.errs, err)
	}
	return int(n)
}

// FloatOr reads "<arch>.<key>", or def when absent.
func (b *Binder) FloatOr(key string, def float64) float32 {
	x, err := b.File.FloatOr(b.Arch+"."+key, def)
	if err != nil {
		b.errs = append(b.errs, err)
	}
	return float32(x)
}

// Check records a failed condition on the hyperparameters.
func (b *Binder) Check(ok bool, format string, args ...any) {
	if !ok {
		b.errs = append(b.errs, fmt.Errorf("%s: %s", b.Arch, fmt.Sprintf(format, args...)))
	}
}

// Err returns every problem found, or nil.
func (b *Binder) Err() error { return errors.Join(b.errs...) }

func sameDims(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
