package model

import (
	"errors"
	"fmt"

	"github.com/redlite/batch/engine/gguf"
	"github.com/redlite/batch/engine/ml"
	"github.com/redlite/batch/engine/modelinfo"
)

// Binder looks weights up by GGUF tensor name, checks their shapes and binds them on a
// backend. It collects every problem instead of stopping at the first, so a broken file
// reports all missing or mis-shaped tensors at once; Err returns them.
type Binder struct {
	Arch string
	File *gguf.File
	B    ml.Backend
	errs []error
	// more counts the problems beyond maxBindErrors, which are not formatted: a hostile
	// file can name thousands of blocks without tensors.
	more int
	// blocks and largest are the file's bounds on block_count and on size
	// hyperparameters (modelinfo.TensorBlocks, LargestDim), computed when first needed.
	blocks, largest int64
	// mapping is the file's tensor section wrapped by the backend once: every weight is an
	// offset into it.
	mapping ml.Mapping
}

// ErrModel matches every error of a model file whose hyperparameters or tensors do not
// make a model of its architecture (gguf.ErrFormat is the file's own format).
var ErrModel = errors.New("invalid model")

// maxBindErrors is how many problems Err spells out.
const maxBindErrors = 20

func (b *Binder) fail(err error) {
	if len(b.errs) >= maxBindErrors {
		b.more++
		return
	}
	b.errs = append(b.errs, err)
}

// Weight binds tensor name with GGUF dims want (ne0 first). A nil want skips the shape check.
func (b *Binder) Weight(name string, want ...int) ml.Weight { return b.bind(name, false, want) }

// Embedding binds the token embedding name. When the file has a separate output matrix
// (output), the embedding is only looked up row by row, and a backend that lays matrices
// out for products at bind time is told so (ml.RowWeights); tied, it is the output matrix
// too and bound as Weight binds it.
func (b *Binder) Embedding(name, output string, want ...int) ml.Weight {
	_, separate := b.File.Tensor(output)
	return b.bind(name, separate, want)
}

func (b *Binder) bind(name string, rowsOnly bool, want []int) ml.Weight {
	t, ok := b.File.Tensor(name)
	if !ok {
		b.fail(fmt.Errorf("%s: missing tensor %s", b.Arch, name))
		return nil
	}
	dims := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		dims[i] = int(d)
	}
	if want != nil && !sameDims(dims, want) {
		b.fail(fmt.Errorf("%s: tensor %s has shape %v, want %v", b.Arch, name, dims, want))
		return nil
	}
	if b.mapping == nil {
		m, err := b.B.Map(b.File.TensorSection())
		if err != nil {
			b.fail(fmt.Errorf("%s: map the tensor data: %w", b.Arch, err))
			return nil
		}
		b.mapping = m
	}
	bind := b.B.Weight
	if rb, ok := b.B.(ml.RowWeights); ok && rowsOnly {
		bind = rb.RowWeight
	}
	w, err := bind(b.mapping, name, t.Type, dims, int64(t.Offset))
	if err != nil {
		b.fail(err)
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

// Every hyperparameter is bounded before anything is sized by it: a count of blocks by the
// blocks the file's tensors name, a size by the largest tensor dimension, the context by
// modelinfo.MaxContextLength. An out-of-bounds value is an error and reads as 0.

// Blocks reads "<arch>.<key>", a number of blocks (block_count), at most the number of
// blocks that the file's tensors belong to.
func (b *Binder) Blocks(key string) int {
	n, err := b.File.Int(b.Arch + "." + key)
	if err != nil {
		b.fail(err)
		return 0
	}
	if b.blocks == 0 {
		b.blocks = int64(modelinfo.TensorBlocks(b.File))
	}
	return b.bounded(key, n, b.blocks, "the number of blocks the file's tensors belong to")
}

// Dim reads "<arch>.<key>", a size (a length, a count of heads or experts), at most the
// largest tensor dimension of the file.
func (b *Binder) Dim(key string) int {
	n, err := b.File.Int(b.Arch + "." + key)
	if err != nil {
		b.fail(err)
		return 0
	}
	return b.bounded(key, n, b.largestDim(), "the largest tensor dimension of the file")
}

// DimOr is Dim, or def when the key is absent.
func (b *Binder) DimOr(key string, def int) int {
	n, err := b.File.IntOr(b.Arch+"."+key, int64(def))
	if err != nil {
		b.fail(err)
		return 0
	}
	return b.bounded(key, n, max(b.largestDim(), int64(def)), "the largest tensor dimension of the file")
}

// Attention reads the attention hyperparameters every architecture has into c: the
// embedding width, query and KV heads, the trained context and the key length (the width
// over the heads when the file has none). It returns the value length, the key length when
// absent.
func (b *Binder) Attention(c *Config) (valueLength int) {
	c.Embedding = b.Dim("embedding_length")
	c.Heads = b.Dim("attention.head_count")
	c.KVHeads = b.Dim("attention.head_count_kv")
	c.ContextLength = b.ContextLength(0)
	c.HeadDim = b.DimOr("attention.key_length", 0)
	if c.HeadDim == 0 && c.Heads > 0 {
		c.HeadDim = c.Embedding / c.Heads
	}
	return b.DimOr("attention.value_length", c.HeadDim)
}

// ContextLength reads "<arch>.context_length" (def when absent), at most
// modelinfo.MaxContextLength.
func (b *Binder) ContextLength(def int) int {
	n, err := b.File.IntOr(b.Arch+".context_length", int64(def))
	if err != nil {
		b.fail(err)
		return 0
	}
	return b.bounded("context_length", n, modelinfo.MaxContextLength, "the limit")
}

func (b *Binder) largestDim() int64 {
	if b.largest == 0 {
		b.largest = modelinfo.LargestDim(b.File)
	}
	return b.largest
}

// bounded returns n if it is within [0, limit], else records why not and returns 0.
func (b *Binder) bounded(key string, n, limit int64, what string) int {
	switch {
	case n < 0:
		b.fail(fmt.Errorf("%s: %s = %d is negative", b.Arch, key, n))
		return 0
	case n > limit:
		b.fail(fmt.Errorf("%s: %s = %d exceeds %s (%d)", b.Arch, key, n, what, limit))
		return 0
	}
	return int(n)
}

// Product is the product of sizes read with Dim, which a tensor dimension holds (heads ×
// head dim, say): it must not exceed the largest tensor dimension, and so cannot overflow.
// what names it in the error; it reads as 0 when out of bounds.
func (b *Binder) Product(what string, factors ...int) int {
	p := int64(1)
	for _, f := range factors {
		if f <= 0 {
			return 0 // a factor already reported
		}
		if p > b.largestDim()/int64(f) {
			b.fail(fmt.Errorf("%s: %s = %v exceeds the largest tensor dimension of the file (%d)", b.Arch, what, factors, b.largestDim()))
			return 0
		}
		p *= int64(f)
	}
	return int(p)
}

// Int reads the hyperparameter "<arch>.<key>". Use Blocks, Dim or ContextLength for values
// that size anything.
func (b *Binder) Int(key string) int {
	n, err := b.File.Int(b.Arch + "." + key)
	if err != nil {
		b.fail(err)
	}
	return int(n)
}

// IntOr reads "<arch>.<key>", or def when absent.
func (b *Binder) IntOr(key string, def int) int {
	n, err := b.File.IntOr(b.Arch+"."+key, int64(def))
	if err != nil {
		b.fail(err)
	}
	return int(n)
}

// FloatOr reads "<arch>.<key>", or def when absent.
func (b *Binder) FloatOr(key string, def float64) float32 {
	x, err := b.File.FloatOr(b.Arch+"."+key, def)
	if err != nil {
		b.fail(err)
	}
	return float32(x)
}

// Check records a failed condition on the hyperparameters.
func (b *Binder) Check(ok bool, format string, args ...any) {
	if !ok {
		b.fail(fmt.Errorf("%s: %s", b.Arch, fmt.Sprintf(format, args...)))
	}
}

// Err returns every problem found (the first maxBindErrors spelled out), or nil. It
// matches ErrModel.
func (b *Binder) Err() error {
	if len(b.errs) == 0 {
		return nil
	}
	errs := b.errs
	if b.more > 0 {
		errs = append(errs[:len(errs):len(errs)], fmt.Errorf("and %d more problems", b.more))
	}
	return &modelError{errors.Join(errs...)}
}

type modelError struct{ err error }

func (e *modelError) Error() string   { return e.err.Error() }
func (e *modelError) Unwrap() []error { return []error{e.err, ErrModel} }

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
