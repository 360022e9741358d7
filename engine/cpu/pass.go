package cpu

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"

	"github.com/redlite/batch/engine/ml"
)

// A context records operations as they are issued and runs them at Compute, in order. Having
// the whole pass before running it tells the context when each intermediate is used for the
// last time, so its buffer goes back to the backend's arena right then and a later operation
// takes it: a pass holds the peak of what is live at once, not the sum of its intermediates
// (the idea of ggml-alloc). An element-wise operation goes further and writes its output
// into the buffer of an input whose last use it is. At Close the pass's remaining buffers go
// back to the arena too, so the next pass of the same shape (every decode step) allocates
// nothing.
//
// Which tensors may be read after Compute follows: those that no operation of the pass
// takes as input, directly or through a view (Reshape, Rows), keep their buffers until
// Close: they are the pass's outputs. Every other one may have been overwritten, and Read
// refuses it.

// op is one recorded operation.
type op struct {
	name string
	run  func()
	ins  []*tensor
	outs []*tensor
	// inPlace marks element-wise operations: out[i] depends on the inputs' element i only
	// and is written after they are read, so the output may share an input's buffer.
	inPlace bool
	// observe marks operations that only look at their input (the debug hook of Name): they
	// extend its life but do not make it an intermediate, so a named output stays readable.
	observe bool
}

// record queues an operation. Inputs released before (state tensors freed with
// Backend.Release) are refused here, where the graph that misuses them is on the stack.
func (c *context) record(name string, inPlace bool, run func(), outs []*tensor, ins ...*tensor) {
	for _, t := range ins {
		if t.freed {
			panic(fmt.Sprintf("cpu: %s of a released tensor %v", name, t.shape))
		}
		if t.root != nil && t.root.ctx != c {
			panic(fmt.Sprintf("cpu: %s of a tensor %v from another pass", name, t.shape))
		}
	}
	for _, t := range outs {
		t.root, t.ctx = t, c
		c.made = append(c.made, t)
	}
	c.ops = append(c.ops, op{name: name, run: run, ins: ins, outs: outs, inPlace: inPlace})
}

// out makes the output tensor of an operation being recorded; its buffer is set when the
// operation runs.
func (c *context) out(shape ...int) *tensor {
	return &tensor{shape: shape, n: numel(shape)}
}

func numel(shape []int) int { return ml.Numel(shape) }

// view makes a tensor that shares x's elements [off, off+numel(shape)).
func (c *context) view(x *tensor, off int, shape ...int) *tensor {
	v := &tensor{shape: shape, n: numel(shape)}
	if x.root == nil {
		// A state or host tensor: its data is there already.
		v.data = x.data[off : off+v.n]
		v.freed = x.freed
		return v
	}
	v.root, v.off = x.root, x.off+off
	x.used = true // read through the view from now on
	c.made = append(c.made, v)
	return v
}

// Compute runs the operations recorded since the last Compute. A panic in one (an id out of
// range, a failed dequantization, a bug), on whichever goroutine of the pool, stops the pass
// and becomes its error; later Computes and Reads return it too.
func (c *context) Compute() (err error) {
	if c.err != nil {
		return c.err
	}
	first := c.next
	// Last uses of the new operations' inputs, and which tensors nothing consumes.
	for i := first; i < len(c.ops); i++ {
		for _, t := range c.ops[i].ins {
			t.used = t.used || !c.ops[i].observe
			if r := t.root; r != nil {
				if r.released {
					return c.fail(fmt.Errorf("cpu: %s uses an intermediate %v whose buffer an earlier Compute released", c.ops[i].name, t.shape))
				}
				r.last = i
			}
		}
	}
	for _, t := range c.made[c.seen:] {
		if !t.used && t.root != nil {
			t.root.keep = true // an output: it may be read
		}
	}
	c.seen = len(c.made)
	defer func() {
		if p := recover(); p != nil {
			name := "an operation"
			if c.next < len(c.ops) {
				name = c.ops[c.next].name
			}
			if e, ok := p.(error); ok {
				err = c.fail(fmt.Errorf("cpu: %s failed: %w", name, e))
			} else {
				err = c.fail(fmt.Errorf("cpu: %s failed: %v", name, p))
			}
		}
	}()
	for ; c.next < len(c.ops); c.next++ {
		i := c.next
		o := &c.ops[i]
		for _, t := range o.ins {
			if t.root != nil && t.root != t {
				t.data = t.root.data[t.off : t.off+t.n]
			}
		}
		for _, t := range o.outs {
			c.alloc(o, t, i)
		}
		o.run()
		for _, t := range o.ins {
			if r := t.root; r != nil && r.last == i && !r.keep && !r.released && r.buf != nil {
				c.release(r)
			}
		}
	}
	return nil
}

func (c *context) fail(err error) error {
	c.err = err
	return err
}

// alloc gives out, an output of operation i, its buffer: for an element-wise operation
// the buffer of an input that dies here, else one from the arena.
func (c *context) alloc(o *op, out *tensor, i int) {
	if out.data != nil { // Input: the host copy is the buffer
		return
	}
	if o.inPlace {
		for _, t := range o.ins {
			if r := t.root; r != nil && r.last == i && !r.keep && !r.released && r.buf != nil && c.sharable(o, r, out.n) {
				// r keeps its data until the operation has run: it is the input.
				out.buf, out.data = r.buf, r.buf[:out.n]
				r.released, r.buf = true, nil
				return
			}
		}
	}
	out.buf = c.b.arena.get(out.n)
	out.data = out.buf[:out.n]
}

// sharable reports whether the output of o may take root r's buffer: every input of o on
// that buffer must cover exactly the output's elements, so that each element is read before
// it is overwritten by the same chunk of the parallel loop.
func (c *context) sharable(o *op, r *tensor, n int) bool {
	for _, t := range o.ins {
		if t.root == r && (t.off != 0 || t.n != n) {
			return false
		}
	}
	return true
}

func (c *context) release(r *tensor) {
	c.b.arena.put(r.buf)
	r.released, r.buf, r.data = true, nil, nil
}

// Close gives every buffer of the pass back to the arena.
func (c *context) Close() {
	for _, t := range c.made {
		if t.root == t && t.buf != nil && !t.released {
			c.release(t)
		}
	}
	c.b.arena.endPass()
	c.b.lists.put(c.ops, c.made)
	c.ops, c.made, c.rope = nil, nil, nil
	c.next, c.seen = 0, 0
	if c.err == nil {
		c.err = errClosed
	}
}

var errClosed = errors.New("cpu: context is closed")

// opLists recycles the slices a context records into: a decode step records a thousand
// operations or more, and growing fresh slices for every pass was most of what decoding
// allocated per token once tensors came from the arena.
type opLists struct {
	mu   sync.Mutex
	ops  [][]op
	made [][]*tensor
}

// maxOpLists bounds the lists kept: one per pass running at once is enough.
const maxOpLists = 4

func (l *opLists) get() ([]op, []*tensor) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ops []op
	var made []*tensor
	if n := len(l.ops); n > 0 {
		ops, l.ops = l.ops[n-1], l.ops[:n-1]
	}
	if n := len(l.made); n > 0 {
		made, l.made = l.made[n-1], l.made[:n-1]
	}
	return ops, made
}

// put keeps emptied lists; their elements are cleared so that closed passes' tensors and
// closures can be collected.
func (l *opLists) put(ops []op, made []*tensor) {
	clear(ops)
	clear(made)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ops) < maxOpLists && cap(ops) > 0 {
		l.ops = append(l.ops, ops[:0])
	}
	if len(l.made) < maxOpLists && cap(made) > 0 {
		l.made = append(l.made, made[:0])
	}
}

func (c *context) Read(x ml.Tensor) ([]float32, error) {
	t := x.(*tensor)
	if c.err != nil {
		return nil, c.err
	}
	r := t.root
	switch {
	case t.freed:
		return nil, errors.New("cpu: read of a released tensor")
	case r == nil:
		return append([]float32(nil), t.data...), nil
	case r.ctx != c:
		return nil, errors.New("cpu: read of a tensor from another pass")
	case r.data == nil && !r.released:
		return nil, fmt.Errorf("cpu: read of a tensor %v before Compute ran it", t.shape)
	case r.released:
		return nil, fmt.Errorf("cpu: read of an intermediate %v: operations of the pass consume it, so its memory was reused", t.shape)
	}
	return append([]float32(nil), r.data[t.off:t.off+t.n]...), nil
}

// arena keeps the buffers of finished intermediates for the operations and passes that
// follow, and counts the memory passes hold. Buffers come in size classes (four per
// doubling) and are reused only within their class: a pass then holds the same memory
// whatever passes came before it, so what it needs can be measured and planned, at the
// cost of rounding each buffer up by at most a fifth.
type arena struct {
	mu   sync.Mutex
	free map[int][][]float32 // by size class
	// taken counts the buffers handed out per class since the last pass ended: a class
	// no pass asked for during a whole pass is dropped (a prefill's large buffers once
	// decoding runs), so the arena follows the work instead of keeping every size ever used.
	taken map[int]int
	// live is what passes and operations hold now (float32s), peak its maximum since the
	// last reset; makes counts the buffers allocated (for tests).
	live, peak, makes int64
}

// sizeClass rounds n up to the next of 1, 1¼, 1½, 1¾ times a power of two (64 at least).
func sizeClass(n int) int {
	if n <= 64 {
		return 64
	}
	step := 1 << (bits.Len(uint(n-1)) - 3) // a quarter of the power of two below n
	return (n + step - 1) / step * step
}

// get returns a buffer of at least n floats with arbitrary contents.
func (a *arena) get(n int) []float32 {
	class := sizeClass(n)
	a.mu.Lock()
	defer a.mu.Unlock()
	var b []float32
	if list := a.free[class]; len(list) > 0 {
		b = list[len(list)-1]
		a.free[class] = list[:len(list)-1]
	} else {
		b = make([]float32, class)
		a.makes++
	}
	if a.taken == nil {
		a.taken = map[int]int{}
	}
	a.taken[class]++
	a.live += int64(class)
	a.peak = max(a.peak, a.live)
	return b
}

// put takes back a buffer from get.
func (a *arena) put(b []float32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.live -= int64(cap(b))
	if a.free == nil {
		a.free = map[int][][]float32{}
	}
	a.free[cap(b)] = append(a.free[cap(b)], b[:cap(b)])
}

// endPass drops the classes that no operation took from since the last endPass.
func (a *arena) endPass() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for class := range a.free {
		if a.taken[class] == 0 {
			delete(a.free, class)
		}
	}
	clear(a.taken)
}

// track counts memory that operations hold outside the arena (the pool's scratch), so that
// the peak covers it.
func (a *arena) track(floats int) {
	a.mu.Lock()
	a.live += int64(floats)
	a.peak = max(a.peak, a.live)
	a.mu.Unlock()
}

// reset drops the pooled buffers and starts a new peak from what is live now.
func (a *arena) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.free = nil
	a.peak = a.live
}

// PeakScratchBytes is the most memory the backend's passes held at once for intermediates
// and operations' working buffers since the last ResetScratch (or since New).
func (b *Backend) PeakScratchBytes() int64 {
	b.arena.mu.Lock()
	defer b.arena.mu.Unlock()
	return 4 * b.arena.peak
}

// ResetScratch drops the buffers kept for later passes and restarts the peak.
func (b *Backend) ResetScratch() {
	b.pool.scratch.reset()
	b.arena.reset()
}
